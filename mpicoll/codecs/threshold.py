"""threshold: send every element with ``|x| > t``, adapting ``t`` after each call to hold a target
``density`` (the fraction of elements sent): the seed's dynamic threshold rule. Same sparse frame
as topk (:mod:`mpicoll.codecs.sparse`), so the frame size varies with the data.

The codec is **stateful**: ``t`` lives in the codec object (``.threshold``; ``reset()`` forgets
it), so use one instance per tensor (or per bucket). Unlike topk it never ranks all elements:
one compare pass selects, and the next threshold comes from what was sent —

- first call (or after ``reset()``, or after an all-zero input): ``t`` is estimated from a random
  sample of magnitudes (at least 4096, enough to hold ~100 above the target);
- more sent than the target ``m = density · count``: every element above ``t`` is among the sent
  values, so the ``m``-th largest of those is exactly the threshold that would have sent ``m``;
- fewer sent: extrapolate the tail. Half of the sent values lie above their median ``a``; assuming
  the count above ``x`` falls as a power of ``x`` between ``t`` and ``a`` gives
  ``t' = t · (sent / m) ^ (log(a / t) / log 2)``, moving down by at most 4× per call.

On a stationary input the density settles within a few percent in two or three calls; gradients
change slowly, so it tracks them; ``kept / offered`` is the density it really held. NaN is always
sent (it never compares ``<= t``), never hidden. Values travel as ``value_dtype`` (float16 by
default), or in the input's dtype with ``None``.
"""

from __future__ import annotations

import math

import numpy as np

from .._array import array_module, to_host
from .sparse import SparseCodec, above, kept_count, value_dtype_name

__all__ = ["Threshold"]

_MIN_SAMPLE = 4096


class Threshold(SparseCodec):
    name = "threshold"
    codec_id = 5
    config_keys = ("density", "value_dtype", "seed")

    def __init__(self, density: float = 0.01, value_dtype="float16", seed: int | None = None):
        if not 0 < density <= 1:
            raise ValueError(f"density must be in (0, 1], not {density}")
        self.density = float(density)
        self.value_dtype = value_dtype_name(value_dtype)
        self.seed = seed
        self._rng = np.random.default_rng(seed)
        self._threshold: float | None = None
        self.kept = self.offered = 0  # elements sent, and given, over every call so far

    @property
    def threshold(self) -> float | None:
        """The threshold the next call will use (None: it will be estimated from a sample)."""
        return self._threshold

    def reset(self) -> None:
        """Forget the adapted threshold (e.g. when the tensor this codec serves changes)."""
        self._threshold = None

    def _max_kept(self, count):
        return count

    def _select(self, flat, plus=None):
        xp = array_module(flat)
        if flat.size == 0:
            return xp.zeros(0, np.int64)
        target = kept_count(self.density, flat.size)
        t = self._threshold if self._threshold is not None else self._estimate(flat, plus)
        idx, sent = above(flat, t, inclusive=False, plus=plus)
        self.kept, self.offered = self.kept + int(idx.size), self.offered + flat.size
        nxt = _next_threshold(t, to_host(sent[xp.isfinite(sent)]), target)
        self._threshold = nxt if math.isfinite(nxt) and nxt > 0 else None
        return idx

    def _estimate(self, flat, plus):
        xp = array_module(flat)
        n = flat.size
        m = min(n, max(_MIN_SAMPLE, math.ceil(100 / self.density)))
        at = xp.asarray(self._rng.integers(0, n, m)) if m < n else slice(None)
        sample = xp.abs(flat[at] if plus is None else flat[at] + plus[at])
        rank = min(m, kept_count(self.density, m))
        return float(xp.partition(sample, m - rank)[m - rank])


def _next_threshold(t: float, sent: np.ndarray, target: int) -> float:
    """The threshold that would have sent ``target`` elements, from the ``sent`` magnitudes."""
    k = sent.size
    if k > target:
        return float(np.partition(sent, k - target - 1)[k - target - 1])
    if k == target:
        return t
    if k < 2 or t <= 0:
        return t / 4
    median = float(np.median(sent))  # > t: every sent magnitude is
    return t * max(0.25, (k / target) ** (math.log(median / t) / math.log(2)))
