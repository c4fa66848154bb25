"""A loop of steps in mpicoll.Steps while ranks die one after another: every survivor must redo
the same step, apply every step once, and end with the same state bits.

    mpiexec --with-ft ulfm --mca btl tcp,self -n N python steps_after_a_failure.py \
        ALGORITHM FORM WHEN [DEATHS [STEPS]]

FORM: blocking, nonblocking (iallreduce, then wait), persistent (an allreduce_init request per
communicator, started each step), comm (mpicoll.Comm's Allreduce), buckets (a BucketManager
made anew on the survivors with manager.on(steps.comm), summing the step's gradient in two
buckets). WHEN, where the victim dies in its step: top (before the step's collective), after (right after the
collective returned on the victim: the others may or may not have completed it), rounds (the
victim starts the collective, progresses it once and dies), inside (a thread kills the victim
0-4 ms into the step's collective of 2 MiB; it prints "died inside" when the collective had
not returned, else the victim dies right after it), agreeing and agreed (the first victim dies
at "after"; the next in the survivors' first recovery, in their agreement on the step to resume
from: before it gave its step, or right after the agreement returned on it, when the others may
or may not have the result yet).
DEATHS (default 2) ranks die, the first at step 3, the next two steps after each recovery:
world rank 1, then the last, then 0.

A step adds to the state ``x`` every rank's contribution (world rank + 1 + step, integers: any
order of summation gives the same bits) and counts itself in ``applied``; each rank checks
that the sum it received is the one its communicator's members give for its step (a step
mixed with another would not be). Survivor 0 prints one line, "survivors: [(world rank, step,
applied, mixed, digest, recoveries), ...]", and each survivor checks that mpicoll's allreduce
on the last communicator equals MPI_Allreduce's bits ("exact: True").
"""

import hashlib
import os
import sys
import threading

import mpi4py
import numpy as np

mpi4py.rc.finalize = False  # Open MPI 5.0.11's MPI_Finalize can wait for the dead (ompi#11404)
from mpi4py import MPI  # noqa: E402

import mpicoll  # noqa: E402
from mpicoll.overlap import BucketManager  # noqa: E402

algorithm, form, when = sys.argv[1:4]
deaths = int(sys.argv[4]) if len(sys.argv) > 4 else 2
total = int(sys.argv[5]) if len(sys.argv) > 5 else 10
WORLD = MPI.COMM_WORLD
ME = WORLD.Get_rank()
RANDOM = np.random.default_rng()
COUNT = 1 << 18 if when == "inside" else 3000


def members(comm):
    """The world ranks of ``comm``'s members."""
    group, world = comm.Get_group(), WORLD.Get_group()
    ranks = MPI.Group.Translate_ranks(group, list(range(group.Get_size())), world)
    group.Free()
    world.Free()
    return ranks


def victims():
    """(world rank, step) of each death: rank 1 at step 3, then the last survivor, then 0."""
    alive, step, planned = list(range(WORLD.Get_size())), 3, []
    for death in range(deaths):
        victim = (1, alive[-1], 0)[death % 3] if len(alive) > 2 else alive[-1]
        planned.append((victim, step))
        alive.remove(victim)
        step += 2
    return dict(planned)


DIES_AT = victims().get(ME)
if when in ("agreeing", "agreed"):
    if DIES_AT is not None and DIES_AT > 3:  # the second victim: in the first recovery
        DIES_AT, before = None, when == "agreeing"

        class DiesInTheAgreement(MPI.Intracomm):
            def allreduce(self, *args, **kwargs):
                if not before:
                    super().allreduce(*args, **kwargs)
                os._exit(3)

        shrink = mpicoll.recovery.shrink
        mpicoll.recovery.shrink = lambda comm=None: DiesInTheAgreement(shrink(comm))
    when = "after"  # (the first victim's point)


class Inside:
    """when == "inside": kill this rank 0-4 ms into the collective, unless it returned first."""

    def __init__(self):
        self.returned = threading.Event()
        threading.Thread(target=self._kill, args=(RANDOM.uniform(0, 0.004),), daemon=True).start()

    def _kill(self, delay):
        if not self.returned.wait(delay):
            print("died inside", flush=True)
            os._exit(3)
comm = mpicoll.Comm(WORLD, algorithm=algorithm) if form == "comm" else WORLD
x = np.zeros(COUNT)
applied = np.zeros(1)
out = np.empty(COUNT)
mixed = 0
send = np.empty(COUNT)
persistent = (None, None)  # (communicator, its persistent request), made anew after a shrink
halves = np.empty(COUNT // 2), np.empty(COUNT - COUNT // 2)  # the buckets' gradients
manager = BucketManager(list(halves), comm=comm, op="sum", algorithm=algorithm,
                        bucket_bytes=8 * COUNT // 2, first_bucket_bytes=8 * COUNT // 2) \
    if form == "buckets" else None
steps = mpicoll.Steps(comm, [x, applied])
while steps.step < total:
    with steps:
        step, comm = steps.step, steps.comm
        dying = DIES_AT == step
        if dying and when == "top":
            os._exit(3)
        send[...] = ME + 1.0 + step
        inside = Inside() if dying and when == "inside" else None
        if form == "blocking":
            mpicoll.allreduce(send, out, algorithm=algorithm, comm=comm)
        elif form == "comm":
            comm.Allreduce(send, out)
        elif form == "buckets":
            manager = manager.on(comm)  # (itself until a recovery)
            halves[0][...], halves[1][...] = send[:COUNT // 2], send[COUNT // 2:]
            manager.run([lambda: ["1"], lambda: ["0"]])
            out[:COUNT // 2], out[COUNT // 2:] = halves
        else:
            if form == "persistent":
                if persistent[0] is not comm:
                    persistent = (comm, mpicoll.allreduce_init(send, out, algorithm=algorithm,
                                                               comm=comm))
                request = persistent[1]
                request.start()
            else:
                request = mpicoll.iallreduce(send, out, algorithm=algorithm, comm=comm)
            if dying and when == "rounds":
                request.test()
                os._exit(3)
            request.wait()
        if inside is not None:
            inside.returned.set()
        if dying:
            os._exit(3)
        mixed += int(out[0] != sum(w + 1.0 + step for w in members(comm)))
        x += out
        applied += 1

comm = steps.comm
want = np.empty(COUNT)
MPI.Intracomm(comm).Allreduce(x, want)
exact = bool(np.array_equal(mpicoll.allreduce(x, comm=comm), want))
mine = (ME, steps.step, int(applied[0]), mixed, hashlib.sha256(x.tobytes()).hexdigest()[:12],
        [(list(failed), at, resumed) for failed, at, resumed, _ in steps.recoveries])
everyone = MPI.Intracomm(comm).gather(mine, root=0)
print(f"exact: {exact}", flush=True)
if comm.Get_rank() == 0:
    print(f"survivors: {everyone}", flush=True)
MPI.Intracomm(comm).Barrier()
