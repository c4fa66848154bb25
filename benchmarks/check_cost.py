"""What the collective fingerprint check costs per call (run under mpiexec).

    mpiexec -n 2 python benchmarks/check_cost.py [--sizes 8,65536,1048576] [--reps 41]

For each size, one repetition times a batch of calls of each method, in a rotating order, each
after a barrier; a sample is the slowest rank's time per call; figures are medians over
repetitions, ratios medians of per-repetition ratios. Methods:

- ``native``: ``MPI_Allreduce``;
- ``fast``: ``mpicoll.allreduce`` as by default, called again and again: the fast path, which
  looks at no fingerprint at all (``mpicoll.fastpath``);
- ``full``: the same call through the full path (the shortcut dropped before each call), its
  kind verified already: what a call of a new kind pays, less the check;
- ``miss``: the full path with the fingerprint compared, as the first call of each kind does
  (the check's cost is miss − full);
- ``all``: ``MPICOLL_CHECK=1``: compared before every call, and every message's size checked.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from mpi4py import MPI

import mpicoll
from mpicoll import check, context, fastpath

METHODS = ("native", "fast", "full", "miss", "all")


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
        print(f"{'size(B)':>10}" + "".join(f"{m + '(us)':>9}" for m in METHODS)
              + "".join(f"{r:>10}" for r in ("fast/nat", "full/nat", "miss/full", "all/full")))
    for nbytes in map(int, args.sizes.split(",")):
        x = np.ones(max(1, nbytes // 4), np.float32)
        y = np.empty_like(x)
        batch = max(1, min(200, int(2e-3 / max(1e-6, 2e-10 * nbytes + 5e-6))))

        def native() -> None:
            comm.Allreduce(x, y)

        ctx = context.of(comm)

        def mode(every: bool = False, full: bool = False, miss: bool = False):
            def call() -> None:
                check.every_call = every
                if full:
                    fastpath.forget()
                if miss:
                    ctx._verified.clear()  # as on the first call of a kind
                mpicoll.allreduce(x, y, algorithm=args.algorithm)
            return call

        methods = [native, mode(), mode(full=True), mode(full=True, miss=True),
                   mode(every=True, full=True)]
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
            times = np.median(samples, axis=1) * 1e6
            ratios = [np.median(samples[a] / samples[b]) for a, b in ((1, 0), (2, 0), (3, 2), (4, 2))]
            print(f"{x.nbytes:>10}" + "".join(f"{t:>9.1f}" for t in times)
                  + "".join(f"{r:>10.3f}" for r in ratios), flush=True)


if __name__ == "__main__":
    main()
