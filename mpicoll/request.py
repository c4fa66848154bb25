"""Requests for collectives in flight, shaped like mpi4py's: test, wait, waitall, testall — and then."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Iterator, Sequence

from ._array import Array
from .engine import Execution
from .timing import Record

if TYPE_CHECKING:
    from .algorithm import Ran

__all__ = ["Request", "waitall", "testall"]


class Request:
    """A nonblocking allreduce in flight; ``test()`` advances it, ``wait()`` finishes it.

    Like an ``mpi4py.MPI.Request``, but ``wait()`` returns the result buffer. ``algorithm``
    names the algorithm that runs, ``codec`` the codec's name ("" without one) and
    ``transport`` how the buffers reach MPI ("host", "cuda-aware" or "staged"). MPI only
    moves data inside MPI calls: a request progresses when it is tested or waited on (see
    ``mpicoll.overlap`` for doing that between pieces of compute, or from a thread).
    """

    def __init__(self, result: Array, algorithm: str, codec: str, transport: str,
                 record: Record | None = None):
        self._stages: Iterator[Execution | Ran] = iter(())
        self._current: Execution | None = None
        self._result = result
        self._record = record
        self.algorithm = algorithm
        self.codec = codec
        self.transport = transport

    def run(self, stages: Iterator[Execution | Ran]) -> None:
        """Run the executions of one collective, one after another; a :class:`Ran` at the end,
        if any, says what really ran (a sparse codec's dense fallback)."""
        self._stages = stages
        self._current = self._next_stage()

    def test(self) -> bool:
        """Progress the transfers without blocking; True once the result is ready."""
        while self._current is not None:
            if not self._current.test():
                return False
            self._current = self._next_stage()
        return True

    def wait(self) -> Any:
        """Block until the result is ready and return it."""
        while self._current is not None:
            self._current.wait()
            self._current = self._next_stage()
        return self._result

    def _next_stage(self) -> Execution | None:
        stage = next(self._stages, None)
        if stage is None or isinstance(stage, Execution):
            return stage
        self.algorithm, self.codec = stage.algorithm, stage.codec  # a Ran: the last item
        if self._record is not None:
            self._record.algorithm, self._record.codec = self.algorithm, self.codec
        return None

    def then(self, fn: Callable[[Any], Any]) -> Request:
        """A request for ``fn(result)``: ``fn`` runs once, in the test or wait that completes
        this one. Do not block on other requests inside ``fn``: that serialises the chain."""
        return _Then(self, fn)


class _Then(Request):
    def __init__(self, parent: Request, fn: Callable[[Any], Any]):
        self._parent, self._fn, self._done, self._value = parent, fn, False, None
        self.algorithm, self.codec, self.transport = parent.algorithm, parent.codec, parent.transport

    def test(self) -> bool:
        if not self._done and self._parent.test():
            self._finish()
        return self._done

    def wait(self) -> Any:
        if not self._done:
            self._parent.wait()
            self._finish()
        return self._value

    def _finish(self) -> None:
        self._value, self._done = self._fn(self._parent.wait()), True


def waitall(requests: Sequence[Request]) -> list:
    """Wait for every request (in order) and return their results."""
    return [r.wait() for r in requests]


def testall(requests: Sequence[Request]) -> bool:
    """Progress every request once; True when all have completed."""
    return all([r.test() for r in requests])  # a list, not a generator: test each one
