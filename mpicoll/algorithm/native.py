"""The MPI library's own allreduce, as one more algorithm: for A/B comparison, and as a
candidate of ``auto`` where MPI's latency is what a Python schedule cannot match.

``MPI_Iallreduce`` on mpicoll's private communicator, also for the blocking call, and
``MPI_Allreduce_init`` for ``allreduce_init``. Blocking calls post the nonblocking one because
MPI never matches a blocking collective with a nonblocking one while whether a call waits alone
or among other requests in flight is each rank's own business; and because, waited on among
them, its requests are advanced by mpicoll's progress engine like any round, so requests still
complete in any order. Alone it completes by ``Test`` a few times, then ``Wait``
(:func:`mpicoll._mpi.complete`): with MPICH 5 the ``Test`` loop is faster than
``MPI_Allreduce`` itself at small sizes.
An average divides by p before the sum, as every mpicoll algorithm does.
"""

from __future__ import annotations

import itertools
import time
from typing import TYPE_CHECKING, Any, Iterable, Iterator

from mpi4py import MPI

from .. import fault
from .._array import address, array_module
from .._mpi import SPINS, complete
from ..execution import Call
from .base import Algorithm

if TYPE_CHECKING:
    from ..ops import Op

__all__ = ["ALGORITHM", "NativeExecution", "exact", "first_buffer", "send_argument", "divide_into",
           "in_place", "own", "own_call"]

_OPEN_MPI = MPI.Get_library_version().startswith("Open MPI")


def exact(dtype) -> bool:
    """Whether MPI's own sum of ``dtype`` wraps as NumPy does: Open MPI's ``op/avx`` saturates
    8- and 16-bit integer sums (open-mpi/ompi#8045), so ``auto`` never hands it those."""
    return not (_OPEN_MPI and dtype.kind in "iu" and dtype.itemsize <= 2)


def send_argument(send: Any, in_place: bool, op: Op) -> Any:
    """What MPI takes as the send buffer: ``MPI_IN_PLACE`` in place, and for an average, whose
    contribution :func:`divide_into` the result first, as the prologue of every schedule does.
    Decided once per kind of call (the fast path, a persistent request) or per call
    (:func:`first_buffer`)."""
    return MPI.IN_PLACE if in_place or op.average else send


def divide_into(send: Any, recv: Any, size: int) -> None:
    """An average's first step: this rank's contribution, divided by p, into the result."""
    array_module(send).multiply(send, 1 / size, out=recv, casting="unsafe")


def in_place(send: Any, recv: Any) -> bool:
    """Whether a call's (flat) arrays are one: they are one or apart (checked), so sharing
    memory means in place (and costs a fifth of comparing addresses, which NumPy builds a dict
    for). Empty arrays share no memory: theirs are compared by address (Open MPI's
    ``MPI_Reduce_init`` refuses one buffer as both, even of no elements)."""
    return bool(array_module(send).may_share_memory(send, recv)) \
        or (send.size == 0 and address(send) == address(recv))


def own(comm: MPI.Intracomm, collective: str, send: Any, recv: Any, op: Op,
        counts: tuple[int, ...] | None, persistent: bool = False, root: int = 0) -> MPI.Request:
    """MPI's own ``allgather``, ``reduce_scatter``, ``bcast`` or ``reduce``, posted (or,
    ``persistent``, made not started): see :func:`own_call`."""
    post, args = own_call(comm, collective, send, recv, op, counts,
                          "init" if persistent else "I", root)
    return post(*args)


def own_call(comm: MPI.Intracomm, collective: str, send: Any, recv: Any, op: Op,
             counts: tuple[int, ...] | None, form: str = "I", root: int = 0
             ) -> tuple[Any, tuple]:
    """MPI's own call for a collective other than allreduce, and its arguments, decided once
    (the fast path posts them again and again); ``form``: "I" (nonblocking), "init"
    (persistent) or "" (blocking). The ``v`` form where ``counts`` gives uneven blocks,
    ``MPI_IN_PLACE`` where the arrays are one (allgather: ``send`` is this rank's block of
    ``recv``; reduce_scatter: the input is ``recv``, the result its first block; reduce: at the
    root); bcast's buffer is ``recv``."""
    first = MPI.IN_PLACE if in_place(send, recv) else send
    args: tuple
    if collective == "bcast":
        stem, args = "Bcast", (recv, root)
    elif collective == "reduce":
        stem, args = "Reduce", (first, recv, op.mpi, root)
    elif collective == "allgather":
        stem = "Allgather" if counts is None else "Allgatherv"
        args = (first, recv) if counts is None else (first, [
            recv, (list(counts), list(itertools.accumulate(counts, initial=0))[:-1])])
    elif counts is None:
        stem, args = "Reduce_scatter_block", (first, recv, op.mpi)
    else:
        stem, args = "Reduce_scatter", (first, recv, list(counts), op.mpi)
    name = f"{stem}_init" if form == "init" else f"I{stem[0].lower()}{stem[1:]}" if form == "I" \
        else stem
    return getattr(comm, name), args


def first_buffer(send: Any, recv: Any, op: Op, size: int) -> Any:
    """:func:`send_argument` for one call (an average divided into ``recv`` now)."""
    if op.average:
        divide_into(send, recv, size)
    return send_argument(send, in_place(send, recv), op)


class NativeExecution:
    """MPI's own nonblocking allreduce as one stage, shaped like
    :class:`~mpicoll.engine.Execution` for the request and the progress engine. Three ways in:
    a call's ``MPI_Iallreduce``, posted by its first ``test`` or ``wait`` (as an execution posts
    its first round: a call's fingerprint check completes before anything is posted); one
    :meth:`posted` already (the nonblocking fast path's); a :meth:`persistent` one, on
    ``MPI_Allreduce_init``'s request, rerun by :meth:`restart`."""

    __slots__ = ("_call", "_request", "_record", "_spins", "progressed", "_persistent",
                 "_divide", "_comm")

    def __init__(self, call: Call | None, request: MPI.Request | None = None,
                 spins: Iterable[int] = SPINS, comm: MPI.Comm | None = None):
        self._call = call  # until posted
        self._comm: Any = comm if call is None else call.ctx.comm  # (for fault.failure)
        self._request = request
        self._record = None if call is None else call.record
        self._spins = spins if call is None else call.ctx.spins
        self.progressed = time.monotonic()
        self._persistent: Any = None  # MPI_Allreduce_init's request, if persistent
        self._divide: tuple | None = None  # (send, recv, size): an average's, at each restart

    @classmethod
    def posted(cls, request: MPI.Request, spins: Iterable[int], comm: MPI.Comm) -> NativeExecution:
        """One posted already, with nothing to record (``mpicoll.fastpath.LoweredCall``'s)."""
        return cls(None, request, spins, comm)

    @classmethod
    def persistent(cls, send: Any, recv: Any, in_place: bool, op: Op, comm: MPI.Intracomm,
                   spins: Iterable[int], collective: str = "allreduce",
                   counts: tuple[int, ...] | None = None, root: int = 0) -> NativeExecution:
        """``MPI_Allreduce_init`` (or another collective's ``_init``: :func:`own_call`) on the
        caller's buffers, not started: :meth:`restart` it."""
        execution = cls(None, None, spins, comm)
        size = comm.Get_size()
        if collective != "allreduce":
            execution._persistent = own(comm, collective, send, recv, op, counts, True, root)
        else:
            execution._persistent = comm.Allreduce_init(send_argument(send, in_place, op), recv,
                                                        op.mpi)
            execution._divide = (send, recv, size) if op.average else None
        return execution

    def restart(self) -> NativeExecution:
        """Start the persistent request again (an average divided into the result first)."""
        if self._divide is not None:
            divide_into(*self._divide)
        self._persistent.Start()
        self._request = self._persistent
        self.progressed = time.monotonic()  # (the watchdog's: it moved now, not at init)
        return self

    def free(self) -> None:
        """Release a persistent request (after its last wait)."""
        if self._persistent is not None:
            self._persistent.Free()
            self._persistent = None

    @property
    def done(self) -> bool:
        return self._call is None and self._request is None

    def pending(self) -> list[MPI.Request]:
        return [] if self._request is None else [self._request]

    def where(self) -> str:
        if self._request is not None:
            return "in MPI's own persistent collective" if self._persistent is not None \
                else "in MPI's own nonblocking collective"
        return "not started" if self._call is not None else "finished"

    def test(self) -> bool:
        self._post()
        try:
            if self._request is not None and self._request.Test():
                self._finished()
        except MPI.Exception as error:
            raise fault.failure(error, self._comm) or error
        return self.done

    def wait(self) -> None:
        if self._call is not None:
            self._post()
        request = self._request
        if request is not None:
            try:
                complete(request, self._spins)
            except MPI.Exception as error:
                raise fault.failure(error, self._comm) or error
            self._request = None  # _finished(), inlined: a persistent start's budget is ~1 µs
            if self._record is not None:
                self._record.t1 = MPI.Wtime()

    def completed(self, index: int, status: MPI.Status) -> None:
        """Completed by the progress engine's ``Waitany``."""
        self._finished()

    def _post(self) -> None:
        call = self._call
        if call is not None:
            comm = call.ctx.comm
            if call.collective != "allreduce":
                options = call.options
                self._request = own(comm, call.collective, call.send, call.recv, call.op,
                                    options.counts, False, options.root)
            else:
                first = first_buffer(call.send, call.recv, call.op, call.ctx.size)
                self._request = comm.Iallreduce(first, call.recv, call.op.mpi)
            self._call = None

    def _finished(self) -> None:
        self._request = None
        if self._record is not None:
            self._record.t1 = MPI.Wtime()


def run(algorithm: Algorithm, call: Call) -> Iterator[NativeExecution]:
    if call.path.name == "staged":
        raise ValueError("native needs host arrays or a CUDA-aware MPI: this MPI cannot take "
                         "device memory (use another algorithm, which stages through the host)")
    yield NativeExecution(call)


ALGORITHM = Algorithm("native", "the MPI library's own MPI_Iallreduce (MPI_Iallgather(v), "
                      "MPI_Ireduce_scatter(_block), MPI_Ibcast, MPI_Ireduce), for comparison "
                      "and auto", run=run, tags=0, mpi=True,
                      collectives=frozenset({"allreduce", "allgather", "reduce_scatter", "bcast",
                                             "reduce"}))
