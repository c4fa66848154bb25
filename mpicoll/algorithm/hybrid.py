"""Hierarchical allreduce: inside each node, then between nodes, then inside each node again.

With equal nodes of L ranks (Horovod's hierarchical shape): a reduce-scatter inside the node
leaves local rank j owning chunk j; the L rings of same-local-rank peers (one per j) run an
allreduce of their chunk across nodes at the same time; an allgather inside the node spreads
the result. The node stages run in the node's shared window (:mod:`.shm`: each rank reduces
its chunk reading the others' inputs in place, then copies the others' chunks out), so only the
inter-node stage sends messages. Inter-node traffic per rank is 2(N-1)/N · n/L, spread over all L ranks.
Nodes of unequal size have no common local ranks: they go through node leaders instead
(:mod:`.node_leaders`). The result is the same bits on every rank either way.

Uncompressed between nodes, the three stages run as one pipeline over chunks (:func:`pipelined`):
the node stages run while the ring's messages are on the link, which otherwise would stand idle
while a rank copies and reduces (MPICH over TCP moves data only inside MPI calls).

With a codec only the inter-node stage is compressed: the node stages run in shared memory,
where encoding would cost more than it saves; the stages then run one after another.
"""

from __future__ import annotations

import numpy as np

from ..schedule import Builder, BufferName, Copy, Local, Region, Transfer, split
from . import binomial, node_leaders, ring, shm
from .base import Algorithm, Frames, Layout, Options, block_bounds


PIPELINE_BYTES = 512 << 10
"""Input per rank per step of the uncompressed pipeline: small enough that filling and draining
it (a few steps with the link idle) costs little, large enough that a step's messages keep the
link busy for much longer than a round's own cost."""


def plan(b: Builder, layout: Layout, count: int, options: Options, src: BufferName,
         frames: Frames | None) -> None:
    if options.collective in ("bcast", "reduce"):
        rooted(b, layout, count, options, src)
        return
    if options.collective != "allreduce":
        blocks(b, layout, count, options, src, frames)
        return
    if len({len(n) for n in layout.nodes}) > 1:
        node_leaders.plan(b, layout, count, options, src, frames)
        return
    node, me = shm.node_of(layout)
    peers = [n[me] for n in layout.nodes]
    itemsize = np.dtype(options.dtype).itemsize
    if len(node) > 1 and len(peers) > 1 and frames is None:
        chunk = min(PIPELINE_BYTES, shm.CHUNK_BYTES)
        pipelined(b, node, me, shm.Pieces(count, len(node), me, itemsize, chunk),
                  peers, layout.nodes.index(node), src)
        return
    pieces = shm.Pieces(count, len(node), me, itemsize) if len(node) > 1 else None
    if pieces is not None:
        with b.phase("node"):
            shm.reduce_scatter(b, node, me, pieces, src)
        src = "recv"
    with b.phase("inter-node"):  # only this stage crosses the slow links: only it is compressed
        ring.allreduce(b, peers, layout.nodes.index(node), *split(0, count, len(node))[me], src,
                       frames)
    if pieces is not None:
        with b.phase("node"):
            shm.allgather(b, node, me, pieces)


def blocks(b: Builder, layout: Layout, count: int, options: Options, src: BufferName,
           frames: Frames | None) -> None:
    """allgather and reduce_scatter over equal nodes of L ranks: the rings of same-local-rank
    peers carry only their own ranks' blocks between nodes, and the node's ranks exchange the
    rest inside it, in its shared window (:func:`.shm.spread`, :func:`.shm.reduce_spans`).
    Each link then carries L(N-1) blocks each way, where a flat ring of N·L ranks (numbered
    node by node) sends N·L-1 through it. A codec, unequal nodes, one node or
    one rank per node: ring's plan across all ranks."""
    node, me = shm.node_of(layout)
    if frames is not None or len({len(n) for n in layout.nodes}) > 1 or len(node) == 1 \
            or len(layout.nodes) == 1:
        ring.plan(b, layout, count, options, src, frames)
        return
    bounds = block_bounds(options, count, layout.size)
    peers = [n[me] for n in layout.nodes]
    position = layout.nodes.index(node)
    itemsize = np.dtype(options.dtype).itemsize
    rings = [[bounds[n[m]] for n in layout.nodes] for m in range(len(node))]  # their blocks
    if options.collective == "allgather":
        with b.phase("inter-node"):
            b.round(local=[Copy(Region("recv", *bounds[layout.rank]), Region(src, 0, count))])
            for transfers, local in ring.allgather_steps(peers, position, rings[me]):
                b.round(transfers, local)
        with b.phase("node"):  # every node's block of my ring out, theirs in
            shm.spread(b, node, me, rings, itemsize)
        return
    # reduce_scatter: tmp holds the ring's scratch, then my ring's blocks summed over the node,
    # at their own offsets
    sums = 3 * max(hi - lo for lo, hi in bounds)
    b.tmp(sums + count)
    with b.phase("node"):
        shm.reduce_spans(b, node, me, rings, src,
                         lambda lo, hi: Region("tmp", sums + lo, sums + hi), itemsize)
    with b.phase("inter-node"):
        chunks = [(sums + lo, sums + hi) for lo, hi in rings[me]]
        for transfers, steps in ring.reduce_scatter_block_steps(peers, position, chunks, "tmp"):
            b.round(transfers, steps)


def rooted(b: Builder, layout: Layout, count: int, options: Options, src: BufferName) -> None:
    """bcast and reduce on nodes of any sizes: a binomial tree of the node leaders (the root
    leads its node, the first rank each other one) between nodes, shared memory inside each.
    A bcast crosses to the other nodes first, then spreads in each; a reduce sums each node
    into its leader first. The tree is rotated to start at the root's node (the op must
    commute). Only leaders send, one whole message per tree edge, whatever the numbering."""
    node, me = shm.node_of(layout)
    root, nodes = options.root, layout.nodes
    leaders = [root if root in n else n[0] for n in nodes]
    top = next(k for k, n in enumerate(nodes) if root in n)
    order = leaders[top:] + leaders[:top]  # the tree's members, the root's node first
    leads = layout.rank in leaders and len(nodes) > 1
    lead = node.index(leaders[nodes.index(node)])
    pieces = shm.Pieces(count, len(node), me, np.dtype(options.dtype).itemsize) \
        if len(node) > 1 else None
    if options.collective == "bcast":
        if leads and count:
            with b.phase("inter-node"):
                binomial.bcast(b, len(order), order.index(layout.rank), 0, count, order)
        if pieces is not None:
            with b.phase("node"):
                shm.bcast(b, node, me, lead, pieces)
        return
    if pieces is not None:
        with b.phase("node"):
            shm.reduce(b, node, me, lead, pieces, src)
        src = "recv"
    if leads and count:
        with b.phase("inter-node"):
            binomial.reduce(b, len(order), order.index(layout.rank), count, src, order)


Stage = tuple[list[Transfer], list[Local], list[Local]]
"""What one pipeline stage does to one chunk: transfers, overlap steps, local steps."""


def pipelined(b: Builder, node: tuple[int, ...], me: int, pieces: shm.Pieces, peers: list[int],
              position: int, src: BufferName) -> None:
    """All three stages at once, chunk by chunk: round k runs stage s on chunk k - s. A chunk's
    stages: copy in, reduce this rank's piece over the node (into ``recv``), the inter-node
    ring's steps on that piece (the last one also publishes the result in the window), copy
    every rank's piece out. The node stages are overlap steps, run while the ring's messages
    are in flight, so the link does not wait for them; a barrier in every round orders them."""
    stride = max(-(-(hi - lo) // len(peers)) for c in pieces.chunks for lo, hi in c)
    b.tmp(stride * (len(peers) - 1))  # ring steps in flight together receive apart
    b.window(node, pieces.window)

    def stages(j: int) -> list[Stage]:
        piece = Region("recv", *pieces.chunks[j][me])
        ring_chunks = split(piece.start, piece.stop, len(peers))
        steps = (ring.reduce_scatter_steps(peers, position, ring_chunks, "recv", stride)
                 + ring.allgather_steps(peers, position, ring_chunks))
        steps[-1][1].append(Copy(pieces.result(j, published=True), piece))  # whole: publish it
        return ([([], pieces.copy_in(j, src), []),
                 ([], pieces.reduce(j, pieces.result(j)) + [Copy(piece, pieces.result(j))], [])]
                + [(transfers, [], local) for transfers, local in steps]
                + [([], pieces.copy_out(j, published=True), [])])

    chunks = [stages(j) for j in range(len(pieces.chunks))]
    depth = len(chunks[0])
    with b.phase("pipelined"):
        for k in range(len(chunks) + depth - 1):
            running = [chunks[k - s][s] for s in range(depth) if 0 <= k - s < len(chunks)]
            b.round([t for transfers, _, _ in running for t in transfers],
                    [step for _, _, local in running for step in local], sync=k >= 1,
                    overlap=[step for _, overlap, _ in running for step in overlap])


ALGORITHM = Algorithm("hybrid", "shared memory inside each node, rings of same-local-rank peers between nodes",
                      plan=plan, compresses=frozenset({"dense"}), needs_commutative=True,
                      compresses_in_node=False, across_nodes=True,
                      tunables=("MPICOLL_TREE_SEGMENT",),
                      collectives=frozenset({"allreduce", "allgather", "reduce_scatter", "bcast",
                                             "reduce"}))
