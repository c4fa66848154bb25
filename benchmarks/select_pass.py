"""The sparse codecs' pass over every element, whole-array against a chunk at a time, interleaved.

    python benchmarks/select_pass.py [--mib 16] [--repeats 41]

topk's selection (sampled threshold, candidates, exact top-k among them) as ``codecs.get("topk")``
runs it now (``sparse.above``: a chunk's magnitudes and mask stay in the cache, the candidates'
magnitudes are read from there), against the same steps on whole arrays as it ran before
(inlined below as the reference: the magnitudes of every element, one mask, a gather of the
candidates' magnitudes). The two are checked to select the same indices, then timed in turn
per repetition; prints medians and the median of the per-repetition ratios.
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np

from mpicoll import codecs
from mpicoll.codecs.topk import _largest


def whole_array(codec, flat: np.ndarray) -> np.ndarray:
    """The selection as it was before ``sparse.above`` (the same random sample as ``codec``'s)."""
    n = flat.size
    k = math.ceil(codec.ratio * n)
    magnitude = np.abs(flat)
    m = min(n, max(4096, math.ceil(codec.sample_ratio * n)))
    expected = m * k / n
    rank = math.ceil(1.25 * expected + 3 * math.sqrt(expected)) + 1
    sample = magnitude[codec._rng.integers(0, n, m)]
    threshold = np.partition(sample, m - rank)[m - rank]
    candidates = np.flatnonzero(~(magnitude < threshold))
    return np.sort(candidates[_largest(magnitude[candidates], k)])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=41)
    args = parser.parse_args()
    x = np.random.default_rng(0).standard_normal(args.mib * 2**20 // 4).astype(np.float32)
    before, now = codecs.get("topk", seed=1), codecs.get("topk", seed=1)
    if not np.array_equal(whole_array(before, x), now._select(x)):
        raise SystemExit("the two select different elements")
    t_before, t_now = [], []
    for _ in range(args.repeats):
        start = time.perf_counter()
        whole_array(before, x)
        t_before.append(time.perf_counter() - start)
        start = time.perf_counter()
        now._select(x)
        t_now.append(time.perf_counter() - start)
    ratio = np.median(np.array(t_now) / np.array(t_before))
    print(f"topk select, {args.mib} MiB float32: whole arrays {np.median(t_before) * 1e3:.2f} ms, "
          f"chunked {np.median(t_now) * 1e3:.2f} ms, median ratio {ratio:.3f}")


if __name__ == "__main__":
    main()
