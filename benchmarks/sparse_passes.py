"""The sparse codecs' passes as they run now against how they ran before, interleaved.

    python benchmarks/sparse_passes.py [--mib 16] [--repeats 41]

Each "before" is inlined below as the reference, checked to give the same result, then the two
are timed in turn per repetition; prints medians and the median of the per-repetition ratios:

- topk's selection (sampled threshold, candidates, exact top-k among them): now a sample of
  ``100 / ratio`` magnitudes, and the k kept by a partition of the candidates' magnitudes (as
  integers) and a mask in index order; before, a sample of 1% of the array, an
  ``argpartition`` of the candidates, then a sort of the kept indices;
- the index varints of that selection, encoded (now: every varint's first byte at once, no
  index list for all of them) and decoded (now: the minimality check on the stream's bytes, not
  on a gather of the varints' last bytes);
- the indices decoded from those varints: now (``gap_indices``) one cumulative sum over the
  stream's bytes; before, the varints decoded (as ``varint_decode`` still does where a gap
  needs three bytes or more) and summed;
- error feedback's ``owed += x`` and the selection of top-1% from ``owed``: now one pass
  (``select_kept(owed, plus=x)``); before, the addition's pass, then the selection's (x is
  added and subtracted in turn, so that the residual stays what it was);
- a rank's decode of ``--ranks`` top-1% frames (of different random arrays) into its result:
  now ``decode_sum``, a chunk of the result at a time; before, a ``decode`` of the first frame
  and a ``decode_add`` of each other one, each a pass of its own, with the indices decoded as
  before; and ``decode_sum`` against its first version, which widened each frame's float16
  values slice by slice (every += again) at indices made relative to the chunk (``decode_sum
  loop``).

(At first "before" for the selection was the whole-array pass ahead of ``sparse.above``: the
script at 8a06b41 made docs/results/issue15/sparse-passes.txt.)
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np

from mpicoll import codecs
from mpicoll.codecs import wire
from mpicoll.codecs.sparse import (_CHUNK, CodecError, above, gap_indices, varint_decode,
                                   varint_encode)


def select_before(rng: np.random.Generator, ratio: float, flat: np.ndarray) -> np.ndarray:
    """topk's sampled selection as it was (its sample drawn from ``rng``)."""
    n = flat.size
    k = math.ceil(ratio * n)
    m = min(n, max(4096, math.ceil(0.01 * n)))
    expected = m * k / n
    rank = math.ceil(1.25 * expected + 3 * math.sqrt(expected)) + 1
    sample = np.abs(flat[rng.integers(0, n, m)])
    threshold = np.partition(sample, m - rank)[m - rank]
    candidates, magnitudes = above(flat, threshold, inclusive=True)
    return np.sort(candidates[np.argpartition(magnitudes, magnitudes.size - k)[magnitudes.size - k:]])


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


def indices_before(stream: np.ndarray, k: int, count: int) -> np.ndarray:
    idx = np.cumsum(varint_decode(stream, k) + np.uint64(1)) - np.uint64(1)
    if k and (idx[-1] >= count or np.any(idx[1:] <= idx[:-1])):
        raise CodecError(f"index out of range for {count} elements")
    return idx.view(np.int64)


def decode_sum_before(codec, frames: list[np.ndarray], out: np.ndarray) -> np.ndarray:
    """The frames decoded one at a time into ``out``, the first written, the others added."""
    for r, frame in enumerate(frames):
        header = wire.unpack(frame[:wire.header_nbytes(1, codec.params)], codec.codec_id,
                             codec.params)
        k, nstream, vcode, _ = header.params
        values = frame[header.nbytes:header.nbytes + k * 2].view(wire.CODE_DTYPES[vcode])
        idx = indices_before(frame[header.nbytes + k * 2:], k, header.count)
        if r:
            out[idx] += values
        else:
            out[...] = 0
            out[idx] = values
    return out


def decode_sum_chunked_before(codec, frames: list[np.ndarray], out: np.ndarray) -> np.ndarray:
    """``decode_sum`` as it was first: a chunk of ``out`` at a time, but each frame's float16
    values widened slice by slice (by every +=), at indices made relative to the chunk."""
    parsed = [codec._read(frame)[1] for frame in frames]
    edges = np.arange(0, out.size + _CHUNK, _CHUNK)
    cuts = [np.searchsorted(idx, edges) for _, idx in parsed]
    for j, start in enumerate(edges[:-1].tolist()):
        chunk = out[start:start + _CHUNK]
        chunk[...] = 0
        for r, ((values, idx), cut) in enumerate(zip(parsed, cuts)):
            a, b = cut[j], cut[j + 1]
            if r:
                chunk[idx[a:b] - start] += values[a:b]
            else:
                chunk[idx[a:b] - start] = values[a:b]
    return out


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
    print(f"{name:>16}: before {np.median(t_before) * 1e3:6.3f} ms, now "
          f"{np.median(t_now) * 1e3:6.3f} ms, median ratio {ratio:.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=41)
    parser.add_argument("--ranks", type=int, default=4, help="frames decoded (default 4)")
    args = parser.parse_args()
    x = np.random.default_rng(0).standard_normal(args.mib * 2**20 // 4).astype(np.float32)
    print(f"# {args.mib} MiB float32, top-1%, medians of {args.repeats} interleaved repetitions")
    rng, now = np.random.default_rng(1), codecs.get("topk", seed=1)
    compare("topk select", lambda: select_before(rng, now.ratio, x), lambda: now._select(x),
            args.repeats)
    idx = now._select(x)
    gaps = np.diff(idx, prepend=-1).astype(np.uint64) - np.uint64(1)
    stream = varint_encode(gaps)
    compare("varint encode", lambda: encode_before(gaps), lambda: varint_encode(gaps),
            args.repeats)
    compare("varint decode", lambda: decode_before(stream, gaps.size),
            lambda: varint_decode(stream, gaps.size), args.repeats)
    compare("index decode", lambda: indices_before(stream, idx.size, x.size),
            lambda: gap_indices(stream, idx.size, x.size), args.repeats)
    owed = {side: np.random.default_rng(3).standard_normal(x.size).astype(np.float32)
            for side in ("before", "now")}
    signed, calls = (x, -x), {"before": 0, "now": 0}

    def with_owed(side: str) -> np.ndarray:
        given = signed[calls[side] % 2]
        calls[side] += 1
        codec = codecs.get("topk", seed=1)
        if side == "now":
            return codec.select_kept(owed[side], plus=given)[0]
        owed[side] += given
        return codec.select_kept(owed[side])[0]
    compare("add owed, select", lambda: with_owed("before"), lambda: with_owed("now"),
            args.repeats)
    rng = np.random.default_rng(2)
    frames = [now.encode(rng.standard_normal(x.size).astype(np.float32))
              for _ in range(args.ranks)]
    out_before, out_now = np.empty_like(x), np.empty_like(x)
    compare(f"decode {args.ranks} frames", lambda: decode_sum_before(now, frames, out_before),
            lambda: now.decode_sum(frames, out_now), args.repeats)
    compare("decode_sum loop", lambda: decode_sum_chunked_before(now, frames, out_before),
            lambda: now.decode_sum(frames, out_now), args.repeats)


if __name__ == "__main__":
    main()
