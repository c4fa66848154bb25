"""Persistent allreduce, MPI-4 style: ``allreduce_init`` once, then ``start()`` and ``wait()``
as often as wanted, on the same buffers.

Init is collective, as ``MPI_Allreduce_init``: every rank calls it in the same order. It does
once what every call would do — check the arguments and the fingerprint, resolve the algorithm,
take the tags — and binds the plan to the caller's buffers: a plain schedule on host arrays
becomes MPI persistent requests (``Send_init``/``Recv_init``, one per transfer, started round
by round with ``Prequest.Startall``; a plan in the node window also bound to the window's
memory, its barriers posted afresh at each start, which waits its turn in the window's queue),
``native`` becomes ``MPI_Allreduce_init`` (:meth:`NativeExecution.persistent`). Anything else
(a codec, device arrays) starts its executions afresh on the same buffers and tags. Which of
these a request gets is decided by :meth:`mpicoll.fastpath.LoweredCall.persistent`, the
object that also runs the blocking and nonblocking calls of its kind.

Starts must come in the same order on every rank, and a request is started again only after
it completed, as MPI requires of its persistent collectives. That is also why reusing the tags
is safe: a rank's next start sends only after its previous one completed, and MPI delivers the
messages between two ranks on one tag in the order they were sent.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from mpi4py import MPI

from . import inflight
from .algorithm.native import NativeExecution
from .engine import BoundStage, bind
from .ops import Op
from .request import Request
from .schedule import Schedule

if TYPE_CHECKING:
    from .node_window import NodeWindow

__all__ = ["PersistentRequest", "BoundRounds"]


class BoundRounds(BoundStage):
    """A lowered plan bound to MPI persistent requests: a stage of a request, rerun by
    :meth:`restart`. A plan in the node window is bound to the window's memory; a start after
    the window grew binds it again to the new one, as every rank does at the same start."""

    __slots__ = ("_requests", "_lowered", "_arrays", "_comm", "_memory")

    def __init__(self, rounds: tuple, arrays: tuple, comm: MPI.Comm, tag: int, op: Op,
                 schedule: Schedule, window: NodeWindow | None = None):
        super().__init__((), tag, op, schedule, window)
        self._lowered, self._arrays, self._comm = rounds, arrays, comm
        self._requests: list[list[Any]] = []
        self._bind()

    def _bind(self) -> None:
        """Bind the plan to the arrays and the window's memory as it is now, on persistent
        requests (not started)."""
        window = self._window
        self._memory = None if window is None else window.memory
        node = None if window is None else \
            window.view(self._arrays[0].dtype, self._schedule.node_count)
        rounds = bind(self._lowered, (*self._arrays, node), window)
        self._take(rounds)
        comm, tag = self._comm, self._tag
        self._requests = [[comm.Recv_init(spec, peer, tag) for spec, peer in receives]
                          + [comm.Send_init(spec, peer, tag) for spec, peer in sends]
                          for _, receives, sends, _, _, _ in rounds]
        self._next = len(rounds)  # not started

    @property
    def posted(self) -> bool:
        """Whether the round in flight was posted (a start in the window waits for its turn)."""
        return self._pending is not None

    def restart(self) -> BoundRounds:
        """Start again: post the first round (in the node window: at its turn)."""
        window = self._window
        if window is not None and window.memory is not self._memory:  # the window grew
            self.free()
            self._bind()
        # self._rewind(self._tag), inlined (a small start's budget is ~1 µs; the flags it also
        # clears are clear after a completed run)
        self._next, self._pending = 0, None
        self._queued, self._stamp = False, self._tag
        self.progressed = time.monotonic()  # (the watchdog's: a start is a move)
        if self._rounds and window is None:
            self._start()
        return self

    def where(self) -> str:
        return super().where() + ("" if self.done else " (persistent)")

    def free(self) -> None:
        for requests in self._requests:
            for request in requests:
                request.Free()
        self._requests = []

    def _post(self, index: int) -> list[MPI.Request]:
        requests = self._requests[index]
        if requests:
            MPI.Prequest.Startall(requests)
        return requests


_NOTHING_AFTER: Any = iter(())  # a bound request's one stage is followed by nothing


class PersistentRequest(Request):
    """What ``allreduce_init`` returns: ``start()``, then ``wait()``/``test()`` as any mpicoll
    request (the progress engine advances it with every other collective in flight); again
    and again, until ``free()`` (or the end of a ``with`` block)."""

    __slots__ = ("_bound", "_restart", "_freed", "_tags")

    def __init__(self, result: Any, algorithm: str, codec: str, transport: str, kind: tuple,
                 number: int, context: Any, bound: BoundRounds | NativeExecution | None,
                 restart: Any, tags: tuple[int, ...]):
        super().__init__(result, algorithm, codec, transport, None, kind, number, context)
        self._bound = bound       # the plan bound to MPI persistent requests, if it could be
        self._restart = restart   # else: a fresh run of the executions, on the same tags
        self._freed = False
        self._tags = tags         # its tags, every start: what took them since must be done
        context.hold(tags, self)

    def start(self) -> None:
        """Start one allreduce of the bound buffers (every rank, in the same order)."""
        if self._freed:
            raise ValueError("start() on a freed persistent request")
        if not self.done:
            raise RuntimeError("start() while the previous start is in flight: wait() first")
        self.context.claim()  # ConcurrentUseError if another thread is in a collective here
        if self._tags:  # (MPI's own takes none)
            self.context.hold(self._tags, self)
        self._error = None
        if self._bound is None:
            self.run(self._restart())
            inflight.add(self)
        else:
            self._stages, self._current = _NOTHING_AFTER, self._bound.restart()
            if isinstance(self._bound, BoundRounds) and not self._bound.posted:
                inflight.add(self)  # its turn in the node window: the engine's first test
            else:  # its first round posted already: into the engine as it is (add would test)
                inflight.add_posted(self)

    def wait(self) -> Any:
        """As :meth:`Request.wait`; a bound request alone in flight runs its rounds right here."""
        bound = self._bound
        if bound is None or self._current is not bound or not inflight.claim_alone(self):
            return super().wait()
        try:
            bound.wait()
            if self.context.fault_tolerant:
                self._finished_stage()
            self._current = None
        except BaseException as error:
            self._stop(error)
            raise
        finally:
            inflight.release_one(self)
        return self._result

    def free(self) -> None:
        """Release the MPI requests (after the last wait; a freed request cannot start)."""
        if not self.done:
            raise RuntimeError("free() while in flight: wait() first")
        if not self._freed and self._bound is not None:
            self._bound.free()
        self._freed = True

    def __enter__(self) -> PersistentRequest:
        return self

    def __exit__(self, *exc: object) -> None:
        if exc[0] is None:
            self.free()
