"""Persistent allreduce (``allreduce_init``: start + wait) beside the blocking call and native
``MPI_Allreduce``, measured as ``mpicoll bench`` measures (interleaved, in a new order each
repetition, slowest rank, medians of per-repetition ratios to native).

    mpiexec -n 2 python benchmarks/persistent.py [-m 8:4K] [-a rd,tree,native,auto] [-i 41]

Prints per size and algorithm: the blocking call's and the persistent request's time and their
ratios to native.
"""

from __future__ import annotations

import argparse

import numpy as np
from mpi4py import MPI

import mpicoll
from mpicoll import bench


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-m", "--sizes", default="8:4K", metavar="MIN:MAX")
    parser.add_argument("-a", "--algorithms", default="rd,tree,ring,native,auto")
    parser.add_argument("-i", "--iters", type=int, default=41)
    args = parser.parse_args()
    comm = MPI.COMM_WORLD
    names = args.algorithms.split(",")
    settings = bench.Settings(sizes=bench.size_range(args.sizes), algorithms=names,
                              iters=args.iters)
    if comm.Get_rank() == 0:
        print(f"# {comm.Get_size()} ranks; {MPI.Get_library_version().splitlines()[0].strip()}; "
              f"float32 sum; medians of {args.iters} interleaved repetitions; ratio to native "
              "MPI_Allreduce")
        print(f"{'size(B)':>9} {'algorithm':>13} {'native(us)':>11} {'call(us)':>9} "
              f"{'init(us)':>9} {'call/nat':>9} {'init/nat':>9}")
    for nbytes in settings.sizes:
        x = bench.exact_input(max(1, nbytes // 4), np.dtype(np.float32), "sum", comm.Get_rank())
        out = np.empty_like(x)
        calls = {bench.NATIVE: lambda: comm.Allreduce(x, out)}
        persistent = {}
        for name in names:
            calls[(name, "call")] = lambda name=name: mpicoll.allreduce(x, out, algorithm=name)
            request = persistent[name] = mpicoll.allreduce_init(x, out, algorithm=name)
            calls[(name, "init")] = lambda request=request: (request.start(), request.wait())
        samples = bench.measure(comm, calls, settings)
        for request in persistent.values():
            request.free()
        if comm.Get_rank() == 0:
            native = samples[bench.NATIVE]
            for name in names:
                call, init = samples[(name, "call")], samples[(name, "init")]
                print(f"{nbytes:>9} {name:>13} {np.median(native) * 1e6:>11.2f} "
                      f"{np.median(call) * 1e6:>9.2f} {np.median(init) * 1e6:>9.2f} "
                      f"{np.median(call / native):>9.2f} {np.median(init / native):>9.2f}",
                      flush=True)


if __name__ == "__main__":
    main()
