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

import atexit
import sys
import threading
import time
from typing import TYPE_CHECKING

from mpi4py import MPI

from . import watchdog
from .check import MismatchError

if TYPE_CHECKING:
    from .request import Request

__all__ = ["add", "add_posted", "progress", "wait", "claim_alone", "release_one", "outstanding",
           "finish", "finish_at_exit"]

_lock = threading.Lock()  # taken to claim requests; appending and removing are atomic alone
_outstanding: list[Request] = []  # in start order


def add(request: Request) -> None:
    """Take a started collective into the engine and post its first round (only its own:
    starting many buckets must not cost a pass over all of them each)."""
    request._claimed = True  # before anyone can see it
    _outstanding.append(request)
    try:
        request._advance()
    finally:
        release_one(request)  # dropped if done already (one rank, or it all arrived)


def add_posted(request: Request) -> None:
    """Take a started collective whose first round is posted already into the engine."""
    _outstanding.append(request)


def outstanding() -> list[Request]:
    """The collectives in flight, in start order (a copy)."""
    with _lock:
        return list(_outstanding)


def progress() -> None:
    """Advance every collective in flight that no other thread is advancing, without blocking."""
    mine = _claim()
    try:
        for request in mine:
            request._advance()
    finally:
        _release(mine)


def wait(request: Request) -> None:
    """Block until ``request`` has finished, advancing every collective in flight meanwhile."""
    alone = claim_alone(request)  # the common case: block in MPI itself
    request._waiting = True
    try:
        if alone:
            request._wait_alone()
        else:
            _wait(request)
    finally:
        request._waiting = False
        if alone:
            release_one(request)


def claim_alone(request: Request) -> bool:
    """Claim ``request`` if it is the only collective in flight (then the caller may block on
    it alone, and must :func:`release_one` it)."""
    with _lock:
        if len(_outstanding) == 1 and _outstanding[0] is request and not request._claimed:
            request._claimed = True
            return True
    return False


def _wait(request: Request) -> None:
    delay = 0.0
    while not request.done:
        mine = _claim()
        try:
            for r in mine:
                r._advance()
            if request.done:
                return
            pending = [(r, i, m) for r in mine for i, m in enumerate(r._pending())]
            if request in mine and pending:  # block until one of them moves
                status = MPI.Status()
                try:
                    index = MPI.Request.Waitany([m for _, _, m in pending], status)
                except MPI.Exception as error:  # a message too large for its receive
                    raise MismatchError(
                        f"mpicoll: a message did not match its receive ({str(error).strip()}) "
                        "in one of: " + "; ".join(r.describe() for r in mine)
                        + ": the ranks are running different collectives") from None
                if index != MPI.UNDEFINED:
                    owner, position, _ = pending[index]
                    owner._completed(position, status)
                delay = 0.0
        finally:
            _release(mine)
        if request not in mine and not request.done:  # another thread advances it: poll
            time.sleep(delay)
            delay = min(2 * delay + 1e-6, 1e-3)


def _claim() -> list[Request]:
    now = time.monotonic()
    with _lock:
        mine = [r for r in _outstanding if not r._claimed]
        for r in mine:
            r._claimed, r._asked = True, now
    return mine


def release_one(request: Request) -> None:
    """Unclaim ``request``; drop it if it has finished."""
    request._claimed = False
    if request.done:
        _drop(request)


def _release(mine: list[Request]) -> None:
    for r in mine:
        release_one(r)


def _drop(request: Request) -> None:
    try:
        _outstanding.remove(request)
    except ValueError:  # another thread that saw it finished dropped it first
        pass


def finish() -> None:
    """Wait for every collective in flight (in start order, each advancing all)."""
    for request in outstanding():
        wait(request)


def finish_at_exit() -> None:
    """Finish what is in flight, then pass a barrier on every communicator mpicoll used.

    Skipped after an uncaught exception (``sys.last_value``): the other ranks may never come.
    """
    if hasattr(sys, "last_value") or MPI.Is_finalized() or not MPI.Is_initialized():
        return
    finish()
    from . import context
    barriers = [ctx.comm.Ibarrier() for ctx in context.live()]
    if barriers:
        with watchdog.Blocked(lambda: "the barrier at exit (the other ranks' collectives)"):
            MPI.Request.Waitall(barriers)
    with watchdog.Blocked(lambda: "freeing the shared-memory windows at exit"):
        context.free_windows()


atexit.register(finish_at_exit)
