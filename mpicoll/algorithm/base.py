"""The contract every allreduce algorithm follows, and what all of them share.

An algorithm is an :class:`Algorithm` value: a name, a ``plan`` that appends this rank's rounds
to a :class:`~mpicoll.schedule.Builder`, and the capabilities the API, ``auto``, bench, tune and
the tests read instead of checking names (Gloo's one ``Algorithm`` contract; Horovod's
per-op ``Enabled()``). Plans are cached per shape and run by the engine; an algorithm whose
rounds depend on the data (sparse frames, whose sizes are known only once encoded) supplies
``run`` instead, a generator of executions built on the same schedules.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterator, Protocol, Union

import numpy as np

from .._array import array_module
from ..engine import Buffers, Execution, Stage
from ..schedule import Builder, BufferName, Copy, Reduce, Region, Scale, Schedule, Zero

if TYPE_CHECKING:
    from ..check import Channel
    from ..codecs import Codec, ErrorFeedback
    from ..context import Context
    from ..ops import Op
    from ..timing import Record
    from ..transport import Transport

__all__ = ["Algorithm", "Layout", "Options", "Frames", "Call", "Ran", "build_schedule",
           "prologue", "run_planned"]


@dataclass(frozen=True)
class Layout:
    """Where this rank sits: its rank, the group size, and the ranks of every node in order."""

    rank: int
    size: int
    nodes: tuple[tuple[int, ...], ...]


@dataclass(frozen=True)
class Options:
    """Tunables that change a plan (and so belong to its cache key)."""

    segment_bytes: int
    dtype: str

    @property
    def segment(self) -> int:
        """Tree segment in elements (at least one)."""
        return max(1, self.segment_bytes // np.dtype(self.dtype).itemsize)


@dataclass(frozen=True)
class Frames:
    """How big a dense codec's frame of n elements is: what a compressed plan sizes slots by."""

    codec: Codec
    dtype: np.dtype

    def nbytes(self, count: int) -> int:
        return self.codec.max_frame_nbytes(count, self.dtype)


class PlanFn(Protocol):
    def __call__(self, b: Builder, layout: Layout, count: int, options: Options, src: BufferName,
                 frames: Frames | None) -> None: ...


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

    ctx: Context
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


RunFn = Callable[["Algorithm", Call], Iterator[Union[Stage, Ran]]]


@dataclass(frozen=True)
class Algorithm:
    """An allreduce algorithm and what it can do.

    Args:
        name: what ``algorithm=`` takes.
        summary: one line for ``info`` and the docs.
        plan: appends this rank's rounds for ``[0, count)`` of ``src`` (see :func:`build_schedule`).
        run: replaces the cached-plan execution when the rounds depend on the data.
        compresses: the codec kinds it runs, ``"dense"`` and/or ``"sparse"``.
        plain: whether it runs without a codec.
        needs_commutative: whether it reorders operands (a ring starts each chunk elsewhere).
        one_node: whether every rank must share one node.
        compresses_in_node: whether a codec compresses messages inside a node too (hybrid's
            only travel between nodes: on one node it runs plain).
        tunables: environment variables that change its plans.
        tags: message tags one call takes (each stage of a multi-stage run needs its own).
        mpi: the MPI library's own allreduce (no schedule: the cost model predicts it as MPI's
            usual algorithms).
        blocks: its blocking calls block in an MPI collective, which never matches a
            nonblocking one: whether a call blocks is compared by the fingerprint check.
    """

    name: str
    summary: str
    plan: PlanFn | None = None
    run: RunFn | None = None
    compresses: frozenset[str] = frozenset()
    plain: bool = True
    needs_commutative: bool = False
    one_node: bool = False
    compresses_in_node: bool = True
    tunables: tuple[str, ...] = ()
    tags: int = 1
    mpi: bool = False
    blocks: bool = False

    def __post_init__(self) -> None:
        if (self.plan is None) == (self.run is None):
            raise ValueError(f"algorithm {self.name!r}: give exactly one of plan and run")
        if not self.compresses <= {"dense", "sparse"}:
            raise ValueError(f"algorithm {self.name!r}: compresses {set(self.compresses)}, "
                             "expected 'dense' and/or 'sparse'")

    def start(self, call: Call) -> Iterator[Stage | Ran]:
        """The executions of one call, in order, and last a :class:`Ran` if what ran differs
        from what was asked."""
        if self.run is not None:
            return self.run(self, call)
        return run_planned(self, call)


def prologue(b: Builder, size: int, count: int, feedback: bool, average: bool) -> BufferName:
    """Prepare this rank's contribution in ``recv`` when it is not ``send`` as given; return
    where it now is.

    An average divides by p first; error feedback then adds what earlier calls still owe (in the
    units that travel, so divided ones for an average) and starts owing anew.
    """
    src: BufferName = "send"
    everything = (0, count)
    if average:
        b.round(local=[Scale(Region("recv", *everything), Region("send", *everything), 1 / size)])
        src = "recv"
    if feedback:
        b.round(local=[Reduce(Region("recv", *everything), Region(src, *everything),
                              Region("residual", *everything)), Zero(Region("residual", *everything))])
        src = "recv"
    return src


def build_schedule(algorithm: Algorithm | str, layout: Layout, count: int, options: Options,
                   frames: Frames | None = None, feedback: bool = False,
                   average: bool = False) -> Schedule:
    """The schedule of ``algorithm`` (or the one registered by that name) for this rank: the
    shared prologue, then its own rounds.

    A lone rank only copies its input: there is nothing to add, nothing to compress.
    """
    if isinstance(algorithm, str):
        from .registry import get  # the registry holds Algorithms, defined above
        algorithm = get(algorithm)
    if algorithm.plan is None:
        raise ValueError(f"{algorithm.name} has no fixed plan: its rounds depend on the data")
    if frames is not None and "dense" not in algorithm.compresses:
        raise ValueError(f"{algorithm.name} does not compress with dense codecs")
    b = Builder()
    src = prologue(b, layout.size, count, feedback, average)
    if layout.size == 1:
        if src == "send":
            b.round(local=[Copy(Region("recv", 0, count), Region("send", 0, count))])
    else:
        algorithm.plan(b, layout, count, options, src, frames)
    return b.build(algorithm.name, count)


def run_planned(algorithm: Algorithm, call: Call, tag_index: int = 0) -> Iterator[Execution]:
    """One execution of ``algorithm``'s cached plan on the call's buffers."""
    ctx, send = call.ctx, call.send
    codec = call.codec if ctx.size > 1 else None  # one rank: nothing travels, nothing is encoded
    feedback = call.feedback  # but what earlier calls owe is still delivered
    plan = ctx.cached_plan(algorithm, send.size, call.options, codec, feedback is not None,
                           call.op.average)
    scratch = plan.take_scratch(send.dtype, array_module(send))
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
