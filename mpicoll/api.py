"""The public calls: check the arguments, pick and plan an algorithm, run it."""

from __future__ import annotations

import functools
import os
from typing import Iterator

import numpy as np
from mpi4py import MPI

from . import algorithm, codecs, context, ops, timing, transport
from ._array import MIXED, address, array_module, writeable
from .algorithm import select, sparse
from .engine import Buffers, Execution
from .request import Request

__all__ = ["allreduce", "iallreduce", "choose_algorithm", "algorithms_available"]

ALGORITHM_ENV = "MPICOLL_ALGORITHM"
CODEC_ENV = "MPICOLL_CODEC"
SEGMENT_ENV = "MPICOLL_TREE_SEGMENT"
DEFAULT_SEGMENT_BYTES = 256 * 1024


def algorithms_available() -> tuple[str, ...]:
    """Names ``algorithm=`` accepts."""
    return algorithm.NAMES + ("auto",)


def allreduce(sendbuf, recvbuf=None, *, op="sum", algorithm="auto", comm=None, codec=None):
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
        codec: compress what travels: a name from ``codecs.available()``, a codec from
            ``codecs.get``, or ``codecs.ErrorFeedback(codec)``. Float16/32/64 sums and averages
            only; ``MPICOLL_CODEC`` sets one when None.
    """
    return iallreduce(sendbuf, recvbuf, op=op, algorithm=algorithm, comm=comm, codec=codec).wait()


def iallreduce(sendbuf, recvbuf=None, *, op="sum", algorithm="auto", comm=None, codec=None) -> Request:
    """Start the allreduce ``allreduce`` describes and return a :class:`Request` for it."""
    send, recv, op, name, comm, codec = _checked(sendbuf, recvbuf, op, algorithm, comm, codec)
    ctx = context.of(comm)
    name = _resolve(name, send.nbytes, ctx, codec)
    path = transport.choose(send)
    recorder = timing.active()
    record = None if recorder is None else recorder.start(
        rank=ctx.rank, ranks=ctx.size, nodes=len(ctx.topology.nodes), op=op.name,
        algorithm=name, codec=_codec_name(codec), dtype=_dtype_name(send.dtype),
        count=send.size, nbytes=send.nbytes, transport=path.name)
    result, send, recv = recv, send.reshape(-1), recv.reshape(-1)
    request = Request(result, name, _codec_name(codec), path.name)
    # Tags are taken now, in call order, identical on every rank: a later stage that took its
    # tag when it starts would race with the calls other ranks made meanwhile.
    if name != sparse.NAME:
        request.run(_dense(ctx, name, send, recv, op, codec, record, ctx.next_tag(), path))
    else:
        request.run(_sparse(ctx, send, recv, op, codec, record, (ctx.next_tag(), ctx.next_tag()),
                            request, path))
    request.test()  # start the first round now
    return request


def choose_algorithm(sendbuf, *, op="sum", algorithm="auto", comm=None, codec=None) -> str:
    """Name the algorithm ``allreduce`` would run for these arguments (collective on first use)."""
    send, _, _, name, comm, codec = _checked(sendbuf, None, op, algorithm, comm, codec)
    return _resolve(name, send.nbytes, context.of(comm), codec)


def _resolve(name: str, nbytes: int, ctx: context.Context, codec) -> str:
    """The algorithm that will run. Sparse codecs always allgather frames, whatever was asked:
    said here, so that requests, records and ``choose_algorithm`` name what really runs."""
    inner, _ = _unwrap(codec)
    if inner is not None and not inner.dense and ctx.size > 1:
        return sparse.NAME
    if name != "auto":
        return name
    chosen = select.choose(nbytes, ctx.topology)
    return "ring" if codec is not None and chosen == "tree" else chosen  # the tree does not compress


def _dense(ctx, name, send, recv, op, codec, record, tag, path) -> Iterator[Execution]:
    """One execution of a cached plan: plain, or compressed with a dense codec; ``path`` is the
    transport."""
    inner, feedback = _unwrap(codec)
    if ctx.size == 1:  # one rank: nothing travels, so nothing is compressed or owed
        inner = None
    plan = ctx.plan(name, send.size, _options(send.dtype), inner, feedback, op.average)
    scratch = plan.take_scratch(send.dtype, array_module(send))
    residual = codec.owed(send) if feedback else None
    bufs = Buffers(send, recv, *scratch, residual=residual)
    link = path.bind(plan.schedule, bufs, plan)
    yield Execution(plan.schedule, op, ctx.comm, tag, bufs, inner, record, link)
    plan.give_back(scratch)  # not on abandonment: MPI might still write into it


def _unwrap(codec) -> tuple:
    """(the codec that encodes, whether error feedback wraps it)."""
    if isinstance(codec, codecs.ErrorFeedback):
        return codec.codec, True
    return codec, False


def _codec_name(codec) -> str:
    if codec is None:
        return ""
    return codec.name + ("+ef" if isinstance(codec, codecs.ErrorFeedback) else "")


def _sparse(ctx, send, recv, op, codec, record, tags, request, path) -> Iterator[Execution]:
    """Sparse codecs: every rank's frame goes to every rank, each decodes them all in rank order.

    The frame lengths are exchanged first (with mpicoll's own allreduce), so every rank knows
    them before it posts a receive, and all ranks take the same path: when the frames together
    outweigh what a dense ring would move (2·n bytes of the array), they fall back to the exact
    ring, and the request and the timing record say so. The lengths travel from host memory.
    """
    inner, feedback = _unwrap(codec)
    xp = array_module(send)
    given = send
    if feedback or op.average:  # this rank's contribution, prepared in recv as the plans do
        given = recv
        if op.average:
            xp.multiply(send, 1 / ctx.size, out=recv)
        else:
            xp.copyto(recv, send)
        if feedback:
            recv += codec.owed(send)
    frame = inner.encode(given)
    lengths = np.zeros(ctx.size, np.int64)
    lengths[ctx.rank] = frame.size
    yield from _dense(ctx, "tree", lengths, lengths, ops.resolve("sum"), None, None, tags[0],
                      transport.HOST)
    if lengths.sum() > 2 * send.nbytes:
        request.algorithm, request.codec = "ring", f"{_codec_name(codec)}:dense-fallback"
        if record is not None:
            record.algorithm, record.codec = request.algorithm, request.codec
        if feedback:
            codec.owed(send)[...] = 0  # the exact sum carries everything owed
        yield from _dense(ctx, "ring", given, recv, ops.resolve("sum"), None, record, tags[1], path)
        return
    if feedback:
        codec.owed(send)[...] = given - inner.decode(frame)
    schedule = sparse.allgather_frames(ctx.topology, lengths.tolist(), send.size)
    wire = xp.empty(schedule.wire_nbytes, np.uint8)
    start = int(lengths[:ctx.rank].sum())
    wire[start:start + frame.size] = frame
    bufs = Buffers(send, recv, xp.empty(0, send.dtype), wire)
    yield Execution(schedule, op, ctx.comm, tags[1], bufs, inner, record, path.bind(schedule, bufs))


@functools.lru_cache(maxsize=None)
def _dtype_name(dtype: np.dtype) -> str:
    return dtype.name  # computed anew by NumPy on each access (~2 µs): too slow per call


def _options(dtype: np.dtype) -> algorithm.Options:
    return algorithm.Options(_env_int(SEGMENT_ENV, DEFAULT_SEGMENT_BYTES), dtype.str)


def _env_int(name: str, default: int) -> int:
    value = os.environ.get(name)
    if value is None:
        return default
    try:
        number = int(value)
    except ValueError:
        number = 0
    if number < 1:
        raise ValueError(f"{name}={value!r}: expected a positive integer")
    return number


@functools.lru_cache(maxsize=8)
def _env_codec(name: str) -> codecs.Codec:
    """One codec per name given in MPICOLL_CODEC, kept, so stateful codecs keep their state."""
    return codecs.get(name)


def _checked(sendbuf, recvbuf, op, algorithm, comm, codec):
    """Validate every argument locally, before any message is sent."""
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
    if algorithm == "auto":
        algorithm = os.environ.get(ALGORITHM_ENV, "auto")
    if algorithm not in algorithms_available():
        raise ValueError(f"unknown algorithm {algorithm!r}; choose one of {algorithms_available()}")
    if comm is None:
        comm = MPI.COMM_WORLD
    if not isinstance(comm, MPI.Intracomm) or comm == MPI.COMM_NULL:
        raise TypeError(f"comm must be an mpi4py intra-communicator, not {comm!r}")
    return send, recv, op, algorithm, comm, check_codec(codec, send, op, algorithm)


def check_codec(codec, send: np.ndarray, op: ops.Op, algorithm: str):
    if codec is None:
        name = os.environ.get(CODEC_ENV)
        if not name or send.dtype.kind != "f" or send.dtype.itemsize > 8 \
                or op.name not in ("sum", "avg") or algorithm == "tree":
            return None  # the environment's codec applies where a codec can
        codec = _env_codec(name)
    if isinstance(codec, str):
        codec = codecs.get(codec)
    if not isinstance(codec, (codecs.Codec, codecs.ErrorFeedback)):
        raise TypeError(f"codec must be a name, a codec or an ErrorFeedback, not {type(codec).__name__}")
    if send.dtype not in (np.float16, np.float32, np.float64):
        raise TypeError(f"codecs compress float16/32/64 arrays, not {send.dtype}")
    if op.name not in ("sum", "avg"):
        raise ValueError(f"codecs compress sums and averages, not {op.name!r}")
    if algorithm == "tree":
        raise ValueError("tree does not compress (its messages are small, and every level would "
                         "re-encode): use ring, hybrid or auto with a codec")
    return codec


def _array(name: str, buf, xp) -> np.ndarray:
    """``buf`` if it is a contiguous array of module ``xp`` (the send buffer's)."""
    if array_module(buf) is not xp:
        raise TypeError(f"sendbuf and recvbuf: {MIXED}")
    if not isinstance(buf, xp.ndarray):
        raise TypeError(f"{name} must be a NumPy or CuPy array, not {type(buf).__name__}")
    if not buf.flags.c_contiguous:
        raise ValueError(f"{name} is not C-contiguous; pass numpy.ascontiguousarray({name})")
    return buf


def _same_memory(a: np.ndarray, b: np.ndarray) -> bool:
    return address(a) == address(b) and a.nbytes == b.nbytes
