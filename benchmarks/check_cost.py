"""What the collective fingerprint check costs per call (run under mpiexec).

    mpiexec -n 2 python benchmarks/check_cost.py [--sizes 8,65536,1048576] [--reps 41]

For each size, one repetition times a batch of calls three ways, in a rotating order, each after
a barrier: native ``MPI_Allreduce``; ``mpicoll.allreduce`` as by default (the kind verified
once, so later calls only look it up); and with ``MPICOLL_CHECK=1`` (one small native
allreduce compares the fingerprint before every call). A sample is the slowest rank's time per
call; the figures are medians over repetitions of per-repetition ratios.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from mpi4py import MPI

import mpicoll
from mpicoll import check


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="8,65536,1048576", help="bytes, comma-separated")
    parser.add_argument("--reps", type=int, default=41)
    parser.add_argument("--algorithm", default="auto")
    args = parser.parse_args()
    comm = MPI.COMM_WORLD
    if comm.Get_rank() == 0:
        print(f"# {comm.Get_size()} ranks, {MPI.Get_library_version().splitlines()[0].strip()}; "
              f"float32 sum, algorithm {args.algorithm}; medians of {args.reps} interleaved "
              "repetitions")
        print(f"{'size(B)':>10} {'native(us)':>11} {'default(us)':>12} {'check(us)':>10} "
              f"{'default/native':>15} {'check/default':>14}")
    for nbytes in map(int, args.sizes.split(",")):
        x = np.ones(max(1, nbytes // 4), np.float32)
        y = np.empty_like(x)
        batch = max(1, min(200, int(2e-3 / max(1e-6, 2e-10 * nbytes + 5e-6))))

        def native() -> None:
            comm.Allreduce(x, y)

        def default() -> None:
            check._every_call = False
            mpicoll.allreduce(x, y, algorithm=args.algorithm)

        def checked() -> None:
            check._every_call = True
            mpicoll.allreduce(x, y, algorithm=args.algorithm)

        methods = [native, default, checked]
        for method in methods:  # warm-up: plans built, the kind verified
            for _ in range(3):
                method()
        samples = np.zeros((len(methods), args.reps))
        for rep in range(args.reps):
            for k in range(len(methods)):
                i = (k + rep) % len(methods)
                comm.Barrier()
                t0 = time.perf_counter()
                for _ in range(batch):
                    methods[i]()
                samples[i, rep] = (time.perf_counter() - t0) / batch
        comm.Allreduce(MPI.IN_PLACE, samples, op=MPI.MAX)
        check.refresh()
        if comm.Get_rank() == 0:
            t_native, t_default, t_check = np.median(samples, axis=1) * 1e6
            print(f"{x.nbytes:>10} {t_native:>11.1f} {t_default:>12.1f} {t_check:>10.1f} "
                  f"{np.median(samples[1] / samples[0]):>15.3f} "
                  f"{np.median(samples[2] / samples[1]):>14.3f}", flush=True)


if __name__ == "__main__":
    main()
