"""The one progress engine of the process: every collective in flight, advanced together.

MPI lets a program complete its requests in any order: waiting on B before A must finish both,
even when the other ranks wait on A first. A collective built from rounds only moves when
something posts its next round, so a wait on B alone would leave A stalled here and the ranks
waiting on A stuck. Hence every ``test()`` and ``wait()`` of any request advances every
collective in flight on every communicator, in start order, as MPI's own progress does.

A request is advanced by one thread at a time: a thread *claims* the requests it advances, and
others skip claimed ones. A wait on the only collective in flight blocks in MPI (``Waitall``);
with several in flight it advances them all and blocks in ``Waitany`` until one moves.

At exit, collectives still in flight are finished, the ranks of every communicator mpicoll
used pass a barrier (and free the shared-memory windows, which MPICH over libfabric needs
freed before its finalize): with MPICH, a rank that returned from its last request and went on into
``MPI_Finalize`` stopped progressing what its neighbours still needed (a last rendezvous send),
and they hung. A watchdog (``MPICOLL_TIMEOUT``, :mod:`mpicoll.watchdog`) turns a collective
that stops moving into a report and an abort.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Protocol

from mpi4py import MPI

from . import fault, watchdog
from .check import MismatchError

__all__ = ["Request", "add", "add_posted", "progress", "wait", "claim_alone", "release_one",
           "outstanding", "in_flight", "concerns", "drop", "finish"]


class Request(Protocol):
    """A collective in flight as the engine drives it (``mpicoll.request.Request``)."""

    claimed: bool   # advanced by a thread right now
    asked: float    # when a test or a progress pass last looked at it
    waiting: bool   # a thread blocks in wait() on it
    context: Any    # the session it runs in (mpicoll.context.Context)

    @property
    def done(self) -> bool: ...
    def advance(self) -> None: ...
    def wait_alone(self) -> None: ...
    def mpi_requests(self) -> list[MPI.Request]: ...
    def completed(self, index: int, status: MPI.Status) -> None: ...
    def describe(self) -> str: ...
    def last_progress(self) -> float: ...
    def watched(self) -> bool: ...
    def fail(self, error: Any) -> None: ...


_lock = threading.Lock()  # taken to claim requests; appending and removing are atomic alone
in_flight: list[Request] = []
"""The collectives in flight, in start order (read, never changed, outside this module: while
it is not empty, the fast path asks :func:`concerns`)."""


def concerns(context: Any) -> bool:
    """Whether a collective in flight was started by this thread or runs on ``context``: a
    blocking call there must go through the engine, which drives them while it waits (or says
    that two threads use one communicator). Another thread's, on another communicator, are
    that thread's to drive."""
    me = threading.get_ident()  # (the thread that started a request is its context's owner)
    return any(r.context is context or r.context.owner == me for r in list(in_flight))


def add(request: Request) -> None:
    """Take a started collective into the engine and post its first round (only its own:
    starting many buckets must not cost a pass over all of them each)."""
    request.claimed = True  # before anyone can see it
    in_flight.append(request)
    try:
        request.advance()
    finally:
        release_one(request)  # dropped if done already (one rank, or it all arrived)


def add_posted(request: Request) -> None:
    """Take a started collective whose first round is posted already into the engine."""
    in_flight.append(request)


def outstanding() -> list[Request]:
    """The collectives in flight, in start order (a copy)."""
    with _lock:
        return list(in_flight)


def progress() -> None:
    """Advance every collective in flight that no other thread is advancing, without blocking."""
    mine = _claim()
    try:
        for request in mine:
            try:
                request.advance()
            except fault.ProcessFailedError:
                pass  # stopped with it: its own test or wait raises it
    finally:
        _release(mine)


def wait(request: Request) -> None:
    """Block until ``request`` has finished, advancing every collective in flight meanwhile."""
    alone = claim_alone(request)  # the common case: block in MPI itself
    request.waiting = True
    try:
        if alone:
            request.wait_alone()
        else:
            _wait(request)
    finally:
        request.waiting = False
        if alone:
            release_one(request)


def claim_alone(request: Request) -> bool:
    """Claim ``request`` if it is the only collective in flight (then the caller may block on
    it alone, and must :func:`release_one` it)."""
    with _lock:
        if len(in_flight) == 1 and in_flight[0] is request and not request.claimed:
            request.claimed = True
            return True
    return False


def _wait(request: Request) -> None:
    delay = 0.0
    while not request.done:
        mine = _claim()
        try:
            for r in mine:
                try:
                    r.advance()
                except fault.ProcessFailedError:
                    if r is request:
                        raise
            if request.done:
                return
            pending = [(r, i, m) for r in mine for i, m in enumerate(r.mpi_requests())]
            if request in mine and pending:  # block until one of them moves
                status = MPI.Status()
                try:
                    index = _waitany([m for _, _, m in pending], status, request)
                except fault.ProcessFailedError as error:  # (a fault-tolerant job's polling)
                    request.context.failed(error)
                    continue  # its collectives were stopped, this one among them
                except MPI.Exception as error:  # a process failed, or a message too large
                    if _failed(error, mine):
                        continue  # its collectives were stopped (this one too, if it is its)
                    raise MismatchError(
                        f"mpicoll: a message did not match its receive ({str(error).strip()}) "
                        "in one of: " + "; ".join(r.describe() for r in mine)
                        + ": the ranks are running different collectives") from None
                if index != MPI.UNDEFINED:
                    owner, position, _ = pending[index]
                    owner.completed(position, status)
                delay = 0.0
        finally:
            _release(mine)
        if request not in mine and not request.done:  # another thread advances it: poll
            time.sleep(delay)
            delay = min(2 * delay + 1e-6, 1e-3)


def _waitany(requests: list[MPI.Request], status: MPI.Status, request: Request) -> int:
    """``MPI_Waitany``, or in a fault-tolerant job ``Testany`` in the spins of ``request``'s
    context, which never block in ``Wait`` (:class:`mpicoll.fault.Polling`: a revoke does not
    end MPI's own nonblocking collectives) and raise once a process failed."""
    if not request.context.fault_tolerant:
        return MPI.Request.Waitany(requests, status)
    spins = iter(request.context.spins)
    while True:
        next(spins)
        index, flag = MPI.Request.Testany(requests, status)
        if flag:
            return index


def _failed(error: MPI.Exception, mine: list[Request]) -> bool:
    """Whether ``error`` (from a wait on several collectives) is a process failure; then the
    context it happened on stops all its collectives in flight (``Context.failed``)."""
    for r in mine:
        if fault.involved(r.context.comm):
            failed = fault.failure(error, r.context.comm)
            if failed is not None:
                r.context.failed(failed)
                return True
    return False


def drop(request: Request) -> None:
    """Take a stopped collective out of the engine (its communicator lost a process)."""
    _drop(request)


def _claim() -> list[Request]:
    now = time.monotonic()
    with _lock:
        mine = [r for r in in_flight if not r.claimed]
        for r in mine:
            r.claimed, r.asked = True, now
    return mine


def release_one(request: Request) -> None:
    """Unclaim ``request``; drop it if it has finished."""
    request.claimed = False
    if request.done:
        _drop(request)


def _release(mine: list[Request]) -> None:
    for r in mine:
        release_one(r)


def _drop(request: Request) -> None:
    try:
        in_flight.remove(request)
    except ValueError:  # another thread that saw it finished dropped it first
        pass


def finish() -> None:
    """Wait for every collective in flight (in start order, each advancing all)."""
    for request in outstanding():
        wait(request)


watchdog.watch(outstanding)
