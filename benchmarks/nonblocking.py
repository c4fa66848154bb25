"""Nonblocking allreduce (``iallreduce`` + ``wait``) beside MPI's own ``MPI_Iallreduce`` +
``MPI_Wait``, measured as ``mpicoll bench`` measures (interleaved, in a new order each
repetition, slowest rank, medians of per-repetition ratios).

    mpiexec -n 2 python benchmarks/nonblocking.py [-m 8:1M -f 8] [-a auto,native,rd] [-i 41]

Per size and algorithm: ``iallreduce`` + ``wait`` as a program makes it again and again (its
starter: :class:`mpicoll.fastpath.Starter`), the same call through the full path (its starter
dropped before each call, as before they existed), and their ratios to ``MPI_Iallreduce``.
"""

from __future__ import annotations

import argparse

import numpy as np
from mpi4py import MPI

import mpicoll
from mpicoll import bench, fastpath


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-m", "--sizes", default="8:1M", metavar="MIN:MAX")
    parser.add_argument("-f", "--factor", type=int, default=8)
    parser.add_argument("-a", "--algorithms", default="auto,native,rd")
    parser.add_argument("-i", "--iters", type=int, default=41)
    args = parser.parse_args()
    comm = MPI.COMM_WORLD
    names = args.algorithms.split(",")
    settings = bench.Settings(sizes=bench.size_range(args.sizes, args.factor),
                              algorithms=names, iters=args.iters)
    if comm.Get_rank() == 0:
        print(f"# {comm.Get_size()} ranks; {MPI.Get_library_version().splitlines()[0].strip()}; "
              f"float32 sum; medians of {args.iters} interleaved repetitions; iallreduce + wait "
              "as repeated (start) and through the full path (full), against MPI_Iallreduce + "
              "MPI_Wait (nat-i)")
        print(f"{'size(B)':>9} {'algorithm':>15} {'ran':>8} {'nat-i(us)':>10} {'start(us)':>10} "
              f"{'full(us)':>9} {'start/nat-i':>12} {'full/nat-i':>11}")
    for nbytes in settings.sizes:
        x = bench.exact_input(max(1, nbytes // 4), np.dtype(np.float32), "sum", comm.Get_rank())
        out = np.empty_like(x)
        calls = {bench.NATIVE: lambda: comm.Allreduce(x, out),
                 "nat-i": lambda: comm.Iallreduce(x, out).Wait()}

        def full(name: str) -> None:  # without this kind's starter (the others' kept: the
            # next "start" of another algorithm must not find its own dropped)
            fastpath.starters[:] = [s for s in fastpath.starters if s.algorithm_arg != name]
            mpicoll.iallreduce(x, out, algorithm=name).wait()

        ran = {}
        for name in names:
            calls[(name, "start")] = \
                lambda name=name: mpicoll.iallreduce(x, out, algorithm=name).wait()
            calls[(name, "full")] = lambda name=name: full(name)
            request = mpicoll.iallreduce(x, out, algorithm=name)
            request.wait()
            ran[name] = request.algorithm
        samples = bench.measure(comm, calls, settings)
        if comm.Get_rank() == 0:
            nat_i = samples["nat-i"]
            for name in names:
                start, through = samples[(name, "start")], samples[(name, "full")]
                print(f"{nbytes:>9} {name:>15} {ran[name]:>8} {np.median(nat_i) * 1e6:>10.2f} "
                      f"{np.median(start) * 1e6:>10.2f} {np.median(through) * 1e6:>9.2f} "
                      f"{np.median(start / nat_i):>12.2f} {np.median(through / nat_i):>11.2f}",
                      flush=True)


if __name__ == "__main__":
    main()
