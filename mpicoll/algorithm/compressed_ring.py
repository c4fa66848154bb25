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
"""

from __future__ import annotations

from ..schedule import Builder, BufferName, Decode, Encode, Local, Recv, Reduce, Region, Send, \
    Transfer, split
from .base import Frames

Step = tuple[list[Transfer], list[Local]]


def _slots(b: Builder, chunks: list[tuple[int, int]], frames: Frames) -> list[Region]:
    """A slot per chunk; an empty chunk gets an empty slot, so its transfers are dropped."""
    return [b.wire(frames.nbytes(hi - lo) if hi > lo else 0) for lo, hi in chunks]


def reduce_scatter(b: Builder, group: list[int], me: int, chunks: list[tuple[int, int]],
                   slots: list[Region], src: BufferName) -> None:
    """Member ``me`` ends holding chunk ``me`` reduced over the group (full precision) in ``recv``."""
    p = len(group)
    right, left = group[(me + 1) % p], group[(me - 1) % p]
    b.tmp(max(hi - lo for lo, hi in chunks))
    with b.phase("reduce-scatter"):
        first = (me - 1) % p
        b.round(local=[Encode(slots[first], Region(src, *chunks[first]))])
        for step in range(p - 1):
            out, into = (me - step - 1) % p, (me - step - 2) % p
            scratch = Region("tmp", 0, chunks[into][1] - chunks[into][0])
            total = Region("recv", *chunks[into])
            local: list[Local] = [Decode(scratch, slots[into]), Reduce(total, Region(src, *chunks[into]), scratch)]
            if step < p - 2:
                local.append(Encode(slots[into], total))  # what the next hop sends on
            b.round([Recv(left, slots[into]), Send(right, slots[out])], local)


def allgather(b: Builder, group: list[int], me: int, chunks: list[tuple[int, int]],
              slots: list[Region]) -> None:
    p = len(group)
    right, left = group[(me + 1) % p], group[(me - 1) % p]
    with b.phase("allgather"):
        own = Region("recv", *chunks[me])
        b.round(local=[Encode(slots[me], own), Decode(own, slots[me])])
        for step in range(p - 1):
            out, into = (me - step) % p, (me - step - 1) % p
            b.round([Recv(left, slots[into]), Send(right, slots[out])],
                    [Decode(Region("recv", *chunks[into]), slots[into])])


def allreduce(b: Builder, group: list[int], me: int, start: int, stop: int, src: BufferName,
              frames: Frames) -> None:
    """Compressed ring allreduce of ``[start, stop)`` among ``group``; ``frames.nbytes(n)`` sizes slots."""
    if len(group) == 1 or start == stop:
        return
    chunks = split(start, stop, len(group))
    slots = _slots(b, chunks, frames)
    reduce_scatter(b, group, me, chunks, slots, src)
    allgather(b, group, me, chunks, slots)


def reduce_scatter_blocks(b: Builder, group: list[int], me: int, blocks: list[tuple[int, int]],
                          src: BufferName, frames: Frames) -> None:
    """The collective ``reduce_scatter``, compressed: member ``me`` ends with block ``me`` of
    ``src`` reduced over the group in ``recv[0:len]``; ``blocks`` in ``src``'s elements.
    Each block travels as two halves, a frame each, pipelined (:func:`_pipelined`)."""
    p, count = len(group), blocks[-1][1]
    right, left = group[(me + 1) % p], group[(me - 1) % p]
    b.tmp(count + max(hi - lo for lo, hi in blocks))  # partial sums in place, then a frame decoded
    streams, starts = [], []
    for parts in halves(blocks):
        slots = _slots(b, parts, frames)
        first = (me - 1) % p
        steps: list[Step] = []
        for step in range(p - 1):
            out, into = (me - step - 1) % p, (me - step - 2) % p
            lo, hi = parts[into]
            scratch = Region("tmp", count, count + hi - lo)
            last = step == p - 2  # (into is me)
            at = blocks[me][0]
            total = Region("recv", lo - at, hi - at) if last else Region("tmp", lo, hi)
            local: list[Local] = [Decode(scratch, slots[into]),
                                  Reduce(total, Region(src, lo, hi), scratch)]
            if not last:
                local.append(Encode(slots[into], total))  # what the next hop sends on
            steps.append(([Recv(left, slots[into]), Send(right, slots[out])], local))
        streams.append(steps)
        starts.append(Encode(slots[first], Region(src, *parts[first])))
    with b.phase("reduce-scatter"):
        _pipelined(b, [starts[0]], [starts[1]], *streams)


def allgather_blocks(b: Builder, group: list[int], me: int, blocks: list[tuple[int, int]],
                     own: Region, frames: Frames) -> None:
    """The collective ``allgather``, compressed: ``own`` (this member's block) encoded once,
    decoded back into ``recv`` at block ``me``, and every frame passed around the ring and
    decoded at its block; ``blocks`` in ``recv``'s elements. Each block travels as two halves,
    a frame each, pipelined (:func:`_pipelined`)."""
    p = len(group)
    right, left = group[(me + 1) % p], group[(me - 1) % p]
    streams, encodes, decodes = [], [], []
    for parts in halves(blocks):
        slots = _slots(b, parts, frames)
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
    with b.phase("allgather"):  # (both halves encoded before a decode writes where own was)
        _pipelined(b, encodes, decodes, *streams)



def halves(blocks: list[tuple[int, int]]) -> list[list[tuple[int, int]]]:
    """Each block cut in two (the first half the larger): the two streams of :func:`_pipelined`."""
    cut = [split(lo, hi, 2) for lo, hi in blocks]
    return [[c[0] for c in cut], [c[1] for c in cut]]


def _pipelined(b: Builder, first: list[Local], under: list[Local], steps_a: list[Step],
               steps_b: list[Step]) -> None:
    """Two streams of ring steps interleaved, so that one stream's codec work runs under the
    other's messages: round 2k carries stream A's step k while B's step k-1 decodes, adds and
    encodes (overlap steps); round 2k+1 carries B's step k under A's. ``first`` runs before
    the first messages, ``under`` under them. Run one after the other, the codec and the wire
    never work at once (int8 on 4 emulated hosts at 1 Gbit/s: half the time went to the
    codec)."""
    b.round(local=first)
    for (sends_a, local_a), (sends_b, local_b) in zip(steps_a, steps_b):
        b.round(sends_a, overlap=under)
        b.round(sends_b, overlap=local_a)
        under = local_b
    b.round(local=under)
