"""How the ranks of a node should synchronise around their shared window (run under mpiexec).

    mpiexec -n 2 python benchmarks/shm_sync.py [--reps 41] [--batch 200]

Two ways to pass a node barrier that orders window writes (what ``shm``'s ``sync`` rounds
need), timed interleaved, medians over repetitions of the slowest rank's time per barrier:

- ``mpi``: ``Win.Sync``; ``MPI_Barrier`` on the node communicator; ``Win.Sync``;
- ``ibarrier``: what mpicoll runs (:meth:`mpicoll.node_window.NodeWindow.barrier`): the same
  with ``MPI_Ibarrier``, completed as mpicoll completes requests (a few ``Test`` calls, then
  ``Wait``), since a blocking barrier cannot match the engine's nonblocking one;
- ``flags``: each rank bumps its own counter in the window (``Win.Sync`` first), then spins
  reading every counter until all have reached its own (``Win.Sync`` in the loop), calling
  ``os.sched_yield`` between reads when the node has more ranks than cores.
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np
from mpi4py import MPI

from mpicoll.node_window import NodeWindow


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=41)
    parser.add_argument("--batch", type=int, default=200)
    args = parser.parse_args()
    comm = MPI.COMM_WORLD
    size, rank = comm.Get_size(), comm.Get_rank()
    window = NodeWindow(comm, tuple(range(size)))
    flags = window.view(np.dtype(np.int64), 8 * size)[::8]  # a cache line per rank
    flags[rank] = 0
    window.barrier()
    shared_cores = size > len(os.sched_getaffinity(0))
    count = [0]

    def mpi() -> None:
        window.fence()
        window.comm.Barrier()
        window.fence()

    def spin() -> None:
        count[0] += 1
        window.fence()
        flags[rank] = count[0]
        window.fence()
        while flags.min() < count[0]:
            if shared_cores:
                os.sched_yield()
            window.fence()

    methods = {"mpi": mpi, "ibarrier": window.barrier, "flags": spin}
    samples = {name: [] for name in methods}
    order = np.random.default_rng(0)
    for _ in range(args.reps):
        for name in order.permutation(list(methods)):
            window.barrier()
            t0 = time.perf_counter()
            for _ in range(args.batch):
                methods[name]()
            samples[name].append((time.perf_counter() - t0) / args.batch)
    table = {}
    for name, s in samples.items():
        table[name] = np.array(s)
        comm.Allreduce(MPI.IN_PLACE, table[name], op=MPI.MAX)
    if rank == 0:
        print(f"# {size} ranks on {len(os.sched_getaffinity(0))} cores, "
              f"{MPI.Get_library_version().splitlines()[0].strip()}; µs per barrier, medians of "
              f"{args.reps} interleaved repetitions of {args.batch}")
        print("  ".join(f"{name}: {np.median(t) * 1e6:.2f}" for name, t in table.items())
              + f"  flags/ibarrier: {np.median(table['flags'] / table['ibarrier']):.2f}")
    window.free()


if __name__ == "__main__":
    main()
