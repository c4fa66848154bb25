"""Hierarchical allreduce through node leaders, for nodes of unequal size.

A tree reduce to each node's first rank, a ring allreduce among the leaders (the only stage
that crosses nodes, so the only one compressed), a tree broadcast inside each node. Unequal
nodes have no common local ranks to pair up, which :mod:`.hybrid`'s rings of peers need; it
plans this instead. Only the leaders use the links, so equal nodes are better served by hybrid.
"""

from __future__ import annotations

from ..schedule import Builder, BufferName
from . import ring, tree
from .base import Frames, Layout, Options


def plan(b: Builder, layout: Layout, count: int, options: Options, src: BufferName,
         frames: Frames | None) -> None:
    node = list(next(n for n in layout.nodes if layout.rank in n))
    me, segment = node.index(layout.rank), options.segment
    with b.phase("node/reduce"):
        tree.reduce(b, node, me, 0, count, src, segment)
    if me == 0:
        leaders = [n[0] for n in layout.nodes]
        src = "recv" if len(node) > 1 else src
        with b.phase("inter-node"):
            ring.allreduce(b, leaders, leaders.index(layout.rank), 0, count, src, frames)
    with b.phase("node/bcast"):
        tree.bcast(b, node, me, 0, count, segment)
