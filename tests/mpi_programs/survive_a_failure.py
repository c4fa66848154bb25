"""One rank dies (os._exit) at a chosen point; every survivor must raise ProcessFailedError
naming it, shrink, and then reduce on the survivors exactly as MPI's own Allreduce does.

    mpiexec --with-ft ulfm --mca btl tcp,self -n N python survive_a_failure.py ALGORITHM FORM WHEN

FORM: blocking, nonblocking (two iallreduce in flight), persistent, comm (mpicoll.Comm).
WHEN: before (the victim dies before the call), inflight (after starting two iallreduce).
The first survivor prints "survivors N: [(rank, outcome, equal, seconds), ...]", outcome
"raised 1" where the survivor raised ProcessFailedError naming rank 1.
"""

import os
import sys
import time

import numpy as np
from mpi4py import MPI

import mpicoll

algorithm, form, when = sys.argv[1:4]
world = MPI.COMM_WORLD
rank, size = world.Get_rank(), world.Get_size()
victim = 1
comm = mpicoll.Comm(world, algorithm=algorithm) if form == "comm" else world.Dup()
x = np.arange(1000, dtype=np.float64) + rank
out = np.empty_like(x)


def call():
    """The collective the survivors are in when the victim dies."""
    if form == "blocking":
        mpicoll.allreduce(x, out, algorithm=algorithm, comm=comm)
    elif form == "nonblocking":
        requests = [mpicoll.iallreduce(x, algorithm=algorithm, comm=comm) for _ in range(2)]
        mpicoll.waitall(requests)
    elif form == "persistent":
        persistent.start()
        persistent.wait()
    else:
        comm.Allreduce(x, out)


persistent = mpicoll.allreduce_init(x, out, algorithm=algorithm, comm=comm) \
    if form == "persistent" else None
for _ in range(2):  # the kind verified, the fast path made
    call()
world.Barrier()
if rank == victim:
    if when == "inflight" and form == "nonblocking":
        [mpicoll.iallreduce(x, algorithm=algorithm, comm=comm) for _ in range(2)]
    os._exit(3)
t0 = time.monotonic()
try:
    call()
    expected = sum(np.arange(1000, dtype=np.float64) + r for r in range(size))
    outcome = "returned " + ("the full sum" if form in ("blocking", "persistent", "comm")
                             and np.array_equal(out, expected) else "wrong" if form != "nonblocking"
                             else "(nonblocking)")
except mpicoll.ProcessFailedError as error:
    outcome = f"raised {','.join(map(str, error.failed))}"
    message = str(error)
detected = time.monotonic() - t0
survivors = mpicoll.shrink(comm)
y = np.arange(1000, dtype=np.float64) * (survivors.Get_rank() + 1)
reference = np.empty_like(y)
survivors.Allreduce(y, reference)
got = mpicoll.allreduce(y, algorithm=algorithm, comm=survivors)
mine = (rank, outcome, bool(np.array_equal(got, reference)), round(detected, 3))
every = survivors.gather(mine)
if survivors.Get_rank() == 0:
    print(f"survivors {len(every)}: {every}", flush=True)
    if outcome.startswith("raised"):
        print(f"message: {message}", flush=True)
