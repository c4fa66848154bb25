"""How a waiting call should wait: ``MPI_Allreduce`` against ``MPI_Iallreduce`` completed by
``Wait`` or by ``Test`` in a loop, and mpicoll's ``native`` and ``rd`` with a given number of
``Test`` spins before ``Wait`` (``mpicoll._mpi``). Measured as ``mpicoll bench`` measures
(interleaved, in a new order each repetition, slowest rank), medians of ratios to ``MPI_Allreduce``.

    mpiexec -n 2 python benchmarks/waiting.py                       # one rank per core
    MPIR_CVAR_POLLS_BEFORE_YIELD=1 MPIR_CVAR_CH4_PROGRESS_THROTTLE=1 \\
        mpiexec -n 4 python benchmarks/waiting.py --spins 32,4      # 4 ranks on 2 cores
"""

from __future__ import annotations

import argparse

import numpy as np
from mpi4py import MPI

import mpicoll
from mpicoll import bench, context


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="8,1024,8192", help="bytes, comma-separated")
    parser.add_argument("--spins", default="32", help="spin counts to try, comma-separated")
    parser.add_argument("--reps", type=int, default=21)
    args = parser.parse_args()
    comm = MPI.COMM_WORLD
    ctx = context.of(comm)
    dup = ctx.comm
    sizes = [int(n) for n in args.sizes.split(",")]
    settings = bench.Settings(sizes=sizes, algorithms=[], iters=args.reps)
    if comm.Get_rank() == 0:
        print(f"# {comm.Get_size()} ranks; {MPI.Get_library_version().splitlines()[0].strip()}; "
              f"float32 sum; medians of {args.reps} interleaved repetitions")
    for nbytes in sizes:
        x = np.ones(max(1, nbytes // 4), np.float32)
        y = np.empty_like(x)

        def test_loop() -> None:
            request = dup.Iallreduce(x, y)
            while not request.Test():
                pass

        calls = {bench.NATIVE: lambda: dup.Allreduce(x, y),
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
        samples = bench.measure(comm, calls, settings)
        if comm.Get_rank() == 0:
            base = samples[bench.NATIVE]
            print(f"{nbytes} B: MPI_Allreduce {np.median(base) * 1e6:.2f} us; "
                  + "; ".join(f"{name} {np.median(times) * 1e6:.2f} us "
                              f"({np.median(times / base):.2f}x)"
                              for name, times in samples.items() if name != bench.NATIVE),
                  flush=True)


if __name__ == "__main__":
    main()
