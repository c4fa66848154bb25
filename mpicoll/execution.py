"""A call's executions: the checked arguments an algorithm runs on, and its cached plan run.

:class:`Call` is what the API hands an algorithm; :func:`start` gives the executions of one
call (the cached plan's, or those of an algorithm whose rounds depend on the data). The
session it runs in is any object with a Context's plan cache and node window
(:class:`Session`): this layer runs plans, it does not own them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterable, Iterator, Protocol, Union

from mpi4py import MPI

from ._array import array_module
from .engine import Execution, Stage
from .local import Buffers

if TYPE_CHECKING:
    from .algorithm.base import Algorithm, Layout, Options
    from .check import Channel
    from .codecs import Codec, ErrorFeedback
    from .node_window import NodeWindow
    from .ops import Op
    from .timing import Record
    from .transport import Transport

__all__ = ["Session", "Call", "Ran", "start", "run_planned"]


class Session(Protocol):
    """What running a plan needs of the communicator's session (``mpicoll.context.Context``)."""

    comm: MPI.Intracomm
    rank: int
    size: int
    spins: Iterable[int]
    layout: Layout

    def cached_plan(self, algorithm: Algorithm, count: int, options: Options,
                    codec: Codec | None = None, feedback: bool = False,
                    average: bool = False) -> Any: ...
    def node_window(self, node: tuple[int, ...]) -> NodeWindow: ...
    def node_window_ready(self, nbytes: int) -> bool: ...


@dataclass(frozen=True)
class Ran:
    """What an execution that changed course at run time really ran (a sparse dense-fallback)."""

    algorithm: str
    codec: str


@dataclass
class Call:
    """One collective's checked arguments, handed to an algorithm's ``run``.

    ``send`` and ``recv`` are flat; ``codec`` is the codec that encodes (None without one) and
    ``feedback`` the ErrorFeedback wrapping it, if any; ``tags`` were taken in call order;
    ``fingerprint`` is the call's fingerprint check, if it has one: it completes before anything
    moves or any collective setup (a node window) runs, or, ``carried``, is the first execution's
    first barrier (see :class:`mpicoll.engine.Execution`).
    """

    ctx: Session
    send: Any
    recv: Any
    op: Op
    options: Options
    codec: Codec | None
    feedback: ErrorFeedback | None
    record: Record | None
    path: Transport
    tags: tuple[int, ...]
    fingerprint: Channel | None = None
    blocking: bool = False  # the caller waits for it (allreduce, not iallreduce)
    collective: str = "allreduce"  # (mpicoll.collective's names): what the buffers hold


def start(algorithm: Algorithm, call: Call) -> Iterator[Union[Stage, Ran]]:
    """The executions of one call, in order, and last a :class:`Ran` if what ran differs from
    what was asked."""
    if algorithm.run is not None:
        return algorithm.run(algorithm, call)
    return run_planned(algorithm, call)


def run_planned(algorithm: Algorithm, call: Call, tag_index: int = 0) -> Iterator[Execution]:
    """One execution of ``algorithm``'s cached plan on the call's buffers."""
    ctx, send = call.ctx, call.send
    codec = call.codec if ctx.size > 1 else None  # one rank: nothing travels, nothing is encoded
    feedback = call.feedback  # but what earlier calls owe is still delivered
    plan = ctx.cached_plan(algorithm, send.size, call.options, codec, feedback is not None,
                           call.op.average)
    scratch: tuple[Any, Any] = plan.take_scratch(send.dtype, array_module(send))
    residual = None if feedback is None else feedback.owed(send)
    schedule = plan.schedule
    check = call.fingerprint if tag_index == 0 else None
    window = node = None
    if schedule.node_count:
        nbytes = schedule.node_count * send.dtype.itemsize
        if check is not None and not ctx.node_window_ready(nbytes):
            check.finish()  # creating or growing the window is collective: agree first
        window = ctx.node_window(schedule.node)
        node = window.view(send.dtype, schedule.node_count)
    bufs = Buffers(send, call.recv, *scratch, residual=residual, feedback=feedback, node=node,
                   window=window)
    link = call.path.bind(schedule, bufs, plan)
    yield Execution(schedule, call.op, ctx.comm, call.tags[tag_index], bufs, codec,
                    call.record, link, check if check is not None and check.pending else None)
    plan.give_back(scratch)  # not on abandonment: MPI might still write into it
