"""The MPI library's own allreduce, as one more algorithm: for A/B comparison, and as a
candidate of ``auto`` where MPI's latency is what a Python schedule cannot match.

``MPI_Iallreduce`` on mpicoll's private communicator, also for the blocking call, and
``MPI_Allreduce_init`` for ``allreduce_init``. Blocking calls post the nonblocking one because
MPI never matches a blocking collective with a nonblocking one while whether a call waits alone
or among other requests in flight is each rank's own business; and because, waited on among
them, its requests are advanced by mpicoll's progress engine like any round, so requests still
complete in any order. Alone it completes by ``Test`` in a loop, then ``Wait`` (:data:`SPINS`):
with MPICH 5 the loop is faster than ``MPI_Allreduce`` itself at 8 B (1.55 against 1.97 µs at
2 ranks here) and than ``Wait``.
An average divides by p before the sum, as every mpicoll algorithm does.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Iterator

from mpi4py import MPI

from .._array import address, array_module
from .base import Algorithm, Call

if TYPE_CHECKING:
    from ..context import Context
    from ..ops import Op

__all__ = ["ALGORITHM", "NativeExecution", "exact", "post", "complete", "SPINS"]

_OPEN_MPI = MPI.Get_library_version().startswith("Open MPI")


def exact(dtype) -> bool:
    """Whether MPI's own sum of ``dtype`` wraps as NumPy does: Open MPI's ``op/avx`` saturates
    8- and 16-bit integer sums (open-mpi/ompi#8045), so ``auto`` never hands it those."""
    return not (_OPEN_MPI and dtype.kind in "iu" and dtype.itemsize <= 2)


def post(send: Any, recv: Any, op: Op, ctx: Context) -> MPI.Request:
    """Start ``MPI_Iallreduce`` of ``send`` into ``recv`` on ``ctx``'s communicator."""
    return ctx.comm.Iallreduce(_first(send, recv, op, ctx.size), recv, op.mpi)


SPINS = range(32)
"""How many ``Test`` calls a waiting call spins before it blocks in ``Wait``: spinning answers a
few microseconds sooner, but a rank that shares its core with another (4 ranks on 2 cores)
must let MPI yield the core, or the ranks it waits for never run (33× slower at 8 B)."""


def complete(request: MPI.Request) -> None:
    """Wait for ``request``: ``Test`` a few times, then ``Wait``."""
    for _ in SPINS:
        if request.Test():
            return
    request.Wait()


def _first(send: Any, recv: Any, op: Op, size: int) -> Any:
    """What MPI takes as the send buffer: ``MPI_IN_PLACE`` in place, and for an average, whose
    contribution is divided into ``recv`` first, as the prologue of every schedule does."""
    if op.average:
        array_module(send).multiply(send, 1 / size, out=recv, casting="unsafe")
        return MPI.IN_PLACE
    return MPI.IN_PLACE if address(send) == address(recv) else send  # flat views of the call


class NativeExecution:
    """One ``MPI_Iallreduce`` in flight, shaped like :class:`~mpicoll.engine.Execution` for the
    request and the progress engine."""

    __slots__ = ("_request", "_record", "progressed")

    def __init__(self, call: Call):
        self._request: MPI.Request | None = post(call.send, call.recv, call.op, call.ctx)
        self._record = call.record
        self.progressed = time.monotonic()

    @property
    def done(self) -> bool:
        return self._request is None

    def pending(self) -> list[MPI.Request]:
        return [] if self._request is None else [self._request]

    def where(self) -> str:
        return "finished" if self._request is None else "in MPI_Iallreduce"

    def test(self) -> bool:
        if self._request is not None and self._request.Test():
            self._finished()
        return self._request is None

    def wait(self) -> None:
        if self._request is not None:
            complete(self._request)
            self._finished()

    def completed(self, index: int, status: MPI.Status) -> None:
        """Completed by the progress engine's ``Waitany``."""
        self._finished()

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
                      run=run, tags=0)
