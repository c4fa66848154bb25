"""Binary-tree allreduce: pipelined reduce to rank 0, then pipelined broadcast back; and its
halves alone: bcast (the tree's ranks rotated so the root is its top) and reduce (to rank 0,
then on to the root: :func:`~mpicoll.algorithm.base.from_rank_zero`).

Cost about 2⌈lg p⌉(α + sβ) + 2(n/s)(α + sβ) for segments of s bytes: few steps for small
messages, while segmenting keeps large ones from paying lg p full copies. The root moves 2n
each way, which is why ring wins on large messages.

The tree is in-order over ranks: a node covering ranks [a, c) has children a+1 (covering the
lower half of the rest) and the start of the upper half. A node reduces ``own op lower op
upper``, so operands stay in rank order and any p works, not only powers of two.

It does not compress: its messages are small, and every level would decode and re-encode.
"""

from __future__ import annotations

from ..schedule import Builder, BufferName, Local, Recv, Reduce, Region, Send, Transfer, split
from .base import Algorithm, Frames, Layout, Options, from_rank_zero


def links(size: int, me: int) -> tuple[int | None, list[int]]:
    """Parent (None at the root) and children, lower ranks first, of member ``me``."""
    lo, hi, parent = 0, size, None
    while True:
        upper = lo + 1 + (hi - lo) // 2  # first rank of the upper subtree
        if me == lo:
            return parent, [c for c in (lo + 1, upper) if c < hi]
        parent = lo
        lo, hi = (lo + 1, upper) if me < upper else (upper, hi)


def segments(start: int, stop: int, segment: int) -> list[tuple[int, int]]:
    n = stop - start
    return split(start, stop, max(1, -(-n // segment))) if n else []


def reduce(b: Builder, group: list[int], me: int, start: int, stop: int, src: BufferName,
           segment: int) -> None:
    """Reduce ``[start, stop)`` to ``recv`` of group member 0, one segment per round in flight.

    In round t a node receives segment t from its children while it sends segment t-1, already
    reduced, to its parent. Leaves send straight from ``src``.
    """
    parent, children = links(len(group), me)
    segment = min(segment, stop - start)
    segs = segments(start, stop, segment)
    b.tmp(len(children) * segment)
    acc: BufferName = "recv" if children else src
    for t in range(len(segs) + 1):
        transfers: list[Transfer] = []
        local: list[Local] = []
        if t < len(segs):
            seg = segs[t]
            parts = [Region("tmp", k * segment, k * segment + seg[1] - seg[0]) for k in range(len(children))]
            transfers += [Recv(group[c], part) for c, part in zip(children, parts)]
            left = Region(src, *seg)
            for part in parts:
                local.append(Reduce(Region("recv", *seg), left, part))
                left = Region("recv", *seg)
        if t > 0 and parent is not None:
            transfers.append(Send(group[parent], Region(acc, *segs[t - 1])))
        b.round(transfers, local)


def bcast(b: Builder, group: list[int], me: int, start: int, stop: int, segment: int) -> None:
    """Broadcast ``recv[start:stop]`` from member 0: receive segment t while forwarding t-1."""
    parent, children = links(len(group), me)
    segs = segments(start, stop, segment)
    for t in range(len(segs) + 1):
        transfers: list[Transfer] = []
        if t < len(segs) and parent is not None:
            transfers.append(Recv(group[parent], Region("recv", *segs[t])))
        if t > 0:
            transfers += [Send(group[c], Region("recv", *segs[t - 1])) for c in children]
        b.round(transfers)


def allreduce(b: Builder, group: list[int], me: int, start: int, stop: int, src: BufferName,
              segment: int) -> None:
    if len(group) == 1 or start == stop:
        return
    with b.phase("reduce"):
        reduce(b, group, me, start, stop, src, segment)
    with b.phase("bcast"):
        bcast(b, group, me, start, stop, segment)


def plan(b: Builder, layout: Layout, count: int, options: Options, src: BufferName,
         frames: Frames | None) -> None:
    p, me, root = layout.size, layout.rank, options.root
    if options.collective == "bcast":
        if count:
            with b.phase("bcast"):
                bcast(b, [(root + i) % p for i in range(p)], (me - root) % p, 0, count,
                      options.segment)
    elif options.collective == "reduce":
        if count:
            with b.phase("reduce"):
                reduce(b, list(range(p)), me, 0, count, src, options.segment)
                from_rank_zero(b, me, root, count)
    elif options.collective == "allreduce":
        allreduce(b, list(range(p)), me, 0, count, src, options.segment)
    else:
        raise ValueError(f"tree plans allreduce, bcast and reduce, not {options.collective}")


ALGORITHM = Algorithm("tree", "pipelined binary-tree reduce + broadcast: few steps for small messages",
                      plan=plan, tunables=("MPICOLL_TREE_SEGMENT",),
                      collectives=frozenset({"allreduce", "bcast", "reduce"}))
