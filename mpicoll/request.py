"""Requests for collectives in flight, shaped like mpi4py's: test, wait, waitall, testall — and then."""

from __future__ import annotations

from typing import Any, Callable, Iterator, Sequence

from mpi4py import MPI

from . import inflight
from ._array import Array
from .execution import Ran
from .check import say
from .fault import ProcessFailedError, check
from .engine import Stage
from .timing import Record


__all__ = ["Request", "waitall", "testall"]


class Request:
    """A nonblocking allreduce in flight; ``test()`` advances it, ``wait()`` finishes it.

    Like an ``mpi4py.MPI.Request``, but ``wait()`` returns the result buffer. ``algorithm``
    names the algorithm that runs, ``codec`` the codec's name ("" without one) and
    ``transport`` how the buffers reach MPI ("host", "cuda-aware" or "staged"). MPI only
    moves data inside MPI calls: collectives progress when any request is tested or waited on
    — every collective in flight, not only this one (:mod:`mpicoll.inflight`), so requests
    may be completed in any order — see ``mpicoll.overlap`` for doing that between pieces of
    compute, or from a thread.
    """

    __slots__ = ("_stages", "_current", "_result", "_record", "_kind", "number", "context",
                 "claimed", "waiting", "asked", "_error", "algorithm", "codec", "transport",
                 "__weakref__")

    def __init__(self, result: Array, algorithm: str, codec: str, transport: str,
                 record: Record | None = None, kind: tuple | None = None, number: int = -1,
                 context: Any = None):
        self._stages: Iterator[Stage | Ran] = iter(())
        self._current: Stage | None = None
        self._result = result
        self._record = record
        self._kind = kind        # the fingerprint (count, dtype, op, algorithm, codec, collective)
        self.number = number     # the collective's number on its communicator
        self.context = context   # the communicator's mpicoll context it runs on
        self.claimed = False  # advanced by a thread right now (see mpicoll.inflight)
        self._error: BaseException | None = None  # what stopped it, raised again on test/wait
        self.waiting = False  # a thread blocks in wait() on it (for the watchdog)
        self.asked = 0.0      # when a test or progress pass last looked at it
        self.algorithm = algorithm
        self.codec = codec
        self.transport = transport

    def run(self, stages: Iterator[Stage | Ran]) -> None:
        """Run the executions of one collective, one after another; a :class:`Ran` at the end,
        if any, says what really ran (a sparse codec's dense fallback)."""
        self._stages = stages
        self._current = self._next_stage()

    @property
    def done(self) -> bool:
        """Whether the result is ready (without progressing anything)."""
        return self._current is None

    def test(self) -> bool:
        """Progress every collective in flight without blocking; True once this result is ready."""
        inflight.progress()
        if self._error is not None:
            raise self._error
        return self.done

    def wait(self) -> Any:
        """Block until the result is ready and return it (every collective in flight progresses
        meanwhile)."""
        if not self.done:
            inflight.wait(self)
        if self._error is not None:
            raise self._error
        return self._result

    def then(self, fn: Callable[[Any], Any]) -> Request:
        """A request for ``fn(result)``: ``fn`` runs once, in the test or wait that completes
        this one. Do not block on other requests inside ``fn``: that serialises the chain."""
        return _Then(self, fn)

    def describe(self) -> str:
        """What this collective is and where it stands, for error reports and the watchdog."""
        head = f"allreduce ({self.algorithm})" if self._kind is None else \
            f"collective #{self.number}: {say(self._kind)}"
        return head if self._current is None else f"{head}, {self._current.where()}"

    # ---- for mpicoll.inflight: called by the one thread that has claimed this request
    def advance(self) -> None:
        try:
            while self._current is not None:
                if not self._current.test():
                    return
                if self.context.fault_tolerant:
                    self._finished_stage()
                self._current = self._next_stage()
        except BaseException as error:
            self._stop(error)
            raise

    def wait_alone(self) -> None:
        try:
            while self._current is not None:
                self._current.wait()
                if self.context.fault_tolerant:
                    self._finished_stage()
                self._current = self._next_stage()
        except BaseException as error:
            self._stop(error)
            raise

    def _stop(self, error: BaseException) -> None:
        """It cannot go on (a mismatch, a failed process): done, and the error is what its
        test or wait raise. A failed process stops every collective of its communicator."""
        failed = error if isinstance(error, ProcessFailedError) else None
        if failed is not None:
            failed.during(self.describe())  # (before it forgets where it stood)
        self._error, self._current = error, None
        if failed is not None:
            self.context.failed(failed)

    def fail(self, error: ProcessFailedError) -> None:
        """Stop it and take it out of the engine: a process of its communicator failed."""
        if not self.done:
            self._error = error.during(self.describe())
            self._current = None
        inflight.drop(self)

    def mpi_requests(self) -> list[MPI.Request]:
        return [] if self._current is None else self._current.pending()

    def completed(self, index: int, status: MPI.Status) -> None:
        if self._current is not None:
            self._current.completed(index, status)

    def last_progress(self) -> float:
        return 0.0 if self._current is None else self._current.progressed

    def watched(self) -> bool:
        """Somebody waits for it: blocked in wait(), or testing since it last moved."""
        return not self.done and (self.waiting or self.asked > self.last_progress())

    def _finished_stage(self) -> None:
        """A stage completed in a job that survives failures (``context.fault_tolerant``):
        raise if one happened (what the stage received may not be data:
        :func:`mpicoll.fault.check`)."""
        if (failed := check(self.context.comm)) is not None:
            raise failed

    def _next_stage(self) -> Stage | None:
        stage = next(self._stages, None)
        if stage is None or not isinstance(stage, Ran):
            return stage
        self.algorithm, self.codec = stage.algorithm, stage.codec  # a Ran: the last item
        if self._record is not None:
            self._record.algorithm, self._record.codec = self.algorithm, self.codec
        return None


class _Then(Request):
    __slots__ = ("_parent", "_fn", "_done", "_value")

    def __init__(self, parent: Request, fn: Callable[[Any], Any]):
        self._parent, self._fn, self._done, self._value = parent, fn, False, None
        self.algorithm, self.codec, self.transport = parent.algorithm, parent.codec, parent.transport

    @property
    def done(self) -> bool:
        return self._done

    def test(self) -> bool:
        if not self._done and self._parent.test():
            self._finish()
        return self._done

    def wait(self) -> Any:
        if not self._done:
            self._parent.wait()
            self._finish()
        return self._value

    def describe(self) -> str:
        return self._parent.describe()

    def _finish(self) -> None:
        self._value, self._done = self._fn(self._parent.wait()), True


def waitall(requests: Sequence[Request]) -> list:
    """Wait for every request (in any order: all progress together) and return their results."""
    return [r.wait() for r in requests]


def testall(requests: Sequence[Request]) -> bool:
    """Progress every collective in flight once; True when all of ``requests`` have completed."""
    inflight.progress()
    return all([r.test() if isinstance(r, _Then) else r.done for r in requests])
