"""What the collective fingerprint check costs per call (run under mpiexec).

    mpiexec -n 2 python benchmarks/check_cost.py [--sizes 8,65536,1048576] [--reps 41]

For each size, one repetition times a batch of calls of each method, in a random order
(the same on every rank, seeded; a rotation would always put a method after the same other one,
whose cache footprint it would then inherit), each
after a barrier; a sample is the slowest rank's time per call; figures are medians over
repetitions, ratios medians of per-repetition ratios. Methods:

- ``native``: ``MPI_Allreduce``;
- ``fast``: ``mpicoll.allreduce`` as by default, called again and again: the fast path, which
  looks at no fingerprint at all (``mpicoll.fastpath``);
- ``full``: the same call through the full path (the shortcut dropped before each call), its
  kind verified already: what a call of a new kind pays, less the check;
- ``miss``: the full path with the fingerprint compared, as the first call of each kind does
  (the check's cost is miss − full);
- ``all``: ``MPICOLL_CHECK=1``: compared before every call, and every message's size checked;
- ``new``: first calls of a kind, as a program makes them: each call of the batch has a count
  not seen before (``n + k`` elements), its plan not cached (built, its scratch allocated), its
  kind verified beforehand, so it is not checked;
- ``new+chk``: the same first calls as by default: not verified, so each one is checked (the
  check's cost on the call that pays it is new+chk − new).
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from mpi4py import MPI

import mpicoll
from mpicoll import check, context, fastpath
from mpicoll.bench import library

METHODS = ("native", "fast", "full", "miss", "all", "new", "new+chk")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="8,65536,1048576", help="bytes, comma-separated")
    parser.add_argument("--reps", type=int, default=41)
    parser.add_argument("--algorithm", default="auto")
    args = parser.parse_args()
    comm = MPI.COMM_WORLD
    if comm.Get_rank() == 0:
        print(f"# {comm.Get_size()} ranks, {library()}; "
              f"float32 sum, algorithm {args.algorithm}; medians of {args.reps} interleaved "
              "repetitions")
        print(f"{'size(B)':>10}" + "".join(f"{m + '(us)':>11}" for m in METHODS)
              + "".join(f"{r:>10}" for r in ("fast/nat", "full/nat", "miss/full", "all/full",
                                                 "chk/new")))
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

        wide = np.ones(x.size + batch, np.float32)
        fresh = [wide[:x.size + k] for k in range(1, batch + 1)]  # a new kind per call
        fresh_out = [np.empty_like(a) for a in fresh]

        def first(checked: bool):
            def call() -> None:  # the batch, before its clock starts: nothing planned
                for a, b in zip(fresh, fresh_out):  # the same memory warm for both
                    mpicoll.allreduce(a, b, algorithm=args.algorithm)
                ctx._plans.clear()  # planned by none, verified by earlier calls
                if checked:
                    ctx._verified.clear()  # or by none
                fastpath.forget()
                comm.Barrier()
                return lambda k: mpicoll.allreduce(fresh[k], fresh_out[k],
                                                   algorithm=args.algorithm)
            call.setup = True  # type: ignore[attr-defined]
            return call

        methods = [native, mode(), mode(full=True), mode(full=True, miss=True),
                   mode(every=True, full=True), first(False), first(True)]
        for method in methods[:5]:  # warm-up: plans built, the kind verified
            for _ in range(3):
                method()
        samples = np.zeros((len(methods), args.reps))
        order = np.random.default_rng(nbytes)
        for rep in range(args.reps):
            for i in order.permutation(len(methods)):
                check.every_call = False
                if getattr(methods[i], "setup", False):
                    one = methods[i]()
                    t0 = time.perf_counter()
                    for j in range(batch):
                        one(j)
                    stop = time.perf_counter()
                    methods[1]()  # the other methods' kind verified and its shortcut kept again
                else:
                    comm.Barrier()
                    t0 = time.perf_counter()
                    for _ in range(batch):
                        methods[i]()
                    stop = time.perf_counter()
                samples[i, rep] = (stop - t0) / batch
        comm.Allreduce(MPI.IN_PLACE, samples, op=MPI.MAX)
        check.refresh()
        if comm.Get_rank() == 0:
            times = np.median(samples, axis=1) * 1e6
            ratios = [np.median(samples[a] / samples[b]) for a, b in ((1, 0), (2, 0), (3, 2), (4, 2),
                                                                  (6, 5))]
            print(f"{x.nbytes:>10}" + "".join(f"{t:>11.1f}" for t in times)
                  + "".join(f"{r:>10.3f}" for r in ratios), flush=True)


if __name__ == "__main__":
    main()
