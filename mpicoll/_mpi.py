"""Completing an MPI request from Python: spin on ``Test`` a little, then block in ``Wait``."""

from __future__ import annotations

import os
from typing import Iterable

from mpi4py import MPI

__all__ = ["SPINS", "SHARED_CORE_SPINS", "spins", "complete", "threads_allow"]

SPINS = range(32)
"""How many ``Test`` calls a waiting call spins before it blocks in ``Wait``: spinning answers
sooner (with MPICH 5 at 2 ranks here, an 8 B ``MPI_Iallreduce`` completed by ``Test`` took
0.84× ``MPI_Allreduce``'s time, by ``Wait`` 1.35×; ``abc5a13:benchmarks/waiting.py``)."""

SHARED_CORE_SPINS = range(4)
"""The same where ranks share cores (4 ranks on 2 here): a rank that only spins keeps the core
from the rank it waits for (32× ``MPI_Allreduce``'s time at 8 B), so it soon lets MPI yield."""


def spins(ranks_on_node: int) -> range:
    """The spins for a rank whose node runs ``ranks_on_node`` ranks."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return SPINS if ranks_on_node <= (cores or 1) else SHARED_CORE_SPINS


def threads_allow() -> bool:
    """Whether a helper thread may block in MPI while another drives the rest
    (``MPI_THREAD_MULTIPLE``, mpi4py's default)."""
    return MPI.Query_thread() == MPI.THREAD_MULTIPLE


def complete(request: MPI.Request, spin: Iterable[int] = SPINS) -> None:
    """Wait for ``request``: ``Test`` ``len(spin)`` times, then ``Wait``."""
    for _ in spin:
        if request.Test():
            return
    request.Wait()
