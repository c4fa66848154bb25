"""The fast path: a call like an earlier one, its checks reduced to comparisons.

Scientific codes call ``allreduce`` with the same kind of arguments every iteration (two dot
products of a conjugate gradient, a tally array). The full path re-validates them, resolves
the algorithm, builds a request, buffers and executions — some 10 µs of Python where native MPI
takes 2. Here a call whose communicator, op, algorithm, codec (none), array type, dtype, shape,
strides and in-place choice match an earlier blocking call runs that call's verified plan,
lowered to flat tuples once (:attr:`mpicoll.context.CachedPlan.lowered`), with nothing built
per call.

Every rank must send the same messages whichever path it takes, so the fast path decides
nothing the full path would decide differently: it takes the collective's number and tag the
same way, and steps aside (returns None) whenever the full path has something to do: another
collective in flight (the progress engine must drive it while this one waits), arrays that are
not plain NumPy or that overlap. What changes rarely is not looked at per call: a shortcut is
made only without timing records, ``MPICOLL_CHECK=1`` or the watchdog, and is dropped
(:func:`forget`) when any of them starts or a communicator forgets its verified kinds (whose
fingerprint check the full path then makes again, on every rank alike).

``iallreduce`` has shortcuts of its own, :class:`Starter` s, under the same rules (a request in
flight does not matter there: every start goes into the progress engine as on the full path).
"""

from __future__ import annotations

import itertools
import threading
from typing import Any

import numpy as np
from mpi4py.MPI import IN_PLACE, Datatype

from . import _env, check, inflight, timing, watchdog
from . import execution
from .algorithm import Algorithm, Options
from .execution import Call
from .algorithm.native import NativeExecution
from .context import CachedPlan, Context
from .engine import BoundExecution, bind, run_bound
from .ops import Op
from .request import Request
from .transport import Transport

__all__ = ["Shortcut", "Starter", "last", "keep", "retry", "forget", "start", "keep_starter"]

last: Shortcut | None = None
"""The most recent blocking call's shortcut, tried first."""
older: list[Shortcut] = []
"""Those of the calls of other kinds before it, most recent first: a loop that alternates a
few kinds of call (a solver's dot products and norms; bench's methods) keeps them all. Each
holds views of the last arrays it ran on (so those stay alive until it is dropped)."""
KEPT = 16
starters: list[Starter] = []
"""The nonblocking calls' shortcuts (:class:`Starter`), most recent first."""
_UNBOUND: Any = object()
"""A shortcut's last arrays before it has any (no argument is this object)."""
_lock = threading.Lock()


def keep(shortcut: Shortcut) -> None:
    """Make ``shortcut`` the first tried; the least recent beyond :data:`KEPT` is dropped."""
    global last
    with _lock:  # threads on different communicators keep theirs at once
        if shortcut in older:
            older.remove(shortcut)
        if last is not None and last is not shortcut:
            older.insert(0, last)
            del older[KEPT - 1:]
        last = shortcut


def retry(sendbuf: Any, recvbuf: Any, op: Any, algorithm: Any, comm: Any) -> Any:
    """The result from an older shortcut that fits the call (it becomes the first tried), or
    None: the full path must run it."""
    for shortcut in list(older):
        result = shortcut.run(sendbuf, recvbuf, op, algorithm, comm)
        if result is not None:
            keep(shortcut)
            return result
    return None


def forget() -> None:
    """Drop every shortcut: what a call must do changed (the environment was read again, timing
    records began, the watchdog started, a communicator forgot its verified kinds)."""
    global last
    with _lock:
        last = None
        older.clear()
        starters.clear()


_env.on_change(forget)


def start(sendbuf: Any, recvbuf: Any, op: Any, algorithm: Any, comm: Any) -> Request | None:
    """The request of ``iallreduce(sendbuf, recvbuf, ...)`` from the starter that fits the call
    (it becomes the first tried), or None: the full path must start it."""
    for starter in list(starters):
        request = starter.start(sendbuf, recvbuf, op, algorithm, comm)
        if request is not None:
            if starter is not starters[0]:
                keep_starter(starter)
            return request
    return None


def keep_starter(starter: Starter) -> None:
    """Make ``starter`` the first tried; the least recent beyond :data:`KEPT` is dropped."""
    with _lock:
        if starter in starters:
            starters.remove(starter)
        starters.insert(0, starter)
        del starters[KEPT:]


class _Kind:
    """The arguments a shortcut was made for, and how a later call's arrays are matched
    against them (what the full path's checks would accept alike)."""

    __slots__ = ("comm", "op_arg", "algorithm_arg", "dtype", "shape", "strides", "in_place",
                 "ctx", "op", "mpi_type")

    def __init__(self, args: tuple, send: np.ndarray, in_place: bool, ctx: Context, op: Op):
        self.op_arg, self.algorithm_arg, self.comm = args
        self.dtype, self.shape, self.strides = send.dtype, send.shape, send.strides
        self.in_place, self.ctx, self.op = in_place, ctx, op
        try:  # (else mpi4py finds it from the buffer at each call)
            self.mpi_type: Datatype | None = Datatype.fromcode(send.dtype.char) \
                if send.dtype.isnative else None
        except (KeyError, ValueError):
            self.mpi_type = None

    def _specs(self, sendbuf: np.ndarray, recv: np.ndarray) -> tuple:
        """MPI's buffer arguments for these arrays (MPI's own allreduce), kept while they are
        the call's: mpi4py reads a buffer given with its datatype faster than a bare array."""
        def spec(array: np.ndarray) -> Any:
            return array if self.mpi_type is None else [array, self.mpi_type]
        return IN_PLACE if sendbuf is recv or self.op.average else spec(sendbuf), spec(recv)

    def _result_for(self, sendbuf: Any, recvbuf: Any) -> np.ndarray | None:
        """The array a call with these arrays writes its result into (allocated if
        ``recvbuf`` is None), or None if the call is not of this kind."""
        dtype = self.dtype
        if type(sendbuf) is not np.ndarray or sendbuf.dtype is not dtype \
                or sendbuf.shape != (shape := self.shape) \
                or sendbuf.strides != (strides := self.strides):
            return None
        if self.in_place:
            return sendbuf if recvbuf is sendbuf else None
        if recvbuf is None:
            return np.empty_like(sendbuf)
        if type(recvbuf) is not np.ndarray or recvbuf is sendbuf \
                or recvbuf.dtype is not dtype or recvbuf.shape != shape \
                or recvbuf.strides != strides or not recvbuf.flags.writeable \
                or ((sendbuf.base is not None or recvbuf.base is not None)  # owners never overlap
                    and np.may_share_memory(sendbuf, recvbuf)):  # views: the full path decides
            return None
        return recvbuf


class Shortcut(_Kind):
    """Runs a blocking allreduce of one kind; made by the full path after such a call ran."""

    __slots__ = ("flat", "tag_high", "schedule", "rounds", "tmp", "native", "blocks",
                 "name", "post", "mpi_op", "average", "last_send", "last_recv", "bound",
                 "bound_recv", "window", "node", "memory")

    def __init__(self, args: tuple, send: np.ndarray, in_place: bool, ctx: Context,
                 kind_bits: int, op: Op, algorithm: Algorithm, schedule: Any, rounds: tuple):
        super().__init__(args, send, in_place, ctx, op)
        self.flat = send.ndim != 1
        self.tag_high = ctx.tag_base(kind_bits)
        self.native = schedule is None
        self.blocks = algorithm.blocks  # MPI's blocking Allreduce (nothing else is in flight)
        self.post: Any = ctx.comm.Allreduce if self.blocks else ctx.comm.Iallreduce
        self.mpi_op, self.average = op.mpi, op.average
        self.name = algorithm.name  # what runs
        self.schedule = schedule
        self.rounds = rounds
        self.tmp = None if schedule is None else np.empty(schedule.tmp_count, send.dtype)
        self.window = None if schedule is None or not schedule.node_count \
            else ctx.node_window(schedule.node)  # the window the full path just bound
        self.node = None if self.window is None \
            else self.window.view(send.dtype, schedule.node_count)
        self.memory = None if self.window is None else self.window.memory
        # The last call's arrays, and the rounds bound to them: the same arrays again need
        # fewer checks and no new views (views held also keep NumPy from resizing an array).
        self.last_send = self.last_recv = _UNBOUND
        self.bound_recv: Any = None
        self.bound: tuple = ()

    @staticmethod
    def make(args: tuple, send: Any, recv: Any, ctx: Context, kind_bits: int, op: Op,
             algorithm: Algorithm, plan: CachedPlan | None) -> Shortcut | None:
        """A shortcut for calls like this one (``plan``: the cached plan that ran, None for
        native), or None if the fast path cannot run them. Whatever would change that later
        (:func:`forget`'s callers) drops the shortcut, so a call need not look again."""
        if type(send) is not np.ndarray or (plan is None and not algorithm.mpi) \
                or check.every_call or timing.active() is not None or watchdog.running():
            return None
        if plan is None:
            return Shortcut(args, send, recv is send, ctx, kind_bits, op, algorithm, None, ())
        rounds = plan.lowered
        if rounds is None:  # codec steps: only the full engine runs them
            return None
        return Shortcut(args, send, recv is send, ctx, kind_bits, op, algorithm, plan.schedule,
                        rounds)

    def run(self, sendbuf: Any, recvbuf: Any, op: Any, algorithm: Any, comm: Any) -> Any:
        """The result of ``allreduce(sendbuf, recvbuf, op=op, algorithm=algorithm,
        comm=comm)``, or None when the full path must run it."""
        if comm is not self.comm or (op is not self.op_arg and op != self.op_arg) \
                or algorithm != self.algorithm_arg:
            return None
        if self.window is not None and self.window.memory is not self.memory:
            return None  # the window grew since: every rank must use the new one
        dtype = self.dtype
        if sendbuf is self.last_send and recvbuf is self.last_recv:
            # The arrays of the last call (a loop's call, made again), bound already: only
            # what NumPy lets change in place is looked at, never their size (a shape set in
            # place keeps it; one held here cannot be resized). MPI's own allreduce takes the
            # buffers as they are now and refuses a read-only or non-contiguous one itself
            # (then the full path says why): the dtypes are enough.
            if sendbuf.dtype is not dtype or recvbuf.dtype is not dtype:
                return None
            if not self.native and (sendbuf.shape != self.shape or recvbuf.shape != self.shape
                                    or sendbuf.strides != self.strides
                                    or recvbuf.strides != self.strides
                                    or not recvbuf.flags.writeable):  # views bound to the old
                return None
            recv = recvbuf
        else:
            recv = self._result_for(sendbuf, recvbuf)
            if recv is None:
                return None
            if recv is not self.bound_recv or sendbuf is not self.last_send:
                if self.native:
                    self.bound = self._specs(sendbuf, recv)
                else:
                    send, out = (sendbuf.reshape(-1), recv.reshape(-1)) if self.flat \
                        else (sendbuf, recv)
                    self.bound = bind(self.rounds, (send, out, self.tmp, self.node), self.window)
                self.bound_recv = recv
            # What is bound now: a result allocated here is never passed again, so after one
            # no later call has "the arrays of the last call".
            self.last_send, self.last_recv = (sendbuf, recvbuf) if recvbuf is not None \
                else (_UNBOUND, _UNBOUND)
        if inflight.in_flight:  # the progress engine must drive them while this one waits
            return None
        ctx = self.ctx
        if ctx.busy:  # ctx.claim(), inlined: with nothing in flight, only a blocking call
            ctx.claim()  # of another thread's can be here: ConcurrentUseError
        number = next(ctx.calls)  # numbered (and tagged) as on the full path: in step
        ctx.busy = True
        try:
            if self.native:  # NativeExecution, inlined: this path's budget is half a microsecond
                send_spec, recv_spec = self.bound
                try:
                    if self.average:  # (NumPy refuses a read-only recv here, MPI below)
                        np.multiply(sendbuf, 1 / ctx.size, out=recv, casting="unsafe")
                    request = self.post(send_spec, recv_spec, self.mpi_op)
                except (BufferError, ValueError):  # refused, nothing sent: the full path says why
                    ctx.calls = itertools.count(number)
                    self.last_send = self.last_recv = _UNBOUND
                    return None
                if not self.blocks:  # MPI_Allreduce returned done: None
                    for _ in ctx.spins:  # _mpi.complete(request, ctx.spins), inlined
                        if request.Test():
                            break
                    else:
                        request.Wait()
            else:
                tag = self.tag_high + next(ctx.tags) % ctx.sequence_mod
                run_bound(self.bound, ctx.comm, tag, self.op, self.schedule)
        finally:
            ctx.busy = False
        return recv


class Starter(_Kind):
    """Starts a nonblocking allreduce of one kind; made by the full path after such a call
    started. What the full path decided for it (the arguments valid, the algorithm, the kind
    verified by every rank, the plan's options) holds for a call like it, so a start only
    numbers and tags the collective as the full path does, and runs the same plan: a plain one
    lowered and bound to the arrays (:class:`~mpicoll.engine.BoundExecution`; in the node
    window it queues for the window as the full path's executions do), any other by the
    algorithm's own stages. The same messages either way, in the same progress engine."""

    __slots__ = ("algorithm", "kind", "kind_bits", "options", "path", "plan", "window",
                 "bound", "bound_for", "posts")

    def __init__(self, args: tuple, send: np.ndarray, in_place: bool, ctx: Context, op: Op,
                 algorithm: Algorithm, kind: tuple, kind_bits: int, options: Options,
                 path: Transport, plan: CachedPlan | None):
        super().__init__(args, send, in_place, ctx, op)
        self.algorithm, self.kind, self.kind_bits = algorithm, kind, kind_bits
        self.options, self.path = options, path
        self.plan = plan if plan is not None and plan.lowered is not None else None
        self.window = None if self.plan is None or not self.plan.schedule.node_count \
            else ctx.node_window(self.plan.schedule.node)  # the window the full path just bound
        # The rounds of the last start, and what they were bound to (send, result, scratch,
        # window memory): a loop's next start on the same arrays takes them as they are.
        self.bound: tuple = ()
        self.bound_for: tuple = ()
        # MPI's own nonblocking allreduce (``native``), posted here with the buffer arguments
        # kept for the same arrays (``bound``, for ``bound_for``), as NativeExecution posts it.
        self.posts = ctx.comm.Iallreduce if algorithm.mpi and not algorithm.blocks else None

    @staticmethod
    def make(args: tuple, send: Any, recv: Any, ctx: Context, op: Op, algorithm: Algorithm,
             kind: tuple, kind_bits: int, options: Options, path: Transport,
             plan: CachedPlan | None) -> Starter | None:
        """A starter for calls like this one (``plan``: the cached plan that ran, if any), or
        None where each call must take the full path (:func:`forget`'s callers drop starters
        when that changes)."""
        if type(send) is not np.ndarray or check.every_call or timing.active() is not None \
                or watchdog.running():
            return None
        return Starter(args, send, recv is send, ctx, op, algorithm, kind, kind_bits, options,
                       path, plan)

    def start(self, sendbuf: Any, recvbuf: Any, op: Any, algorithm: Any, comm: Any
              ) -> Request | None:
        """The request of ``iallreduce(sendbuf, recvbuf, op=op, algorithm=algorithm,
        comm=comm)``, started, or None when the full path must start it."""
        if comm is not self.comm or (op is not self.op_arg and op != self.op_arg) \
                or algorithm != self.algorithm_arg:
            return None
        recv = self._result_for(sendbuf, recvbuf)
        if recv is None:
            return None
        ctx, chosen, plan = self.ctx, self.algorithm, self.plan
        ctx.claim()  # ConcurrentUseError, as Context.begin
        number = next(ctx.calls)
        tags = ctx.next_tags(chosen.tags, self.kind_bits)
        request = Request(recv, chosen.name, "", self.path.name, None, self.kind, number, ctx)
        ctx.hold(tags, request)
        if self.posts is not None:
            if not self.bound_for or sendbuf is not self.bound_for[0] \
                    or recv is not self.bound_for[1]:
                self.bound, self.bound_for = self._specs(sendbuf, recv), (sendbuf, recv)
            if self.op.average:  # divided into the result first, summed there in place
                np.multiply(sendbuf, 1 / ctx.size, out=recv, casting="unsafe")
            send_spec, recv_spec = self.bound
            posted = self.posts(send_spec, recv_spec, self.op.mpi)
            request.run(iter((NativeExecution.posted(posted, ctx.spins),)))
        elif plan is None:
            call = Call(ctx, sendbuf.reshape(-1), recv.reshape(-1), self.op, self.options, None,
                        None, None, self.path, tags)
            request.run(execution.start(chosen, call))
        else:
            scratch, window = plan.take_scratch(self.dtype), self.window
            memory = None if window is None else window.memory  # (grown since: bound anew)
            last = self.bound_for
            if last and sendbuf is last[0] and recv is last[1] and scratch is last[2] \
                    and memory is last[3]:  # (no other run has this scratch: it is free)
                rounds = self.bound
            else:
                node = None if window is None else \
                    window.view(self.dtype, plan.schedule.node_count)
                rounds = bind(plan.lowered or (), (sendbuf.reshape(-1), recv.reshape(-1),
                                                   scratch[0], node), window)
                self.bound, self.bound_for = rounds, (sendbuf, recv, scratch, memory)
            request.run(iter((BoundExecution(rounds, ctx.comm, tags[0], self.op, plan.schedule,
                                             plan, scratch, window),)))
        inflight.add(request)  # and post its first round now
        return request
