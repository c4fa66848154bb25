"""Binomial trees for bcast and reduce: ⌈lg p⌉ rounds, whole messages (MPICH's choice for short
ones; the pipelined ``tree`` is for long ones).

Bcast: in relative ranks (the root is 0), rank r receives from r minus its lowest set bit,
then sends to r + 2^k for every 2^k below that bit, largest subtree first. Cost ⌈lg p⌉(α + nβ).

Reduce: the tree rooted at rank 0, whose ranks keep rank order: rank r receives at once from
r + 1, r + 2, r + 4 ... (each child covers the ranks up to the next), reduces its own part with
theirs in that order, and sends to r minus its lowest set bit; every op, commutative or not,
reduces in rank order. A root other than 0 gets the result from rank 0 in one more message,
as MPICH does for non-commutative ops. Cost ⌈lg p⌉(α + nβ + nγ) (+ α + nβ off rank 0).
"""

from __future__ import annotations

from typing import Sequence

from ..schedule import Builder, BufferName, Recv, Reduce, Region, Send
from .base import Algorithm, Frames, Layout, Options, from_rank_zero


def bcast(b: Builder, p: int, me: int, root: int, count: int,
          group: Sequence[int] | None = None) -> None:
    """Broadcast ``recv[0:count]`` from ``root`` (indices into ``group``, the ranks; default:
    ranks 0 to p - 1)."""
    rank = group or range(p)
    whole = Region("recv", 0, count)
    relative, mask = (me - root) % p, 1
    while mask < p and not relative & mask:
        mask <<= 1
    if relative:  # (mask: its lowest set bit)
        b.round([Recv(rank[(relative - mask + root) % p], whole)])
    children = [relative + m for m in (1 << k for k in reversed(range(mask.bit_length() - 1)))
                if relative + m < p]
    if children:
        b.round([Send(rank[(child + root) % p], whole) for child in children])


def reduce(b: Builder, p: int, me: int, count: int, src: BufferName,
           group: Sequence[int] | None = None) -> None:
    """Reduce ``src[0:count]`` of every rank into ``recv`` of rank 0, in rank order (indices
    into ``group``, the ranks; default: ranks 0 to p - 1)."""
    rank = group or range(p)
    mask, children = 1, []
    while mask < p and not me & mask:
        if me + mask < p:
            children.append(me + mask)
        mask <<= 1
    acc = src
    if children:
        b.tmp(len(children) * count)
        parts = [Region("tmp", k * count, (k + 1) * count) for k in range(len(children))]
        local = []
        for part in parts:
            local.append(Reduce(Region("recv", 0, count), Region(acc, 0, count), part))
            acc = "recv"
        b.round([Recv(rank[child], part) for child, part in zip(children, parts)], local)
    if me:
        b.round([Send(rank[me - mask], Region(acc, 0, count))])


def plan(b: Builder, layout: Layout, count: int, options: Options, src: BufferName,
         frames: Frames | None) -> None:
    p, me = layout.size, layout.rank
    if not count:
        return
    if options.collective == "bcast":
        with b.phase("bcast"):
            bcast(b, p, me, options.root, count)
    elif options.collective == "reduce":
        with b.phase("reduce"):
            reduce(b, p, me, count, src)
            from_rank_zero(b, me, options.root, count)
    else:
        raise ValueError(f"binomial plans bcast and reduce only, not {options.collective}")


ALGORITHM = Algorithm("binomial", "binomial tree: ceil(lg p) rounds of whole messages (bcast; "
                      "reduce in rank order, any op)", plan=plan,
                      collectives=frozenset({"bcast", "reduce"}))
