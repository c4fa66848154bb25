"""Bruck's allgather: ⌈lg p⌉ rounds at any p (Bruck et al. 1997; MPICH's choice for short
messages where p is not a power of two).

After round k a rank holds the blocks of itself and the 2^(k+1) - 1 ranks after it (modulo
p): in round k, at distance d = 2^k, it sends the min(d, p - d) blocks it holds to rank
me - d and receives as many from rank me + d. Cost ⌈lg p⌉·α + (p-1)/p·Nβ for N elements in
all: the ring's bandwidth in lg p rounds instead of p - 1.

Blocks never move inside ``recv``: each lands at its own place, so no rotation is needed at
the end. A run of blocks that wraps past the last one travels as two messages, the same split
on both sides (both name the same blocks); blocks may be uneven (``counts``), empty runs are
not sent.
"""

from __future__ import annotations

import itertools

from ..schedule import Builder, BufferName, Copy, Recv, Region, Send, Transfer
from .base import Algorithm, Frames, Layout, Options


def runs(first: int, count: int, p: int, starts: list[int]) -> list[Region]:
    """Blocks ``first .. first + count - 1`` (modulo p) of ``recv`` as contiguous regions
    (two where they wrap), empty ones left out."""
    stop = first + count
    pieces = [(first, min(stop, p)), (0, stop - p)] if stop > p else [(first, stop)]
    return [Region("recv", starts[lo], starts[hi]) for lo, hi in pieces
            if starts[hi] > starts[lo]]


def allgather_rounds(p: int, me: int, starts: list[int]) -> list[list[Transfer]]:
    """The transfers of each round (``starts``: where each block begins, and the end)."""
    rounds: list[list[Transfer]] = []
    distance = 1
    while distance < p:
        count = min(distance, p - distance)
        to, source = (me - distance) % p, (me + distance) % p
        receives: list[Transfer] = [Recv(source, r) for r in runs(source, count, p, starts)]
        rounds.append(receives + [Send(to, r) for r in runs(me, count, p, starts)])
        distance *= 2
    return rounds


def plan(b: Builder, layout: Layout, count: int, options: Options, src: BufferName,
         frames: Frames | None) -> None:
    if options.collective != "allgather":
        raise ValueError(f"bruck plans allgather only, not {options.collective}")
    p, me = layout.size, layout.rank
    sizes = options.counts or (count,) * p
    starts = list(itertools.accumulate(sizes, initial=0))
    with b.phase("allgather"):
        b.round(local=[Copy(Region("recv", starts[me], starts[me + 1]), Region(src, 0, count))])
        for transfers in allgather_rounds(p, me, starts):
            b.round(transfers)


ALGORITHM = Algorithm("bruck", "Bruck's allgather: ceil(lg p) rounds at any p, blocks in place",
                      plan=plan, collectives=frozenset({"allgather"}))
