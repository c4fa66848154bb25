"""Threads, each with communicators of its own, create node windows at once; then exit.

``python threads_windows.py [ALGORITHM]`` (default ``shm``). Every node window is freed at
exit, collectively, in an order all ranks must agree on; threads create windows in whatever
order they are scheduled, which need not be the same on every rank. Prints the order this
rank frees its windows in (by communicator name), then "done"; the launcher's exit code says
whether the exit finished.

``python threads_windows.py bare``: no mpicoll, the threads make and free shared windows with
mpi4py alone (Open MPI's osc/ucx crashes there unless ``OMPI_MCA_osc=^ucx``).
"""

import sys
import threading

import numpy as np
from mpi4py import MPI

import mpicoll
from mpicoll import context

algorithm = sys.argv[1] if len(sys.argv) > 1 else "shm"
WORLD = MPI.COMM_WORLD
THREADS, EACH = 4, 3
comms = [[WORLD.Dup() for _ in range(EACH)] for _ in range(THREADS)]  # made in one thread
for k, mine in enumerate(comms):
    for j, comm in enumerate(mine):
        comm.Set_name(f"t{k}c{j}")
wrong: list[str] = []


def work(mine: list[MPI.Intracomm]) -> None:
    if algorithm == "bare":
        for comm in mine:
            MPI.Win.Allocate_shared(64, 1, comm=comm).Free()
        return
    for i, comm in enumerate(mine):
        x = np.full(5000 + i, comm.Get_rank() + 1.0)
        y = mpicoll.allreduce(x, algorithm=algorithm, comm=comm)
        if not np.all(y == sum(range(1, comm.Get_size() + 1))):
            wrong.append(comm.Get_name())


threads = [threading.Thread(target=work, args=(mine,)) for mine in comms]
for t in threads:
    t.start()
for t in threads:
    t.join()
assert not wrong, wrong
by_window = {}
for comm in (c for mine in comms for c in mine):
    ctx = context.of(comm)
    window = ctx._node_window
    if window is not None:
        by_window[window.order] = comm.Get_name()
order = [by_window[key] for key in sorted(by_window)]
sys.stdout.write(f"frees {WORLD.Get_rank()} {' '.join(order)}\n")  # one write: one line
sys.stdout.flush()
MPI.COMM_WORLD.Barrier()
sys.stdout.write(f"done {WORLD.Get_rank()}\n")
sys.stdout.flush()
