"""Rabenseifner's allreduce: reduce-scatter by recursive halving, then allgather by recursive
doubling (MPICH's choice for long messages).

Each halving round a rank keeps half of what it still reduces and sends the other half to the
rank whose number differs in that round's bit; the allgather retraces the rounds backwards.
Cost for p a power of two 2 lg p·α + 2(p−1)/p·nβ + (p−1)/p·nγ: the ring's bandwidth in 2 lg p
rounds instead of 2(p−1), which is why it wins on large messages at power-of-two p. Other p fold
in as in :mod:`.recursive_doubling`, at the price of two more transfers of all n.

Partner bits go lowest first and the lower block of ranks is always the left operand, so each
element is reduced as the same balanced expression over ranks in order. The op therefore need
not be commutative, and since each element is reduced once and then copied, every rank ends
with the same bits.
"""

from __future__ import annotations

from ..schedule import Builder, BufferName, Recv, Reduce, Region, Send, split
from .base import Algorithm, Frames, Layout, Options
from .recursive_doubling import folded, masks, ordered, real_rank

Span = tuple[int, int]


def elements(chunks: list[Span], first: int, stop: int) -> Span:
    """The elements of chunks ``[first, stop)``."""
    return chunks[first][0], chunks[stop - 1][1]


def reduce_scatter(b: Builder, me: int, rem: int, chunks: list[Span], src: BufferName
                   ) -> list[tuple[int, Span, Span]]:
    """Halve the chunks this rank reduces, round by round, the lower rank keeping the lower half.

    Returns each round's peer, the elements kept and those given away: the allgather's rounds,
    backwards. Afterwards ``recv`` holds the last kept elements, fully reduced.
    """
    rounds = []
    lo, hi = 0, len(chunks)  # the chunks this rank still reduces
    with b.phase("reduce-scatter"):
        for mask in masks(len(chunks)):
            partner = me ^ mask
            mid = (lo + hi) // 2
            keep, give = ((lo, mid), (mid, hi)) if me < partner else ((mid, hi), (lo, mid))
            kept, given = elements(chunks, *keep), elements(chunks, *give)
            received = Region("tmp", 0, kept[1] - kept[0])
            b.tmp(len(received))
            peer = real_rank(partner, rem)
            b.round([Recv(peer, received), Send(peer, Region(src, *given))],
                    [Reduce(Region("recv", *kept), *ordered(me, partner, Region(src, *kept), received))])
            rounds.append((peer, kept, given))
            src = "recv"
            lo, hi = keep
    return rounds


def allgather(b: Builder, rounds: list[tuple[int, Span, Span]]) -> None:
    """Undo the halving: send what was kept, receive what was given, last round first."""
    with b.phase("allgather"):
        for peer, kept, given in reversed(rounds):
            b.round([Recv(peer, Region("recv", *given)), Send(peer, Region("recv", *kept))])


def plan(b: Builder, layout: Layout, count: int, options: Options, src: BufferName,
         frames: Frames | None) -> None:
    folded(b, layout, count, src, lambda me, rem, pof2, contribution: allgather(
        b, reduce_scatter(b, me, rem, split(0, count, pof2), contribution)))


ALGORITHM = Algorithm("rabenseifner",
                      "recursive halving + doubling: the ring's bandwidth in 2 lg p steps",
                      plan=plan)
