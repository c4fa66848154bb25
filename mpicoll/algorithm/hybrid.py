"""Hierarchical allreduce: inside each node, then between nodes, then inside each node again.

With equal nodes of L ranks (Horovod's hierarchical shape): a ring reduce-scatter inside the
node leaves local rank j owning chunk j; the L rings of same-local-rank peers (one per j) run an
allreduce of their chunk across nodes at the same time; a ring allgather inside the node
spreads the result. Inter-node traffic per rank is 2(N-1)/N · n/L, spread over all L ranks.
Nodes of unequal size have no common local ranks: they go through node leaders instead
(:mod:`.node_leaders`). The result is the same bits on every rank either way.

With a codec only the inter-node stage is compressed: node stages run over shared memory,
where encoding costs more than it saves.
"""

from __future__ import annotations

from ..schedule import Builder, BufferName, split
from . import node_leaders, ring
from .base import Algorithm, Frames, Layout, Options


def plan(b: Builder, layout: Layout, count: int, options: Options, src: BufferName,
         frames: Frames | None) -> None:
    if len({len(n) for n in layout.nodes}) > 1:
        node_leaders.plan(b, layout, count, options, src, frames)
        return
    node = next(n for n in layout.nodes if layout.rank in n)
    me = node.index(layout.rank)
    chunks = split(0, count, len(node))
    with b.phase("node"):
        ring.reduce_scatter(b, list(node), me, chunks, src)
    peers = [n[me] for n in layout.nodes]
    src = "recv" if len(node) > 1 else src
    with b.phase("inter-node"):  # only this stage crosses the slow links: only it is compressed
        ring.allreduce(b, peers, layout.nodes.index(node), *chunks[me], src, frames)
    with b.phase("node"):
        ring.allgather(b, list(node), me, chunks)


ALGORITHM = Algorithm("hybrid", "ring inside each node, rings of same-local-rank peers between nodes",
                      plan=plan, compresses=frozenset({"dense"}), needs_commutative=True,
                      compresses_in_node=False, tunables=("MPICOLL_TREE_SEGMENT",))
