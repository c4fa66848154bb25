"""The public calls: validate the arguments, resolve the algorithm, dispatch it."""

from __future__ import annotations

import functools
import os
from typing import Any, TypeAlias, Union

import numpy as np
from mpi4py import MPI

from . import _env, check, codecs, context, inflight, ops, timing, transport
from . import algorithm as algorithms_
from ._array import MIXED, Array, address, array_module, writeable
from .algorithm import Algorithm, Call, Options, registry, select
from .request import Request

__all__ = ["allreduce", "iallreduce", "choose_algorithm", "algorithms_available", "check_codec"]

ALGORITHM_ENV = "MPICOLL_ALGORITHM"
CODEC_ENV = "MPICOLL_CODEC"
SEGMENT_ENV = "MPICOLL_TREE_SEGMENT"
DEFAULT_SEGMENT_BYTES = 256 * 1024
AnyCodec: TypeAlias = Union[codecs.Codec, codecs.ErrorFeedback]
CodecArg: TypeAlias = Union[str, codecs.Codec, codecs.ErrorFeedback, None]
OpArg: TypeAlias = Union[str, MPI.Op, ops.Op]


def algorithms_available() -> tuple[str, ...]:
    """Names ``algorithm=`` accepts."""
    return algorithms_.names() + (registry.AUTO,)


def allreduce(sendbuf: Array, recvbuf: Array | None = None, *, op: OpArg = "sum",
              algorithm: str = "auto", comm: MPI.Intracomm | None = None,
              codec: CodecArg = None) -> Array:
    """Reduce ``sendbuf`` over every rank of ``comm`` and return the result, the same bits on all.

    Args:
        sendbuf: contiguous NumPy or CuPy array; never modified unless ``recvbuf is sendbuf``.
            CuPy arrays reach MPI directly when it is CUDA-aware, else through pinned host
            memory (``mpicoll.transport``); the result stays on the device.
        recvbuf: array of the same shape, dtype and kind (host or device) for the result
            (allocated when None); ``recvbuf is sendbuf`` reduces in place.
        op: "sum", "prod", "min", "max", "avg" or the matching ``mpi4py.MPI.Op``.
        algorithm: one of ``algorithms()``; "auto" picks by size and node layout (the
            ``MPICOLL_ALGORITHM`` environment variable overrides "auto").
        comm: any intra-communicator; ``MPI.COMM_WORLD`` when None.
        codec: compress what travels: a name or spec from ``codecs.available()`` ("int8",
            "int8+ef"), a codec from ``codecs.get``, or ``codecs.ErrorFeedback(codec)``.
            Float16/32/64 sums and averages only; ``MPICOLL_CODEC`` sets one when None.
    """
    return iallreduce(sendbuf, recvbuf, op=op, algorithm=algorithm, comm=comm, codec=codec).wait()


def iallreduce(sendbuf: Array, recvbuf: Array | None = None, *, op: OpArg = "sum",
               algorithm: str = "auto", comm: MPI.Intracomm | None = None,
               codec: CodecArg = None) -> Request:
    """Start the allreduce ``allreduce`` describes and return a :class:`Request` for it."""
    send, recv, op_, asked, comm_, codec_ = _checked(sendbuf, recvbuf, op, algorithm, comm, codec)
    ctx = context.of(comm_)
    chosen = _resolve(asked, send.nbytes, ctx, codec_, op_)
    path = transport.choose(send)
    inner, feedback = (codec_, None) if not isinstance(codec_, codecs.ErrorFeedback) \
        else (codec_.codec, codec_)
    spec = "" if codec_ is None else codecs.spec(codec_)
    # What every rank must agree on; checked before anything moves on the first call of each
    # kind (every call with MPICOLL_CHECK=1), and hashed into every message tag.
    kind = (send.size, send.dtype, op_.name, chosen.name,
            spec if inner is None else f"{spec}({_params(inner)})")
    number, known = ctx.begin(kind)  # ConcurrentUseError: another thread's collectives in flight
    bits = check.tag_bits(kind) if known is None else known
    if known is None or check.every_call:
        check.verify(ctx, number, kind, bits)
        if known is None:
            ctx.remember(kind, bits)
    recorder = timing.active()
    record = None if recorder is None else recorder.start(
        rank=ctx.rank, ranks=ctx.size, nodes=len(ctx.layout.nodes), op=op_.name,
        algorithm=chosen.name, codec=spec, dtype=_dtype_name(send.dtype),
        count=send.size, nbytes=send.nbytes, transport=path.name)
    request = Request(recv, chosen.name, spec, path.name, record, kind, number, ctx)
    # Tags are taken now, in call order, identical on every rank: a later stage that took its
    # tag when it starts would race with the calls other ranks made meanwhile.
    call = Call(ctx, send.reshape(-1), recv.reshape(-1), op_, _options(send.dtype), inner,
                feedback, record, path, ctx.next_tags(chosen.tags, bits))
    request.run(chosen.start(call))
    inflight.add(request)  # and post its first round now
    return request


def choose_algorithm(sendbuf: Array, *, op: OpArg = "sum", algorithm: str = "auto",
                     comm: MPI.Intracomm | None = None,
                     codec: CodecArg = None) -> str:
    """Name the algorithm ``allreduce`` would run for these arguments (collective on first use)."""
    send, _, op_, asked, comm_, codec_ = _checked(sendbuf, None, op, algorithm, comm, codec)
    return _resolve(asked, send.nbytes, context.of(comm_), codec_, op_).name


def check_codec(codec: CodecArg, dtype: np.dtype,
                op: ops.Op, algorithm: str) -> AnyCodec | None:
    """The codec a call with these arguments uses (None: none), or a clear error if it cannot.

    Without one, ``MPICOLL_CODEC`` applies where a codec can: floating sums and averages on an
    algorithm that compresses.
    """
    return _codec_for(codec, dtype, op, None if algorithm == registry.AUTO else registry.get(algorithm))


def _codec_for(codec: CodecArg, dtype: np.dtype, op: ops.Op, asked: Algorithm | None
               ) -> AnyCodec | None:
    """:func:`check_codec` for ``asked`` (None: auto)."""
    if codec is None:
        return _env_codec(dtype, op, asked)
    if isinstance(codec, str):
        codec = codecs.parse(codec)
        if codec is None:
            return None
    if not isinstance(codec, (codecs.Codec, codecs.ErrorFeedback)):
        raise TypeError(f"codec must be a name, a codec or an ErrorFeedback, not {type(codec).__name__}")
    if dtype not in (np.float16, np.float32, np.float64):
        raise TypeError(f"codecs compress float16/32/64 arrays, not {dtype}")
    if op.name not in ("sum", "avg"):
        raise ValueError(f"codecs compress sums and averages, not {op.name!r}")
    kind = select.codec_kind(codec)
    if asked is not None and not select.accepts(asked, kind):
        able = [a.name for a in algorithms_.registered() if select.accepts(a, kind)]
        raise ValueError(f"{asked.name} does not compress {kind} codecs: use "
                         f"{', '.join(able + [registry.AUTO])}")
    return codec


def _resolve(asked: Algorithm | None, nbytes: int, ctx: context.Context,
             codec: AnyCodec | None, op: ops.Op) -> Algorithm:
    if asked is not None and codec is None:
        return asked  # what was asked for, as it was checked
    return select.resolve(asked, nbytes, ctx.layout, select.codec_kind(codec), op.commutative)


@functools.lru_cache(maxsize=None)
def _dtype_name(dtype: np.dtype) -> str:
    return dtype.name  # computed anew by NumPy on each access (~2 µs): too slow per call


def _params(codec: codecs.Codec) -> str:
    """A codec's parameters, as the fingerprint compares them."""
    return ", ".join(f"{key}={value!r}" for key, value in sorted(codec.get_config().items())
                     if key != "name")


def _options(dtype: np.dtype) -> Options:
    return Options(_env.positive_int(SEGMENT_ENV, DEFAULT_SEGMENT_BYTES), dtype.str)


def _env_codec(dtype: np.dtype, op: ops.Op, asked: Algorithm | None) -> AnyCodec | None:
    """``MPICOLL_CODEC``'s codec where a codec can apply, else None."""
    spec = os.environ.get(CODEC_ENV)
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
    if recvbuf is None:
        recv = xp.empty_like(send)
    else:
        recv = _array("recvbuf", recvbuf, xp)
        if recv.shape != send.shape or recv.dtype != send.dtype:
            raise ValueError(f"recvbuf {recv.shape} {recv.dtype} does not match "
                             f"sendbuf {send.shape} {send.dtype}")
        if not writeable(recv):
            raise ValueError("recvbuf is read-only")
        if recv is not sendbuf and xp.may_share_memory(send, recv) and not _same_memory(send, recv):
            raise ValueError("recvbuf overlaps sendbuf; pass the same array for in place")
    if not isinstance(algorithm, str):
        raise TypeError(f"algorithm must be a name, not {type(algorithm).__name__}")
    if algorithm == registry.AUTO:
        algorithm = os.environ.get(ALGORITHM_ENV, registry.AUTO)
    asked = None if algorithm == registry.AUTO else registry.get(algorithm)
    if asked is not None and asked.needs_commutative and not op.commutative:
        raise ValueError(f"{algorithm} reorders operands: op {op.name!r} is not commutative")
    if comm is None:
        comm = MPI.COMM_WORLD
    if not isinstance(comm, MPI.Intracomm) or comm == MPI.COMM_NULL:
        raise TypeError(f"comm must be an mpi4py intra-communicator, not {comm!r}")
    codec = _codec_for(codec, send.dtype, op, asked)
    if codec is None and asked is not None and not asked.plain:
        raise ValueError(f"{algorithm} runs only with a codec of a kind it compresses "
                         f"({', '.join(sorted(asked.compresses))})")
    return send, recv, op, asked, comm, codec


def _array(name: str, buf: Any, xp: Any) -> Array:
    """``buf`` if it is a contiguous array of module ``xp`` (the send buffer's)."""
    if array_module(buf) is not xp:
        raise TypeError(f"sendbuf and recvbuf: {MIXED}")
    if not isinstance(buf, xp.ndarray):
        raise TypeError(f"{name} must be a NumPy or CuPy array, not {type(buf).__name__}")
    if not buf.flags.c_contiguous:
        raise ValueError(f"{name} is not C-contiguous; pass numpy.ascontiguousarray({name})")
    return buf


def _same_memory(a: Array, b: Array) -> bool:
    return address(a) == address(b) and a.nbytes == b.nbytes
