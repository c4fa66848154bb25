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

Its first half alone is the collective ``reduce_scatter`` (:func:`reduce_scatter_blocks`):
lg p′ rounds, plus one to hand each block to its owner, where the ring takes p - 1.
"""

from __future__ import annotations

import itertools

from ..schedule import Builder, BufferName, Copy, Recv, Reduce, Region, Send, split
from .base import Algorithm, Frames, Layout, Options
from .recursive_doubling import folded, folded_rank, folded_size, masks, ordered, real_rank, \
    represented

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


def reduce_scatter_blocks(b: Builder, layout: Layout, count: int, options: Options,
                          src: BufferName) -> None:
    """The collective ``reduce_scatter`` by recursive halving: ranks beyond a power of two fold
    in (the even rank's whole input reduced into the odd one's), then the halving rounds on
    chunks that are the blocks of the ranks each folded rank stands for, partial sums in
    ``tmp`` at the input's offsets (what arrives after them). Lowest bit first leaves folded
    rank f with chunk bitrev(f): one more exchange swaps it to its owner, which copies its
    block into ``recv`` and hands a folded rank's block back to it."""
    p, rank = layout.size, layout.rank
    sizes = options.counts or (count // p,) * p
    starts = list(itertools.accumulate(sizes, initial=0))
    pof2 = folded_size(p)
    rem, bits = p - pof2, pof2.bit_length() - 1
    b.tmp(2 * count)
    arrived = count  # tmp[count:] receives; tmp[:count] holds partial sums at their offsets
    with b.phase("reduce-scatter"):
        if rank < 2 * rem:  # the fold
            whole = Region(src, 0, count)
            if rank % 2 == 0:
                b.round([Send(rank + 1, whole)])
            else:
                received = Region("tmp", arrived, arrived + count)
                b.round([Recv(rank - 1, received)],
                        [Reduce(Region("tmp", 0, count), received, whole)])
                src = "tmp"
        me = folded_rank(rank, rem)
        if me is not None:
            chunks = [(starts[represented(f, rem)[0]], starts[represented(f, rem)[1]])
                      for f in range(pof2)]
            lo, hi = 0, pof2
            for mask in masks(pof2):
                partner = me ^ mask
                mid = (lo + hi) // 2
                keep, give = ((lo, mid), (mid, hi)) if me < partner else ((mid, hi), (lo, mid))
                kept, given = elements(chunks, *keep), elements(chunks, *give)
                received = Region("tmp", arrived, arrived + kept[1] - kept[0])
                peer = real_rank(partner, rem)
                b.round([Recv(peer, received), Send(peer, Region(src, *given))],
                        [Reduce(Region("tmp", *kept),
                                *ordered(me, partner, Region(src, *kept), received))])
                src, (lo, hi) = "tmp", keep
            held = int(f"{me:0{bits}b}"[::-1], 2) if bits else me  # bitrev(me): lo
            chunk = Region("tmp", *chunks[me])
            if held != me:  # the chunk that ended here belongs to folded rank ``held``
                peer = real_rank(held, rem)
                chunk = Region("tmp", arrived, arrived + chunks[me][1] - chunks[me][0])
                b.round([Recv(peer, chunk), Send(peer, Region("tmp", *chunks[held]))])
            first, stop = represented(me, rem)
            mine = chunk.start + starts[rank] - starts[first]
            b.round(local=[Copy(Region("recv", 0, sizes[rank]),
                                Region("tmp", mine, mine + sizes[rank]))])
            if stop - first == 2 and sizes[first]:  # the folded even rank's block, handed back
                b.round([Send(first, Region("tmp", chunk.start, chunk.start + sizes[first]))])
        elif sizes[rank]:
            b.round([Recv(rank + 1, Region("recv", 0, sizes[rank]))])


def plan(b: Builder, layout: Layout, count: int, options: Options, src: BufferName,
         frames: Frames | None) -> None:
    if options.collective == "reduce_scatter":
        reduce_scatter_blocks(b, layout, count, options, src)
        return
    folded(b, layout, count, src, lambda me, rem, pof2, contribution: allgather(
        b, reduce_scatter(b, me, rem, split(0, count, pof2), contribution)))


ALGORITHM = Algorithm("rabenseifner",
                      "recursive halving + doubling: the ring's bandwidth in 2 lg p steps",
                      plan=plan, collectives=frozenset({"allreduce", "reduce_scatter"}))
