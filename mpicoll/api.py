"""The public calls: check the arguments, pick and plan an algorithm, run it."""

from __future__ import annotations

import functools
import os

import numpy as np
from mpi4py import MPI

from . import algorithm, context, ops, timing
from .algorithm import select
from .engine import Execution

__all__ = ["allreduce", "iallreduce", "choose_algorithm", "algorithms_available", "Request"]

ALGORITHM_ENV = "MPICOLL_ALGORITHM"
SEGMENT_ENV = "MPICOLL_TREE_SEGMENT"
DEFAULT_SEGMENT_BYTES = 256 * 1024


def algorithms_available() -> tuple[str, ...]:
    """Names ``algorithm=`` accepts."""
    return algorithm.NAMES + ("auto",)


class Request:
    """A nonblocking allreduce in flight; ``test()`` advances it, ``wait()`` finishes it.

    Like an ``mpi4py.MPI.Request``, but ``wait()`` returns the result buffer.
    """

    def __init__(self, execution: Execution, plan: context.Plan, tmp: np.ndarray,
                 result: np.ndarray):
        self._execution = execution
        self._plan = plan
        self._tmp = tmp
        self._result = result
        self.algorithm = execution.schedule.algorithm

    def test(self) -> bool:
        """Progress the transfers without blocking; True once the result is ready."""
        return self._execution.test() and self._release()

    def wait(self) -> np.ndarray:
        """Block until the result is ready and return it."""
        self._execution.wait()
        self._release()
        return self._result

    def _release(self) -> bool:
        if self._tmp is not None:
            self._plan.give_back(self._tmp)
            self._tmp = None
        return True


def allreduce(sendbuf, recvbuf=None, *, op="sum", algorithm="auto", comm=None, codec=None):
    """Reduce ``sendbuf`` over every rank of ``comm`` and return the result, the same bits on all.

    Args:
        sendbuf: contiguous NumPy array; never modified unless ``recvbuf is sendbuf``.
        recvbuf: array of the same shape and dtype for the result (allocated when None);
            ``recvbuf is sendbuf`` reduces in place.
        op: "sum", "prod", "min", "max" or the matching ``mpi4py.MPI.Op``.
        algorithm: one of ``algorithms()``; "auto" picks by size and node layout (the
            ``MPICOLL_ALGORITHM`` environment variable overrides "auto").
        comm: any intra-communicator; ``MPI.COMM_WORLD`` when None.
        codec: compression codec; none are available in this version, so it must be None.
    """
    return iallreduce(sendbuf, recvbuf, op=op, algorithm=algorithm, comm=comm, codec=codec).wait()


def iallreduce(sendbuf, recvbuf=None, *, op="sum", algorithm="auto", comm=None, codec=None) -> Request:
    """Start the allreduce ``allreduce`` describes and return a :class:`Request` for it."""
    send, recv, op, algorithm, comm = _checked(sendbuf, recvbuf, op, algorithm, comm, codec)
    ctx = context.of(comm)
    if algorithm == "auto":
        algorithm = select.choose(send.nbytes, ctx.topology)
    plan = ctx.plan(algorithm, send.size, _options(send.dtype))
    tmp = plan.take_tmp(send.dtype)
    recorder = timing.active()
    record = None if recorder is None else recorder.start(
        rank=ctx.rank, ranks=ctx.size, nodes=len(ctx.topology.nodes), op=op.name,
        algorithm=algorithm, codec="", dtype=_dtype_name(send.dtype), count=send.size,
        nbytes=send.nbytes)
    execution = Execution(plan.schedule, op, ctx.comm, ctx.next_tag(),
                          send.reshape(-1), recv.reshape(-1), tmp, record)
    request = Request(execution, plan, tmp, recv)
    request.test()  # start the first round now
    return request


def choose_algorithm(sendbuf, *, op="sum", algorithm="auto", comm=None) -> str:
    """Name the algorithm ``allreduce`` would run for these arguments (collective on first use)."""
    send, _, _, algorithm, comm = _checked(sendbuf, None, op, algorithm, comm, None)
    if algorithm == "auto":
        algorithm = select.choose(send.nbytes, context.of(comm).topology)
    return algorithm


@functools.lru_cache(maxsize=None)
def _dtype_name(dtype: np.dtype) -> str:
    return dtype.name  # computed anew by NumPy on each access (~2 µs): too slow per call


def _options(dtype: np.dtype) -> algorithm.Options:
    return algorithm.Options(_env_int(SEGMENT_ENV, DEFAULT_SEGMENT_BYTES), dtype.itemsize)


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


def _checked(sendbuf, recvbuf, op, algorithm, comm, codec):
    """Validate every argument locally, before any message is sent."""
    if codec is not None:
        raise ValueError(f"unknown codec {codec!r}: this version has no codecs")
    send = _array("sendbuf", sendbuf)
    op = ops.resolve(op)
    ops.check_dtype(send.dtype, op)
    if recvbuf is None:
        recv = np.empty_like(send)
    else:
        recv = _array("recvbuf", recvbuf)
        if recv.shape != send.shape or recv.dtype != send.dtype:
            raise ValueError(f"recvbuf {recv.shape} {recv.dtype} does not match "
                             f"sendbuf {send.shape} {send.dtype}")
        if not recv.flags.writeable:
            raise ValueError("recvbuf is read-only")
        if recv is not sendbuf and np.may_share_memory(send, recv) and not _same_memory(send, recv):
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
    return send, recv, op, algorithm, comm


def _array(name: str, buf) -> np.ndarray:
    if not isinstance(buf, np.ndarray):
        raise TypeError(f"{name} must be a NumPy array, not {type(buf).__name__}")
    if not buf.flags.c_contiguous:
        raise ValueError(f"{name} is not C-contiguous; pass numpy.ascontiguousarray({name})")
    return buf


def _same_memory(a: np.ndarray, b: np.ndarray) -> bool:
    return a.__array_interface__["data"][0] == b.__array_interface__["data"][0] and a.nbytes == b.nbytes
