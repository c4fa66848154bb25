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

import time
from typing import TYPE_CHECKING, Any, Iterator

from mpi4py import MPI

from .._array import array_module
from .._mpi import complete
from ..execution import Call
from .base import Algorithm

if TYPE_CHECKING:
    from ..ops import Op

__all__ = ["ALGORITHM", "NativeExecution", "exact", "first_buffer"]

_OPEN_MPI = MPI.Get_library_version().startswith("Open MPI")


def exact(dtype) -> bool:
    """Whether MPI's own sum of ``dtype`` wraps as NumPy does: Open MPI's ``op/avx`` saturates
    8- and 16-bit integer sums (open-mpi/ompi#8045), so ``auto`` never hands it those."""
    return not (_OPEN_MPI and dtype.kind in "iu" and dtype.itemsize <= 2)


def first_buffer(send: Any, recv: Any, op: Op, size: int) -> Any:
    """What MPI takes as the send buffer: ``MPI_IN_PLACE`` in place, and for an average, whose
    contribution is divided into ``recv`` first, as the prologue of every schedule does."""
    if op.average:
        array_module(send).multiply(send, 1 / size, out=recv, casting="unsafe")
        return MPI.IN_PLACE
    # Flat views of the call's arrays, which are one array or apart (checked): sharing memory
    # means in place (and costs a fifth of comparing addresses, which NumPy builds a dict for).
    return MPI.IN_PLACE if array_module(send).may_share_memory(send, recv) else send


class NativeExecution:
    """One ``MPI_Iallreduce``, shaped like :class:`~mpicoll.engine.Execution` for the request
    and the progress engine: posted by its first ``test`` or ``wait``, as an execution posts
    its first round (a call's fingerprint check completes before anything is posted)."""

    __slots__ = ("_call", "_request", "_record", "_spins", "progressed")

    def __init__(self, call: Call):
        self._call: Call | None = call  # until posted
        self._request: MPI.Request | None = None
        self._record = call.record
        self._spins = call.ctx.spins
        self.progressed = time.monotonic()

    @classmethod
    def posted(cls, request: MPI.Request, spins: range) -> NativeExecution:
        """One posted already, with nothing to record (``mpicoll.fastpath.Starter``'s)."""
        execution = cls.__new__(cls)
        execution._call, execution._request, execution._record = None, request, None
        execution._spins, execution.progressed = spins, time.monotonic()
        return execution

    @property
    def done(self) -> bool:
        return self._call is None and self._request is None

    def pending(self) -> list[MPI.Request]:
        return [] if self._request is None else [self._request]

    def where(self) -> str:
        return "in MPI_Iallreduce" if self._request is not None else \
            "not started" if self._call is not None else "finished"

    def test(self) -> bool:
        self._post()
        if self._request is not None and self._request.Test():
            self._finished()
        return self.done

    def wait(self) -> None:
        self._post()
        if self._request is not None:
            complete(self._request, self._spins)
            self._finished()

    def completed(self, index: int, status: MPI.Status) -> None:
        """Completed by the progress engine's ``Waitany``."""
        self._finished()

    def _post(self) -> None:
        call = self._call
        if call is not None:
            first = first_buffer(call.send, call.recv, call.op, call.ctx.size)
            self._request = call.ctx.comm.Iallreduce(first, call.recv, call.op.mpi)
            self._call = None

    def _finished(self) -> None:
        self._request = None
        self.progressed = time.monotonic()
        if self._record is not None:
            self._record.t1 = MPI.Wtime()


def run(algorithm: Algorithm, call: Call) -> Iterator[NativeExecution]:
    if call.path.name == "staged":
        raise ValueError("native needs host arrays or a CUDA-aware MPI: this MPI cannot take "
                         "device memory (use another algorithm, which stages through the host)")
    yield NativeExecution(call)


ALGORITHM = Algorithm("native", "the MPI library's own MPI_Iallreduce, for comparison and auto",
                      run=run, tags=0, mpi=True)
