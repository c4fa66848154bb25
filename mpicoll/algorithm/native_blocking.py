"""The MPI library's own blocking ``MPI_Allreduce`` for blocking calls: where MPI's blocking
collective beats its nonblocking one (MPICH 5 at 8 KiB on 4 ranks: ``MPI_Iallreduce`` took
1.24× ``MPI_Allreduce``; Open MPI's ``MPI_Iallgather`` 2.6-4.8× its ``MPI_Allgather`` at 32 KiB
to 2 MiB on 2 ranks), a candidate of ``auto`` as measured by ``tune``. The same for
``allgather`` and ``reduce_scatter``: their blocking calls.

MPI never matches a blocking collective with a nonblocking one, so every rank must block in
the same calls: a blocking ``allreduce`` with this algorithm always runs ``MPI_Allreduce``,
and ``iallreduce`` and ``allreduce_init`` run what :mod:`.native` runs. Whether a call blocks
is therefore part of what the fingerprint check compares (``Algorithm.blocks``).

A rank blocked in MPI cannot advance mpicoll's own collectives still in flight, which other
ranks may need before they reach this call (requests complete in any order). So a call with
nothing else in flight (the common case, and the fast path's) blocks in ``MPI_Allreduce``
itself; with collectives in flight a helper thread blocks in it while this one drives them,
and a generalized request completed by the helper lets the progress engine wait on it with
theirs. That needs ``MPI_THREAD_MULTIPLE``: without it ``auto`` never picks this algorithm,
and asking for it with collectives in flight is an error.
"""

from __future__ import annotations

import threading
from typing import Any, Iterator

from mpi4py import MPI

from .. import fault, watchdog
from .._mpi import threads_allow
from ..execution import Call
from .base import Algorithm
from .native import NativeExecution, first_buffer, own_call

__all__ = ["ALGORITHM", "BlockingExecution"]


class BlockingExecution(NativeExecution):
    """One blocking ``MPI_Allreduce``, run by the first ``test`` or ``wait``: on this thread when
    nothing else is in flight, else on a helper thread whose generalized request the progress
    engine waits on with the others'."""

    __slots__ = ("_error",)

    def __init__(self, call: Call):
        super().__init__(call)
        self._error: BaseException | None = None  # the helper's, raised where the call waits

    def where(self) -> str:
        return "in MPI_Allreduce (a helper thread)" if self._request is not None else \
            super().where()

    def _post(self) -> None:
        call, self._call = self._call, None
        if call is None:
            return
        if call.collective == "allreduce":
            method, args = call.ctx.comm.Allreduce, (
                first_buffer(call.send, call.recv, call.op, call.ctx.size), call.recv,
                call.op.mpi)
        else:  # MPI_Allgather(v), MPI_Reduce_scatter(_block), MPI_Bcast, MPI_Reduce
            method, args = own_call(call.ctx.comm, call.collective, call.send, call.recv,
                                    call.op, call.options.counts, "", call.options.root)
        from .. import inflight  # the engine imports the requests, which import the algorithms
        if len(inflight.outstanding()) <= 1:  # this call's own request alone: block right here
            with watchdog.Blocked(lambda: f"MPI_{method.__name__} (native-blocking)"):
                try:
                    method(*args)
                except MPI.Exception as error:
                    raise fault.failure(error, call.ctx.comm) or error
            self._finished()
            return
        if not threads_allow():
            raise RuntimeError("native-blocking with other collectives in flight needs "
                               "MPI_THREAD_MULTIPLE (mpi4py's default): complete them first, "
                               "or use another algorithm")
        request = MPI.Grequest.Start(lambda status: None, lambda: None, lambda completed: None)
        self._request = request
        threading.Thread(target=self._block, args=(call.ctx.comm, method, args, request),
                         daemon=True, name="mpicoll native-blocking").start()

    def _block(self, comm: MPI.Intracomm, method: Any, args: tuple, request: MPI.Grequest
               ) -> None:
        try:
            method(*args)
        except MPI.Exception as error:  # raised again where the call waits
            self._error = fault.failure(error, comm) or error
        except BaseException as error:
            self._error = error
        finally:
            request.Complete()

    def wait(self) -> None:
        super().wait()
        if self._error is not None:
            raise self._error

    def _finished(self) -> None:
        super()._finished()
        if self._error is not None:
            raise self._error


def run(algorithm: Algorithm, call: Call) -> Iterator[Any]:
    if call.path.name == "staged":
        raise ValueError("native-blocking needs host arrays or a CUDA-aware MPI: this MPI "
                         "cannot take device memory (use another algorithm)")
    yield BlockingExecution(call) if call.blocking else NativeExecution(call)


ALGORITHM = Algorithm("native-blocking", "the MPI library's own MPI_Allreduce for blocking "
                      "calls (MPI_Iallreduce for the others; MPI_Allgather(v), "
                      "MPI_Reduce_scatter(_block), MPI_Bcast, MPI_Reduce likewise), for auto "
                      "where MPI's blocking call is faster", run=run, tags=0, mpi=True,
                      blocks=True, collectives=frozenset({"allreduce", "allgather",
                                                          "reduce_scatter", "bcast", "reduce"}))
