"""topk: keep the ``k = ceil(ratio · count)`` largest-magnitude elements (at least one), send them
as a sparse frame (:mod:`mpicoll.codecs.sparse`), decode the rest as zeros. DGC's and GRACE's
sparsifier; use it through :class:`~mpicoll.codecs.ErrorFeedback` so unsent values are sent later.

``method="exact"`` partitions all magnitudes (``np.partition``, O(n) but the slowest pass).
``method="sampled"`` is DGC's fast path: estimate the threshold from a random sample of
magnitudes (``100 / ratio`` of them but at most 1% of ``count``, or ``sample_ratio · count``; at
least 4096), placed a little low so that ``|x| ≥ t`` keeps slightly more than ``k`` candidates,
then trim the candidates to the exact top ``k`` (of equal magnitudes at the k-th, the first
ones). Because every element outside the candidates is smaller than every candidate, the result
is the exact top-k (the same indices as the exact method); when the estimate keeps fewer than
``k`` (rare) it falls back to the exact pass. NaN counts as the largest magnitude in both, so a
NaN is always sent, never hidden.

Values travel as ``value_dtype`` (float16 by default, which is what makes top-1% 120× smaller
than float32; magnitudes above 65504 become ±inf), or in the input's dtype with ``None``.
"""

from __future__ import annotations

import math

import numpy as np

from .._array import array_module
from .sparse import SparseCodec, above, kept_count, value_dtype_name

__all__ = ["TopK"]

_MIN_SAMPLE = 4096
_IN_SAMPLE = 100
_MAX_SAMPLE_RATIO = 0.01
"""By default (``sample_ratio=None``) the sample holds about 100 elements of the top k: the
candidates then number about 1.56 k, and fall short of k (the exact pass runs) once in about 10⁷
calls (156 or more of the sample above the k-th largest, where 100 are expected: a binomial tail
of 1.1e-7). That is ``100 / ratio`` magnitudes whatever n (drawing each is a random read), but
never more than 1% of n: a small ratio keeps the sample of 1% and fewer of the top k in it."""


class TopK(SparseCodec):
    name = "topk"
    codec_id = 4
    config_keys = ("ratio", "method", "value_dtype", "sample_ratio", "seed")

    def __init__(self, ratio: float = 0.01, method: str = "sampled", value_dtype="float16",
                 sample_ratio: float | None = None, seed: int | None = None):
        if not 0 < ratio <= 1:
            raise ValueError(f"ratio must be in (0, 1], not {ratio}")
        if method not in ("exact", "sampled"):
            raise ValueError(f"method must be 'exact' or 'sampled', not {method!r}")
        if sample_ratio is not None and not 0 < sample_ratio <= 1:
            raise ValueError(f"sample_ratio must be None or in (0, 1], not {sample_ratio}")
        self.ratio = float(ratio)
        self.method = method
        self.value_dtype = value_dtype_name(value_dtype)
        self.sample_ratio = None if sample_ratio is None else float(sample_ratio)
        self.seed = seed
        self._rng = np.random.default_rng(seed)

    def _max_kept(self, count):
        return kept_count(self.ratio, count)

    def _select(self, flat, plus=None):
        k = kept_count(self.ratio, flat.size)
        if self.method == "sampled" and k:
            candidates, magnitudes = self._candidates(flat, k, plus)  # (flat + plus now in flat)
            if candidates.size >= k:
                return _largest(_magnitude_bits(magnitudes), k, candidates)
        elif plus is not None:
            flat += plus
        return _largest(_magnitude_bits(flat), k, None)

    def sample_size(self, n: int) -> int:
        """How many magnitudes of ``n`` the sampled method draws."""
        wanted = self.sample_ratio * n if self.sample_ratio is not None else \
            min(_IN_SAMPLE / self.ratio, _MAX_SAMPLE_RATIO * n)
        return min(n, max(_MIN_SAMPLE, math.ceil(wanted)))

    def _candidates(self, flat, k, plus):
        """Indices and magnitudes of the elements at or above a sampled threshold set to keep
        ~1.25 k + noise (of ``flat + plus``, left in ``flat``)."""
        xp = array_module(flat)
        n = flat.size
        m = self.sample_size(n)
        expected = m * k / n  # sample elements expected among the top k
        rank = math.ceil(1.25 * expected + 3 * math.sqrt(expected)) + 1
        if rank >= m:
            if plus is not None:
                flat += plus
            return xp.arange(n), xp.abs(flat)
        at = xp.asarray(self._rng.integers(0, n, m))
        sample = xp.abs(flat[at] if plus is None else flat[at] + plus[at])
        threshold = xp.partition(sample, m - rank)[m - rank]
        return above(flat, threshold, inclusive=True, plus=plus)


def _largest(bits, k, indices):
    """The ``indices`` (None: the positions) of the k largest magnitudes (given as
    :func:`_magnitude_bits`), in order: the k-th largest found by a partition, then every element
    above it and the first ones equal to it kept by a mask in index order, so the kept indices
    need no sort."""
    xp = array_module(bits)
    if k < bits.size:
        kth = xp.partition(bits, bits.size - k)[bits.size - k]
        keep = bits > kth
        short = k - int(xp.count_nonzero(keep))
        if short:
            keep[xp.flatnonzero(bits == kth)[:short]] = True
        positions = xp.flatnonzero(keep)
    else:
        positions = xp.arange(bits.size)
    return positions if indices is None else indices[positions]


def _magnitude_bits(x):
    """``|x|`` as integers as wide as its floats (the sign bit cleared): they order as the
    magnitudes do, with every NaN above inf, so a NaN is never left out (a float comparison
    would need a pass of its own for NaN)."""
    itemsize = x.dtype.itemsize
    return x.view(f"<i{itemsize}") & ((1 << (8 * itemsize - 1)) - 1)
