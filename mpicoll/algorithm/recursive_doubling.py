"""Recursive-doubling allreduce: lg p rounds of exchanging the whole vector (MPICH's choice
for short messages).

In round k a rank swaps its partial result with the rank whose number differs in bit k, and
both reduce. Cost for p a power of two lg p·α + lg p·nβ + lg p·nγ: half the tree's rounds,
paid for by sending all n in each, so it suits small messages, where latency is the cost.

Other p are folded in as MPICH does: of the first 2·rem ranks (rem = p minus the largest power
of two not above it) each even rank hands its data to the odd one above it, which takes part
for both and hands the result back at the end: two more rounds of n for those ranks.

The lower block of ranks is always the left operand, in the fold too, so every rank evaluates
the same balanced expression over ranks in order: the op need not be commutative, and all ranks
end with the same bits.

The same rounds, with blocks instead of sums, are an ``allgather``: lg p′ rounds in which the
blocks a rank holds double (:func:`allgather`), ranks beyond a power of two folded in alike.
"""

from __future__ import annotations

import itertools
from typing import Callable

from ..schedule import Builder, BufferName, Copy, Recv, Reduce, Region, Send
from .base import Algorithm, Frames, Layout, Options


def folded_size(size: int) -> int:
    """How many ranks remain after the fold: the largest power of two not above ``size``."""
    return 1 << (size.bit_length() - 1)


def masks(pof2: int) -> list[int]:
    """The partner bits, lowest first: lower blocks of ranks combine before higher ones."""
    return [1 << k for k in range(pof2.bit_length() - 1)]


def folded_rank(rank: int, rem: int) -> int | None:
    """``rank``'s place among the power-of-two ranks; None for an even rank that folded."""
    if rank < 2 * rem:
        return rank // 2 if rank % 2 else None
    return rank - rem


def real_rank(folded: int, rem: int) -> int:
    """The rank that takes part as ``folded``: the odd one of a pair, or one shifted back up."""
    return 2 * folded + 1 if folded < rem else folded + rem


def ordered(me: int, partner: int, mine: Region, theirs: Region) -> tuple[Region, Region]:
    """The operands of a reduction with ``partner``, the lower rank's on the left."""
    return (theirs, mine) if partner < me else (mine, theirs)


def fold_in(b: Builder, rank: int, rem: int, count: int, src: BufferName) -> BufferName:
    """Pair up the first 2·rem ranks (even sends, odd reduces); return where ``rank``'s
    contribution now is."""
    if rank >= 2 * rem:
        return src
    whole = Region(src, 0, count)
    with b.phase("fold"):
        if rank % 2 == 0:
            b.round([Send(rank + 1, whole)])
            return src
        received = Region("tmp", 0, count)
        b.tmp(count)
        b.round([Recv(rank - 1, received)],
                [Reduce(Region("recv", 0, count), *ordered(rank, rank - 1, whole, received))])
    return "recv"


def fold_out(b: Builder, rank: int, rem: int, count: int) -> None:
    """Hand the result back from each odd rank of the first 2·rem to the even rank below it."""
    if rank >= 2 * rem:
        return
    result = Region("recv", 0, count)
    with b.phase("unfold"):
        b.round([Recv(rank + 1, result) if rank % 2 == 0 else Send(rank - 1, result)])


def exchange(b: Builder, me: int, rem: int, pof2: int, count: int, src: BufferName) -> None:
    """lg p′ rounds among the p′ (``pof2``) ranks left after the fold, ``me`` counted among
    them: each sends the whole partial result and reduces what arrives into ``recv``."""
    received = Region("tmp", 0, count)
    b.tmp(count)
    with b.phase("exchange"):
        for mask in masks(pof2):
            partner = me ^ mask
            mine = Region(src, 0, count)
            peer = real_rank(partner, rem)
            b.round([Recv(peer, received), Send(peer, mine)],
                    [Reduce(Region("recv", 0, count), *ordered(me, partner, mine, received))])
            src = "recv"


def folded(b: Builder, layout: Layout, count: int, src: BufferName,
           body: Callable[[int, int, int, BufferName], None]) -> None:
    """Fold the ranks beyond a power of two in, run ``body(me, rem, pof2, contribution)`` on
    the ranks left, fold the result back out: the frame rd and Rabenseifner share."""
    pof2 = folded_size(layout.size)
    rem = layout.size - pof2
    contribution = fold_in(b, layout.rank, rem, count, src)
    me = folded_rank(layout.rank, rem)
    if me is not None:
        body(me, rem, pof2, contribution)
    fold_out(b, layout.rank, rem, count)


def represented(folded: int, rem: int) -> tuple[int, int]:
    """The ranks ``[first, stop)`` that take part as ``folded``: an even rank that folded and
    the odd one above it, or one rank."""
    return (2 * folded, 2 * folded + 2) if folded < rem else (folded + rem, folded + rem + 1)


def allgather(b: Builder, layout: Layout, count: int, options: Options, src: BufferName
              ) -> None:
    """Recursive-doubling allgather, blocks in place in ``recv``: the ranks beyond a power of
    two fold in (each even rank of the first 2·rem hands its block to the odd one above it,
    which takes part for both), lg p′ rounds double the blocks each holds, lowest bit first,
    and the odd ranks hand the whole result back."""
    p, rank = layout.size, layout.rank
    sizes = options.counts or (count,) * p
    starts = list(itertools.accumulate(sizes, initial=0))
    pof2 = folded_size(p)
    rem = p - pof2

    def blocks(first: int, stop: int) -> Region:
        return Region("recv", starts[first], starts[stop])

    def of(folded_first: int, folded_stop: int) -> Region:
        return blocks(represented(folded_first, rem)[0], represented(folded_stop - 1, rem)[1])

    with b.phase("allgather"):
        b.round(local=[Copy(blocks(rank, rank + 1), Region(src, 0, count))])
        if rank < 2 * rem and sizes[rank - rank % 2]:  # the fold: the even rank's block
            b.round([Send(rank + 1, blocks(rank, rank + 1)) if rank % 2 == 0
                     else Recv(rank - 1, blocks(rank - 1, rank))])
        me = folded_rank(rank, rem)
        for mask in masks(pof2) if me is not None else ():
            assert me is not None  # (the loop runs only then)
            partner = me ^ mask
            mine, theirs = of(me & -mask, (me & -mask) + mask), \
                of(partner & -mask, (partner & -mask) + mask)
            peer = real_rank(partner, rem)
            b.round([*([Recv(peer, theirs)] if len(theirs) else []),
                     *([Send(peer, mine)] if len(mine) else [])])
        if rank < 2 * rem and starts[-1]:  # the whole result back to each even rank
            whole = Region("recv", 0, starts[-1])
            b.round([Recv(rank + 1, whole) if rank % 2 == 0 else Send(rank - 1, whole)])


def plan(b: Builder, layout: Layout, count: int, options: Options, src: BufferName,
         frames: Frames | None) -> None:
    if options.collective == "allgather":
        allgather(b, layout, count, options, src)
        return
    folded(b, layout, count, src,
           lambda me, rem, pof2, contribution: exchange(b, me, rem, pof2, count, contribution))


ALGORITHM = Algorithm("rd", "recursive doubling: lg p exchanges of the whole vector, for small messages",
                      plan=plan, collectives=frozenset({"allreduce", "allgather"}))
