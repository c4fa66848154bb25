"""Allreduce in shared memory: the ranks of one node read each other's inputs in place.

Each rank copies its input into its segment of the node window (:mod:`mpicoll.node_window`),
the node passes a barrier, each rank reduces its slice across the L inputs in rank order into
its result area, another barrier, and each rank copies every slice out: no messages at all,
about 2n copied and n/L·(L−1) reduced per rank. Long vectors go in chunks, pipelined: in one
round a rank copies chunk k in, reduces its slice of chunk k−1 and copies chunk k−2 out, so the
window stays bounded (two input areas of :data:`CHUNK_BYTES` and four result areas of a slice,
per rank: two of them publish hybrid's pipelined results) and one barrier per chunk orders it
all.

The window's layout is the same for every call (in bytes, whatever the count or dtype): inputs
at the front of each rank's segment, results behind them. That is what makes one call safe
against the next without a closing barrier: a call writes only its own input area before its
first barrier, and what the previous call's last round still reads is a result area.

Every element is reduced once, in rank order, then copied: every rank gets the same bits, and
the op need not be commutative.

The other collectives use the same window and layout: allgather (:func:`spread`),
reduce_scatter (:func:`reduce_spans`), bcast and reduce; hybrid's node stages are these too.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from ..schedule import Builder, BufferName, Copy, Local, Reduce, Region, split
from .base import Algorithm, Frames, Layout, Options, block_bounds

CHUNK_BYTES = 1 << 20
"""Input per rank per pipeline step; the window holds about (2 + 4/L) times this per rank."""

_ALIGN = 64


class Pieces:
    """How ``count`` elements are cut for a node of ``size`` ranks: rank r owns the slice
    ``split(0, count, size)[r]``; chunk j holds piece j of every slice, so reducing chunk by
    chunk leaves each rank's whole slice contiguous (what hybrid's inter-node stage needs).

    Chunks hold at most ``chunk_bytes`` (:data:`CHUNK_BYTES` or less: a finer pipeline); the
    areas are those of :data:`CHUNK_BYTES` whatever the chunks, so that every plan on a node
    lays its window out alike."""

    def __init__(self, count: int, size: int, me: int, itemsize: int,
                 chunk_bytes: int | None = None):
        chunk_bytes = CHUNK_BYTES if chunk_bytes is None else chunk_bytes
        assert chunk_bytes <= CHUNK_BYTES
        self.size, self.me = size, me
        chunk = chunk_bytes // itemsize  # elements of one chunk's input
        slices = split(0, count, size)
        # Each chunk takes at most ceil(slice / chunks) of each of the L slices: enough chunks
        # that L such pieces of the largest slice fit one input area.
        largest = max(hi - lo for lo, hi in slices)
        chunks = max(1, -(-largest // max(chunk // size, 1)))
        pieces = [split(lo, hi, chunks) for lo, hi in slices]
        self.chunks = [[p[j] for p in pieces] for j in range(chunks)]
        self.segment, self._inputs, self._results = segment(size, itemsize)
        assert max(hi - lo for c in self.chunks for lo, hi in c) <= \
            self._results[1] - self._results[0]

    @property
    def window(self) -> int:
        """Elements of the node window the plan uses."""
        return self.size * self.segment

    def inputs(self, j: int, rank: int | None = None) -> list[tuple[Region, tuple[int, int]]]:
        """Where chunk ``j``'s pieces lie in the input area of ``rank`` (this one by default),
        beside where each lies in the whole vector."""
        return _laid_out(self.chunks[j],
                         (self.me if rank is None else rank) * self.segment + self._inputs[j % 2])

    def copy_in(self, j: int, src: BufferName, rank: int | None = None) -> list[Local]:
        """Chunk ``j`` of this rank's input into the input area of ``rank`` (its own)."""
        return [Copy(area, Region(src, *span)) for area, span in self.inputs(j, rank)]

    def reduce(self, j: int, dst: Region) -> list[Local]:
        """This rank's piece of chunk ``j``, reduced over every rank's input, into ``dst``."""
        lo, hi = self.chunks[j][self.me]
        at = sum(b - a for a, b in self.chunks[j][:self.me])
        inputs = [Region("node", r * self.segment + self._inputs[j % 2] + at,
                         r * self.segment + self._inputs[j % 2] + at + hi - lo)
                  for r in range(self.size)]
        return _reduced(dst, inputs)

    def result(self, j: int, rank: int | None = None, published: bool = False) -> Region:
        """Result area of ``rank`` (this one by default) for chunk ``j``'s piece; ``published``:
        the area that shows it to the others while this rank reduces later chunks."""
        rank = self.me if rank is None else rank
        lo, hi = self.chunks[j][rank]
        base = rank * self.segment + self._results[j % 2 + 2 * published]
        return Region("node", base, base + hi - lo)

    def copy_out(self, j: int, published: bool = False) -> list[Local]:
        """Every rank's reduced piece of chunk ``j`` from its result area into ``recv``."""
        return [Copy(Region("recv", *self.chunks[j][r]), self.result(j, r, published))
                for r in range(self.size)]


def segment(size: int, itemsize: int) -> tuple[int, tuple[int, int], tuple[int, ...]]:
    """A rank's segment of the window on a node of ``size`` ranks, fixed for the node: its
    elements, where its two input areas start and where its four result areas start (two
    results, two that publish a rank's slice to the others while it reduces later chunks)."""
    area = _up(CHUNK_BYTES)
    result = _up(-(-CHUNK_BYTES // size) + itemsize * 2)
    return ((2 * area + 4 * result) // itemsize, (0, area // itemsize),
            tuple((2 * area + i * result) // itemsize for i in range(4)))


def _laid_out(pieces: list[tuple[int, int]], base: int) -> list[tuple[Region, tuple[int, int]]]:
    """``pieces`` of a vector one after another in an area of the window that starts at
    ``base``: where each lies there, beside where it lies in the vector."""
    at, where = base, []
    for lo, hi in pieces:
        where.append((Region("node", at, at + hi - lo), (lo, hi)))
        at += hi - lo
    return where


def _reduced(dst: Region, parts: list[Region]) -> list[Local]:
    """``dst`` = the parts (two at least) reduced in order."""
    steps: list[Local] = [Reduce(dst, parts[0], parts[1])]
    return steps + [Reduce(dst, dst, part) for part in parts[2:]]


def _up(nbytes: int) -> int:
    return -(-nbytes // _ALIGN) * _ALIGN


def node_of(layout: Layout) -> tuple[tuple[int, ...], int]:
    """This rank's node and its index in it."""
    node = next(n for n in layout.nodes if layout.rank in n)
    return node, node.index(layout.rank)


Stage = Callable[[int], list[Local]]


def pipelined(b: Builder, node: tuple[int, ...], window: int, chunks: int,
              stages: list[Stage]) -> None:
    """One round per step of a pipeline over the chunks: round k runs stage s on chunk k − s
    (later stages first), and every round but the first passes the node's barrier, so stage s
    of a chunk has finished on every rank before stage s + 1 of it starts on any."""
    b.window(node, window)
    for k in range(chunks + len(stages) - 1):
        steps: list[Local] = []
        for s in reversed(range(len(stages))):
            if 0 <= k - s < chunks:
                steps += stages[s](k - s)
        b.round(local=steps, sync=k >= 1)


def reduce_scatter(b: Builder, node: tuple[int, ...], me: int, pieces: Pieces,
                   src: BufferName) -> None:
    """Leave this rank's slice reduced over the node in ``recv``, at its place in the vector
    (hybrid's first stage). Reduced in the window, then copied: reductions stay in host memory
    for device arrays."""
    with b.phase("reduce-scatter"):
        pipelined(b, node, pieces.window, len(pieces.chunks), [
            lambda j: pieces.copy_in(j, src),
            lambda j: (pieces.reduce(j, pieces.result(j))
                       + [Copy(Region("recv", *pieces.chunks[j][me]), pieces.result(j))])])


def allgather(b: Builder, node: tuple[int, ...], me: int, pieces: Pieces) -> None:
    """Spread every rank's slice of ``recv`` to the whole node (hybrid's last stage)."""
    with b.phase("allgather"):
        pipelined(b, node, pieces.window, len(pieces.chunks), [
            lambda j: [Copy(pieces.result(j), Region("recv", *pieces.chunks[j][me]))],
            pieces.copy_out])


class Spans:
    """Spans of a vector cut into ``chunks`` pieces each: chunk j is piece j of every span, one
    after another, as an area of the window holds them."""

    def __init__(self, spans: list[tuple[int, int]], chunks: int):
        self.cut = [split(lo, hi, chunks) for lo, hi in spans]

    @staticmethod
    def chunks(spans: list[tuple[int, int]], room: int) -> int:
        """The fewest chunks of which each holds at most ``room`` elements (a span's pieces
        differ by one element at most)."""
        sizes = [hi - lo for lo, hi in spans if hi > lo]
        if len(sizes) > room:
            raise ValueError(f"{len(sizes)} spans do not fit a window area of {room} elements")
        chunks = max(1, -(-sum(sizes) // room))
        while sum(-(-n // chunks) for n in sizes) > room:
            chunks += 1
        return chunks

    def chunk(self, j: int, base: int = 0) -> list[tuple[Region, tuple[int, int]]]:
        """Where chunk ``j``'s pieces lie in an area that starts at ``base``, beside where each
        lies in the vector."""
        return _laid_out([cut[j] for cut in self.cut], base)


def spread(b: Builder, node: tuple[int, ...], me: int, spans: list[list[tuple[int, int]]],
           itemsize: int, src: BufferName = "recv", shift: int = 0) -> None:
    """Give every rank of the node the others' ``spans`` of ``recv`` (``spans[m]``: what its
    rank m holds): each copies its own, a chunk at a time, into its input area, and after the
    barrier the others copy them out to the same place. Own spans are read from ``src`` (at
    ``shift`` elements before their place); from elsewhere than ``recv`` they go to ``recv``
    too, from the window, where they are still in cache. A last barrier, as bcast's: the last
    round reads input areas."""
    elements, inputs, _ = segment(len(node), itemsize)
    chunks = max(Spans.chunks(own, inputs[1] - inputs[0]) for own in spans)
    cuts = [Spans(own, chunks) for own in spans]

    def area(j: int, m: int) -> list[tuple[Region, tuple[int, int]]]:
        return cuts[m].chunk(j, m * elements + inputs[j % 2])

    def publish(j: int) -> list[Local]:
        steps: list[Local] = []
        for where, (lo, hi) in area(j, me):
            steps.append(Copy(where, Region(src, lo - shift, hi - shift)))
            if src != "recv":
                steps.append(Copy(Region("recv", lo, hi), where))
        return steps

    def take(j: int) -> list[Local]:
        return [Copy(Region("recv", *span), where)
                for m in range(len(node)) if m != me for where, span in area(j, m)]

    pipelined(b, node, len(node) * elements, chunks, [publish, take])
    b.round(sync=True)


def reduce_spans(b: Builder, node: tuple[int, ...], me: int, spans: list[list[tuple[int, int]]],
                 src: BufferName, into: Callable[[int, int], Region], itemsize: int) -> None:
    """Reduce ``src`` over the node, rank m keeping ``spans[m]`` (into ``into(lo, hi)``): each
    rank copies every span of its input in, a chunk at a time, and after the barrier reduces
    its own spans' pieces across the node's input areas, in its result area (host memory,
    whatever the arrays), then copies them out. A last barrier: the last round reads input
    areas."""
    elements, inputs, results = segment(len(node), itemsize)
    every = [span for own in spans for span in own]
    chunks = max([Spans.chunks(every, inputs[1] - inputs[0])]
                 + [Spans.chunks(own, results[1] - results[0]) for own in spans])
    cut = Spans(every, chunks)
    first = sum(len(own) for own in spans[:me])  # where this rank's spans start in ``every``

    def copy_in(j: int) -> list[Local]:
        return [Copy(where, Region(src, *span))
                for where, span in cut.chunk(j, me * elements + inputs[j % 2])]

    def reduce(j: int) -> list[Local]:
        areas = [cut.chunk(j, r * elements + inputs[j % 2]) for r in range(len(node))]
        steps: list[Local] = []
        at = me * elements + results[j % 2]
        for k in range(first, first + len(spans[me])):
            parts = [area[k][0] for area in areas]
            lo, hi = areas[0][k][1]
            dst = Region("node", at, at + hi - lo)
            at += hi - lo
            steps += _reduced(dst, parts) + [Copy(into(lo, hi), dst)]
        return steps

    pipelined(b, node, len(node) * elements, chunks, [copy_in, reduce])
    b.round(sync=True)


def bcast(b: Builder, node: tuple[int, ...], me: int, root: int, pieces: Pieces) -> None:
    """Spread ``recv`` of the node's rank ``root`` (an index into ``node``) to the others: it
    copies each chunk into its input area, they copy it out. A last barrier: the last round
    reads an input area, which the next call's first round writes."""
    def publish(j: int) -> list[Local]:
        return pieces.copy_in(j, "recv", root) if me == root else []

    def take(j: int) -> list[Local]:
        return [] if me == root else [Copy(Region("recv", *span), area)
                                      for area, span in pieces.inputs(j, root)]

    with b.phase("bcast"):
        pipelined(b, node, pieces.window, len(pieces.chunks), [publish, take])
        b.round(sync=True)


def reduce(b: Builder, node: tuple[int, ...], me: int, root: int | None, pieces: Pieces,
           src: BufferName) -> None:
    """Leave ``src`` reduced over the node in ``recv`` of its rank ``root`` (an index into
    ``node``; None: of every rank, an allreduce): copy in, reduce each slice, copy out."""
    def out(j: int) -> list[Local]:
        return pieces.copy_out(j) if root is None or me == root else []

    pipelined(b, node, pieces.window, len(pieces.chunks), [lambda j: pieces.copy_in(j, src),
                                lambda j: pieces.reduce(j, pieces.result(j)), out])


def plan(b: Builder, layout: Layout, count: int, options: Options, src: BufferName,
         frames: Frames | None) -> None:
    if len(layout.nodes) > 1:
        raise ValueError(f"shm needs every rank on one node; these ranks are on "
                         f"{len(layout.nodes)} (nodes {[list(n) for n in layout.nodes]})")
    node, me = node_of(layout)
    itemsize = np.dtype(options.dtype).itemsize
    kind = options.collective
    if kind == "allgather":
        blocks = block_bounds(options, count, len(node))
        with b.phase("allgather"):
            spread(b, node, me, [[blocks[r]] for r in node], itemsize, src, blocks[node[me]][0])
        return
    if kind == "reduce_scatter":
        blocks = block_bounds(options, count, len(node))
        shift = blocks[node[me]][0]
        with b.phase("reduce-scatter"):
            reduce_spans(b, node, me, [[blocks[r]] for r in node], src,
                         lambda lo, hi: Region("recv", lo - shift, hi - shift), itemsize)
        return
    pieces = Pieces(count, len(node), me, itemsize)
    if kind == "bcast":
        bcast(b, node, me, node.index(options.root), pieces)
    else:  # allreduce, or reduce to its root
        reduce(b, node, me, None if kind == "allreduce" else node.index(options.root), pieces,
               src)


ALGORITHM = Algorithm("shm", "shared memory inside one node: every rank reduces its slice in place",
                      plan=plan, one_node=True,
                      collectives=frozenset({"allreduce", "allgather", "reduce_scatter", "bcast",
                                             "reduce"}))
