"""The lowercase ``allreduce`` of Python objects: mpi4py's own beside ``mpicoll.Comm``'s, per kind
of object, and ``MPI_Allreduce`` of one double (what a number needs at least).

    mpiexec -n 2 python benchmarks/lowercase.py [-i 41] [-k float,int,...]

Measured as ``mpicoll bench`` measures (``mpicoll.bench.measure``): interleaved, in a new order
every repetition, small calls repeated inside a sample, the slowest rank's time, medians. Per
kind: mpi4py's time, mpicoll's, the median of their per-repetition ratios (``vs-mpi4py``) and
mpicoll's ratio to ``MPI_Allreduce`` of 8 bytes. ``array-N``: N doubles; ``mixed-int``: rank 0 passes an ``int``, the others
a ``numpy.int64`` (mpi4py's answer, a ``numpy.int64``, on every rank).
"""

from __future__ import annotations

import argparse

import numpy as np
from mpi4py import MPI

import mpicoll
from mpicoll import bench


def objects(rank: int) -> dict[str, object]:
    """What a program passes, by kind."""
    return {"float": 0.5 + rank, "numpy.float64": np.float64(rank), "int": rank,
            "0-d-array": np.array(float(rank)), "mixed-int": rank if rank == 0 else np.int64(rank),
            "array-8": np.full(8, float(rank)), "array-8192": np.full(8192, float(rank))}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-i", "--iters", type=int, default=41, help="repetitions (default 41)")
    parser.add_argument("-k", "--kinds", default=",".join(objects(0)),
                        help="comma-separated kinds of object (default all)")
    args = parser.parse_args(argv)
    unknown = set(args.kinds.split(",")) - set(objects(0))
    if unknown:
        parser.error(f"unknown kinds {sorted(unknown)}; choose from {','.join(objects(0))}")
    world = MPI.COMM_WORLD
    comm = mpicoll.Comm(world)
    settings = bench.Settings(sizes=[8], algorithms=[], iters=args.iters)
    one = np.zeros(1)
    calls = {bench.NATIVE: lambda: world.Allreduce(MPI.IN_PLACE, one)}
    kinds = {kind: obj for kind, obj in objects(world.Get_rank()).items()
             if kind in args.kinds.split(",")}
    for kind, obj in kinds.items():
        calls[("mpi4py", kind)] = lambda obj=obj: world.allreduce(obj)
        calls[("mpicoll", kind)] = lambda obj=obj: comm.allreduce(obj)
    samples = bench.measure(world, calls, settings)
    fallbacks = world.allreduce(sum(comm.fallbacks.values()))
    if world.Get_rank() != 0:
        return
    native = samples[bench.NATIVE]
    print(f"# lowercase allreduce: {world.Get_size()} ranks; {bench.library()}; medians of "
          f"{args.iters} interleaved repetitions; MPI_Allreduce of 8 B "
          f"{np.median(native) * 1e6:.2f} us; calls mpicoll handed to mpi4py: {fallbacks}")
    print(f"#{'object':>17} {'mpi4py(us)':>10} {'mpicoll(us)':>11} {'vs-mpi4py':>9} "
          f"{'vs-MPI_Allreduce':>16}")
    for kind in kinds:
        theirs, ours = samples[("mpi4py", kind)], samples[("mpicoll", kind)]
        print(f"{kind:>18} {np.median(theirs) * 1e6:>10.2f} {np.median(ours) * 1e6:>11.2f} "
              f"{np.median(ours / theirs):>9.2f} {np.median(ours / native):>16.2f}", flush=True)


if __name__ == "__main__":
    main()
