"""Ranks die one after another (os._exit) at a chosen point; after each death every survivor
must raise ProcessFailedError naming the dead rank (or, where the dead rank had already sent
all it owed, return the full sum), shrink, and reduce on the survivors exactly as MPI's own
Allreduce does; then the next rank dies, on the shrunk communicator.

    mpiexec --with-ft ulfm --mca btl tcp,self -n N python survive_a_failure.py \
        ALGORITHM[+CODEC] FORM WHEN [DEATHS [kill]]

FORM: blocking, nonblocking (three iallreduce in flight), persistent (allreduce_init), comm
(mpicoll.Comm's Allreduce), buckets (a BucketManager's run), allgather, reduce_scatter, bcast,
reduce (the blocking calls of those collectives, rooted at rank 0). WHEN: before (the victim dies
before the call), rounds (the victim starts the collective, progresses it once, and dies:
between rounds, or in a window barrier). DEATHS (default 2): how many ranks die, one per
stage: rank 1, then the last rank, then rank 0; the first exits (os._exit), later ones are
killed (SIGKILL; the first too with "kill"). Each victim prints "dying at T (pid P)" first. Survivor 0 prints one
line per stage at the end, "stage S of N ranks, rank V died: [(rank, outcome, equal,
seconds, shrink), ...]": outcome "raised V" or "returned the full sum"; equal: the shrunk
communicator's allreduce matched MPI's; seconds: from the death to the outcome; shrink: the
seconds mpicoll.shrink took. Then
"message: ..." (a survivor's error).
"""

import os
import signal
import sys
import time

import mpi4py
import numpy as np

mpi4py.rc.finalize = False  # Open MPI 5.0.11's MPI_Finalize can wait for the dead (ompi#11404)
from mpi4py import MPI  # noqa: E402

import mpicoll
from mpicoll.overlap import BucketManager

spec, form, when = sys.argv[1:4]
deaths = int(sys.argv[4]) if len(sys.argv) > 4 else 2
killed = sys.argv[5:] == ["kill"]  # the first victim is killed too
algorithm, _, codec = spec.partition("+")
options = {"algorithm": algorithm, "codec": codec or None}
COUNT = 5000  # elements: several rounds and segments in every algorithm


def contribution(rank: int) -> np.ndarray:
    """Integers, so that any order of summation gives the same bits; with a codec, only every
    125th nonzero (40: what top-1% and fp16 carry exactly)."""
    x = (np.arange(COUNT) % 64 + rank + 1).astype(np.float32)
    if codec:
        x[np.arange(COUNT) % 125 != 0] = 0
    return x


class Collective:
    """One form of the call on one communicator, as a user would write it."""

    def __init__(self, comm: MPI.Intracomm):
        self.comm = mpicoll.Comm(comm, **options) if form == "comm" else comm
        self.x = contribution(comm.Get_rank())
        self.out = np.empty_like(self.x)
        if form == "persistent":
            self.persistent = mpicoll.allreduce_init(self.x, self.out, comm=comm, **options)
        if form == "buckets":
            self.grads = {f"g{i}": self.x[i * 1000:(i + 1) * 1000].copy() for i in range(5)}
            self.manager = BucketManager(self.grads, comm=comm, bucket_bytes=8000,
                                                 first_bucket_bytes=4000, op="sum",
                                                 **options)

    def start(self) -> list:
        """Start it; what to finish."""
        if form == "nonblocking":
            return [mpicoll.iallreduce(self.x, comm=self.comm, **options) for _ in range(3)]
        if form == "persistent":
            self.persistent.start()
            return [self.persistent]
        if form == "buckets":
            for name, grad in self.grads.items():
                grad[...] = self.x[int(name[1:]) * 1000:][:1000]
            return [self.manager]
        return []

    def finish(self, started: list) -> list[np.ndarray]:
        """Finish it; its results."""
        if form == "nonblocking":
            return mpicoll.waitall(started)
        if form == "persistent":
            self.persistent.wait()
            return [self.out]
        if form == "buckets":
            self.manager.run([lambda: list(self.grads)])
            return [np.concatenate(list(self.grads.values()))]
        if form == "allgather":
            return [mpicoll.allgather(self.x, comm=self.comm, algorithm=algorithm)]
        if form == "reduce_scatter":
            blocks = np.resize(self.x, COUNT - COUNT % self.comm.Get_size())
            return [mpicoll.reduce_scatter(blocks, comm=self.comm, algorithm=algorithm)]
        if form == "bcast":
            return [mpicoll.bcast(self.x.copy(), comm=self.comm, algorithm=algorithm)]
        if form == "reduce":
            return [mpicoll.reduce(self.x, self.out, comm=self.comm, algorithm=algorithm)]
        if form == "comm":
            self.comm.Allreduce(self.x, self.out)
        else:
            mpicoll.allreduce(self.x, self.out, comm=self.comm, **options)
        return [self.out]

    def once(self) -> list[np.ndarray]:
        return self.finish(self.start())


def die(first: bool) -> None:
    """The first victim exits (os._exit), later ones are killed (SIGKILL): Open MPI's runtime
    under --with-ft ulfm ends the job at a second process that exits non-zero."""
    print(f"dying at {time.time()} (pid {os.getpid()})", flush=True)
    if first and not killed:
        os._exit(3)
    os.kill(os.getpid(), signal.SIGKILL)


def stage(comm: MPI.Intracomm, victim: int) -> tuple[MPI.Intracomm, list]:
    """Kill ``victim`` of ``comm`` at WHEN; what the survivors saw, and their communicator."""
    rank, size = comm.Get_rank(), comm.Get_size()
    call = Collective(comm)
    for _ in range(2):  # the kind verified, the fast path made
        call.once()
    death = comm.bcast(time.time() + 0.2)  # (one clock: every rank is on this host)
    comm.Barrier()
    if rank == victim:
        time.sleep(max(0.0, death - time.time()))  # the others are in the call by then
        if when == "rounds":
            started = call.start()
            if form == "nonblocking":
                started[0].test()
            elif form == "persistent":
                call.persistent.test()
            elif form == "blocking":
                mpicoll.iallreduce(call.x, comm=comm, **options).test()
        die(first=size == world_size)
    message = ""
    try:
        call.out[...] = np.nan  # (what the warm-up calls left there is the full sum too)
        results = call.once()
        expected = sum(contribution(r) for r in range(size))
        outcome = "returned the full sum" if all(np.array_equal(r, expected) for r in results) \
            else "returned a wrong result"
    except mpicoll.ProcessFailedError as error:
        outcome, message = f"raised {','.join(map(str, error.failed))}", str(error)
    detected = time.time() - death  # from the death to this survivor's error
    t0 = time.monotonic()
    survivors = call.comm.Shrink() if form == "comm" else mpicoll.shrink(comm)
    shrunk = time.monotonic() - t0
    y = contribution(survivors.Get_rank()) * 3
    reference = np.empty_like(y)
    MPI.Intracomm.Allreduce(survivors, y, reference)  # MPI's own (not mpicoll.Comm's)
    got = mpicoll.allreduce(y, comm=survivors, **options)
    mine = (rank, outcome, bool(np.array_equal(got, reference)), round(detected, 4),
            round(shrunk, 4))
    return survivors, [survivors.allgather(mine), message]


world_size = MPI.COMM_WORLD.Get_size()
comm = MPI.COMM_WORLD.Dup()
comm.Set_errhandler(MPI.ERRORS_RETURN)
lines = []
for s in range(deaths):
    size = comm.Get_size()
    victim = (1, size - 1, 0)[s % 3]
    comm, (seen, message) = stage(comm, victim)
    lines.append(f"stage {s} of {size} ranks, rank {victim} died: {seen}")
if comm.Get_rank() == 0:
    print("\n".join(lines), flush=True)
    print(f"message: {message}", flush=True)
