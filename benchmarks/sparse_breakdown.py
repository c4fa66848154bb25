"""Where a rank's CPU goes in a top-k / threshold allreduce with error feedback (one process).

    python benchmarks/sparse_breakdown.py [--mib 16] [--ranks 4] [--repeats 21]

The steps ``sparse-allgather`` runs on every rank, each timed alone on a float32 array of
``--mib`` MiB of normal values (medians of ``--repeats``): the contribution added into the
residual, the selection, the rest of the encode (values, index varints, frame), charging the
frame to the residual, the residual's finiteness check (of the kept entries: error feedback's
look when all is finite), then decoding the sum of ``--ranks`` frames into the result
(``decode_sum``; each frame is parsed). The wire is not here: see the emulated-cluster tables
in docs/results.md.

Then the three CPU rates ``sparse-auto`` predicts with (mpicoll/algorithm/sparse_auto.py), for
topk: seconds per byte of a frame parsed and added in (what one more top-1% frame of the array
adds to a ``decode_sum``), per frame whatever its size (the same with frames of 1000 elements),
and per element encoded (the whole array).
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from mpicoll import codecs


def median_ms(step, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    return float(np.median(times)) * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=16)
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=21)
    args = parser.parse_args()
    n = args.mib * 2**20 // 4
    x = np.random.default_rng(0).standard_normal(n).astype(np.float32)
    print(f"# {args.mib} MiB float32, one process; ms per step, medians of {args.repeats}; "
          f"decode: {args.ranks} frames")
    print(f"{'codec':>10} {'add owed':>9} {'select':>8} {'encode':>8} {'charge':>8} "
          f"{'finite':>8} {'decode':>8} {'total':>8}")
    for name in ("topk", "threshold"):
        codec = codecs.get(name)
        owed = np.zeros_like(x)
        out = np.empty_like(x)
        frame, kept, sent = codec.encode_kept(x)
        add = median_ms(lambda: np.add(owed, x, out=owed), args.repeats)
        select = median_ms(lambda: codec._select(x), args.repeats)
        encode = median_ms(lambda: codec.encode_kept(x), args.repeats) - select
        charge = median_ms(lambda: owed.__setitem__(kept, owed[kept] - sent), args.repeats)
        finite = median_ms(lambda: np.isfinite(owed[kept].sum()), args.repeats)  # (kept only)

        decode = median_ms(lambda: codec.decode_sum([frame] * args.ranks, out), args.repeats)
        total = add + select + encode + charge + finite + decode
        print(f"{name:>10} {add:9.2f} {select:8.2f} {encode:8.2f} {charge:8.2f} {finite:8.2f} "
              f"{decode:8.2f} {total:8.2f}", flush=True)
    rates(x, args.repeats)


def rates(x: np.ndarray, repeats: int) -> None:
    """What sparse-auto's PARSE, FRAME and SELECT stand for, measured here (topk)."""
    codec = codecs.get("topk")
    frame, out = codec.encode(x), np.zeros_like(x)
    small = codec.encode(x[:1000])

    def one_more(frame_: np.ndarray, out_: np.ndarray) -> float:
        """Seconds that each frame after the first adds to a decode_sum of five."""
        five = median_ms(lambda: codec.decode_sum([frame_] * 5, out_), repeats)
        return (five - median_ms(lambda: codec.decode_sum([frame_], out_), repeats)) * 1e-3 / 4
    per_frame = one_more(small, out[:1000])
    per_byte = (one_more(frame, out) - per_frame) / frame.size
    per_element = median_ms(lambda: codec.encode(x), repeats) * 1e-3 / x.size
    print(f"# sparse-auto's rates: PARSE {per_byte:.2e} s per frame byte ({frame.size} B frame), "
          f"FRAME {per_frame:.1e} s per frame, SELECT {per_element:.2e} s per element")


if __name__ == "__main__":
    main()
