"""The fast path: a call like an earlier one, its checks reduced to comparisons.

Scientific codes call ``allreduce`` with the same kind of arguments every iteration (two dot
products of a conjugate gradient, a tally array). The full path re-validates them, resolves
the algorithm, builds a request, buffers and executions — some 10 µs of Python where native MPI
takes 2. Here a call whose communicator, op, algorithm, codec (none), array type, dtype, shape,
strides and in-place choice match an earlier call runs that call's verified plan, lowered to
flat tuples once (:attr:`mpicoll.context.CachedPlan.lowered`), with nothing built per call.

One :class:`LoweredCall` per kind of call and communicator does it, whatever the form: the
blocking call (:meth:`~LoweredCall.run`, a tight loop), the nonblocking start
(:meth:`~LoweredCall.start`) and the persistent request's stage
(:meth:`~LoweredCall.persistent`). The communicator's :class:`~mpicoll.context.Context` owns
them (``Context.lowered``, most recent first) and retires them when what a call must do
changes: timing records, ``MPICOLL_CHECK=1`` or the watchdog start, the environment is read
again (one ``_env.on_change`` listener), the communicator forgets its verified kinds (whose
fingerprint check the full path then makes again, on every rank alike) or is freed.

Every rank must send the same messages whichever path it takes, so the fast path decides
nothing the full path would decide differently: it takes the collective's number and tag the
same way, and steps aside (returns None) whenever the full path has something to do: for a
blocking call another collective in flight that this thread started or that runs on the same
communicator (the progress engine must drive it while this one waits), arrays that are not plain NumPy or that overlap, a node window grown since.
"""

from __future__ import annotations

import itertools
import time
from typing import Any

import numpy as np
from mpi4py import MPI
from mpi4py.MPI import Datatype

from . import check, context, execution, fault, inflight, timing, watchdog
from .check import say
from .algorithm import Algorithm, Options
from .algorithm.native import NativeExecution, divide_into, own_call, send_argument
from .context import CachedPlan, Context
from .engine import BoundExecution, bind, run_bound
from .execution import Call
from .ops import Op
from .persistent import BoundRounds
from .request import Request
from .transport import Transport
from .trials import Watch

__all__ = ["LoweredCall", "WatchedCall", "LoweredBlocks", "run", "start", "keep", "blocks",
           "KEPT"]

KEPT = 16
"""Lowered calls kept per communicator: a loop that alternates a few kinds of call (a solver's
dot products and norms; bench's methods) keeps them all."""

last_run: LoweredCall | None = None
last_start: LoweredCall | None = None
"""The lowered calls of the last blocking and nonblocking call on any communicator, tried
before looking the communicator's up: a lookup cache, owning nothing (a retired call matches
no communicator), worth ~30 ns of a 1.3 µs call."""

_NEVER: Any = object()
"""The communicator of a call that cannot be run this way (no call passes this object)."""
_UNBOUND: Any = object()
"""A lowered call's last arrays before it has any (no argument is this object)."""


def run(sendbuf: Any, recvbuf: Any, op: Any, algorithm: Any, comm: Any) -> Any:
    """The result of a blocking call from a lowered call of ``comm`` that fits it (it becomes
    the first tried), or None: the full path must run it."""
    return _first_fitting(True, sendbuf, recvbuf, op, algorithm, comm)


def start(sendbuf: Any, recvbuf: Any, op: Any, algorithm: Any, comm: Any) -> Request | None:
    """The request of ``iallreduce(sendbuf, recvbuf, ...)`` from a lowered call of ``comm``
    that fits it (it becomes the first tried), or None: the full path must start it."""
    return _first_fitting(False, sendbuf, recvbuf, op, algorithm, comm)


def _first_fitting(blocking: bool, *args: Any) -> Any:
    """What the first of ``comm``'s lowered calls that fits the call returns (run or started)."""
    ctx = context.known(args[-1])
    for call in () if ctx is None else ctx.lowered:
        result = call.run(*args) if blocking else call.start(*args)
        if result is not None:
            keep(call, blocking)
            return result
    return None


def keep(call: LoweredCall, blocking: bool) -> None:
    """A call the full path just made: kept by its communicator's context, tried first."""
    global last_run, last_start
    call.ctx.keep_lowered(call, KEPT)
    if blocking:
        last_run = call
    else:
        last_start = call


class LoweredCall:
    """One kind of call on one communicator, as the full path decided it after one ran: the
    arguments valid, the algorithm, the kind verified by every rank, the plan and its options.
    Those hold for a later call of the same kind, so it only matches the arrays, numbers and
    tags the collective as the full path does, and runs the same plan: a plain one lowered and
    bound to the arrays, ``native`` posted with buffer arguments kept, any other (a blocking
    one aside) by the algorithm's own stages."""

    __slots__ = ("comm", "runs_on", "op_arg", "algorithm_arg", "key", "dtype", "shape",
                 "strides", "in_place", "ctx", "op", "mpi_type", "algorithm", "kind",
                 "kind_bits", "options", "path", "plan", "schedule", "rounds", "window", "flat",
                 "tag_high", "native", "blocks", "post", "posts", "mpi_op", "average",
                 "tmp", "node", "memory", "last_send", "last_recv", "bound", "bound_recv",
                 "started", "started_for", "stage")

    def __init__(self, args: tuple, send: np.ndarray, in_place: bool, ctx: Context, op: Op,
                 algorithm: Algorithm, kind: tuple, kind_bits: int, options: Options,
                 path: Transport, plan: CachedPlan | None, blocks: bool = True):
        self.op_arg, self.algorithm_arg, self.comm = args
        self.key = (*args, send.dtype, send.shape, send.strides, in_place)
        self.dtype, self.shape, self.strides = send.dtype, send.shape, send.strides
        self.in_place, self.ctx, self.op = in_place, ctx, op
        try:  # (else mpi4py finds it from the buffer at each call)
            self.mpi_type: Datatype | None = Datatype.fromcode(send.dtype.char) \
                if send.dtype.isnative else None
        except (KeyError, ValueError):
            self.mpi_type = None
        self.algorithm, self.kind, self.kind_bits = algorithm, kind, kind_bits
        self.options, self.path = options, path
        rounds = None if plan is None else plan.lowered  # None: codec steps, the engine's
        self.plan = plan if rounds is not None else None
        schedule = None if self.plan is None else self.plan.schedule
        self.schedule: Any = schedule  # (None: MPI's own, or the algorithm's stages)
        self.rounds = rounds or ()
        self.window = None if schedule is None or not schedule.node_count \
            else ctx.node_window(schedule.node)  # the window the full path just bound
        self.native = algorithm.mpi
        # A blocking call runs a lowered plan or MPI's own; any other kind only starts here.
        self.runs_on = self.comm if blocks and (self.native or self.plan is not None) \
            else _NEVER
        self.flat = send.ndim != 1
        self.tag_high = ctx.tag_base(kind_bits)
        self.blocks = algorithm.blocks  # MPI's blocking Allreduce (nothing else is in flight)
        self.post: Any = ctx.comm.Allreduce if self.blocks else ctx.comm.Iallreduce
        self.posts = ctx.comm.Iallreduce if self.native and not self.blocks else None
        self.mpi_op, self.average = op.mpi, op.average
        self.tmp: np.ndarray | None = None  # the blocking run's scratch, made at its first bind
        self.node = None if self.window is None or schedule is None \
            else self.window.view(send.dtype, schedule.node_count)
        self.memory = None if self.window is None else self.window.memory
        # The last blocking call's arrays, and the rounds bound to them: the same arrays again
        # need fewer checks and no new views (views held also keep NumPy from resizing them).
        self.last_send = self.last_recv = _UNBOUND
        self.bound_recv: Any = None
        self.bound: tuple = ()
        # The rounds (or native buffer arguments) of the last start, and what they were bound
        # to (send, result, scratch, window memory): a loop's next start takes them as they are.
        self.started: tuple = ()
        self.started_for: tuple = ()
        self.stage: BoundExecution | None = None  # the stage run on them, reused once done

    @staticmethod
    def make(args: tuple, send: Any, recv: Any, ctx: Context, op: Op, algorithm: Algorithm,
             kind: tuple, kind_bits: int, options: Options, path: Transport,
             plan: CachedPlan | None, blocks: bool = True, watch: Watch | None = None
             ) -> LoweredCall | None:
        """A lowered call for calls like this one (``plan``: the cached plan that ran, if any),
        or None where each call must take the full path (the context retires lowered calls
        when that changes, so a call need not look again). ``blocks``: it may run blocking
        calls (not an ``auto`` call whose size is on trial); ``watch``: ``auto``'s guard of the
        choice it runs (:class:`WatchedCall`)."""
        if type(send) is not np.ndarray or not send.flags.c_contiguous or check.every_call \
                or timing.active() is not None \
                or watchdog.running():
            return None
        if watch is None:
            return LoweredCall(args, send, recv is send, ctx, op, algorithm, kind, kind_bits,
                               options, path, plan, blocks)
        return WatchedCall(watch, args, send, recv is send, ctx, op, algorithm, kind,
                           kind_bits, options, path, plan, blocks)

    def retire(self) -> None:
        """Match no call from now on, and let go of the user's arrays."""
        self.comm = self.runs_on = _NEVER
        self.last_send = self.last_recv = _UNBOUND
        self.bound_recv, self.bound, self.started, self.started_for = None, (), (), ()
        self.stage = None

    def _specs(self, sendbuf: np.ndarray, recv: np.ndarray) -> tuple:
        """MPI's buffer arguments for these arrays (MPI's own allreduce), kept while they are
        the call's: mpi4py reads a buffer given with its datatype faster than a bare array."""
        def spec(array: np.ndarray) -> Any:
            return array if self.mpi_type is None else [array, self.mpi_type]
        return send_argument(spec(sendbuf), sendbuf is recv, self.op), spec(recv)

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

    def run(self, sendbuf: Any, recvbuf: Any, op: Any, algorithm: Any, comm: Any) -> Any:
        """The result of ``allreduce(sendbuf, recvbuf, op=op, algorithm=algorithm,
        comm=comm)``, or None when the full path must run it."""
        if comm is not self.runs_on or (op is not self.op_arg and op != self.op_arg) \
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
                    if self.tmp is None:  # (a kind only started or persistent never needs it)
                        self.tmp = np.empty(self.schedule.tmp_count, self.dtype)
                    self.bound = bind(self.rounds, (send, out, self.tmp, self.node), self.window)
                self.bound_recv = recv
            # What is bound now: a result allocated here is never passed again, so after one
            # no later call has "the arrays of the last call".
            self.last_send, self.last_recv = (sendbuf, recvbuf) if recvbuf is not None \
                else (_UNBOUND, _UNBOUND)
        ctx = self.ctx
        if inflight.in_flight and inflight.concerns(ctx):  # the engine must drive them
            return None
        if ctx.busy:  # ctx.claim(), inlined: with nothing in flight here, only a blocking
            ctx.claim()  # call of another thread's can be: ConcurrentUseError
        number = next(ctx.calls)  # numbered (and tagged) as on the full path: in step
        ctx.busy = True
        try:
            if self.native:  # NativeExecution, inlined: this path's budget is half a microsecond
                send_spec, recv_spec = self.bound
                try:
                    if self.average:  # (NumPy refuses a read-only recv here, MPI below)
                        divide_into(sendbuf, recv, ctx.size)
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
            else:  # ctx.next_tags(1, kind_bits), inlined
                tag = self.tag_high + next(ctx.tags) % ctx.sequence_mod
                run_bound(self.bound, ctx.comm, tag, self.op, self.schedule)
            if ctx.fault_tolerant and (failed := fault.check(ctx.comm)) is not None:
                raise failed
        except MPI.Exception as error:  # (MPI's own: run_bound says what its errors mean)
            failed = fault.failure(error, ctx.comm)
            if failed is None:
                raise
            raise ctx.failed(failed.during(self._describe(number))) from None
        except fault.ProcessFailedError as error:
            raise ctx.failed(error.during(self._describe(number))) from None
        finally:
            ctx.busy = False
        return recv

    def _describe(self, number: int) -> str:
        """The collective numbered ``number``, as a request describes itself."""
        return f"collective #{number}: {say(self.kind)}"

    def start(self, sendbuf: Any, recvbuf: Any, op: Any, algorithm: Any, comm: Any
              ) -> Request | None:
        """The request of ``iallreduce(sendbuf, recvbuf, op=op, algorithm=algorithm,
        comm=comm)``, started, or None when the full path must start it. A request in flight
        does not matter here: every start goes into the progress engine, as on the full path;
        in the node window it queues for the window as the full path's executions do."""
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
        last = self.started_for
        if self.posts is not None:
            if not last or sendbuf is not last[0] or recv is not last[1]:
                self.started, self.started_for = self._specs(sendbuf, recv), (sendbuf, recv)
            if self.average:
                divide_into(sendbuf, recv, ctx.size)
            send_spec, recv_spec = self.started
            posted = self.posts(send_spec, recv_spec, self.mpi_op)
            request.run(iter((NativeExecution.posted(posted, ctx.spins, ctx.comm),)))
        elif plan is None:
            call = Call(ctx, sendbuf.reshape(-1), recv.reshape(-1), self.op, self.options, None,
                        None, None, self.path, tags)
            request.run(execution.start(chosen, call))
        else:
            scratch, window = plan.take_scratch(self.dtype), self.window
            memory = None if window is None else window.memory  # (grown since: bound anew)
            stage = self.stage
            if last and sendbuf is last[0] and recv is last[1] and scratch is last[2] \
                    and memory is last[3] and stage is not None and stage.done:
                stage = stage.again(tags[0], scratch)  # (its scratch, given back: it finished)
            else:
                node = None if window is None else \
                    window.view(self.dtype, plan.schedule.node_count)
                rounds = bind(self.rounds, (sendbuf.reshape(-1), recv.reshape(-1),
                                            scratch[0], node), window)
                self.started, self.started_for = rounds, (sendbuf, recv, scratch, memory)
                stage = self.stage = BoundExecution(rounds, ctx.comm, tags[0], self.op,
                                                    plan.schedule, plan, scratch, window)
            request.run(iter((stage,)))
        inflight.add(request)  # and post its first round now
        return request

    def persistent(self, send: Any, recv: Any, in_place: bool, tag: int
                   ) -> BoundRounds | NativeExecution | None:
        """The stage an ``allreduce_init`` of this kind reruns at every start, bound to its
        (flat) buffers: MPI's own persistent allreduce, the lowered plan on MPI persistent
        requests, or None (its executions start afresh each time)."""
        ctx = self.ctx
        if self.native:
            return NativeExecution.persistent(send, recv, in_place, self.op, ctx.comm, ctx.spins)
        if self.schedule is None:
            return None
        tmp = np.empty(self.schedule.tmp_count, self.dtype)  # the request's own
        return BoundRounds(self.rounds, (send, recv, tmp), ctx.comm, tag, self.op,
                           self.schedule, self.window)


class WatchedCall(LoweredCall):
    """The lowered call of an ``auto`` call whose choice a :class:`~mpicoll.trials.Watch`
    guards: each blocking call is counted, the checks among them timed here (as the trials
    timed theirs: a call through the fast path) and given to the trials, the last of a period
    with the ranks' agreement. When it sends the size back to its trials, auto's lowered calls
    retire (``Context.forget_lowered``), this one too."""

    __slots__ = ("watch",)

    def __init__(self, watch: Watch, *args: Any):
        super().__init__(*args)
        self.watch = watch

    def run(self, sendbuf: Any, recvbuf: Any, op: Any, algorithm: Any, comm: Any) -> Any:
        watch = self.watch
        if not watch.timing:
            result = LoweredCall.run(self, sendbuf, recvbuf, op, algorithm, comm)
            if result is not None:
                watch.passed()
            return result
        began = time.perf_counter()
        result = LoweredCall.run(self, sendbuf, recvbuf, op, algorithm, comm)
        if result is not None:
            self._checked(time.perf_counter() - began)
        return result

    def _checked(self, seconds: float) -> None:
        ctx, watch = self.ctx, self.watch
        try:
            changed = ctx.trials.ran(watch.key, watch.key[1], watch.name, seconds)
        except MPI.Exception as error:
            failed = fault.failure(error, ctx.comm)
            if failed is None:
                raise
            raise ctx.failed(failed).during("checking auto's choice") from None
        if changed:
            ctx.forget_lowered(self.algorithm_arg)


last_blocks: LoweredBlocks | None = None
"""The lowered call of the last blocking allgather, reduce_scatter, bcast or reduce, tried
first (as :data:`last_run`: a lookup cache owning nothing)."""

OFF_ROOT = object()
"""What a lowered reduce returns off its root, where the call's result is None."""


def blocks(which: str, sendbuf: Any, recvbuf: Any, op: Any, algorithm: Any, comm: Any,
           counts: Any, root: int = 0) -> Any:
    """The result of a blocking allgather, reduce_scatter, bcast or reduce (``which``) from a
    lowered call of ``comm`` that fits it (:data:`OFF_ROOT` for a reduce off its root), or
    None: the full path (:mod:`mpicoll.blockwise`, :mod:`mpicoll.rooted`) must run it."""
    global last_blocks
    if last_blocks is not None:
        result = last_blocks.run_blocks(which, sendbuf, recvbuf, op, algorithm, comm, counts,
                                        root)
        if result is not None:
            return result
    ctx = context.known(comm)
    for call in () if ctx is None else ctx.lowered:
        if type(call) is LoweredBlocks:
            result = call.run_blocks(which, sendbuf, recvbuf, op, algorithm, comm, counts, root)
            if result is not None:
                last_blocks = call
                return result
    return None


def _off_root(options: Options, ctx: Context) -> bool:
    """Whether a call of these options is a reduce on a rank other than its root."""
    return options.collective == "reduce" and ctx.rank != options.root


class LoweredBlocks:
    """A blocking allgather, reduce_scatter, bcast or reduce like one the full path just ran,
    on the same arrays (a loop's call): its checks reduced to comparisons, and MPI's own call's
    arguments (or the plan, bound to the arrays) kept, so a call costs what allreduce's fast
    path does. It is numbered, tagged and steps aside as :class:`LoweredCall` does, and kept
    with the communicator's lowered calls (retired with them); an allreduce never fits it.
    A reduce off its root has no result (:data:`OFF_ROOT`), its recvbuf may be None: the
    partial sums go to scratch of its own."""

    __slots__ = ("key", "comm", "algorithm_arg", "which", "send_arg", "recv_arg", "op_arg",
                 "counts_arg", "counts", "root", "result", "dtype", "ctx", "op", "kind",
                 "kind_bits", "tags", "post", "blocks", "bound", "schedule", "watch", "window",
                 "memory")

    def __init__(self, args: tuple, send: np.ndarray, recv: np.ndarray, ctx: Context, op: Op,
                 algorithm: Algorithm, kind: tuple, kind_bits: int, options: Options,
                 plan: CachedPlan | None, watch: Watch | None = None):
        (self.which, self.send_arg, self.recv_arg, self.op_arg, self.algorithm_arg, self.comm,
         self.counts_arg) = args
        self.key = (self.which, id(self.send_arg), id(self.recv_arg), self.op_arg,
                    self.algorithm_arg, self.comm, kind)
        self.counts, self.root, self.watch = options.counts, options.root, watch
        self.result = OFF_ROOT if _off_root(options, ctx) else None
        self.dtype, self.ctx, self.op, self.kind, self.kind_bits = recv.dtype, ctx, op, kind, \
            kind_bits
        self.tags = algorithm.tags
        self.post: Any = None
        self.bound: tuple = ()
        self.schedule: Any = None
        self.window = self.memory = None
        self.blocks = algorithm.blocks  # MPI's blocking call (nothing else is in flight)
        if algorithm.mpi:  # (its buffers with their datatype: mpi4py reads those faster)
            post, args = own_call(ctx.comm, self.which, send, recv, op, options.counts,
                                  "" if self.blocks else "I", options.root)
            try:
                mpi_type = Datatype.fromcode(recv.dtype.char) if recv.dtype.isnative else None
            except (KeyError, ValueError):
                mpi_type = None
            if mpi_type is not None and options.counts is None:
                args = tuple([a, mpi_type] if isinstance(a, np.ndarray) else a for a in args)
            self.post = post, args
        elif plan is not None and plan.lowered is not None:
            schedule = self.schedule = plan.schedule
            tmp = np.empty(schedule.tmp_count, recv.dtype)
            node = None
            if schedule.node_count:  # the window the full path just bound
                self.window = ctx.node_window(schedule.node)
                self.memory = self.window.memory
                node = self.window.view(recv.dtype, schedule.node_count)
            self.bound = bind(plan.lowered, (send, recv, tmp, node), self.window)
        else:
            self.comm = _NEVER

    @staticmethod
    def make(args: tuple, send: Any, recv: Any, ctx: Context, op: Op, algorithm: Algorithm,
             kind: tuple, kind_bits: int, options: Options, plan: CachedPlan | None,
             watch: Watch | None = None) -> LoweredBlocks | None:
        """A lowered call for later calls with these arguments, or None where each call must
        take the full path (the arrays it allocated, device memory, records, checks).
        ``watch``: ``auto``'s guard of the choice it runs; it counts the calls, and the full
        path times its checks."""
        if args[2] is None and not _off_root(options, ctx) or type(recv) is not np.ndarray \
                or type(send) is not np.ndarray \
                or check.every_call or timing.active() is not None or watchdog.running() \
                or (plan is None and not algorithm.mpi):
            return None
        return LoweredBlocks(args, send, recv, ctx, op, algorithm, kind, kind_bits, options,
                             plan, watch)

    def run(self, *args: Any) -> None:
        """Not an allreduce: none fits."""
        return None

    start = run

    def retire(self) -> None:
        """Match no call from now on, and let go of the user's arrays."""
        global last_blocks
        if last_blocks is self:
            last_blocks = None
        self.comm = _NEVER
        self.send_arg = self.recv_arg = _UNBOUND
        self.post, self.bound = None, ()

    def run_blocks(self, which: str, sendbuf: Any, recvbuf: Any, op: Any, algorithm: Any,
                   comm: Any, counts: Any, root: int = 0) -> Any:
        """``recvbuf``, the result of the call (:data:`OFF_ROOT`: a reduce's off its root), or
        None when the full path must run it."""
        if sendbuf is not self.send_arg or recvbuf is not self.recv_arg or comm is not self.comm \
                or which is not self.which and which != self.which \
                or algorithm is not self.algorithm_arg and algorithm != self.algorithm_arg \
                or (op is not self.op_arg and op != self.op_arg) \
                or (counts is not self.counts_arg and (counts is None or self.counts_arg is None
                                                       or tuple(counts) != self.counts)) \
                or root != self.root \
                or (recvbuf is not None and recvbuf.dtype is not self.dtype) \
                or (sendbuf is not MPI.IN_PLACE and sendbuf.dtype is not self.dtype):
            return None
        if self.window is not None and self.window.memory is not self.memory:
            return None  # the window grew since: every rank must use the new one
        ctx, watch = self.ctx, self.watch
        if inflight.in_flight and inflight.concerns(ctx):  # the engine must drive them
            return None
        if watch is not None and watch.timing:  # a check of auto's choice: the full path's
            return None
        if ctx.busy:  # ctx.claim(), as LoweredCall.run inlines it
            ctx.claim()
        number = next(ctx.calls)  # numbered and tagged as on the full path: in step
        ctx.busy = True
        try:
            if self.post is not None:  # (MPI's own: no tags of mpicoll's)
                post, args = self.post
                request = post(*args)
                if not self.blocks:  # (MPI's blocking call returned done: None)
                    for _ in ctx.spins:  # _mpi.complete(request, ctx.spins), inlined
                        if request.Test():
                            break
                    else:
                        request.Wait()
            else:
                run_bound(self.bound, ctx.comm, ctx.next_tags(self.tags, self.kind_bits)[0],
                          self.op, self.schedule)
            if ctx.fault_tolerant and (failed := fault.check(ctx.comm)) is not None:
                raise failed
        except MPI.Exception as error:
            failed = fault.failure(error, ctx.comm)
            if failed is None:
                raise
            raise ctx.failed(failed.during(f"collective #{number}: {say(self.kind)}")) from None
        except fault.ProcessFailedError as error:
            raise ctx.failed(error.during(f"collective #{number}: {say(self.kind)}")) from None
        finally:
            ctx.busy = False
        if watch is not None:
            watch.passed()
        return recvbuf if self.result is None else self.result
