"""topk: keep the ``k = ceil(ratio · count)`` largest-magnitude elements (at least one), send them
as a sparse frame (:mod:`mpicoll.codecs.sparse`), decode the rest as zeros. DGC's and GRACE's
sparsifier; use it through :class:`~mpicoll.codecs.ErrorFeedback` so unsent values are sent later.

``method="exact"`` partitions all magnitudes (``np.argpartition``, O(n) but the slowest pass).
``method="sampled"`` is DGC's fast path: estimate the threshold from a random sample of
``sample_ratio · count`` magnitudes (at least 4096), placed a little low so that ``|x| ≥ t`` keeps
slightly more than ``k`` candidates, then trim the candidates to the exact top ``k``. Because every
element outside the candidates is smaller than every candidate, the result is the exact top-k
(ties aside); when the estimate keeps fewer than ``k`` (rare) it falls back to the exact pass.
NaN counts as the largest magnitude in both, so a NaN is always sent, never hidden.

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


class TopK(SparseCodec):
    name = "topk"
    codec_id = 4
    config_keys = ("ratio", "method", "value_dtype", "sample_ratio", "seed")

    def __init__(self, ratio: float = 0.01, method: str = "sampled", value_dtype="float16",
                 sample_ratio: float = 0.01, seed: int | None = None):
        if not 0 < ratio <= 1:
            raise ValueError(f"ratio must be in (0, 1], not {ratio}")
        if method not in ("exact", "sampled"):
            raise ValueError(f"method must be 'exact' or 'sampled', not {method!r}")
        if not 0 < sample_ratio <= 1:
            raise ValueError(f"sample_ratio must be in (0, 1], not {sample_ratio}")
        self.ratio = float(ratio)
        self.method = method
        self.value_dtype = value_dtype_name(value_dtype)
        self.sample_ratio = float(sample_ratio)
        self.seed = seed
        self._rng = np.random.default_rng(seed)

    def _max_kept(self, count):
        return kept_count(self.ratio, count)

    def _select(self, flat):
        xp = array_module(flat)
        k = kept_count(self.ratio, flat.size)
        if self.method == "sampled" and k:
            candidates, magnitudes = self._candidates(flat, k)
            if candidates.size >= k:
                return xp.sort(candidates[_largest(magnitudes, k)])
        return xp.sort(_largest(xp.abs(flat), k))

    def _candidates(self, flat, k):
        """Indices and magnitudes of the elements at or above a sampled threshold set to keep
        ~1.25 k + noise."""
        xp = array_module(flat)
        n = flat.size
        m = min(n, max(_MIN_SAMPLE, math.ceil(self.sample_ratio * n)))
        expected = m * k / n  # sample elements expected among the top k
        rank = math.ceil(1.25 * expected + 3 * math.sqrt(expected)) + 1
        if rank >= m:
            return xp.arange(n), xp.abs(flat)
        sample = xp.abs(flat[xp.asarray(self._rng.integers(0, n, m))])
        threshold = xp.partition(sample, m - rank)[m - rank]
        return above(flat, threshold, inclusive=True)


def _largest(magnitude, k):
    """Indices of the k largest magnitudes (NaN counts as largest), in no particular order."""
    xp = array_module(magnitude)
    if k == magnitude.size:
        return xp.arange(k)
    return xp.argpartition(magnitude, magnitude.size - k)[magnitude.size - k:]
