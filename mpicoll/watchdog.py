"""The watchdog: a collective that stops moving becomes a report and an abort, not a silent hang.

``MPICOLL_TIMEOUT=seconds`` (read once, at the first collective; off when unset or 0) starts a
daemon thread. It aborts the job (``MPI_Abort`` on ``COMM_WORLD``, exit code 70) when a
collective that somebody is waiting on or testing has not finished a round for that long, or
when mpicoll has been blocked that long in one of its own blocking steps (a fingerprint check,
the barrier at exit). Before that it prints, on each rank that notices, which collective (call
number, algorithm, round, phase) and which peers it waits on, as NCCL's watchdog and Horovod's
stall inspector do. A request nobody tests is not watched: the time between a start and the
first test or wait is the program's to spend. So the timeout must be longer than the longest
stretch a collective takes while somebody waits on it.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from typing import Callable, Iterable, Protocol

from mpi4py import MPI

from . import _env

__all__ = ["TIMEOUT_ENV", "ABORT_CODE", "timeout", "refresh", "ensure_started", "running",
           "watch", "Blocked", "Watched"]

TIMEOUT_ENV = "MPICOLL_TIMEOUT"
ABORT_CODE = 70
_timeout: float | None = None
_thread: threading.Thread | None = None
_blocked: dict[int, tuple[float, Callable[[], str]]] = {}  # thread id -> (since, what)


class Watched(Protocol):
    """A collective in flight, as the watchdog looks at it (``mpicoll.request.Request``)."""

    def describe(self) -> str: ...
    def last_progress(self) -> float: ...
    def watched(self) -> bool: ...


_sources: list[Callable[[], Iterable[Watched]]] = []


def watch(source: Callable[[], Iterable[Watched]]) -> None:
    """Watch the collectives ``source()`` lists (the progress engine registers its own)."""
    _sources.append(source)


def running() -> bool:
    """Whether the watchdog thread runs (then calls take the full path, which it sees)."""
    return _thread is not None


def timeout() -> float:
    """Seconds without progress before the abort; 0 when off."""
    global _timeout
    if _timeout is None:
        value = os.environ.get(TIMEOUT_ENV, "0")
        try:
            seconds = float(value)
        except ValueError:
            seconds = -1.0
        if not seconds >= 0:  # also NaN
            raise ValueError(f"{TIMEOUT_ENV}={value!r}: expected seconds >= 0 (0: off)")
        _timeout = seconds
    return _timeout


def refresh() -> None:
    """Read ``MPICOLL_TIMEOUT`` again at the next collective."""
    global _timeout
    _timeout = None


def ensure_started() -> None:
    """Start the watchdog thread if a timeout is set and it is not running yet."""
    global _thread
    if _thread is None and timeout() > 0:
        _thread = threading.Thread(target=_watch, args=(timeout(),), name="mpicoll-watchdog",
                                   daemon=True)
        _thread.start()
        _env.changed()  # watched calls take the full path, which the watchdog sees


class Blocked:
    """``with Blocked(what):`` marks this thread as blocked in ``what()`` (a blocking MPI call of
    mpicoll's own) for the watchdog; nothing at all when the watchdog is off."""

    __slots__ = ("what",)

    def __init__(self, what: Callable[[], str]):
        self.what = what

    def __enter__(self) -> None:
        if _thread is not None:
            _blocked[threading.get_ident()] = (time.monotonic(), self.what)

    def __exit__(self, *exc: object) -> None:
        if _thread is not None:
            _blocked.pop(threading.get_ident(), None)


def _watch(limit: float) -> None:
    while True:
        time.sleep(min(limit / 4, 1.0))
        now = time.monotonic()
        for since, what in list(_blocked.values()):
            if now - since > limit:
                _abort(f"{what()} has been blocked for {now - since:.0f} s")
        for request in [r for source in _sources for r in source()]:
            quiet = now - request.last_progress()
            if request.watched() and quiet > limit:
                _abort(f"{request.describe()}: no round finished for {quiet:.0f} s")


def _abort(report: str) -> None:
    rank = MPI.COMM_WORLD.Get_rank()
    print(f"mpicoll watchdog: rank {rank}: {report} ({TIMEOUT_ENV}={timeout():g}); "
          f"aborting the job", file=sys.stderr, flush=True)
    time.sleep(0.5)  # let the launcher forward the report before the job is killed
    MPI.COMM_WORLD.Abort(ABORT_CODE)
