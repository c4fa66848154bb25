"""How much a little Python before each call costs a small allreduce (run under mpiexec).

    mpiexec -n 4 python benchmarks/dispatch_cost.py [--bytes 4096] [--reps 31] [--parts]

Ranks that share cores multiply whatever a call does before it reaches MPI: this times
``MPI_Allreduce`` alone, after 0.5 and 2 µs of Python spun on every rank, and
``mpicoll.allreduce(..., algorithm="native-blocking")`` (the same MPI call behind mpicoll's
dispatch), interleaved and rotating, slowest rank per sample; medians, and medians of
per-repetition ratios to ``MPI_Allreduce`` alone. With ``--parts``, also what mpicoll's call is
made of: MPI's call as the fast path posts it (on mpicoll's duplicate of the communicator, with
the buffer arguments it keeps), and behind a bare Python function of ``allreduce``'s signature.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from mpi4py import MPI

import mpicoll
from mpicoll import context
from mpicoll.bench import library


def spin(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def wrapper(sendbuf, recvbuf=None, *, op="sum", algorithm="auto", comm=None, codec=None):
    """A function called as ``mpicoll.allreduce`` is, doing nothing but MPI's call."""
    return MPI.COMM_WORLD.Allreduce(sendbuf, recvbuf)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bytes", type=int, default=4096)
    parser.add_argument("--reps", type=int, default=31)
    parser.add_argument("--batch", type=int, default=50)
    parser.add_argument("--parts", action="store_true", help="also time the call's parts")
    args = parser.parse_args()
    comm = MPI.COMM_WORLD
    x = np.ones(max(1, args.bytes // 4), np.float32)
    y = np.empty_like(x)
    methods = {
        "MPI_Allreduce": lambda: comm.Allreduce(x, y),
        "+0.5us Python": lambda: (spin(0.5e-6), comm.Allreduce(x, y)),
        "+2us Python": lambda: (spin(2e-6), comm.Allreduce(x, y)),
        "native-blocking": lambda: mpicoll.allreduce(x, y, algorithm="native-blocking"),
    }
    if args.parts:
        dup, specs = context.of(comm).comm, ([x, MPI.FLOAT], [y, MPI.FLOAT])
        methods["as posted"] = lambda: dup.Allreduce(*specs)
        methods["in a wrapper"] = lambda: wrapper(x, y, algorithm="native-blocking")
    names = list(methods)
    for call in methods.values():
        for _ in range(args.batch):
            call()
    samples: dict[str, list[float]] = {name: [] for name in names}
    for rep in range(args.reps):
        for k in range(len(names)):
            name = names[(k + rep) % len(names)]
            call = methods[name]
            comm.Barrier()
            t0 = time.perf_counter()
            for _ in range(args.batch):
                call()
            samples[name].append(comm.allreduce((time.perf_counter() - t0) / args.batch,
                                                op=MPI.MAX))
    if comm.Get_rank() == 0:
        base = np.array(samples["MPI_Allreduce"])
        print(f"# {comm.Get_size()} ranks, {library()}; {x.nbytes} B float32 sum; medians of "
              f"{args.reps} interleaved repetitions of {args.batch} calls")
        for name in names:
            times = np.array(samples[name])
            print(f"{name:>16} {np.median(times) * 1e6:8.1f} us  ratio "
                  f"{np.median(times / base):.3f}")


if __name__ == "__main__":
    main()
