"""The sparse codecs' passes as they run now against how they ran before, interleaved.

    python benchmarks/sparse_passes.py [--mib 16] [--repeats 41]

Each "before" is inlined below as the reference, checked to give the same result, then the two
are timed in turn per repetition; prints medians and the median of the per-repetition ratios:

- topk's selection (sampled threshold, candidates, exact top-k among them): now a chunk at a
  time (``sparse.above``: a chunk's magnitudes and mask stay in the cache, the candidates'
  magnitudes are read from there); before, on whole arrays (every magnitude, one mask, a gather
  of the candidates' magnitudes);
- the index varints of that selection, encoded (now: every varint's first byte at once, no
  index list for all of them) and decoded (now: the minimality check on the stream's bytes, not
  on a gather of the varints' last bytes).
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np

from mpicoll import codecs
from mpicoll.codecs.sparse import CodecError, varint_decode, varint_encode
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


def encode_before(values: np.ndarray) -> np.ndarray:
    lengths = np.ones(values.size, np.int64)
    top = int(values.max(initial=0))
    for bits in range(7, 63, 7):
        if top < 1 << bits:
            break
        lengths += values >= np.uint64(1 << bits)
    starts = np.cumsum(lengths) - lengths
    stream = np.empty(int(lengths.sum()), np.uint8)
    for j in range(int(lengths.max(initial=0))):
        longer = np.flatnonzero(lengths > j)
        group = (values[longer] >> np.uint64(7 * j)) & np.uint64(0x7F)
        more = (lengths[longer] > j + 1).astype(np.uint64) << np.uint64(7)
        stream[starts[longer] + j] = group | more
    return stream


def decode_before(stream: np.ndarray, k: int) -> np.ndarray:
    ends = np.flatnonzero(stream < 0x80)
    starts = np.empty_like(ends)
    starts[0], starts[1:] = 0, ends[:-1] + 1
    lengths = ends - starts + 1
    longest = int(lengths.max())
    values = (stream[starts] & 0x7F).astype(np.uint64)
    if longest > 1 and np.any(stream[ends[lengths > 1]] == 0):
        raise CodecError("varint with a redundant zero byte (not minimal)")
    for j in range(1, longest):
        longer = np.flatnonzero(lengths > j)
        values[longer] |= (stream[starts[longer] + j] & 0x7F).astype(np.uint64) << np.uint64(7 * j)
    return values


def compare(name: str, before, now, repeats: int) -> None:
    if not np.array_equal(before(), now()):
        raise SystemExit(f"{name}: the two differ")
    t_before, t_now = [], []
    for _ in range(repeats):
        for step, times in ((before, t_before), (now, t_now)):
            start = time.perf_counter()
            step()
            times.append(time.perf_counter() - start)
    ratio = np.median(np.array(t_now) / np.array(t_before))
    print(f"{name:>15}: before {np.median(t_before) * 1e3:6.3f} ms, now "
          f"{np.median(t_now) * 1e3:6.3f} ms, median ratio {ratio:.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=41)
    args = parser.parse_args()
    x = np.random.default_rng(0).standard_normal(args.mib * 2**20 // 4).astype(np.float32)
    print(f"# {args.mib} MiB float32, top-1%, medians of {args.repeats} interleaved repetitions")
    before, now = codecs.get("topk", seed=1), codecs.get("topk", seed=1)
    compare("topk select", lambda: whole_array(before, x), lambda: now._select(x), args.repeats)
    idx = now._select(x)
    gaps = np.diff(idx, prepend=-1).astype(np.uint64) - np.uint64(1)
    stream = varint_encode(gaps)
    compare("varint encode", lambda: encode_before(gaps), lambda: varint_encode(gaps),
            args.repeats)
    compare("varint decode", lambda: decode_before(stream, gaps.size),
            lambda: varint_decode(stream, gaps.size), args.repeats)


if __name__ == "__main__":
    main()
