"""Run a schedule on real buffers: to completion (blocking) or round by round (nonblocking)."""

from __future__ import annotations

import numpy as np
from mpi4py import MPI

from .ops import Op
from .schedule import Reduce, Region, Round, Schedule, Send
from .timing import Record

__all__ = ["Execution"]


class Execution:
    """One run of a schedule on bound buffers.

    ``wait()`` runs it to the end; ``test()`` advances it as far as it can without blocking and
    says whether it has finished. Both may be mixed; messages use the private communicator and
    the tag the caller reserved, so several executions can be in flight on one communicator.
    """

    def __init__(self, schedule: Schedule, op: Op, comm: MPI.Comm, tag: int,
                 send: np.ndarray, recv: np.ndarray, tmp: np.ndarray, record: Record | None = None):
        self.schedule = schedule
        self._record = record  # timing: phases are filled in as rounds finish
        self._mark = record.t0 if record is not None else 0.0  # end of the last timed round
        self._op = op
        self._comm = comm
        self._tag = tag
        self._arrays = {"send": send, "recv": recv, "tmp": tmp}
        self._bytes = {name: a.view(np.uint8) for name, a in self._arrays.items()}
        self._itemsize = recv.itemsize
        self._next = 0          # index of the next round to start
        self._pending = None    # requests of the round in flight
        if not schedule.rounds:
            self._finished()

    @property
    def done(self) -> bool:
        return self._next == len(self.schedule.rounds) and self._pending is None

    def test(self) -> bool:
        """Advance without blocking; return True once every round has finished."""
        while not self.done:
            if self._pending is None:
                self._start(self.schedule.rounds[self._next])
            if self._pending and not MPI.Request.Testall(self._pending):
                return False
            self._finish(self.schedule.rounds[self._next - 1])
        return True

    def wait(self) -> None:
        """Run every remaining round to completion."""
        while not self.done:
            if self._pending is None:
                self._start(self.schedule.rounds[self._next])
            if self._pending:
                MPI.Request.Waitall(self._pending)
            self._finish(self.schedule.rounds[self._next - 1])

    def _start(self, rnd: Round) -> None:
        comm, tag = self._comm, self._tag
        # Receives first: a message that finds its receive posted skips the unexpected queue.
        reqs = [comm.Irecv(self._wire(t.region), t.peer, tag)
                for t in rnd.transfers if not isinstance(t, Send)]
        reqs += [comm.Isend(self._wire(t.region), t.peer, tag)
                 for t in rnd.transfers if isinstance(t, Send)]
        self._pending = reqs
        self._next += 1

    def _finish(self, rnd: Round) -> None:
        self._pending = None
        if rnd.local:
            view = self._view
            with np.errstate(all="ignore"):  # overflow to inf / wrap-around is the MPI result too
                for step in rnd.local:
                    if isinstance(step, Reduce):
                        self._op.kernel(view(step.left), view(step.right), out=view(step.dst))
                    else:
                        np.copyto(view(step.dst), view(step.src))
        if self._record is not None:
            # A phase is charged from the end of the previous round to the end of its own.
            now, phases = MPI.Wtime(), self._record.phases
            phases[rnd.phase] = phases.get(rnd.phase, 0.0) + now - self._mark
            self._mark = now
        if self._next == len(self.schedule.rounds):
            self._finished()

    def _finished(self) -> None:
        if self._record is not None:
            self._record.t1 = self._mark if self.schedule.rounds else MPI.Wtime()

    def _view(self, r: Region) -> np.ndarray:
        return self._arrays[r.buf][r.start:r.stop]

    def _wire(self, r: Region) -> np.ndarray:
        """Bytes of a region: MPI moves bytes, so every NumPy dtype travels the same way."""
        n = self._itemsize
        return self._bytes[r.buf][r.start * n:r.stop * n]
