"""Codec throughput on this CPU: encode, decode and decode_add, in GB/s of float32 input.

    .venv/bin/python benchmarks/codec_throughput.py                 # table, 1/16/64 MiB
    .venv/bin/python benchmarks/codec_throughput.py --json out.json --sizes 1 16 --repeats 7

Each number is the median of ``--repeats`` timed calls after one warm-up, on normal float32
data of standard deviation ``--scale`` (1 by default; late in training gradients are ~1e-5,
where fp16 holds them only as subnormals). ``decode`` writes into a preallocated array, ``decode_add`` adds into a float32
accumulator — the way a compressed allreduce uses them. ``ratio`` is float32 bytes / frame bytes.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time

import numpy as np

from mpicoll import codecs

MIB = 2**20


def median_seconds(fn, repeats: int) -> float:
    fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def measure(name: str, mib: int, repeats: int, scale: float = 1.0) -> dict:
    x = (np.random.default_rng(0).standard_normal(mib * MIB // 4) * scale).astype(np.float32)
    codec = codecs.get(name)
    frame_buf = np.empty(codec.max_frame_nbytes(x.size, x.dtype), np.uint8)
    frame = codec.encode(x)
    out = np.empty_like(x)
    acc = np.zeros_like(x)
    seconds = {"encode": median_seconds(lambda: codec.encode(x, out=frame_buf), repeats),
               "decode": median_seconds(lambda: codec.decode(frame, out=out), repeats),
               "decode_add": median_seconds(lambda: codec.decode_add(frame, acc), repeats)}
    return {"codec": name, "mib": mib, "ratio": x.nbytes / frame.size,
            **{f"{op}_gbps": x.nbytes / s / 1e9 for op, s in seconds.items()}}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1, 16, 64], metavar="MIB")
    parser.add_argument("--codecs", nargs="+", default=list(codecs.available()))
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--scale", type=float, default=1.0, help="the data's standard deviation")
    parser.add_argument("--json", metavar="PATH", help="also write the rows as JSON here")
    args = parser.parse_args(argv)

    rows = []
    print(f"{'codec':>10} {'MiB':>4} {'ratio':>7} {'encode':>8} {'decode':>8} {'dec_add':>8}"
          "  (GB/s of float32 input)")
    for name in args.codecs:
        for mib in args.sizes:
            row = measure(name, mib, args.repeats, args.scale)
            rows.append(row)
            print(f"{name:>10} {mib:>4} {row['ratio']:>7.1f} {row['encode_gbps']:>8.2f} "
                  f"{row['decode_gbps']:>8.2f} {row['decode_add_gbps']:>8.2f}", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"machine": platform.processor() or platform.machine(),
                       "numpy": np.__version__, "repeats": args.repeats, "scale": args.scale,
                       "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
