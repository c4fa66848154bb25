"""How a waiting call should wait: ``MPI_Allreduce`` against ``MPI_Iallreduce`` completed by
``Wait`` or by ``Test`` in a loop, and mpicoll's ``native`` and ``rd`` with a given number of
``Test`` spins before ``Wait`` (``mpicoll._mpi``). Interleaved, medians of ratios to
``MPI_Allreduce``.

    mpiexec -n 2 python benchmarks/waiting.py                       # one rank per core
    MPIR_CVAR_POLLS_BEFORE_YIELD=1 MPIR_CVAR_CH4_PROGRESS_THROTTLE=1 \\
        mpiexec -n 4 python benchmarks/waiting.py --spins 32,4      # 4 ranks on 2 cores
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from mpi4py import MPI

import mpicoll
from mpicoll import context


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="8,1024,8192", help="bytes, comma-separated")
    parser.add_argument("--spins", default="32", help="spin counts to try, comma-separated")
    parser.add_argument("--reps", type=int, default=21)
    args = parser.parse_args()
    comm = MPI.COMM_WORLD
    ctx = context.of(comm)
    dup = ctx.comm
    if comm.Get_rank() == 0:
        print(f"# {comm.Get_size()} ranks; {MPI.Get_library_version().splitlines()[0].strip()}; "
              f"float32 sum; medians of {args.reps} interleaved repetitions")
    for nbytes in map(int, args.sizes.split(",")):
        x = np.ones(max(1, nbytes // 4), np.float32)
        y = np.empty_like(x)

        def test_loop() -> None:
            request = dup.Iallreduce(x, y)
            while not request.Test():
                pass

        calls = {"MPI_Allreduce": lambda: dup.Allreduce(x, y),
                 "Iallreduce+Wait": lambda: dup.Iallreduce(x, y).Wait(),
                 "Iallreduce+Test": test_loop}
        for spins in map(int, args.spins.split(",")):
            def spun(name: str, spins: int = spins):
                def call() -> None:
                    ctx.spins = range(spins)
                    mpicoll.allreduce(x, y, algorithm=name)
                return call
            calls[f"native, {spins} spins"] = spun("native")
            calls[f"rd, {spins} spins"] = spun("rd")
        names = list(calls)
        samples = np.zeros((len(names), args.reps))
        batch = 200 if nbytes <= 65536 else 20
        for call in calls.values():
            for _ in range(20):
                call()
        for rep in range(args.reps):
            for k in range(len(names)):
                i = (k + rep) % len(names)
                comm.Barrier()
                t0 = time.perf_counter()
                for _ in range(batch):
                    calls[names[i]]()
                samples[i, rep] = (time.perf_counter() - t0) / batch
        comm.Allreduce(MPI.IN_PLACE, samples, op=MPI.MAX)
        if comm.Get_rank() == 0:
            print(f"{nbytes} B: MPI_Allreduce {np.median(samples[0]) * 1e6:.2f} us; "
                  + "; ".join(f"{name} {np.median(samples[i]) * 1e6:.2f} us "
                              f"({np.median(samples[i] / samples[0]):.2f}x)"
                              for i, name in enumerate(names) if i), flush=True)


if __name__ == "__main__":
    main()
