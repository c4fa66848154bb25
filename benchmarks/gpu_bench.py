"""Short GPU benchmark (run by benchmarks/gpu_check.sh): allreduce of device against host buffers
on ranks sharing the GPU, and codec throughput on the device, in GB/s of float32 input.

    mpiexec -n 4 python benchmarks/gpu_bench.py --out DIR

Allreduce: every (size, buffers) runs ``--iters`` timed calls after two warm-ups; a call's time
includes a synchronisation of the stream, so device work is counted; the figure is the median
over calls of the slowest rank. Device buffers run staged (``MPICOLL_CUDA_AWARE=0``) and, when
the MPI library says it is CUDA-aware, directly too. ``native`` is MPI_Allreduce on host arrays.
Codecs: rank 0 alone, CUDA events around each call, median of ``--repeats``; NumPy alongside.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
from pathlib import Path

import cupy
import numpy as np
from mpi4py import MPI

import mpicoll
from mpicoll import codecs, cuda_aware

from codec_throughput import median_seconds  # benchmarks/ is on sys.path: the host timer

MIB = 2**20


def time_allreduce(comm, run, sync, iters: int) -> float:
    for _ in range(2):
        run()
    sync()
    times = []
    for _ in range(iters):
        comm.Barrier()
        t0 = MPI.Wtime()
        run()
        sync()
        times.append(comm.allreduce(MPI.Wtime() - t0, op=MPI.MAX))
    return statistics.median(times)


def allreduce_rows(comm, sizes, iters, algorithm):
    p, stream = comm.Get_size(), cupy.cuda.get_current_stream()
    paths = {"native": None, "host": None, "staged": "0"}
    if cuda_aware.detect().aware:
        paths["cuda-aware"] = "1"
    rows = []
    for nbytes in sizes:
        count = nbytes // 4
        for path, aware in paths.items():
            xp = np if path in ("native", "host") else cupy
            x, out = xp.ones(count, np.float32), xp.empty(count, np.float32)
            if aware is not None:
                os.environ[cuda_aware.OVERRIDE_ENV] = aware
            if path == "native":
                def run():
                    comm.Allreduce(x, out)
            else:
                def run():
                    mpicoll.allreduce(x, out, algorithm=algorithm)
            seconds = time_allreduce(comm, run, stream.synchronize, iters)
            wrong = int(comm.allreduce(int(np.count_nonzero(cupy.asnumpy(out) != p))))
            rows.append({"bytes": nbytes, "buffers": path, "us": seconds * 1e6,
                         "busbw_gbps": nbytes * 2 * (p - 1) / p / seconds / 1e9, "wrong": wrong})
            os.environ.pop(cuda_aware.OVERRIDE_ENV, None)
    return rows


def device_seconds(fn, repeats: int) -> float:
    fn()
    start, end = cupy.cuda.Event(), cupy.cuda.Event()
    times = []
    for _ in range(repeats):
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(cupy.cuda.get_elapsed_time(start, end) / 1e3)
    return statistics.median(times)


def codec_rows(mib: int, repeats: int):
    rows = []
    x_host = np.random.default_rng(0).standard_normal(mib * MIB // 4).astype(np.float32)
    for name in codecs.available():
        for where, xp, timer in (("cupy", cupy, device_seconds), ("numpy", np, median_seconds)):
            x = xp.asarray(x_host)
            codec = codecs.get(name)
            slot = xp.empty(codec.max_frame_nbytes(x.size, x.dtype), np.uint8)
            frame = codec.encode(x)
            out, acc = xp.empty_like(x), xp.zeros_like(x)
            seconds = {"encode": timer(lambda: codec.encode(x, out=slot), repeats),
                       "decode": timer(lambda: codec.decode(frame, out=out), repeats),
                       "decode_add": timer(lambda: codec.decode_add(frame, acc), repeats)}
            rows.append({"codec": name, "array": where, "mib": mib, "ratio": x.nbytes / frame.size,
                         **{f"{op}_gbps": x.nbytes / s / 1e9 for op, s in seconds.items()}})
    return rows


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="gpu-check-out")
    parser.add_argument("--sizes-kib", type=int, nargs="+", default=[4, 256, 4096, 65536])
    parser.add_argument("--iters", type=int, default=10)
    parser.add_argument("--algorithm", default="auto")
    parser.add_argument("--codec-mib", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    comm = MPI.COMM_WORLD
    cupy.cuda.Device(comm.Get_rank() % cupy.cuda.runtime.getDeviceCount()).use()
    out = Path(args.out)

    rows = allreduce_rows(comm, [k * 1024 for k in args.sizes_kib], args.iters, args.algorithm)
    if comm.Get_rank() == 0:
        print(f"# allreduce, {comm.Get_size()} ranks on {cupy.cuda.runtime.getDeviceCount()} GPU(s), "
              f"float32 sum, algorithm={args.algorithm}; {cuda_aware.detect().source}")
        print(f"{'bytes':>10} {'buffers':>11} {'time(us)':>10} {'busbw(GB/s)':>12} {'#wrong':>7}")
        for r in rows:
            print(f"{r['bytes']:>10} {r['buffers']:>11} {r['us']:>10.1f} {r['busbw_gbps']:>12.3f} "
                  f"{r['wrong']:>7}")
        (out / "allreduce.json").write_text(json.dumps(rows, indent=1))
        crows = codec_rows(args.codec_mib, args.repeats)
        print(f"\n# codec throughput, {args.codec_mib} MiB float32, GB/s of input "
              f"({cupy.cuda.runtime.getDeviceProperties(0)['name'].decode()})")
        print(f"{'codec':>10} {'array':>6} {'ratio':>7} {'encode':>8} {'decode':>8} {'dec_add':>8}")
        for r in crows:
            print(f"{r['codec']:>10} {r['array']:>6} {r['ratio']:>7.1f} {r['encode_gbps']:>8.2f} "
                  f"{r['decode_gbps']:>8.2f} {r['decode_add_gbps']:>8.2f}")
        (out / "codec_throughput.json").write_text(json.dumps(crows, indent=1))
    comm.Barrier()
    if any(r["wrong"] for r in rows):  # the same on every rank: counts were summed
        raise SystemExit("wrong allreduce results")


if __name__ == "__main__":
    main()
