"""Allreduce for sparse codecs as ``auto`` runs it: ``sparse-allgather`` or ``sparse-regions``,
whichever the frames at hand make cheaper, or the exact ring where they outweigh it.

Every rank selects what its codec keeps of its contribution, once, and sizes both frames it
could send without building them (``SparseCodec.kept_nbytes``): the one frame of
``sparse-allgather`` and the p frames cut at the regions' edges of ``sparse-regions``. That row
of p + 1 lengths from every rank is summed into a table, as both algorithms sum theirs. From it
every rank predicts both (:func:`predict`), builds only the frames of the cheaper and runs it
(regions only where predicted a quarter faster or more: the rates below are one machine's,
ranks that share cores are not modelled, and at 2 and 4 ranks here regions measured from 2×
slower to a few percent faster than the allgather):

- allgather: p-1 ring steps; the busiest rank sends all frames but one; every rank parses all
  p frames;
- regions: one step that sends each region's frames to its owner, a second lengths exchange
  (a tree), and a ring allgather of the reduced regions (taken as a p-th of the first frames);
  a rank parses its region's frames and the reduced ones, and encodes its region once more.

Latency and time per byte come from the cost model in force on rank 0 (``mpicoll tune``'s, or
the built-in one), across nodes or within one as the layout has them: they travel in the same
table, so every rank decides alike. The CPU rates are this machine's, measured on a slow day
(``git show abc5a13:benchmarks/sparse_breakdown.py``). The record says which algorithm ran;
each path gives the same bits as that algorithm asked for by name.

Only with error feedback: what the regions' second encode drops, the region's owner owes, and
without it that would be lost, beyond what the codec itself drops. A codec without error
feedback runs ``sparse-allgather`` as it is: the exact sum of what every rank kept.
"""

from __future__ import annotations

import math
from typing import Iterator

import numpy as np

from .. import codecs, tuning
from ..codecs.sparse import SparseCodec
from ..engine import Execution
from . import registry, sparse_allgather, sparse_regions
from ..execution import Call, Ran, run_planned
from .base import Algorithm
from .sparse_allgather import (FALLBACK, bounds, charge, contribution, dense_fallback, gather,
                               lengths_call)
from .sparse_regions import reduce_regions

NAME = "sparse-auto"
PARSE = 9e-9  # seconds per byte of frame parsed and added in (a top-1% frame: 3.3 bytes a value)
FRAME = 170e-6  # seconds per frame parsed, whatever its size (header, checks, NumPy calls)
SELECT = 2.7e-9  # seconds per element selected and encoded (topk, sampled selection)
MARGIN = 0.75  # regions only where predicted to take at most this much of the allgather's time


def predict(wholes: np.ndarray, lengths: np.ndarray, count: int, alpha: float, beta: float
            ) -> dict[str, float]:
    """Predicted seconds of each path: rank q's frame is ``wholes[q]`` bytes, its frame of
    region r ``lengths[q, r]``; ``count`` elements; links of latency ``alpha`` and ``beta``
    seconds per byte."""
    p = lengths.shape[0]
    total = float(wholes.sum())
    allgather = ((p - 1) * alpha + beta * (total - float(wholes.min()))
                 + PARSE * total + FRAME * p)
    rows, cols, own = lengths.sum(axis=1), lengths.sum(axis=0), np.diag(lengths)
    reduced = float(lengths.sum()) / p  # the regions' sums, made sparse again at the codec's rate
    scatter = (p - 1) * alpha + beta * float(max((rows - own).max(), (cols - own).max()))
    exchange = 2 * math.ceil(math.log2(p)) * alpha
    regather = (p - 1) * alpha + beta * reduced * (p - 1) / p
    regions = (scatter + exchange + regather + PARSE * (float(cols.max()) + reduced)
               + FRAME * 2 * p + SELECT * count / p)
    return {sparse_allgather.NAME: allgather, sparse_regions.NAME: regions}


def choice(times: dict[str, float]) -> str:
    """The path to run for these :func:`predict` ions: regions only by a clear margin."""
    regions = times[sparse_regions.NAME] <= MARGIN * times[sparse_allgather.NAME]
    return sparse_regions.NAME if regions else sparse_allgather.NAME


def run(algorithm: Algorithm, call: Call) -> Iterator[Execution | Ran]:
    ctx, send, codec, feedback = call.ctx, call.send, call.codec, call.feedback
    assert isinstance(codec, SparseCodec), "sparse-auto runs only with a sparse codec"
    if ctx.size == 1:  # a lone rank copies, as auto has it
        yield from _said(FALLBACK, run_planned(registry.get(FALLBACK), call), call)
        return
    if feedback is None:  # regions lose what their second encode drops; only error feedback
        yield from _said(sparse_allgather.NAME, sparse_allgather.run(algorithm, call), call)
        return  # owes it to the next call
    p, me = ctx.size, ctx.rank
    edges = bounds(send.size, p)
    given, plus = contribution(call)
    kept, sent = codec.select_kept(given, plus)
    whole, regions = codec.kept_nbytes(given, kept, sent, edges)
    table = np.zeros(p * (p + 1) + 2, np.int64)
    table[me * (p + 1):(me + 1) * (p + 1)] = [whole, *regions]
    if me == 0:  # rank 0's links decide: the others add zeros to their bits
        model, level = tuning.model_in_force(), "remote" if len(ctx.layout.nodes) > 1 else "local"
        table[-2:] = np.array([model.alpha[level], model.beta[level]]).view(np.int64)
    yield from run_planned(registry.get("tree"), lengths_call(call, table))
    rows = table[:-2].reshape(p, p + 1)
    if rows[:, 0].sum() > 2 * send.nbytes:  # as sparse-allgather decides
        yield from dense_fallback(call, given)
        return
    alpha, beta = table[-2:].view(np.float64)
    if choice(predict(rows[:, 0], rows[:, 1:], send.size, alpha, beta)) == sparse_regions.NAME:
        frames = codec.frames_kept(given, kept, sent, edges)
        charge(given, kept, sent)  # what the frames send is no longer owed
        yield from reduce_regions(call, given, frames, rows[:, 1:])
    else:
        frame = codec.frames_kept(given, kept, sent)
        charge(given, kept, sent)
        feedback.keep_finite(given, kept)
        yield from _said(sparse_allgather.NAME, gather(call, frame, rows[:, 0]), call)


def _said(name: str, stages: Iterator[Execution | Ran], call: Call) -> Iterator[Execution | Ran]:
    """``stages``, then that ``name`` ran, unless they said what ran themselves."""
    for stage in stages:
        yield stage
        if isinstance(stage, Ran):
            return
    yield Ran(name, codecs.spec(call.feedback or call.codec))


ALGORITHM = Algorithm(NAME, "sparse-allgather or sparse-regions, whichever the frame sizes "
                      "make cheaper (auto's choice for sparse codecs)", run=run,
                      compresses=frozenset({"sparse"}), plain=False, tags=4)
