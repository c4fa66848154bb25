"""The public calls: validate the arguments, resolve the algorithm, dispatch it."""

from __future__ import annotations

import contextlib
import functools
import time
from typing import Any, NamedTuple, TypeAlias, Union, cast

import numpy as np
from mpi4py import MPI

from . import _env, check, codecs, collective, context, fastpath, fault, inflight, ops, timing, \
    transport, watchdog
from . import algorithm as algorithms_
from ._array import MIXED, Array, address, array_module, flat, writeable
from . import builtin, execution  # noqa: F401  (importing builtin registers the algorithms)
from .algorithm import Algorithm, Options, native, registry, select
from .execution import Call
from .algorithm.native import NativeExecution
from .persistent import BoundRounds, PersistentRequest
from .request import Request

__all__ = ["allreduce", "iallreduce", "allreduce_init", "choose_algorithm", "trials_left",
           "algorithms_available", "check_codec", "reload_environment"]

AnyCodec: TypeAlias = Union[codecs.Codec, codecs.ErrorFeedback]
CodecArg: TypeAlias = Union[str, codecs.Codec, codecs.ErrorFeedback, None]
OpArg: TypeAlias = Union[str, MPI.Op, ops.Op]


def reload_environment() -> None:
    """Read the ``MPICOLL_*`` variables again: calls read them once, at the first call (and
    ``MPICOLL_TIMEOUT`` when the first communicator is used), not on every call."""
    _env.reload()  # (which drops the fast path's shortcuts)
    check.refresh()
    watchdog.refresh()


def algorithms_available(collective: str = "allreduce") -> tuple[str, ...]:
    """Names ``algorithm=`` accepts for calls of ``collective`` (:mod:`mpicoll.collective`:
    "allreduce", "allgather", "reduce_scatter", ...; those mpicoll does not run yet: none)."""
    names = algorithms_.names(collective=collective)
    return names + (registry.AUTO,) if names else ()


def allreduce(sendbuf: Array, recvbuf: Array | None = None, *, op: OpArg = "sum",
              algorithm: str = "auto", comm: MPI.Intracomm | None = None,
              codec: CodecArg = None) -> Array:
    """Reduce ``sendbuf`` over every rank of ``comm`` and return the result, the same bits on all.

    Args:
        sendbuf: contiguous NumPy or CuPy array, any shape, C or Fortran order (its elements
            in memory order are the message); never modified unless ``recvbuf is sendbuf``.
            CuPy arrays reach MPI directly when it is CUDA-aware, else through pinned host
            memory (``mpicoll.transport``); the result stays on the device.
        recvbuf: array of as many elements, of the same dtype and kind (host or device), for
            the result, in its own shape (allocated like ``sendbuf`` when None); the same
            memory as ``sendbuf`` reduces in place.
        op: "sum", "prod", "min", "max", "avg" or the matching ``mpi4py.MPI.Op``; or a
            commutative user-defined ``MPI.Op`` (host arrays; applied by ``MPI_Reduce_local``).
        algorithm: one of ``algorithms()``; "auto" picks by size and node layout (the
            ``MPICOLL_ALGORITHM`` environment variable overrides "auto"; "native" is the MPI
            library's own).
        comm: any intra-communicator; ``MPI.COMM_WORLD`` when None.
        codec: compress what travels: a name or spec from ``codecs.available()`` ("int8",
            "int8+ef"), a codec from ``codecs.get``, or ``codecs.ErrorFeedback(codec)``.
            Float16/32/64 sums and averages only; ``MPICOLL_CODEC`` sets one when None.

    A call like the previous blocking one (same comm, op, algorithm, no codec, NumPy arrays of
    the same dtype, shape and strides) takes a fast path: see :mod:`mpicoll.fastpath`.
    """
    if codec is None:
        shortcut = fastpath.last_run
        if shortcut is not None:
            result = shortcut.run(sendbuf, recvbuf, op, algorithm, comm)
            if result is not None:
                return result
        result = fastpath.run(sendbuf, recvbuf, op, algorithm, comm)
        if result is not None:
            return result
        if algorithm == registry.AUTO:
            trial = _trial(sendbuf, recvbuf, op, comm)
            if trial is not None:
                return _tried(trial, sendbuf, recvbuf, op, comm)
    request, lowered, p = _start(sendbuf, recvbuf, op, algorithm, comm, codec, blocking=True)
    result = request.wait()
    if p.carried:
        _checked_now(p)  # its barrier had the verdict (or it had none: now)
    if lowered is not None:
        fastpath.keep(lowered, blocking=True)
    return result


def _trial(sendbuf: Any, recvbuf: Any, op: Any, comm: Any, counted: bool = True
           ) -> tuple[context.Context, str, tuple, tuple[str, ...]] | None:
    """A blocking ``auto`` call that is one of its trials, or a check of its kept choice
    (:mod:`mpicoll.trials`): the communicator's context, the algorithm it runs, the key and the
    shortlist; else None. ``counted``: the call is about to run (a guard counts it)."""
    send, _, op_, asked, comm_, codec = _checked(sendbuf, recvbuf, op, registry.AUTO, comm, None)
    ctx = context.of(comm_)
    chosen = _resolve(asked, send, transport.choose(send), ctx, codec, op_, blocking=True,
                      counted=counted)
    return None if isinstance(chosen, Algorithm) else (ctx, chosen[0], *chosen[1])


def _tried(trial: tuple[context.Context, str, tuple, tuple[str, ...]], sendbuf: Any,
           recvbuf: Any, op: Any, comm: Any) -> Any:
    """Run the trial as a call of the algorithm it tries (the fast path from its second call,
    as after the choice), timed; after the last, the ranks agree on the choice."""
    ctx, name, key, shortlist = trial
    try:
        if key[0] <= select.OWN_UP_TO:  # all its trials now, on scratch arrays, then the call
            _sampled(ctx, key, shortlist, sendbuf, op, comm)
            ctx.forget_lowered(registry.AUTO)  # (made on trial: for nonblocking calls)
            return allreduce(sendbuf, recvbuf, op=op, comm=comm)
        ctx.in_step()  # (mpicoll.trials: on links the call before has drained)
        began = time.perf_counter()
        result = allreduce(sendbuf, recvbuf, op=op, algorithm=name, comm=comm)
        if ctx.trials.ran(key, shortlist, name, time.perf_counter() - began):
            ctx.forget_lowered(registry.AUTO)  # of the old choice (or made on trial)
        return result
    except MPI.Exception as error:
        failed = fault.failure(error, ctx.comm)
        if failed is None:
            raise
        raise ctx.failed(failed).during("agreeing on auto's choice") from None


def _sampled(ctx: context.Context, key: tuple, shortlist: tuple[str, ...], sendbuf: Any,
             op: Any, comm: Any) -> None:
    """Trials of a small size: a call of microseconds timed alone, between Python, ranks the
    candidates unlike the same calls back to back, so each trial here is the mean of
    :data:`SAMPLE` calls back to back on scratch arrays like ``sendbuf`` (every rank makes the
    same calls: collectives like any other)."""
    xp = array_module(sendbuf)
    scratch = xp.zeros_like(sendbuf)
    out = xp.empty_like(scratch)
    recorded = timing.active() is not None  # (the samples are not the program's calls: kept
    with timing.recording() if recorded else contextlib.nullcontext():  # out of its records)
        while ctx.trials.left(key, shortlist):
            name, _ = ctx.trials.next(key, shortlist)
            began = time.perf_counter()
            for _ in range(SAMPLE):
                allreduce(scratch, out, op=op, algorithm=name, comm=comm)
            ctx.trials.ran(key, shortlist, name, (time.perf_counter() - began) / SAMPLE)


SAMPLE = 16
"""Calls per trial of a small size (:func:`_sampled`): some 50-100 µs of calls of 8 B."""


def iallreduce(sendbuf: Array, recvbuf: Array | None = None, *, op: OpArg = "sum",
               algorithm: str = "auto", comm: MPI.Intracomm | None = None,
               codec: CodecArg = None) -> Request:
    """Start the allreduce ``allreduce`` describes and return a :class:`Request` for it.

    A call like an earlier nonblocking one (as for ``allreduce``'s fast path) skips the
    checks and the choices that call made: see :class:`mpicoll.fastpath.LoweredCall`."""
    if codec is None:
        lowered = fastpath.last_start
        request = None if lowered is None else lowered.start(sendbuf, recvbuf, op, algorithm, comm)
        if request is None:
            request = fastpath.start(sendbuf, recvbuf, op, algorithm, comm)
        if request is not None:
            return request
    request, lowered, _ = _start(sendbuf, recvbuf, op, algorithm, comm, codec)
    if lowered is not None:
        fastpath.keep(lowered, blocking=False)
    return request


def allreduce_init(sendbuf: Array, recvbuf: Array | None = None, *, op: OpArg = "sum",
                   algorithm: str = "auto", comm: MPI.Intracomm | None = None,
                   codec: CodecArg = None) -> PersistentRequest:
    """A persistent allreduce of these buffers (MPI-4's ``MPI_Allreduce_init``): ``start()``,
    then ``wait()`` or ``test()``, as often as wanted; ``free()`` or a ``with`` block at the end.

    Collective: every rank calls it, and later ``start()``, in the same order. The arguments are
    those of ``allreduce``; ``sendbuf`` is read and ``recvbuf`` written at every start.
    """
    prepared = _prepare(sendbuf, recvbuf, op, algorithm, comm, codec, record=False)
    _checked_now(prepared)
    send, recv, op_, chosen, ctx, path, call = prepared.send, prepared.recv, prepared.op, \
        prepared.chosen, prepared.ctx, prepared.path, prepared.call
    bound: BoundRounds | NativeExecution | None = None
    if prepared.codec is None and path.name == "host":
        lowered = fastpath.LoweredCall((op, algorithm, comm), send, recv is send, ctx, op_,
                                       chosen, prepared.kind, prepared.bits, call.options, path,
                                       _plain_plan(prepared))
        bound = lowered.persistent(call.send, call.recv, native.in_place(call.send, call.recv),
                                   call.tags[0] if call.tags else 0)
    return PersistentRequest(recv, chosen.name, prepared.spec, path.name, prepared.kind,
                             prepared.number, ctx, bound, lambda: execution.start(chosen, call),
                             call.tags)


class _Prepared(NamedTuple):
    """A call checked, resolved, numbered, fingerprint-checked and tagged: ready to start."""

    send: Array
    recv: Array
    op: ops.Op
    chosen: Algorithm
    ctx: context.Context
    path: transport.Transport
    codec: AnyCodec | None
    spec: str
    kind: tuple
    number: int
    bits: int
    call: Call
    checking: check.Channel | None  # the fingerprint check in flight there
    carried: bool                 # the check is the first barrier's (Call.fingerprint)


def _prepare(sendbuf: Any, recvbuf: Any, op: Any, algorithm: Any, comm: Any, codec: Any,
             record: bool = True, blocking: bool = False) -> _Prepared:
    """``blocking``: a blocking call, which lets a one-node algorithm's first barrier carry its
    fingerprint check (a nonblocking one's would post it in an order other calls could pass)."""
    send, recv, op_, asked, comm_, codec_ = _checked(sendbuf, recvbuf, op, algorithm, comm, codec)
    ctx = context.of(comm_)
    path = transport.choose(send)
    chosen = cast(Algorithm, _resolve(asked, send, path, ctx, codec_, op_))
    inner, feedback = (codec_, None) if not isinstance(codec_, codecs.ErrorFeedback) \
        else (codec_.codec, codec_)
    spec = "" if codec_ is None else codecs.spec(codec_)
    # What every rank must agree on; checked before anything moves on the first call of each
    # kind (every call with MPICOLL_CHECK=1), and hashed into every message tag.
    rest = (send.dtype, op_.name, chosen.name,
            spec if inner is None else f"{spec}({_params(inner)})", collective.ALLREDUCE.name)
    kind = (send.size, *rest)
    carry = blocking and chosen.one_node and chosen.plan is not None
    # (ConcurrentUseError: another thread's collectives in flight)
    number, bits, checking = ctx.begin_checked(kind, carry, blocking, blocking and chosen.blocks)
    recorder = timing.active() if record else None
    record_ = None if recorder is None else recorder.start(
        rank=ctx.rank, ranks=ctx.size, nodes=len(ctx.layout.nodes), op=op_.name,
        algorithm=chosen.name, codec=spec, dtype=_dtype_name(send.dtype),
        count=send.size, nbytes=send.nbytes, transport=path.name)
    # Tags are taken now, in call order, identical on every rank: a later stage that took its
    # tag when it starts would race with the calls other ranks made meanwhile.
    call = Call(ctx, flat(send), flat(recv), op_, _options(send.dtype), inner,
                feedback, record_, path, ctx.next_tags(chosen.tags, bits),
                checking, blocking)
    return _Prepared(send, recv, op_, chosen, ctx, path, codec_, spec, kind, number, bits, call,
                     checking, carry and checking is not None)


def _checked_now(p: _Prepared) -> None:
    """Finish the call's fingerprint check, if it has one: before anything moves (its kind is
    remembered, if new, once every rank agreed)."""
    if p.checking is not None:
        p.checking.finish()


def _start(sendbuf: Any, recvbuf: Any, op: Any, algorithm: Any, comm: Any, codec: Any,
           blocking: bool = False) -> tuple[Request, Any, _Prepared]:
    """Start the call; also a lowered call for calls like it, if any (``fastpath.LoweredCall``).
    A check the call's barrier carries (``carried``) has its verdict when the request
    completes."""
    p = _prepare(sendbuf, recvbuf, op, algorithm, comm, codec, blocking=blocking)
    request = Request(p.recv, p.chosen.name, p.spec, p.path.name, p.call.record, p.kind,
                      p.number, p.ctx)
    p.ctx.hold(p.call.tags, request)
    try:
        request.run(execution.start(p.chosen, p.call))  # plans, binds the buffers; posts nothing yet
    finally:
        if not p.carried:  # (a carried one is this rank's barrier: not passed if it failed)
            _checked_now(p)  # every rank started the check: every rank completes it
    inflight.add(request)  # and post its first round now
    lowered: fastpath.LoweredCall | None = None
    if p.codec is None and p.call.record is None and p.path.name == "host":
        watch, blocks = None, True
        if algorithm == registry.AUTO and _env.settings().algorithm == registry.AUTO:
            key = _trial_key(p.send, p.path, p.ctx, None, p.op)
            if key is not None:  # (on trial: a blocking call must reach its trials)
                blocks, watch = key in p.ctx.trials.kept, p.ctx.trials.watches.get(key)
        lowered = fastpath.LoweredCall.make((op, algorithm, comm), sendbuf, p.recv, p.ctx, p.op,
                                            p.chosen, p.kind, p.bits, p.call.options, p.path,
                                            _plain_plan(p), blocks, watch)
    return request, lowered, p


def _plain_plan(p: _Prepared) -> context.CachedPlan | None:
    """The cached plan of a call without a codec, None for an algorithm without one (native):
    what the fast path and persistent requests bind."""
    if p.chosen.plan is None:
        return None
    return p.ctx.cached_plan(p.chosen, p.send.size, p.call.options, None, False, p.op.average)


def choose_algorithm(sendbuf: Array, *, op: OpArg = "sum", algorithm: str = "auto",
                     comm: MPI.Intracomm | None = None,
                     codec: CodecArg = None) -> str:
    """Name the algorithm ``allreduce`` would run for these arguments (collective on first use)."""
    send, _, op_, asked, comm_, codec_ = _checked(sendbuf, None, op, algorithm, comm, codec)
    chosen = _resolve(asked, send, transport.choose(send), context.of(comm_), codec_, op_)
    return chosen.name if isinstance(chosen, Algorithm) else chosen[0]


def trials_left(sendbuf: Array, *, op: OpArg = "sum", comm: MPI.Intracomm | None = None) -> int:
    """How many more blocking ``auto`` calls like this one (no codec) are trials of its
    shortlist (:mod:`mpicoll.trials`): a benchmark of the steady state warms up through them.
    The same on every rank."""
    trial = _trial(sendbuf, None, op, comm, counted=False)
    if trial is None:
        return 0
    ctx, _, key, shortlist = trial
    return 1 if key[0] <= select.OWN_UP_TO else ctx.trials.left(key, shortlist)  # (_sampled)


def check_codec(codec: CodecArg, dtype: np.dtype,
                op: ops.Op, algorithm: str) -> AnyCodec | None:
    """The codec a call with these arguments uses (None: none), or a clear error if it cannot.

    Without one, ``MPICOLL_CODEC`` applies where a codec can: floating sums and averages on an
    algorithm that compresses.
    """
    return _codec_for(codec, dtype, op, None if algorithm == registry.AUTO else registry.get(algorithm))


def codec_for_floats(codec: CodecArg, dtype: np.dtype) -> AnyCodec | None:
    """``codec`` as an object (a name parsed; None for none), checked to be one and to have
    float data to compress: what every collective that takes a codec checks first."""
    if isinstance(codec, str):
        codec = codecs.parse(codec)
    if codec is None:
        return None
    if not isinstance(codec, (codecs.Codec, codecs.ErrorFeedback)):
        raise TypeError(f"codec must be a name, a codec or an ErrorFeedback, not {type(codec).__name__}")
    if dtype not in (np.float16, np.float32, np.float64):
        raise TypeError(f"codecs compress float16/32/64 arrays, not {dtype}")
    return codec


def _codec_for(codec: CodecArg, dtype: np.dtype, op: ops.Op, asked: Algorithm | None
               ) -> AnyCodec | None:
    """:func:`check_codec` for ``asked`` (None: auto)."""
    if codec is None:
        return _env_codec(dtype, op, asked)
    codec = codec_for_floats(codec, dtype)
    if codec is None:
        return None
    if op.name not in ("sum", "avg"):
        raise ValueError(f"codecs compress sums and averages, not {op.name!r}")
    kind = select.codec_kind(codec)
    if asked is not None and not select.accepts(asked, kind):
        able = [a.name for a in algorithms_.registered() if select.accepts(a, kind)]
        raise ValueError(f"{asked.name} does not compress {kind} codecs: use "
                         f"{', '.join(able + [registry.AUTO])}")
    return codec


def _resolve(asked: Algorithm | None, send: Array, path: transport.Transport,
             ctx: context.Context, codec: AnyCodec | None, op: ops.Op, blocking: bool = False,
             counted: bool = False) -> Algorithm | tuple[str, tuple]:
    """The algorithm, or for a blocking ``auto`` call still on trial (:mod:`mpicoll.trials`),
    or a timed check of its kept choice, the name it runs and (key, shortlist) for
    ``Trials.ran``. ``counted``: a blocking call about to run (its size class's guard counts
    it)."""
    if asked is not None and codec is None:
        return asked  # what was asked for, as it was checked
    key = _trial_key(send, path, ctx, codec, op)
    if key is not None:
        tried = key[1]
        name, trial = ctx.trials.next(key, tried)
        if trial and blocking or counted and ctx.trials.counted(key):
            return name, (key, tried)
        if not trial:
            return registry.get(name)
    mpi_can = path.name != "staged" and native.exact(send.dtype)
    return select.resolve(asked, send.nbytes, ctx.layout, select.codec_kind(codec),
                          op.commutative, send.dtype.itemsize, mpi_can)


def _trial_key(send: Array, path: transport.Transport, ctx: context.Context,
               codec: AnyCodec | None, op: ops.Op) -> tuple | None:
    """The key of an ``auto`` call's trials (size class, shortlist), or None where ``auto``
    tries nothing (a codec, one rank, ``MPICOLL_AUTO=model``, a shortlist of one)."""
    if codec is not None or ctx.size == 1 or _env.settings().auto == "model":
        return None
    mpi_can = path.name != "staged" and native.exact(send.dtype)
    tried = select.shortlist(send.nbytes, ctx.layout, op.commutative, send.dtype.itemsize,
                             mpi_can)
    return None if len(tried) == 1 else (select.size_class(send.nbytes), tried)


@functools.lru_cache(maxsize=None)
def _dtype_name(dtype: np.dtype) -> str:
    return dtype.name  # computed anew by NumPy on each access (~2 µs): too slow per call


def _params(codec: codecs.Codec) -> str:
    """A codec's parameters, as the fingerprint compares them."""
    return ", ".join(f"{key}={value!r}" for key, value in sorted(codec.get_config().items())
                     if key != "name")


def _options(dtype: np.dtype) -> Options:
    return Options(_env.settings().segment_bytes, dtype.str)


def _env_codec(dtype: np.dtype, op: ops.Op, asked: Algorithm | None) -> AnyCodec | None:
    """``MPICOLL_CODEC``'s codec where a codec can apply, else None."""
    spec = _env.settings().codec
    if not spec or dtype.kind != "f" or dtype.itemsize > 8 or op.name not in ("sum", "avg"):
        return None
    codec = _parsed_env_codec(spec)
    if asked is not None and not select.accepts(asked, select.codec_kind(codec)):
        return None
    return codec


@functools.lru_cache(maxsize=8)
def _parsed_env_codec(spec: str) -> AnyCodec | None:
    """One codec per spec given in MPICOLL_CODEC, kept, so stateful codecs keep their state."""
    return codecs.parse(spec)


def _checked(sendbuf: Any, recvbuf: Any, op: Any, algorithm: Any, comm: Any, codec: Any
             ) -> tuple[Array, Array, ops.Op, Algorithm | None, MPI.Intracomm, AnyCodec | None]:
    """Validate every argument locally, before any message is sent; the algorithm asked for
    comes back as None for "auto"."""
    xp = array_module(sendbuf)
    send = _array("sendbuf", sendbuf, xp)
    op = ops.resolve(op)
    ops.check_dtype(send.dtype, op)
    if xp is not np and op.name == "user":
        raise TypeError("a user-defined MPI.Op reduces host arrays only (MPI_Reduce_local)")
    if recvbuf is None:
        recv = xp.empty_like(send)
    else:
        recv = _array("recvbuf", recvbuf, xp)
        if recv.size != send.size or recv.dtype != send.dtype:  # (shapes may differ, as in MPI)
            raise ValueError(f"recvbuf holds {recv.size} {recv.dtype}, sendbuf {send.size} "
                             f"{send.dtype}: they must hold as many elements of one dtype")
        if not writeable(recv):
            raise ValueError("recvbuf is read-only")
        if recv is not sendbuf and xp.may_share_memory(send, recv) and not _same_memory(send, recv):
            raise ValueError("recvbuf overlaps sendbuf; pass the same array for in place")
    if not isinstance(algorithm, str):
        raise TypeError(f"algorithm must be a name, not {type(algorithm).__name__}")
    if algorithm == registry.AUTO:
        algorithm = _env.settings().algorithm
    asked = None if algorithm == registry.AUTO else registry.get(algorithm)
    if asked is not None and asked.needs_commutative and not op.commutative:
        raise ValueError(f"{algorithm} reorders operands: op {op.name!r} is not commutative")
    comm = communicator(comm)
    codec = _codec_for(codec, send.dtype, op, asked)
    if codec is None and asked is not None and not asked.plain:
        raise ValueError(f"{algorithm} runs only with a codec of a kind it compresses "
                         f"({', '.join(sorted(asked.compresses))})")
    return send, recv, op, asked, comm, codec


def communicator(comm: Any) -> MPI.Intracomm:
    """The communicator a call's ``comm`` names (``MPI.COMM_WORLD`` for None), or a clear
    error."""
    if comm is None:
        return MPI.COMM_WORLD
    if comm == MPI.COMM_NULL:  # what Split with MPI.UNDEFINED or Create_group gives a non-member
        raise TypeError("comm is MPI.COMM_NULL: this rank is not in the communicator; call "
                        "collectives on it only from its members")
    if not isinstance(comm, MPI.Intracomm):
        raise TypeError(f"comm must be an mpi4py intra-communicator, not {comm!r}")
    return comm


def _array(name: str, buf: Any, xp: Any) -> Array:
    """``buf`` if it is a contiguous array of module ``xp`` (the send buffer's): any shape, C
    or Fortran order (its elements in memory order are the message, as for MPI)."""
    if array_module(buf) is not xp:
        raise TypeError(f"sendbuf and recvbuf: {MIXED}")
    if not isinstance(buf, xp.ndarray):
        raise TypeError(f"{name} must be a NumPy or CuPy array, not {type(buf).__name__}")
    if not (buf.flags.c_contiguous or buf.flags.f_contiguous):
        raise ValueError(f"{name} is not contiguous; pass numpy.ascontiguousarray({name})")
    return buf


def _same_memory(a: Array, b: Array) -> bool:
    return address(a) == address(b) and a.nbytes == b.nbytes
