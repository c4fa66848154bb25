"""Allreduce for sparse codecs (topk, threshold): an allgather of frames, then decode them all.

Sparse frames cannot be summed hop by hop as dense ones are (each sum would need re-sparsifying
and lose more), so every rank's frame travels around the ring unchanged, and every rank decodes
all p frames into its result in rank order: the same additions in the same order, the same
bits everywhere. Each rank receives the other p-1 frames, so the cost grows with p.

The frame lengths are exchanged first (with mpicoll's own tree), so every rank knows them
before it posts a receive, and all ranks take the same path: when the frames together outweigh
what a dense ring would move (2·n bytes of the array), they fall back to the exact ring and
say so in what they return; with error feedback the contribution is made in the residual
(what was owed plus the input), so the exact sum of it leaves nothing owed. The lengths travel
from host memory.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Iterator

import numpy as np

from .. import codecs, ops, transport
from ..codecs.sparse import SparseCodec
from .._array import array_module
from ..engine import Execution
from ..local import Buffers, run_local
from ..schedule import Builder, Decode, DecodeSum, Recv, Region, Schedule, Send
from . import registry
from ..execution import Call, Ran, run_planned
from .base import Algorithm, Layout, prologue

NAME = "sparse-allgather"
FALLBACK = "ring"


def bounds(count: int, size: int) -> list[int]:
    """Where each rank's region of the index space starts, and the end: as equal as integers
    allow (``sparse-regions``)."""
    return [count * r // size for r in range(size + 1)]


def allgather_frames(layout: Layout, lengths: list[int], count: int,
                     regions: list[int] | None = None) -> Schedule:
    """The schedule for frames of ``lengths[r]`` bytes, rank r's at offset sum(lengths[:r]),
    decoded in rank order and added up; or, with ``regions`` (where each rank's region starts,
    and the end), each decoded into its own region.

    Built per call: the lengths change from call to call.
    """
    b = Builder()
    slots = [b.wire(n) for n in lengths]
    p, me = layout.size, layout.rank
    right, left = (me + 1) % p, (me - 1) % p
    with b.phase("allgather"):
        for step in range(p - 1):
            b.round([Recv(left, slots[(me - step - 1) % p]), Send(right, slots[(me - step) % p])])
    with b.phase("decode"):
        if regions is None:
            b.round(local=[DecodeSum(Region("recv", 0, count), tuple(slots))])
        else:
            b.round(local=[Decode(Region("recv", regions[r], regions[r + 1]), slot)
                           for r, slot in enumerate(slots)])
    return b.build(NAME, count)


def run(algorithm: Algorithm, call: Call) -> Iterator[Execution | Ran]:
    """Exchange the frame lengths, then allgather the frames, or fall back to the exact ring."""
    ctx, send, codec, feedback = call.ctx, call.send, call.codec, call.feedback
    assert codec is not None, "sparse-allgather runs only with a sparse codec"
    if ctx.size == 1:  # a lone rank sends nothing, so it compresses nothing: a copy, as for all
        yield from run_planned(registry.get(FALLBACK), call)
        return
    given, plus = contribution(call)
    if feedback is not None and isinstance(codec, SparseCodec):  # its frame is charged to the
        frame, kept, sent = codec.encode_kept(given, plus)  # residual without being read back
    else:
        if plus is not None:
            given += plus
        frame, kept, sent = codec.encode(given), None, None
    lengths = np.zeros(ctx.size, np.int64)
    lengths[ctx.rank] = frame.size
    yield from run_planned(registry.get("tree"), lengths_call(call, lengths))
    if lengths.sum() > 2 * send.nbytes:
        yield from dense_fallback(call, given)
        return
    if feedback is not None:  # given is the residual: what was not sent stays owed
        if kept is None:
            codec.decode_sub(frame, given)
        else:
            charge(given, kept, sent)
        feedback.keep_finite(given, kept)
    yield from gather(call, frame, lengths)


def gather(call: Call, frame: Any, lengths: np.ndarray) -> Iterator[Execution]:
    """The allgather of every rank's ``frame`` (``lengths``: their sizes, in rank order), each
    decoded into the result in rank order."""
    ctx, send = call.ctx, call.send
    schedule = allgather_frames(ctx.layout, lengths.tolist(), send.size)
    wire = array_module(send).empty(schedule.wire_nbytes, np.uint8)
    start = int(lengths[:ctx.rank].sum())
    wire[start:start + frame.size] = frame
    bufs = Buffers(send, call.recv, array_module(send).empty(0, send.dtype), wire)
    yield Execution(schedule, call.op, ctx.comm, call.tags[1], bufs, call.codec, call.record,
                    call.path.bind(schedule, bufs))


def charge(owed: Any, kept: Any, sent: Any) -> None:
    """``owed[kept] -= sent``: what a sparse frame sent is no longer owed (as ``decode_sub``)."""
    with np.errstate(over="ignore", invalid="ignore"):
        owed[kept] -= sent


def dense_fallback(call: Call, given: Any) -> Iterator[Execution | Ran]:
    """The exact ring on every rank's contribution ``given``, where the frames together outweigh
    what it moves; it carries everything error feedback owed, so nothing is owed after."""
    exact = replace(call, send=given, op=ops.resolve("sum"), codec=None, feedback=None)
    yield from run_planned(registry.get(FALLBACK), exact, tag_index=1)
    if call.feedback is not None:
        given[...] = 0
    yield Ran(FALLBACK, codecs.spec(call.feedback or call.codec) + ":dense-fallback")


def contribution(call: Call) -> tuple[Any, Any]:
    """This rank's contribution as ``(given, plus)``: ``send`` itself, or an average's share
    divided in ``recv`` by the prologue every plan starts with, and None; with error feedback,
    the residual and that share, which the selection adds into the residual in its own pass
    (``select_kept(given, plus)``), so that what the frame sends is then subtracted where it
    was sent (k entries of a sparse frame, not a dense decode and a dense difference)."""
    b = Builder()
    src = prologue(b, call.ctx.size, call.send.size, False, call.op.average)
    bufs = Buffers(call.send, call.recv, call.send[:0])
    for rnd in b.rounds:
        run_local(rnd.local, bufs, call.op)
    given = call.send if src == "send" else call.recv
    if call.feedback is None:
        return given, None
    # (the prologue's order is given + owed: the same bits, addition commutes)
    return call.feedback.owed(call.send), given


def lengths_call(call: Call, lengths: np.ndarray) -> Call:
    """A sum of the frame lengths, in place, from host memory, unrecorded."""
    return replace(call, send=lengths, recv=lengths, op=ops.resolve("sum"),
                   options=replace(call.options, dtype=lengths.dtype.str), codec=None,
                   feedback=None, record=None, path=transport.HOST)


ALGORITHM = Algorithm(NAME, "every rank's sparse frame to every rank, decoded in rank order",
                      run=run, compresses=frozenset({"sparse"}), plain=False, tags=2)
