"""mpi4py's communicator with mpicoll's collectives: one line changes an existing program over.

    from mpi4py import MPI
    import mpicoll
    comm = mpicoll.Comm(MPI.COMM_WORLD)      # was: comm = MPI.COMM_WORLD

:class:`Comm` is an ``MPI.Intracomm`` on the same handle (no duplicate unless ``dup=True``), so
every method mpicoll does not implement is mpi4py's own. ``Allreduce``, ``Iallreduce`` and
``Allreduce_init`` take mpi4py's arguments, by mpi4py's rules (a message is a buffer, a count and
a datatype: shapes may differ), and run :func:`mpicoll.allreduce` with the communicator's
``algorithm`` and ``codec``; what mpicoll cannot do runs mpi4py's call instead, decided from the
arguments alone (MPI asks every rank for the same count and datatype). The lowercase
``allreduce`` gives mpi4py's answer for whatever objects the ranks pass, deciding with every
rank's object in view (:mod:`mpicoll.objects`). ``Allgather``, ``Allgatherv``,
``Reduce_scatter_block``, ``Reduce_scatter`` and their ``I...`` and ``..._init`` forms run
:mod:`mpicoll.blockwise` the same way (in place too; an ``Allgatherv`` whose displacements
are not the packed layout is mpi4py's); the lowercase ``allgather`` of objects stays mpi4py's. Fallbacks are counted in :attr:`Comm.fallbacks`
and recorded as algorithm ``mpi`` in the timing records, with the reason as its phase.
"""

from __future__ import annotations

import collections
import itertools
import operator
from typing import Any

import numpy as np
from mpi4py import MPI

from . import api, blockwise, context, objects, ops, recovery, rooted, timing
from .algorithm import registry
from .persistent import PersistentRequest
from .request import Request as _MpicollRequest

__all__ = ["Comm", "Request", "Prequest"]

_MPICOLL_OPS = (MPI.SUM, MPI.PROD, MPI.MIN, MPI.MAX)


class _Fallback(Exception):
    """mpicoll cannot run this call: mpi4py's runs it (the message says why)."""


class Comm(MPI.Intracomm):
    """An ``MPI.Intracomm`` whose allreduce calls run mpicoll's algorithms.

    Args:
        comm: the intra-communicator to wrap (``MPI.COMM_WORLD`` when None); the same handle.
        algorithm: what ``mpicoll.allreduce`` runs ("auto" by default, which reads
            ``MPICOLL_ALGORITHM``); each call may pass its own ``algorithm=``.
        codec: compression for floating sums (None: ``MPICOLL_CODEC``, if set); per call too.
        dup: wrap a duplicate of ``comm`` (freed with ``Free()``) instead of ``comm`` itself.

    The settings are fixed when it is made (``comm.algorithm`` and ``comm.codec`` read them).
    ``Dup``, ``Split``, ``Split_type``, ``Create``, ``Create_group`` and ``Idup`` return a
    ``Comm`` with the same settings; topology and inter-communicators are mpi4py's own.
    """

    fallbacks: collections.Counter
    _settings: dict  # mpicoll.allreduce's keywords for a call without extras
    _records: objects.Records  # the lowercase allreduce's
    _blockwise_algorithms: dict  # collective -> what its calls without algorithm= run

    def __new__(cls, comm: MPI.Intracomm | None = None, *, algorithm: str = "auto",
                codec: Any = None, dup: bool = False) -> Comm:
        comm = MPI.COMM_WORLD if comm is None else comm
        if not isinstance(comm, MPI.Intracomm):
            raise TypeError(f"mpicoll.Comm wraps an intra-communicator, not "
                            f"{type(comm).__name__}: an inter-communicator's Allreduce is MPI's")
        if comm == MPI.COMM_NULL:
            raise ValueError("mpicoll.Comm cannot wrap MPI.COMM_NULL")
        self = super().__new__(cls, comm.Dup() if dup else comm)
        if algorithm != registry.AUTO:
            registry.get(algorithm)  # ValueError naming the choices
        self.fallbacks = collections.Counter()  # reason -> calls mpi4py ran instead
        # mpicoll runs on the same handle as a plain Intracomm, whose Dup and Allreduce_init
        # (which mpicoll calls) are mpi4py's, not these
        self._settings = {"algorithm": algorithm, "comm": MPI.Intracomm(self), "codec": codec}
        self._records = objects.Records(self.Get_size(), MPI.BYTE)
        # what the other collectives run: the communicator's algorithm where it runs them
        self._blockwise_algorithms = {
            stem: algorithm if algorithm in registry.names(collective=stem) else registry.AUTO
            for stem in ("allgather", "reduce_scatter", "bcast", "reduce")}
        return self

    def __init__(self, comm: MPI.Intracomm | None = None, *, algorithm: str = "auto",
                 codec: Any = None, dup: bool = False):
        pass  # everything happened in __new__ (mpi4py's objects are built there)

    @property
    def algorithm(self) -> str:
        """What the allreduce calls run unless a call says otherwise."""
        return self._settings["algorithm"]

    @property
    def codec(self) -> Any:
        """What they compress with unless a call says otherwise (None: ``MPICOLL_CODEC``)."""
        return self._settings["codec"]

    def __repr__(self) -> str:
        return (f"mpicoll.Comm(size={self.Get_size()}, algorithm={self.algorithm!r}"
                + (f", codec={self.codec!r}" if self.codec is not None else "") + ")")

    # ---- communicators made from this one stay mpicoll's
    def _same(self, comm: Any) -> Any:
        if isinstance(comm, MPI.Intracomm) and comm != MPI.COMM_NULL:
            return Comm(comm, algorithm=self.algorithm, codec=self.codec)
        return comm

    def Dup(self, info: MPI.Info | None = None) -> Comm:
        return self._same(super().Dup() if info is None else super().Dup(info))

    def Dup_with_info(self, info: MPI.Info) -> Comm:
        return self._same(super().Dup_with_info(info))

    def Idup(self, info: MPI.Info | None = None) -> tuple[Comm, MPI.Request]:
        comm, request = super().Idup() if info is None else super().Idup(info)
        return self._same(comm), request

    def Split(self, color: int = 0, key: int = 0) -> Comm:
        return self._same(super().Split(color, key))

    def Shrink(self) -> Comm:
        """The survivors, after a process failed (:func:`mpicoll.shrink`), still mpicoll's."""
        return self._same(recovery.shrink(self))

    def Recover(self, step: int) -> tuple[Comm, int]:
        """The survivors, still mpicoll's, and the step every survivor resumes from
        (:func:`mpicoll.recover`)."""
        survivors, resume = recovery.recover(self, step)
        return self._same(survivors), resume

    def Split_type(self, split_type: int, key: int = 0, info: MPI.Info = MPI.INFO_NULL) -> Comm:
        return self._same(super().Split_type(split_type, key, info))

    def Create(self, group: MPI.Group) -> Comm:
        return self._same(super().Create(group))

    def Create_group(self, group: MPI.Group, tag: int = 0) -> Comm:
        return self._same(super().Create_group(group, tag))

    # ---- the allreduce family
    def Allreduce(self, sendbuf: Any, recvbuf: Any, op: MPI.Op = MPI.SUM, *,
                  algorithm: str | None = None, codec: Any = None) -> None:
        """``MPI_Allreduce`` as mpi4py takes it, run by mpicoll."""
        try:
            send, recv, op_ = _arguments(sendbuf, recvbuf, op)
        except _Fallback as why:
            with self._fallback(str(why), recvbuf, op):
                super().Allreduce(sendbuf, recvbuf, op)
            return
        api.allreduce(send, recv, op=op_, **self._how(algorithm, codec))

    def Iallreduce(  # type: ignore[override]  # mpicoll's request, not an MPI.Request
            self, sendbuf: Any, recvbuf: Any, op: MPI.Op = MPI.SUM, *,
            algorithm: str | None = None, codec: Any = None) -> Request | MPI.Request:
        """``MPI_Iallreduce``: a :class:`Request` (``Wait``, ``Test``), or mpi4py's request
        where mpi4py runs it."""
        try:
            send, recv, op_ = _arguments(sendbuf, recvbuf, op)
        except _Fallback as why:
            with self._fallback(str(why), recvbuf, op):
                return super().Iallreduce(sendbuf, recvbuf, op)
        return Request(api.iallreduce(send, recv, op=op_, **self._how(algorithm, codec)))

    def Allreduce_init(  # type: ignore[override]  # mpicoll's request, not an MPI.Prequest
            self, sendbuf: Any, recvbuf: Any, op: MPI.Op = MPI.SUM,
            info: MPI.Info = MPI.INFO_NULL, *, algorithm: str | None = None,
            codec: Any = None) -> Prequest | MPI.Prequest:
        """``MPI_Allreduce_init`` (MPI-4): a :class:`Prequest` (``Start``, ``Wait``, ``Test``,
        ``Free``), or mpi4py's where mpi4py runs it."""
        try:
            send, recv, op_ = _arguments(sendbuf, recvbuf, op)
        except _Fallback as why:
            with self._fallback(str(why), recvbuf, op):
                return super().Allreduce_init(sendbuf, recvbuf, op, info)
        return Prequest(api.allreduce_init(
            send, recv, op=op_, **self._how(algorithm, codec)))

    def allreduce(self, sendobj: Any, op: Any = MPI.SUM, *, algorithm: str | None = None,
                  codec: Any = None) -> Any:
        """mpi4py's lowercase ``allreduce``, with mpi4py's answer whatever each rank passes
        (:mod:`mpicoll.objects`): every rank's object described in one ``MPI_Allgather`` of
        32 bytes, then numbers (Python and NumPy scalars, 0-d arrays) combined here in
        mpi4py's order, NumPy arrays of the same dtype and shape on every rank reduced by
        mpicoll (SUM and PROD), anything else run by mpi4py on every rank."""
        if not _arithmetic(op):
            with self._fallback("a lowercase allreduce with an op other than SUM, PROD, MIN, "
                                "MAX", None, op):
                return super().allreduce(sendobj, op)
        records = self._records
        records.describe(sendobj)
        if records.gather:
            self._settings["comm"].Allgather(records.mine, records.every)
        how = records.decide(lambda dtype: _reduces_arrays(dtype, op))
        if how == "fold":
            return objects.fold(records.numbers(), op)
        if how == "array":
            return api.allreduce(np.ascontiguousarray(sendobj), op=op,
                                 **self._how(algorithm, codec))
        reason = "a lowercase allreduce of arrays that differ across ranks, of booleans, or by " \
            "MIN or MAX" if records.arrays() else \
            "a lowercase allreduce of objects other than numbers and arrays (or ints beyond int64)"
        with self._fallback(reason, None, op):
            return super().allreduce(sendobj, op)

    def _how(self, algorithm: str | None, codec: Any) -> dict:
        """mpicoll's keywords for a call: its own extras, else this communicator's settings."""
        if algorithm is None and codec is None:
            return self._settings
        return {"algorithm": algorithm or self.algorithm, "comm": self._settings["comm"],
                "codec": self.codec if codec is None else codec}

    # ---- allgather and reduce_scatter (mpicoll.blockwise), in mpi4py's three forms
    def Allgather(self, sendbuf: Any, recvbuf: Any, *, algorithm: str | None = None) -> None:
        """``MPI_Allgather`` as mpi4py takes it (``MPI.IN_PLACE`` too), run by mpicoll."""
        return self._blockwise("", "allgather", super().Allgather, (sendbuf, recvbuf), algorithm)

    def Iallgather(self, sendbuf: Any, recvbuf: Any, *,  # type: ignore[override]
                   algorithm: str | None = None) -> Request | MPI.Request:
        return self._blockwise("i", "allgather", super().Iallgather, (sendbuf, recvbuf),
                               algorithm)

    def Allgather_init(self, sendbuf: Any, recvbuf: Any,  # type: ignore[override]
                       info: MPI.Info = MPI.INFO_NULL, *, algorithm: str | None = None
                       ) -> Prequest | MPI.Prequest:
        return self._blockwise("init", "allgather", super().Allgather_init,
                               (sendbuf, recvbuf, info), algorithm)

    def Allgatherv(self, sendbuf: Any, recvbuf: Any, *, algorithm: str | None = None) -> None:
        """``MPI_Allgatherv``: run by mpicoll where the blocks lie packed in rank order (no
        displacements, or those of the packed layout), by mpi4py otherwise."""
        return self._blockwise("", "allgatherv", super().Allgatherv, (sendbuf, recvbuf),
                               algorithm)

    def Iallgatherv(self, sendbuf: Any, recvbuf: Any, *,  # type: ignore[override]
                    algorithm: str | None = None) -> Request | MPI.Request:
        return self._blockwise("i", "allgatherv", super().Iallgatherv, (sendbuf, recvbuf),
                               algorithm)

    def Allgatherv_init(self, sendbuf: Any, recvbuf: Any,  # type: ignore[override]
                        info: MPI.Info = MPI.INFO_NULL, *, algorithm: str | None = None
                        ) -> Prequest | MPI.Prequest:
        return self._blockwise("init", "allgatherv", super().Allgatherv_init,
                               (sendbuf, recvbuf, info), algorithm)

    def Reduce_scatter_block(self, sendbuf: Any, recvbuf: Any, op: MPI.Op = MPI.SUM, *,
                             algorithm: str | None = None) -> None:
        """``MPI_Reduce_scatter_block`` (in place: the input in ``recvbuf``, the result its
        first block), run by mpicoll."""
        return self._blockwise("", "reduce_scatter_block", super().Reduce_scatter_block,
                               (sendbuf, recvbuf, op), algorithm)

    def Ireduce_scatter_block(  # type: ignore[override]
            self, sendbuf: Any, recvbuf: Any, op: MPI.Op = MPI.SUM, *,
            algorithm: str | None = None) -> Request | MPI.Request:
        return self._blockwise("i", "reduce_scatter_block", super().Ireduce_scatter_block,
                               (sendbuf, recvbuf, op), algorithm)

    def Reduce_scatter_block_init(  # type: ignore[override]
            self, sendbuf: Any, recvbuf: Any, op: MPI.Op = MPI.SUM,
            info: MPI.Info = MPI.INFO_NULL, *, algorithm: str | None = None
            ) -> Prequest | MPI.Prequest:
        return self._blockwise("init", "reduce_scatter_block",
                               super().Reduce_scatter_block_init, (sendbuf, recvbuf, op, info),
                               algorithm)

    def Reduce_scatter(self, sendbuf: Any, recvbuf: Any, recvcounts: Any = None,
                       op: MPI.Op = MPI.SUM, *, algorithm: str | None = None) -> None:
        """``MPI_Reduce_scatter`` (``recvcounts`` None: every rank's receive count, gathered
        as mpi4py does), run by mpicoll."""
        return self._blockwise("", "reduce_scatter", super().Reduce_scatter,
                               (sendbuf, recvbuf, recvcounts, op), algorithm)

    def Ireduce_scatter(  # type: ignore[override]
            self, sendbuf: Any, recvbuf: Any, recvcounts: Any = None, op: MPI.Op = MPI.SUM, *,
            algorithm: str | None = None) -> Request | MPI.Request:
        return self._blockwise("i", "reduce_scatter", super().Ireduce_scatter,
                               (sendbuf, recvbuf, recvcounts, op), algorithm)

    def Reduce_scatter_init(  # type: ignore[override]
            self, sendbuf: Any, recvbuf: Any, recvcounts: Any = None, op: MPI.Op = MPI.SUM,
            info: MPI.Info = MPI.INFO_NULL, *, algorithm: str | None = None
            ) -> Prequest | MPI.Prequest:
        return self._blockwise("init", "reduce_scatter", super().Reduce_scatter_init,
                               (sendbuf, recvbuf, recvcounts, op, info), algorithm)

    def Bcast(self, buf: Any, root: int = 0, *, algorithm: str | None = None) -> None:
        """``MPI_Bcast`` as mpi4py takes it, run by mpicoll."""
        return self._rooted("", "bcast", super().Bcast, (buf, root), algorithm)

    def Ibcast(self, buf: Any, root: int = 0, *,  # type: ignore[override]
               algorithm: str | None = None) -> Request | MPI.Request:
        return self._rooted("i", "bcast", super().Ibcast, (buf, root), algorithm)

    def Bcast_init(self, buf: Any, root: int = 0,  # type: ignore[override]
                   info: MPI.Info = MPI.INFO_NULL, *, algorithm: str | None = None
                   ) -> Prequest | MPI.Prequest:
        return self._rooted("init", "bcast", super().Bcast_init, (buf, root, info), algorithm)

    def Reduce(self, sendbuf: Any, recvbuf: Any, op: MPI.Op = MPI.SUM, root: int = 0, *,
               algorithm: str | None = None) -> None:
        """``MPI_Reduce`` as mpi4py takes it (``MPI.IN_PLACE`` at the root; ``recvbuf`` is
        read at the root only), run by mpicoll, in rank order (non-commutative ops too)."""
        return self._rooted("", "reduce", super().Reduce, (sendbuf, recvbuf, op, root),
                            algorithm)

    def Ireduce(self, sendbuf: Any, recvbuf: Any,  # type: ignore[override]
                op: MPI.Op = MPI.SUM, root: int = 0, *, algorithm: str | None = None
                ) -> Request | MPI.Request:
        return self._rooted("i", "reduce", super().Ireduce, (sendbuf, recvbuf, op, root),
                            algorithm)

    def Reduce_init(self, sendbuf: Any, recvbuf: Any,  # type: ignore[override]
                    op: MPI.Op = MPI.SUM, root: int = 0, info: MPI.Info = MPI.INFO_NULL, *,
                    algorithm: str | None = None) -> Prequest | MPI.Prequest:
        return self._rooted("init", "reduce", super().Reduce_init,
                            (sendbuf, recvbuf, op, root, info), algorithm)

    def _rooted(self, form: str, name: str, mpi4py_call: Any, args: tuple,
                algorithm: str | None) -> Any:
        """Run ``Bcast`` or ``Reduce`` (``name``: "bcast", "reduce") in ``form`` by mpicoll, or
        by ``mpi4py_call`` where mpicoll cannot (counted). What decides is what every rank of a
        correct program passes alike (the buffer's kind, the datatype, the op), so all ranks
        take the same way; a reduce's ``recvbuf`` is read at the root only."""
        op = args[2] if name == "reduce" else None
        try:
            positional, keywords = _rooted_arguments(name, args, self)
        except _Fallback as why:
            with self._fallback(str(why), args[0], op, name):
                return mpi4py_call(*args)
        run = getattr(rooted, {"": name, "i": f"i{name}", "init": f"{name}_init"}[form])
        if algorithm is None:
            algorithm = self._blockwise_algorithms[name]
        result = run(*positional, algorithm=algorithm, comm=self._settings["comm"], **keywords)
        return None if form == "" else Request(result) if form == "i" else Prequest(result)

    def _blockwise(self, form: str, name: str, mpi4py_call: Any, args: tuple,
                   algorithm: str | None) -> Any:
        """Run ``name`` (mpi4py's spelling) in ``form`` ("", "i" or "init") by mpicoll, or,
        where mpicoll cannot, by ``mpi4py_call`` with the same arguments (counted)."""
        op = args[3] if name == "reduce_scatter" else args[2] if name.startswith("reduce") \
            else None
        stem = "allgather" if name.startswith("allgather") else "reduce_scatter"
        try:
            send, recv, keywords = _blockwise_arguments(name, args, self)
        except _Fallback as why:
            with self._fallback(str(why), args[1], op, stem):
                return mpi4py_call(*args)
        run = getattr(blockwise, {"": stem, "i": f"i{stem}", "init": f"{stem}_init"}[form])
        if algorithm is None:
            algorithm = self._blockwise_algorithms[stem]
        result = run(send, recv, algorithm=algorithm, comm=self._settings["comm"], **keywords)
        return None if form == "" else Request(result) if form == "i" else Prequest(result)

    # ---- what mpi4py ran instead
    def _fallback(self, reason: str, buf: Any, op: Any, collective: str = "allreduce"
                  ) -> _Recorded:
        self.fallbacks[reason] += 1
        return _Recorded(self, reason, buf, op, collective)


class _Recorded:
    """A fallback call in the timing records (when they are on): algorithm ``mpi``, the reason
    as its only phase."""

    def __init__(self, comm: Comm, reason: str, buf: Any, op: Any, collective: str):
        recorder = timing.active()
        self.record = None
        if recorder is not None:
            nbytes = _nbytes(buf)
            self.record = recorder.start(
                rank=comm.Get_rank(), ranks=comm.Get_size(),
                nodes=len(context.of(comm).layout.nodes), op=_op_name(op), algorithm="mpi",
                codec="", dtype="", count=0, nbytes=nbytes, transport="host",
                collective=collective)
            self.reason = reason

    def __enter__(self) -> None:
        pass

    def __exit__(self, *exc: object) -> None:
        if self.record is not None:
            self.record.t1 = MPI.Wtime()
            self.record.phases[f"fallback: {self.reason}"] = self.record.t1 - self.record.t0


def _nbytes(buf: Any) -> int:
    try:
        return memoryview(buf[0] if isinstance(buf, (list, tuple)) else buf).nbytes
    except TypeError:
        return 0


def _op_name(op: Any) -> str:
    for name, known in zip(("sum", "prod", "min", "max"), _MPICOLL_OPS):
        if op == known:
            return name
    return "user" if isinstance(op, MPI.Op) else str(op)


class Request:
    """What :meth:`Comm.Iallreduce` returns: mpi4py's request methods on an mpicoll request.
    Not an ``MPI.Request``: ``MPI.Request.Waitall`` does not take it (``mpicoll.waitall``
    takes their ``request`` attributes)."""

    __slots__ = ("request",)

    def __init__(self, request: _MpicollRequest):
        self.request = request

    def Wait(self, status: MPI.Status | None = None) -> bool:
        self.request.wait()
        return True

    def Test(self, status: MPI.Status | None = None) -> bool:
        return self.request.test()

    def wait(self, status: MPI.Status | None = None) -> None:
        self.request.wait()

    def test(self, status: MPI.Status | None = None) -> tuple[bool, None]:
        return self.request.test(), None

    def Free(self) -> None:
        """Nothing to free: the request ends when it completes (wait for it first)."""


class Prequest(Request):
    """What :meth:`Comm.Allreduce_init` returns: ``Start``, ``Wait``, ``Test``, ``Free``."""

    __slots__ = ()
    request: PersistentRequest

    def Start(self) -> None:
        self.request.start()

    def Free(self) -> None:
        self.request.free()


def _arguments(sendbuf: Any, recvbuf: Any, op: Any) -> tuple[Any, Any, Any]:
    """mpi4py's allreduce arguments as mpicoll's (send, recv, op), or _Fallback."""
    recv = _buffer(recvbuf, writeable=True)
    send = recv if sendbuf is MPI.IN_PLACE else _buffer(sendbuf)
    if send.size != recv.size or send.dtype != recv.dtype or send.dtype.char != recv.dtype.char:
        raise _Fallback("send and receive buffers differ")  # mpi4py says how (MPI.LONG is not
    # MPI.LONG_LONG, though NumPy makes both int64)
    if recv.dtype.kind in "iuf" and _arithmetic(op):
        return send, recv, op  # what most calls pass: nothing more to decide
    return send, recv, _op(op, recv.dtype)


def _arithmetic(op: Any) -> bool:
    """``MPI.SUM``, ``PROD``, ``MIN`` or ``MAX``: by identity first (the objects calls pass, in
    nanoseconds), then by handle."""
    return op is MPI.SUM or op is MPI.MAX or op is MPI.MIN or op is MPI.PROD \
        or isinstance(op, MPI.Op) and any(op == known for known in _MPICOLL_OPS)


def _op(op: Any, dtype: np.dtype, ordered: bool = False) -> Any:
    """The op for mpicoll, or _Fallback: MPI's four arithmetic ops and commutative user ops
    (``ordered``, a reduce's, which keeps rank order: non-commutative ones too)."""
    if not isinstance(op, MPI.Op):
        raise _Fallback(f"op {op!r} is not an MPI.Op")
    if op.is_predefined and not _arithmetic(op):
        raise _Fallback("a predefined op mpicoll does not run (logical, bitwise, loc, replace)")
    try:
        ops.check_dtype(dtype, ops.resolve(op, ordered))  # (non-commutative: ValueError)
    except (TypeError, ValueError) as why:
        raise _Fallback(str(why)) from None
    return op


def _buffer(spec: Any, writeable: bool = False, blocks: int = 1) -> Any:
    """The array a buffer spec names: ``buf``, ``[buf, datatype]``, ``[buf, count]``,
    ``[buf, count, datatype]``, ``[buf, (count, displ), datatype]`` or
    ``[buf, count, displ, datatype]`` (counts and displacements in elements of the datatype;
    a count counts one of ``blocks`` blocks, as an allgather's receive count does)."""
    if type(spec) is np.ndarray:  # what most calls pass
        flags = spec.flags
        if flags.c_contiguous and (flags.writeable or not writeable):
            return spec
    count = displ = datatype = None
    buf = spec
    if isinstance(spec, (list, tuple)):
        buf, *rest = spec
        if rest and isinstance(rest[-1], MPI.Datatype):
            datatype = rest.pop()
        if len(rest) == 1 and isinstance(rest[0], (tuple, list)):
            rest = list(rest[0])
        if len(rest) > 2:
            raise _Fallback("a buffer spec mpicoll does not read")
        count, displ = (rest + [None, None])[:2]
    if hasattr(buf, "__cuda_array_interface__"):
        if count is not None or displ is not None or datatype is not None:
            raise _Fallback("a device buffer with an explicit count or datatype")
        return buf
    if isinstance(buf, np.ndarray):
        array = buf
    else:
        try:
            array = np.asarray(memoryview(buf))
        except (TypeError, ValueError, NotImplementedError):
            raise _Fallback("not a buffer NumPy reads") from None
    if not (array.flags.c_contiguous or array.flags.f_contiguous):
        raise _Fallback("a non-contiguous buffer")  # mpi4py refuses it
    flat = array.reshape(-1, order="A")
    if datatype is not None:
        try:
            dtype = np.dtype(datatype.tocode())
        except (ValueError, TypeError):
            raise _Fallback("a derived datatype") from None
        if flat.nbytes % dtype.itemsize:
            raise _Fallback("a buffer that is not a whole number of its datatype")
        flat = flat.view(np.uint8).view(dtype) if flat.dtype != dtype else flat
    if writeable and not flat.flags.writeable:
        raise _Fallback("a read-only receive buffer")  # mpi4py says so
    start = displ or 0
    stop = flat.size if count is None else start + count * blocks
    if start < 0 or stop > flat.size:
        raise _Fallback("a count or displacement beyond the buffer")
    return flat[start:stop]


def _blockwise_arguments(name: str, args: tuple, comm: Comm) -> tuple[Any, Any, dict]:
    """mpi4py's arguments of ``Allgather``, ``Allgatherv``, ``Reduce_scatter_block`` or
    ``Reduce_scatter`` (``name`` in lower case) as mpicoll's (send, recv, keywords), or
    _Fallback. In place, send is ``MPI.IN_PLACE`` and recv what the call reads and writes."""
    p, me = comm.Get_size(), comm.Get_rank()
    sendbuf, recvbuf = args[:2]
    in_place = sendbuf is MPI.IN_PLACE
    keywords: dict = {}
    if name == "allgather":
        recv = _array(_buffer(recvbuf, writeable=True, blocks=p))
        block = _whole_blocks(recv.size, p)
    elif name == "allgatherv":
        recv, counts = _packed(recvbuf, p)
        block, keywords["counts"] = counts[me], counts
    elif name == "reduce_scatter_block":
        recv = _array(_buffer(recvbuf, writeable=True, blocks=p if in_place else 1))
        block = _whole_blocks(recv.size, p) if in_place else recv.size
        block *= p
    else:
        recv = _array(_buffer(recvbuf, writeable=True))
        given = args[2]
        if given is None:
            if in_place:
                raise _Fallback("a Reduce_scatter in place without recvcounts")
            given = MPI.Intracomm(comm).allgather(recv.size)  # as mpi4py does
        keywords["counts"] = sizes = _counts(given, p)
        block = sum(sizes)
        if in_place and recv.size != block or not in_place and recv.size != sizes[me]:
            raise _Fallback("a receive buffer that does not hold the counts")
    _arithmetic_dtype(recv.dtype, name)
    if in_place:
        send = sendbuf
    else:
        send = _array(_buffer(sendbuf))
        if send.size != block or send.dtype != recv.dtype or send.dtype.char != recv.dtype.char:
            raise _Fallback("send and receive buffers differ")
    if name.startswith("reduce"):
        keywords["op"] = _op(args[3] if name == "reduce_scatter" else args[2], recv.dtype)
    return send, recv, keywords


def _rooted_arguments(name: str, args: tuple, comm: Comm) -> tuple[tuple, dict]:
    """mpi4py's arguments of ``Bcast`` or ``Reduce`` as mpicoll's (positional, keywords), or
    _Fallback."""
    if name == "bcast":
        buf, root = args[:2]
        data = _array(_buffer(buf))
        _arithmetic_dtype(data.dtype, name)
        return (data, root), {}
    sendbuf, recvbuf, op, root = args[:4]
    at_root = comm.Get_rank() == root
    recv = _array(_buffer(recvbuf, writeable=True)) if at_root and recvbuf is not None \
        else None
    send: Any = sendbuf if sendbuf is MPI.IN_PLACE else _array(_buffer(sendbuf))
    data = recv if send is MPI.IN_PLACE else send
    if data is None:
        raise _Fallback("MPI.IN_PLACE without a recvbuf, or off the root")  # mpi4py says so
    _arithmetic_dtype(data.dtype, name)
    return (send, recv), {"op": _op(op, data.dtype, ordered=True), "root": root}


def _arithmetic_dtype(dtype: np.dtype, name: str) -> None:
    if dtype.kind not in "iufc" or dtype.fields is not None:
        raise _Fallback(f"a dtype other than integer, floating or complex ({name})")


def _array(buf: Any) -> Any:
    """A NumPy or CuPy array as it is (else _Fallback: another device buffer, which mpicoll
    does not slice into blocks)."""
    if not hasattr(buf, "dtype"):
        raise _Fallback("a device buffer other than a CuPy array")
    return buf


def _whole_blocks(size: int, p: int) -> int:
    """A block of a buffer that holds ``p`` (else _Fallback: mpi4py says what is wrong)."""
    if size % p:
        raise _Fallback("a buffer that is not a whole number of blocks")
    return size // p


def _counts(counts: Any, p: int) -> tuple[int, ...]:
    """mpi4py's counts of a ``v`` call (one int for every rank, or a sequence of ``p``)."""
    try:
        counts = (operator.index(counts),) * p if not hasattr(counts, "__len__") \
            else tuple(operator.index(c) for c in counts)
    except TypeError:
        raise _Fallback("counts that are not integers") from None
    if len(counts) != p or min(counts) < 0:
        raise _Fallback("counts that are not one per rank or negative")
    return counts


def _packed(spec: Any, p: int) -> tuple[Any, tuple[int, ...]]:
    """The receive buffer of an ``Allgatherv`` and its counts, where its blocks lie packed in
    rank order (else _Fallback): ``buf``, ``[buf, counts]``, ``[buf, counts, datatype]``,
    ``[buf, (counts, displs), datatype]``, ``[buf, counts, displs, datatype]``; counts one int,
    a sequence or None (equal blocks), displacements None, one int (a stride) or a sequence."""
    counts = displs = datatype = None
    buf = spec
    if isinstance(spec, (list, tuple)):
        buf, *rest = spec
        if rest and isinstance(rest[-1], MPI.Datatype):
            datatype = rest.pop()
        if len(rest) == 1 and isinstance(rest[0], tuple):  # (counts, displs), as mpi4py reads
            rest = list(rest[0])
        if len(rest) > 2:
            raise _Fallback("a buffer spec mpicoll does not read")
        counts, displs = (rest + [None, None])[:2]
    recv = _array(_buffer(buf if datatype is None else [buf, datatype], writeable=True))
    sizes = (_whole_blocks(recv.size, p),) * p if counts is None else _counts(counts, p)
    packed = list(itertools.accumulate(sizes, initial=0))[:-1]
    if displs is not None:
        starts = [displs * i for i in range(p)] if not hasattr(displs, "__len__") \
            else list(displs)
        if starts != packed:
            raise _Fallback("displacements that are not the packed layout")
    total = sum(sizes)
    if total > recv.size:
        raise _Fallback("counts beyond the buffer")
    return recv if total == recv.size else recv[:total], sizes  # (the same array: fast path)


def _reduces_arrays(dtype: np.dtype, op: Any) -> bool:
    """Whether mpicoll reduces lowercase arrays of ``dtype`` by ``op`` as mpi4py's ``x + y`` or
    ``x * y`` would (mpi4py's MIN and MAX compare whole arrays: its error, not ours)."""
    if dtype.kind not in "iufc" or not (op == MPI.SUM or op == MPI.PROD):
        return False
    try:
        ops.check_dtype(dtype, ops.resolve(op))
    except (TypeError, ValueError):
        return False
    return True
