"""Ring allreduce: reduce-scatter then allgather around a ring (Patarasuk & Yuan; Horovod, NCCL).

Cost 2(p-1)α + 2(p-1)/p·nβ + (p-1)/p·nγ: bandwidth-optimal, no rank carries more than its share.
Chunk ``i`` ends reduced on ring member ``i`` and travels from there, so every rank receives the
same bits. Needs a commutative op: chunk ``i`` is reduced in ring order starting after ``i``.
"""

from __future__ import annotations

from ..schedule import Builder, BufferName, Recv, Reduce, Region, Send, split
from . import compressed_ring
from .base import Algorithm, Frames, Layout, Options


def reduce_scatter(b: Builder, group: list[int], me: int, chunks: list[tuple[int, int]],
                   src: BufferName) -> None:
    """After p-1 steps member ``me`` holds chunk ``me`` reduced over the group, in ``recv``.

    The first step sends from ``src`` and every step reduces ``src + received`` into ``recv``,
    so no copy of the input is ever made.
    """
    p = len(group)
    if p == 1:
        return
    right, left = group[(me + 1) % p], group[(me - 1) % p]
    b.tmp(max(hi - lo for lo, hi in chunks))
    with b.phase("reduce-scatter"):
        for step in range(p - 1):
            out, into = chunks[(me - step - 1) % p], chunks[(me - step - 2) % p]
            scratch = Region("tmp", 0, into[1] - into[0])
            b.round(
                transfers=[Recv(left, scratch), Send(right, Region(src if step == 0 else "recv", *out))],
                local=[Reduce(Region("recv", *into), Region(src, *into), scratch)],
            )


def allgather(b: Builder, group: list[int], me: int, chunks: list[tuple[int, int]]) -> None:
    """Pass each member's chunk around the ring, straight into ``recv``."""
    p = len(group)
    right, left = group[(me + 1) % p], group[(me - 1) % p]
    with b.phase("allgather"):
        for step in range(p - 1):
            out, into = chunks[(me - step) % p], chunks[(me - step - 1) % p]
            b.round(transfers=[Recv(left, Region("recv", *into)), Send(right, Region("recv", *out))])


def allreduce(b: Builder, group: list[int], me: int, start: int, stop: int, src: BufferName,
              frames: Frames | None = None) -> None:
    """Ring allreduce of elements ``[start, stop)`` among ``group`` (global ranks, ring order),
    compressed when ``frames`` says how big a dense codec's frames are."""
    if frames is not None:
        compressed_ring.allreduce(b, group, me, start, stop, src, frames)
        return
    if len(group) == 1 or start == stop:
        return
    chunks = split(start, stop, len(group))
    reduce_scatter(b, group, me, chunks, src)
    allgather(b, group, me, chunks)


def plan(b: Builder, layout: Layout, count: int, options: Options, src: BufferName,
         frames: Frames | None) -> None:
    allreduce(b, list(range(layout.size)), layout.rank, 0, count, src, frames)


ALGORITHM = Algorithm("ring", "reduce-scatter + allgather around a ring: bandwidth-optimal",
                      plan=plan, compresses=frozenset({"dense"}), needs_commutative=True)
