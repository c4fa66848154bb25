"""bcast and reduce: the collectives with a root, where the data starts or ends.

Every training loop broadcasts its initial weights, and MPI codes reduce diagnostics to one
rank. They run through the same machinery as allreduce: checked arguments, the collective
numbered on its communicator, the fingerprint check (which names the collective and its root,
so ranks that disagree on either, or on the count, raise ``MismatchError``), requests the
progress engine completes in any order with the others'. ``binomial`` and ``tree`` plan both
(a reduce keeps rank order, so every op reduces as MPI's does), ``native`` is MPI's own; every
call form. ``auto`` measures as allgather's does (:func:`mpicoll.blockwise.tried`): a
communicator's first blocking calls of each size class try MPI's own two calls (and above
:func:`~mpicoll.blockwise.own_up_to` every algorithm) and keep the fastest; until then, and
where its trials do not run (one rank, device memory), MPI's own where it can take the call,
else ``binomial`` below :data:`~mpicoll.blockwise.TREE_FROM` and ``tree`` from there on
(:func:`~mpicoll.blockwise.auto_algorithm`). A blocking call on the same arrays as an earlier
one takes the fast path (:class:`mpicoll.fastpath.LoweredBlocks`). Codecs and averages are
refused clearly.
"""

from __future__ import annotations

import operator
from typing import Any, Union

from mpi4py import MPI

from . import _env, collective, context, fastpath, ops, timing, transport
from ._array import Array, array_module, flat, writeable
from .algorithm import Options, registry
from .api import _array, communicator
from .blockwise import auto_algorithm, launch, persist, run_blocking, tried
from .execution import Call
from .persistent import PersistentRequest
from .request import Request

__all__ = ["bcast", "ibcast", "bcast_init", "reduce", "ireduce", "reduce_init"]

OpArg = Union[str, MPI.Op, ops.Op]

def bcast(buf: Array, root: int = 0, *, algorithm: str = "auto",
          comm: MPI.Intracomm | None = None, codec: None = None) -> Array:
    """``root``'s ``buf`` in ``buf`` on every rank (``MPI_Bcast``); returns ``buf``.

    Args:
        buf: contiguous NumPy or CuPy array, any shape (its elements in memory order), of the
            same size and dtype on every rank; writeable except at the root.
        root: the rank whose ``buf`` is sent, the same on every rank.
        algorithm: one of ``algorithms("bcast")``; "auto": MPI's own where it can take the
            buffer, else :data:`~mpicoll.blockwise.TREE_FROM` decides.
        codec: not built for bcast (a codec raises ValueError).
        comm: any intra-communicator; ``MPI.COMM_WORLD`` when None.
    """
    if codec is None:
        result = fastpath.blocks("bcast", buf, buf, None, algorithm, comm, None, root)
        if result is not None:
            return result
    return _blocking(collective.BCAST, buf, buf, None, root, algorithm, comm, codec)


def ibcast(buf: Array, root: int = 0, *, algorithm: str = "auto",
           comm: MPI.Intracomm | None = None, codec: None = None) -> Request:
    """Start the bcast ``bcast`` describes; its :class:`Request` completes in any order with
    other requests."""
    return launch(*_prepare(collective.BCAST, buf, buf, None, root, algorithm, comm,
                            codec)[:5])


def bcast_init(buf: Array, root: int = 0, *, algorithm: str = "auto",
               comm: MPI.Intracomm | None = None, codec: None = None) -> PersistentRequest:
    """A persistent bcast of ``buf``: ``start()``, then ``wait()``, as often as wanted
    (collective: every rank makes it, and later starts it, in the same order)."""
    return persist(*_prepare(collective.BCAST, buf, buf, None, root, algorithm, comm,
                             codec, record=False)[:5])


def reduce(sendbuf: Array, recvbuf: Array | None = None, *, op: OpArg = "sum", root: int = 0,
           algorithm: str = "auto", comm: MPI.Intracomm | None = None,
           codec: None = None) -> Array | None:
    """The reduction of every rank's ``sendbuf``, in rank order, in ``recvbuf`` of ``root``
    (``MPI_Reduce``); returns it there, and None on the other ranks.

    Args:
        sendbuf: contiguous NumPy or CuPy array of n elements, any shape. At the root,
            ``MPI.IN_PLACE`` (or ``recvbuf`` itself): its input is ``recvbuf``.
        recvbuf: the root's array of n elements of the same dtype (allocated flat when None);
            ignored on the other ranks, which never write it.
        op: "sum", "prod", "min", "max" or a matching ``mpi4py.MPI.Op``, or a user-defined
            one, commutative or not ("avg" is not built).
        root: the rank that gets the result, the same on every rank.
        algorithm: one of ``algorithms("reduce")``; "auto": MPI's own where it can take the
            call, else :data:`~mpicoll.blockwise.TREE_FROM` decides.
        codec: not built for reduce (a codec raises ValueError).
        comm: any intra-communicator; ``MPI.COMM_WORLD`` when None.
    """
    if codec is None:
        result = fastpath.blocks("reduce", sendbuf, recvbuf, op, algorithm, comm, None, root)
        if result is not None:
            return None if result is fastpath.OFF_ROOT else result
    return _blocking(collective.REDUCE, sendbuf, recvbuf, op, root, algorithm, comm, codec)


def ireduce(sendbuf: Array, recvbuf: Array | None = None, *, op: OpArg = "sum", root: int = 0,
            algorithm: str = "auto", comm: MPI.Intracomm | None = None,
            codec: None = None) -> Request:
    """Start the reduce ``reduce`` describes; its :class:`Request` completes in any order with
    other requests (its wait returns None off the root)."""
    return launch(*_prepare(collective.REDUCE, sendbuf, recvbuf, op, root, algorithm, comm,
                            codec)[:5])


def reduce_init(sendbuf: Array, recvbuf: Array | None = None, *, op: OpArg = "sum",
                root: int = 0, algorithm: str = "auto", comm: MPI.Intracomm | None = None,
                codec: None = None) -> PersistentRequest:
    """A persistent reduce of these buffers: ``start()``, then ``wait()``, as often as wanted
    (collective: every rank makes it, and later starts it, in the same order)."""
    return persist(*_prepare(collective.REDUCE, sendbuf, recvbuf, op, root, algorithm, comm,
                             codec, record=False)[:5])


def _blocking(which: collective.Collective, sendbuf: Any, recvbuf: Any, op: Any, root: Any,
              algorithm: Any, comm: Any, codec: Any) -> Any:
    """A blocking call on the full path; then calls like it (the same arrays, a loop's) take
    the fast path (:class:`mpicoll.fastpath.LoweredBlocks`)."""
    if algorithm == registry.AUTO and codec is None:
        ran, result = tried(which, sendbuf, recvbuf, op, comm, None,
                            lambda send, recv, name: _call(which, send, recv, op, root, name,
                                                           comm))
        if ran:
            return result
    chosen, call, result, kind, number, bits = _prepare(which, sendbuf, recvbuf, op, root,
                                                        algorithm, comm, codec, blocking=True)
    return run_blocking(chosen, call, result, kind, number, bits,
                        (which.name, sendbuf, recvbuf, op, algorithm, comm, None))


def _call(which: collective.Collective, sendbuf: Any, recvbuf: Any, op: Any, root: Any,
          algorithm: str, comm: Any) -> Any:
    """A blocking call of ``which`` as the program makes it (the fast path included)."""
    if which is collective.BCAST:
        return bcast(recvbuf, root, algorithm=algorithm, comm=comm)
    return reduce(sendbuf, recvbuf, op="sum" if op is None else op, root=root,
                  algorithm=algorithm, comm=comm)


def _prepare(which: collective.Collective, sendbuf: Any, recvbuf: Any, op: Any, root: Any,
             algorithm: Any, comm: Any, codec: Any, blocking: bool = False,
             record: bool = True) -> tuple[Any, Call, Any, tuple, int, int]:
    """Validate every argument locally (before anything is sent), then number the call and
    start its fingerprint check: the algorithm, the call, what its wait returns, the call's
    kind, number and tag hash. ``blocking``: the caller waits for it (``native-blocking`` runs MPI's
    blocking call)."""
    name = which.name
    if codec is not None:
        raise ValueError(f"codecs on {name} are not built: codec must be None")
    comm_ = communicator(comm)
    p, me = comm_.Get_size(), comm_.Get_rank()
    try:
        root = operator.index(root)
    except TypeError:
        raise TypeError(f"{name}: root must be an integer rank, not {root!r}") from None
    if not 0 <= root < p:
        raise ValueError(f"{name}: root {root} is not a rank of the communicator's {p}")
    in_place = which.reduces and (sendbuf is MPI.IN_PLACE
                                  or (sendbuf is recvbuf and sendbuf is not None))
    if in_place and me != root:
        raise ValueError(f"{name} in place (sendbuf MPI.IN_PLACE or recvbuf itself) is the "
                         f"root's only; rank {me} is not root {root}")
    if in_place and recvbuf is None:
        raise ValueError(f"{name} in place: recvbuf holds the data, it cannot be None")
    given = recvbuf if in_place else sendbuf
    xp = array_module(given)
    data = _array("recvbuf" if in_place else ("buf" if name == "bcast" else "sendbuf"), given,
                  xp)
    if data.dtype.kind not in "iufc" or data.dtype.fields is not None:
        raise TypeError(f"{name} of dtype {data.dtype}: only integer, floating and complex "
                        "dtypes")
    op_ = ops.resolve("sum" if op is None else op, ordered=True)  # (bcast: unused)
    if which.reduces:
        ops.check_dtype(data.dtype, op_)
        if op_.average:
            raise ValueError(f"op 'avg' on {name} is not built: reduce with 'sum' and divide "
                             "by the communicator's size")
    recv = data if name == "bcast" or in_place else \
        None if recvbuf is None else _array("recvbuf", recvbuf, xp)
    if recv is not None and recv is not data:  # (checked on every rank that gives one: all raise alike)
        if recv.size != data.size or recv.dtype != data.dtype:
            raise ValueError(f"{name}: recvbuf holds {recv.size} {recv.dtype}; it must hold "
                             f"{data.size} {data.dtype}, as sendbuf")
        if xp.may_share_memory(data, recv):
            raise ValueError(f"{name}: recvbuf overlaps sendbuf; for in place pass "
                             "MPI.IN_PLACE (or recvbuf itself) as sendbuf")
    # A bcast's root only reads buf (a read-only buf elsewhere raises there alone, as
    # mpi4py's BufferError does: the ranks' calls differ, as a count that differs would)
    if recv is not None and not writeable(recv) and (name != "bcast" or me != root):
        raise ValueError(f"{'buf' if name == 'bcast' else 'recvbuf'} is read-only"
                         + (f" on rank {me}, not the root" if name == "bcast" else ""))
    if recv is None or (which.reduces and me != root):  # off the root: scratch, theirs untouched
        recv = xp.empty(data.size, data.dtype)
    if not isinstance(algorithm, str):
        raise TypeError(f"algorithm must be a name, not {type(algorithm).__name__}")
    send = flat(data)
    path = transport.choose(send)
    ctx = context.of(comm_)
    if algorithm == registry.AUTO:
        algorithm = auto_algorithm(which, send, path, op_, ctx, send.size)
    chosen = registry.get(algorithm, name)
    if chosen.mpi and path.name == "staged":
        raise ValueError(f"{chosen.name} needs host arrays or a CUDA-aware MPI: this MPI cannot "
                         "take device memory (use binomial or tree, which stage through the "
                         "host)")
    if chosen.needs_commutative and not op_.commutative:
        raise ValueError(f"{chosen.name} reorders operands: op {op_.name!r} is not commutative")
    # The root is part of what every rank must agree on: named with the collective.
    kind = (send.size, send.dtype, op_.name if which.reduces else "", chosen.name, "",
            f"{name} {'from' if name == 'bcast' else 'to'} rank {root}")
    number, bits, checking = ctx.begin_checked(kind, blocks=blocking and chosen.blocks)
    recorder = timing.active() if record else None  # (persistent: none, as allreduce_init)
    record_ = None if recorder is None else recorder.start(
        rank=ctx.rank, ranks=p, nodes=len(ctx.layout.nodes), op=kind[2], algorithm=chosen.name,
        codec="", dtype=send.dtype.name, count=send.size, nbytes=send.nbytes,
        transport=path.name, collective=name)
    options = Options(_env.settings().segment_bytes, send.dtype.str, name, None, root)
    call = Call(ctx, send, flat(recv), op_, options, None, None, record_, path,
                ctx.next_tags(chosen.tags, bits), checking, blocking, name)
    result = recv if name == "bcast" or me == root else None
    return chosen, call, result, kind, number, bits
