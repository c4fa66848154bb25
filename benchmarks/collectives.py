"""allgather and reduce_scatter through mpicoll beside the MPI library's own, as bench measures
allreduce: interleaved in a new order each repetition, the slowest rank's time, medians of
per-repetition ratios (below 1: mpicoll is faster).

    mpiexec -n 4 python benchmarks/collectives.py [-m 1K:64M] [-f 4] [-i 15]

Sizes are nccl-tests': the larger buffer (allgather's receive, reduce_scatter's send), float32
sum; busbw = algbw × (p-1)/p. Every algorithm's result is compared with MPI's (exact data).
"""

from __future__ import annotations

import argparse

import numpy as np
from mpi4py import MPI

import mpicoll
from mpicoll import bench, collective
from mpicoll.progress import Progress


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-m", "--sizes", default="1K:64M", help="MIN:MAX bytes (nccl-tests' size)")
    parser.add_argument("-f", "--factor", type=int, default=4, help="size step (default 4)")
    parser.add_argument("-i", "--iters", type=int, default=15, help="repetitions (default 15)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    args = parser.parse_args(argv)
    comm = MPI.COMM_WORLD
    p, rank = comm.Get_size(), comm.Get_rank()
    settings = bench.Settings(sizes=[], algorithms=[], iters=args.iters)
    sizes = bench.size_range(args.sizes, args.factor)
    algorithms = [a for a in mpicoll.algorithms("allgather") if a != "auto"]
    if rank == 0:
        print(f"# allgather and reduce_scatter: {p} ranks, {bench.library()}; float32 sum; "
              f"ratio = median over {args.iters} interleaved repetitions of mpicoll / MPI's own")
        print(f"#{'collective':>14} {'size(B)':>10} {'MPI(us)':>10} {'MPI busbw':>10} "
              + " ".join(f"{name:>8}" for name in algorithms), flush=True)
    progress = Progress(2 * len(sizes), enabled=rank == 0 and not args.no_progress)
    for which in (collective.ALLGATHER, collective.REDUCE_SCATTER):
        for nbytes in sizes:
            n = max(1, nbytes // 4 // p)  # a block
            send = np.random.default_rng(rank).integers(-3, 4, which.counts(n, p)[0]) \
                .astype(np.float32)
            ref = np.empty(which.counts(n, p)[1], np.float32)
            outs = {name: np.empty_like(ref) for name in algorithms}
            own = (lambda: comm.Allgather(send, ref)) if which is collective.ALLGATHER \
                else (lambda: comm.Reduce_scatter_block(send, ref))
            calls = {bench.NATIVE: own}  # (mpicoll's keyed by (algorithm,): "native" is one)
            run = mpicoll.allgather if which is collective.ALLGATHER else mpicoll.reduce_scatter
            for name in algorithms:
                calls[(name,)] = lambda out=outs[name], name=name: run(send, out, algorithm=name)
            samples = bench.measure(comm, calls, settings)
            wrong = [name for name in algorithms if not np.array_equal(outs[name], ref)]
            if comm.allreduce(len(wrong), op=MPI.MAX):
                raise SystemExit(f"{which.name} at {nbytes} B: {wrong} differ from MPI's result")
            progress.step(f"{which.name} {bench.format_size(nbytes)}B")
            if rank == 0:
                size = which.nbytes(n, p, 4)
                t = float(np.median(samples[bench.NATIVE]))
                busbw = size / t / 1e9 * which.bus_factor(p)
                ratios = [float(np.median(samples[(name,)] / samples[bench.NATIVE]))
                          for name in algorithms]
                print(f"{which.name:>15} {size:>10} {t * 1e6:>10.1f} {busbw:>10.3f} "
                      + " ".join(f"{r:>8.2f}" for r in ratios), flush=True)
    progress.clear()


if __name__ == "__main__":
    main()
