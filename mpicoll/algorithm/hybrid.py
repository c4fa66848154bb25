"""Hierarchical allreduce: inside each node, then between nodes, then inside each node again.

With equal nodes of L ranks (Horovod's hierarchical shape): a ring reduce-scatter inside the
node leaves local rank j owning chunk j; the L rings of same-local-rank peers (one per j) run an
allreduce of their chunk across nodes at the same time; a ring allgather inside the node
spreads the result. Inter-node traffic per rank is 2(N-1)/N · n/L, spread over all L ranks.

Nodes of unequal size have no common local ranks, so they fall back to node leaders: a tree
reduce to each node's first rank, a ring allreduce among leaders, a tree broadcast inside each
node. The result is the same bits on every rank either way.

With a codec only the inter-node stage is compressed: node stages run over shared memory,
where encoding costs more than it saves.
"""

from __future__ import annotations

from ..schedule import Builder, split
from . import compressed, ring, tree

NAME = "hybrid"


def plan(b: Builder, topo, count: int, options, src: str, frames) -> None:
    node = next(n for n in topo.nodes if topo.rank in n)
    me = node.index(topo.rank)
    if len({len(n) for n in topo.nodes}) == 1:
        chunks = split(0, count, len(node))
        with b.phase("node"):
            ring.reduce_scatter(b, node, me, chunks, src)
        peers = [n[me] for n in topo.nodes]
        src = "recv" if len(node) > 1 else src
        with b.phase("inter-node"):
            _between_nodes(b, peers, topo.nodes.index(node), *chunks[me], src, frames)
        with b.phase("node"):
            ring.allgather(b, node, me, chunks)
    else:
        segment = options.segment
        with b.phase("node/reduce"):
            tree.reduce(b, node, me, 0, count, src, segment)
        if me == 0:
            leaders = [n[0] for n in topo.nodes]
            src = "recv" if len(node) > 1 else src
            with b.phase("inter-node"):
                _between_nodes(b, leaders, leaders.index(topo.rank), 0, count, src, frames)
        with b.phase("node/bcast"):
            tree.bcast(b, node, me, 0, count, segment)


def _between_nodes(b, group, me, start, stop, src, frames):
    """Only this stage crosses the slow links, so only this stage is compressed."""
    if frames is None:
        ring.allreduce(b, group, me, start, stop, src)
    else:
        compressed.allreduce(b, group, me, start, stop, src, frames)
