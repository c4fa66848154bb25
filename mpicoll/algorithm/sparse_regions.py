"""Allreduce for sparse codecs by index regions: a sparse reduce-scatter, then an allgather of
the reduced regions, each made sparse again (the shape of Ok-Topk, PPoPP'22).

The index space is cut into p regions, one per rank. Each rank selects over its whole
contribution (as ``encode_regions``: top-k is the array's top k) and sends the part in region r, a
frame of its own, to rank r. Rank r decodes the p frames of its region in rank order (the same
additions, whatever arrives first) and encodes that sum again with a fresh codec of the same
parameters (a stateful codec keeps the state of the first encode): about k/p values. Those p
frames are allgathered and each decoded into its region, so every rank ends with the same bits.
A rank sends and parses about two frames' worth, where ``sparse-allgather`` moves and parses p;
the region's owner encodes once more.

Where a region's sum has filled in so far that its sparse frame outweighs a dense one (``fp16``,
2 bytes a value), its owner sends the dense frame instead; frames are decoded by the codec that
wrote them, and a call where some region switched says so in its record (``:dense-regions``).

What the second encode drops, the region's owner owes: with error feedback it joins that rank's
residual, beside what its first encode did not send, so what every rank sent plus what all owe
is still the sum of the inputs. As in ``sparse-allgather``, the frame lengths are summed first
(a p × p table, by mpicoll's own tree), and where the first frames together outweigh a dense
ring's 2·n bytes every rank runs the exact ring instead.
"""

from __future__ import annotations

from typing import Any, Iterator

import numpy as np

from .. import codecs
from ..codecs.sparse import SparseCodec
from ..codecs.wire import frame_bytes, peek_codec_id
from .._array import array_module
from ..engine import Execution
from ..local import Buffers
from ..schedule import Builder, DecodeSum, Recv, Region, Schedule, Send
from . import registry
from ..execution import Call, Ran, run_planned
from .base import Algorithm, Layout
from .sparse_allgather import (FALLBACK, allgather_frames, bounds, charge, contribution,
                               dense_fallback, lengths_call)

NAME = "sparse-regions"
DENSE = "fp16"  # a region's frame when its sum has filled in


class _ByFrame:
    """Decodes each frame with the codec that wrote it: a region may have switched to dense."""

    decode = staticmethod(codecs.decode)
    decode_sum = staticmethod(codecs.decode_sum)


def reduce_scatter_frames(layout: Layout, lengths: np.ndarray, edges: list[int],
                          count: int) -> Schedule:
    """Rank q's frame of region r is ``lengths[q, r]`` bytes; this rank sends each of its own
    to the region's owner and decodes the p frames of its own region in rank order. The wire
    holds this rank's p frames (in region order), then those it receives (in rank order)."""
    b = Builder()
    p, me = layout.size, layout.rank
    mine = [b.wire(int(n)) for n in lengths[me]]
    theirs = {q: b.wire(int(lengths[q, me])) for q in range(p) if q != me}
    with b.phase("reduce-scatter"):
        b.round([Recv(q, slot) for q, slot in theirs.items()]
                + [Send(r, mine[r]) for r in range(p) if r != me])
    region = Region("recv", edges[me], edges[me + 1])
    slots = [mine[me] if q == me else theirs[q] for q in range(p)]
    with b.phase("decode"):
        b.round(local=[DecodeSum(region, tuple(slots))])
    return b.build(NAME, count)


def run(algorithm: Algorithm, call: Call) -> Iterator[Execution | Ran]:
    ctx, send, codec, feedback = call.ctx, call.send, call.codec, call.feedback
    assert isinstance(codec, SparseCodec), "sparse-regions runs only with a sparse codec"
    if ctx.size == 1:
        yield from run_planned(registry.get(FALLBACK), call)
        return
    p, me = ctx.size, ctx.rank
    edges = bounds(send.size, p)
    given, plus = contribution(call)
    kept, sent = codec.select_kept(given, plus)  # (encode_regions, keeping what it sends)
    frames = codec.frames_kept(given, kept, sent, edges)
    lengths = np.zeros((p, p), np.int64)
    lengths[me] = [frame.size for frame in frames]
    yield from run_planned(registry.get("tree"), lengths_call(call, lengths.reshape(-1)))
    if lengths.sum() > 2 * send.nbytes:
        yield from dense_fallback(call, given)
        return
    if feedback is not None:  # what the first frames did not send stays owed
        charge(given, kept, sent)
    yield from reduce_regions(call, given, frames, lengths)


def reduce_regions(call: Call, given: Any, frames: list, lengths: np.ndarray
                   ) -> Iterator[Execution | Ran]:
    """The region reduce-scatter of this rank's ``frames`` (``lengths[q, r]``: rank q's of
    region r), then the allgather of the reduced regions, each made sparse again; last, what
    ran. ``given``: the contribution, with error feedback the residual, already charged with
    what ``frames`` send."""
    ctx, send, recv, codec, feedback = call.ctx, call.send, call.recv, call.codec, call.feedback
    assert codec is not None
    p, me, xp = ctx.size, ctx.rank, array_module(send)
    edges = bounds(send.size, p)
    schedule = reduce_scatter_frames(ctx.layout, lengths, edges, send.size)
    wire = xp.empty(schedule.wire_nbytes, np.uint8)
    at = 0
    for frame in frames:
        wire[at:at + frame.size] = frame
        at += frame.size
    bufs = Buffers(send, recv, xp.empty(0, send.dtype), wire)
    yield Execution(schedule, call.op, ctx.comm, call.tags[1], bufs, codec, call.record,
                    call.path.bind(schedule, bufs))
    region = recv[edges[me]:edges[me + 1]]
    reduced = codecs.from_config(codec.get_config()).encode(region)  # the parameters, not the state
    if reduced.size > 2 * region.size:  # filled in: a dense frame may be smaller
        dense = codecs.get(DENSE).encode(region)
        reduced = dense if dense.size < reduced.size else reduced
    if feedback is not None:  # what the second encode drops, this region's owner owes
        owed = given[edges[me]:edges[me + 1]]
        owed += region
        codecs.decode_sub(reduced, owed)
        feedback.keep_finite(given)
    sizes = np.zeros(p, np.int64)
    sizes[me] = reduced.size
    yield from run_planned(registry.get("tree"), lengths_call(call, sizes), tag_index=2)
    schedule = allgather_frames(ctx.layout, sizes.tolist(), send.size, edges)
    wire = xp.empty(schedule.wire_nbytes, np.uint8)
    start = int(sizes[:me].sum())
    wire[start:start + reduced.size] = reduced
    bufs = Buffers(send, recv, xp.empty(0, send.dtype), wire)
    yield Execution(schedule, call.op, ctx.comm, call.tags[3], bufs, _ByFrame(),  # type: ignore[arg-type]
                    call.record, call.path.bind(schedule, bufs))
    starts = np.concatenate([[0], np.cumsum(sizes)])
    went_dense = any(peek_codec_id(frame_bytes(wire[starts[r]:starts[r + 1]])) != codec.codec_id
                     for r in range(p))
    yield Ran(NAME, codecs.spec(feedback or codec) + (":dense-regions" if went_dense else ""))


ALGORITHM = Algorithm(NAME, "a sparse reduce-scatter over index regions, then an allgather of "
                      "the reduced regions made sparse again", run=run,
                      compresses=frozenset({"sparse"}), plain=False, tags=4)
