"""Ring allreduce: reduce-scatter then allgather around a ring (Patarasuk & Yuan; Horovod, NCCL).

Cost 2(p-1)α + 2(p-1)/p·nβ + (p-1)/p·nγ: bandwidth-optimal, no rank carries more than its share.
Chunk ``i`` ends reduced on ring member ``i`` and travels from there, so every rank receives the
same bits. Needs a commutative op: chunk ``i`` is reduced in ring order starting after ``i``.

Its two halves are the collectives ``allgather`` and ``reduce_scatter`` on their own, from the
same steps, with rank i's block as chunk i: each (p-1)α + (p-1)/p·Nβ for N elements in all
(blocks may be uneven, as in ``MPI_Allgatherv`` and ``MPI_Reduce_scatter``: the largest one
sets the pace). In place, the input of a reduce_scatter is ``recv`` itself: its first block
is written only in the last step, after every other block was read.

And the large-message rooted collectives (van de Geijn; Rabenseifner's reduce, with the ring's
reduce-scatter): ``bcast`` scatters the root's chunks down a binomial tree, then the ring
allgathers them (the root, which holds them all, only sends), about (lg p + p - 1)α +
2(p-1)/p·nβ against a tree's lg p·nβ; ``reduce``
reduce-scatters around the ring, then every rank sends its chunk to the root,
(2p - 2)α + 2(p-1)/p·nβ + (p-1)/p·nγ.
"""

from __future__ import annotations

from ..schedule import Builder, BufferName, Copy, Local, Recv, Reduce, Region, Send, Transfer, \
    split
from . import compressed_ring
from .base import Algorithm, Frames, Layout, Options, block_bounds


Step = tuple[list[Transfer], list[Local]]


def reduce_scatter_steps(group: list[int], me: int, chunks: list[tuple[int, int]],
                         src: BufferName, stride: int = 0) -> list[Step]:
    """The p-1 steps (transfers, then local steps) after which member ``me`` holds chunk ``me``
    reduced over the group, in ``recv``.

    The first step sends from ``src`` and every step reduces ``src + received`` into ``recv``,
    so no copy of the input is ever made. Step s receives into ``tmp`` at s·``stride`` (a
    pipeline runs several steps at once).
    """
    p = len(group)
    right, left = group[(me + 1) % p], group[(me - 1) % p]
    steps: list[Step] = []
    for step in range(p - 1):
        out, into = chunks[(me - step - 1) % p], chunks[(me - step - 2) % p]
        scratch = Region("tmp", step * stride, step * stride + into[1] - into[0])
        steps.append(([Recv(left, scratch), Send(right, Region(src if step == 0 else "recv", *out))],
                      [Reduce(Region("recv", *into), Region(src, *into), scratch)]))
    return steps


def reduce_scatter_block_steps(group: list[int], me: int, chunks: list[tuple[int, int]],
                               src: BufferName) -> list[Step]:
    """:func:`reduce_scatter_steps` for a ``recv`` that holds only member ``me``'s chunk (the
    collective ``reduce_scatter``): a step's partial sums go to ``tmp`` (two slots after the
    receive slot, one written while the other is sent), the last step's into ``recv``."""
    p = len(group)
    right, left = group[(me + 1) % p], group[(me - 1) % p]
    n = max(hi - lo for lo, hi in chunks)

    def partial(step: int, chunk: tuple[int, int]) -> Region:
        slot = n * (1 + step % 2)
        return Region("tmp", slot, slot + chunk[1] - chunk[0])

    steps: list[Step] = []
    for step in range(p - 1):
        out, into = chunks[(me - step - 1) % p], chunks[(me - step - 2) % p]
        scratch = Region("tmp", 0, into[1] - into[0])
        sent = Region(src, *out) if step == 0 else partial(step - 1, out)
        result = Region("recv", 0, into[1] - into[0]) if step == p - 2 else partial(step, into)
        steps.append(([Recv(left, scratch), Send(right, sent)],
                      [Reduce(result, Region(src, *into), scratch)]))
    return steps


def allgather_steps(group: list[int], me: int, chunks: list[tuple[int, int]]) -> list[Step]:
    """The p-1 steps that pass each member's chunk around the ring, straight into ``recv``."""
    p = len(group)
    right, left = group[(me + 1) % p], group[(me - 1) % p]
    return [([Recv(left, Region("recv", *chunks[(me - step - 1) % p])),
              Send(right, Region("recv", *chunks[(me - step) % p]))], [])
            for step in range(p - 1)]


def reduce_scatter(b: Builder, group: list[int], me: int, chunks: list[tuple[int, int]],
                   src: BufferName) -> None:
    """:func:`reduce_scatter_steps` as rounds."""
    if len(group) == 1:
        return
    b.tmp(max(hi - lo for lo, hi in chunks))
    with b.phase("reduce-scatter"):
        for transfers, local in reduce_scatter_steps(group, me, chunks, src):
            b.round(transfers, local)


def allgather(b: Builder, group: list[int], me: int, chunks: list[tuple[int, int]]) -> None:
    """:func:`allgather_steps` as rounds."""
    with b.phase("allgather"):
        for transfers, local in allgather_steps(group, me, chunks):
            b.round(transfers, local)


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


def scatter(b: Builder, group: list[int], me: int, chunks: list[tuple[int, int]]) -> None:
    """Binomial scatter of ``recv``'s chunks from group member 0: member r receives the chunks
    of its subtree (r up to r plus its lowest set bit) from its parent, then sends each child
    c = r + 2^k the chunks of c's subtree, the largest first."""
    p = len(group)

    def span(first: int, stop: int) -> Region:
        return Region("recv", chunks[first][0], chunks[stop - 1][1])

    mask = 1
    while mask < p and not me & mask:
        mask <<= 1
    if me:
        b.round([Recv(group[me - mask], span(me, min(me + mask, p)))])
    children = [(me + m, m) for m in (1 << k for k in reversed(range(mask.bit_length() - 1)))
                if me + m < p]
    if children:
        b.round([Send(group[c], span(c, min(c + m, p))) for c, m in children])


def plan(b: Builder, layout: Layout, count: int, options: Options, src: BufferName,
         frames: Frames | None) -> None:
    group, me, p = list(range(layout.size)), layout.rank, layout.size
    if options.collective == "allreduce":
        allreduce(b, group, me, 0, count, src, frames)
        return
    if options.collective in ("bcast", "reduce"):
        root, chunks = options.root, split(0, count, p)
        if not count:
            return
        if options.collective == "bcast":  # in ranks relative to the root
            ring_, relative = [(root + i) % p for i in range(p)], (me - root) % p
            with b.phase("scatter"):
                scatter(b, ring_, relative, chunks)
            with b.phase("allgather"):  # the root holds every chunk: it receives none
                for transfers, local in allgather_steps(ring_, relative, chunks):
                    b.round([t for t in transfers if not (
                        relative == 0 and isinstance(t, Recv)
                        or relative == p - 1 and isinstance(t, Send))], local)
            return
        reduce_scatter(b, group, me, chunks, src)  # chunk i reduced on rank i, in recv
        with b.phase("gather"):
            b.round([Recv(r, Region("recv", *chunks[r])) for r in group if r != root]
                    if me == root else [Send(root, Region("recv", *chunks[me]))])
        return
    blocks = block_bounds(options, count, p)
    if frames is not None:  # a dense codec's frames travel
        if options.collective == "allgather":
            compressed_ring.allgather_blocks(b, group, me, blocks, Region(src, 0, count), frames)
        else:
            compressed_ring.reduce_scatter_blocks(b, group, me, blocks, src, frames)
        return
    if options.collective == "allgather":
        with b.phase("allgather"):
            b.round(local=[Copy(Region("recv", *blocks[me]), Region(src, 0, count))])
            for transfers, local in allgather_steps(group, me, blocks):
                b.round(transfers, local)
    else:  # reduce_scatter: this rank's block of the result is all of recv
        b.tmp(3 * max(hi - lo for lo, hi in blocks))
        with b.phase("reduce-scatter"):
            for transfers, local in reduce_scatter_block_steps(group, me, blocks, src):
                b.round(transfers, local)


ALGORITHM = Algorithm("ring", "reduce-scatter + allgather around a ring: bandwidth-optimal",
                      plan=plan, compresses=frozenset({"dense"}), needs_commutative=True,
                      collectives=frozenset({"allreduce", "allgather", "reduce_scatter", "bcast",
                                             "reduce"}))
