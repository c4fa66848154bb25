"""Hierarchical allreduce: inside each node, then between nodes, then inside each node again.

With equal nodes of L ranks (Horovod's hierarchical shape): a reduce-scatter inside the node
leaves local rank j owning chunk j; the L rings of same-local-rank peers (one per j) run an
allreduce of their chunk across nodes at the same time; an allgather inside the node spreads
the result. The node stages run in the node's shared window (:mod:`.shm`: each rank reduces
its chunk reading the others' inputs in place, then copies the others' chunks out), so only the
inter-node stage sends messages. Inter-node traffic per rank is 2(N-1)/N · n/L, spread over all L ranks.
Nodes of unequal size have no common local ranks: they go through node leaders instead
(:mod:`.node_leaders`). The result is the same bits on every rank either way.

With a codec only the inter-node stage is compressed: the node stages run in shared memory,
where encoding would cost more than it saves.
"""

from __future__ import annotations

import numpy as np

from ..schedule import Builder, BufferName, split
from . import node_leaders, ring, shm
from .base import Algorithm, Frames, Layout, Options


def plan(b: Builder, layout: Layout, count: int, options: Options, src: BufferName,
         frames: Frames | None) -> None:
    if len({len(n) for n in layout.nodes}) > 1:
        node_leaders.plan(b, layout, count, options, src, frames)
        return
    node, me = shm.node_of(layout)
    pieces = shm.Pieces(count, len(node), me, np.dtype(options.dtype).itemsize) \
        if len(node) > 1 else None
    if pieces is not None:
        with b.phase("node"):
            shm.reduce_scatter(b, node, me, pieces, src)
        src = "recv"
    peers = [n[me] for n in layout.nodes]
    with b.phase("inter-node"):  # only this stage crosses the slow links: only it is compressed
        ring.allreduce(b, peers, layout.nodes.index(node), *split(0, count, len(node))[me], src,
                       frames)
    if pieces is not None:
        with b.phase("node"):
            shm.allgather(b, node, me, pieces)


ALGORITHM = Algorithm("hybrid", "shared memory inside each node, rings of same-local-rank peers between nodes",
                      plan=plan, compresses=frozenset({"dense"}), needs_commutative=True,
                      compresses_in_node=False, tunables=("MPICOLL_TREE_SEGMENT",))
