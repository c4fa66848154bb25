"""Compressed ring allreduce for dense codecs (fp16, bf16, int8, sign).

Reduce-scatter: each hop decodes the incoming partial sum, adds it to this rank's values in
the array's own precision (float32 or wider, never the codec's), and re-encodes the sum for
the next hop. Allgather: the owner of a chunk encodes its final sum once, *decodes it back into
its own result*, and the frame travels on unchanged, so every rank decodes the same frame and
ends with the same bits. Wire volume per rank: 2(p-1)/p of the encoded size.

Every frame slot is sized exactly (dense frames have a size known from the element count), and
each chunk keeps its own slot, so a slot is never received into while it is being sent.

The two halves are also the collectives ``reduce_scatter`` and ``allgather`` on their own, with
rank i's block as chunk i (:func:`reduce_scatter_blocks`, :func:`allgather_blocks`: ZeRO++'s
quantized gradients and weights). A reduce_scatter keeps its partial sums in ``tmp`` at their
blocks' own positions, so error feedback owes each loss where the input was; an allgather's
owner decodes its own frame into its block, so every rank holds the same bits.

A chunk of two :data:`PIECE_BYTES` or more travels in pieces, a frame each, one stream of ring
steps per piece, whose rounds take turns (:func:`_pipelined`): one piece's decode, add and
encode run under the next piece's messages.
"""

from __future__ import annotations

from typing import Callable

from ..schedule import Builder, BufferName, Decode, Encode, Local, Recv, Reduce, Region, Send, \
    Transfer, split
from .base import Frames

Step = tuple[list[Transfer], list[Local]]
Span = tuple[int, int]

PIECE_BYTES = 512 << 10
"""The input a piece of a chunk holds at least (:func:`streams_of`): a chunk of less than two
goes whole, in one stream. Smaller pieces cost more messages than their overlap saves: an
allreduce of 1 MiB on 4 emulated hosts at 1 Gbit/s (chunks of 256 KiB, fp16) ran at 1.54× MPI's
own speed in one stream and 1.15× in two; of 4 MiB (chunks of 1 MiB) 1.67× and 2.00×."""

MAX_STREAMS = 4
"""Pieces of a chunk at most: each adds p-1 rounds to each half of the ring. Against 8, on 4
emulated hosts (16-64 MiB, three runs each, alternated): allgather int8 3.33-3.70× MPI's own
fp32 against 2.78-3.45×, reduce_scatter alike, allreduce of 16 MiB int8 3.57-3.70× against
2.50-3.23×."""


def _slots(b: Builder, chunks: list[Span], frames: Frames) -> list[Region]:
    """A slot per chunk; an empty chunk gets an empty slot, so its transfers are dropped."""
    return [b.wire(frames.nbytes(hi - lo) if hi > lo else 0) for lo, hi in chunks]


def allreduce(b: Builder, group: list[int], me: int, start: int, stop: int, src: BufferName,
              frames: Frames) -> None:
    """Compressed ring allreduce of ``[start, stop)`` among ``group``; ``frames.nbytes(n)`` sizes slots."""
    if len(group) == 1 or start == stop:
        return
    chunks = split(start, stop, len(group))
    b.tmp(max(hi - lo for lo, hi in chunks))
    slots = reduce_scatter(b, group, me, chunks, src, frames,
                           lambda lo, hi, last: Region("recv", lo, hi), 0)
    allgather_blocks(b, group, me, chunks, Region("recv", *chunks[me]), frames, slots)


def reduce_scatter_blocks(b: Builder, group: list[int], me: int, blocks: list[Span],
                          src: BufferName, frames: Frames) -> None:
    """The collective ``reduce_scatter``, compressed: member ``me`` ends with block ``me`` of
    ``src`` reduced over the group in ``recv[0:len]``; ``blocks`` in ``src``'s elements. The
    partial sums stay in ``tmp`` at their blocks' own positions."""
    count, at = blocks[-1][1], blocks[me][0]
    b.tmp(count + max(hi - lo for lo, hi in blocks))  # partial sums in place, then a frame decoded
    reduce_scatter(b, group, me, blocks, src, frames,
                   lambda lo, hi, last: Region("recv", lo - at, hi - at) if last
                   else Region("tmp", lo, hi), count)


def reduce_scatter(b: Builder, group: list[int], me: int, chunks: list[Span], src: BufferName,
                   frames: Frames, total: Callable[[int, int, bool], Region],
                   scratch: int) -> list[list[Region]]:
    """Member ``me`` ends holding chunk ``me`` reduced over the group (full precision):
    ``total(lo, hi, last)`` is where a hop's sum of ``[lo, hi)`` goes (``last``: this member's
    own, the result); a frame decodes into ``tmp`` at ``scratch``. Returns each stream's frame
    slots, free once it ends (allreduce's allgather takes them)."""
    p = len(group)
    right, left, first = group[(me + 1) % p], group[(me - 1) % p], (me - 1) % p
    streams: list[list[Step]] = []
    starts: list[Local] = []
    every: list[list[Region]] = []
    for parts in streams_of(chunks, frames):
        slots = _slots(b, parts, frames)
        every.append(slots)
        steps: list[Step] = []
        for step in range(p - 1):
            out, into = (me - step - 1) % p, (me - step - 2) % p
            lo, hi = parts[into]
            last = step == p - 2  # (into is me)
            summed, decoded = total(lo, hi, last), Region("tmp", scratch, scratch + hi - lo)
            local: list[Local] = [Decode(decoded, slots[into]),
                                  Reduce(summed, Region(src, lo, hi), decoded)]
            if not last:
                local.append(Encode(slots[into], summed))  # what the next hop sends on
            steps.append(([Recv(left, slots[into]), Send(right, slots[out])], local))
        streams.append(steps)
        starts.append(Encode(slots[first], Region(src, *parts[first])))
    with b.phase("reduce-scatter"):
        _pipelined(b, starts[:1], starts[1:], streams)
    return every


def allgather_blocks(b: Builder, group: list[int], me: int, blocks: list[Span], own: Region,
                     frames: Frames, slots_of: list[list[Region]] | None = None) -> None:
    """The collective ``allgather``, compressed (and allreduce's second half): ``own`` (this
    member's block) encoded once, decoded back into ``recv`` at block ``me``, and every frame
    passed around the ring and decoded at its block; ``blocks`` in ``recv``'s elements.
    ``slots_of``: each stream's frame slots, if a phase before left them free."""
    p = len(group)
    right, left = group[(me + 1) % p], group[(me - 1) % p]
    streams: list[list[Step]] = []
    encodes: list[Local] = []
    decodes: list[Local] = []
    for j, parts in enumerate(streams_of(blocks, frames)):
        slots = _slots(b, parts, frames) if slots_of is None else slots_of[j]
        lo, hi = parts[me]
        encodes.append(Encode(slots[me], Region(own.buf, own.start + lo - blocks[me][0],
                                                own.start + hi - blocks[me][0])))
        decodes.append(Decode(Region("recv", lo, hi), slots[me]))
        steps: list[Step] = []
        for step in range(p - 1):
            out, into = (me - step) % p, (me - step - 1) % p
            steps.append(([Recv(left, slots[into]), Send(right, slots[out])],
                          [Decode(Region("recv", *parts[into]), slots[into])]))
        streams.append(steps)
    with b.phase("allgather"):  # (own encoded whole before a decode writes where it was)
        _pipelined(b, encodes[:1], encodes[1:] + decodes, streams)


def streams_of(chunks: list[Span], frames: Frames) -> list[list[Span]]:
    """The chunks as they travel: each cut into as many pieces as the largest holds
    :data:`PIECE_BYTES` (1 to :data:`MAX_STREAMS`, the first pieces the larger), stream j
    carrying piece j of every chunk."""
    largest = max(hi - lo for lo, hi in chunks) * frames.dtype.itemsize
    k = max(1, min(MAX_STREAMS, largest // PIECE_BYTES))
    cut = [split(lo, hi, k) for lo, hi in chunks]
    return [[c[j] for c in cut] for j in range(k)]


def _pipelined(b: Builder, first: list[Local], under: list[Local],
               streams: list[list[Step]]) -> None:
    """Ring steps as rounds: ``first`` runs before the first messages, ``under`` under them.
    One stream: each step's local steps after its messages. Several: the streams take turns,
    step by step, and each round's messages carry one stream's step while the step of the
    round before decodes, adds and encodes (overlap steps): what a stream's next step sends
    is ready a round before it goes. Run one after the other, the codec and the wire never
    work at once (int8 on 4 emulated hosts at 1 Gbit/s: half of a reduce_scatter's time went
    to the codec)."""
    b.round(local=first)
    for step in zip(*streams):
        for sends, local in step:
            if len(streams) == 1:  # (the next step sends what this one encodes)
                b.round(sends, local, overlap=under)
                under = []
            else:
                b.round(sends, overlap=under)
                under = local
    b.round(local=under)
