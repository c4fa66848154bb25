"""Is the MPI library CUDA-aware? Asked of the library itself, with an override both ways.

A non-CUDA-aware MPI given a device pointer crashes, so the answer defaults to "no" unless the
library says yes (``MPIX_Query_cuda_support``, MPICH and Open MPI; or ``cuda`` among the MPI 4.1
``mpi_memory_alloc_kinds``) or the user sets ``MPICOLL_CUDA_AWARE=1``.
"""

from __future__ import annotations

import ctypes
import functools
import os
from dataclasses import dataclass

from mpi4py import MPI

__all__ = ["Answer", "detect", "OVERRIDE_ENV"]

OVERRIDE_ENV = "MPICOLL_CUDA_AWARE"


@dataclass(frozen=True)
class Answer:
    aware: bool
    source: str  # how we know, for `python -m mpicoll info` and timing provenance


def detect() -> Answer:
    """The override when set (read on every call), else what the library says (asked once)."""
    override = os.environ.get(OVERRIDE_ENV)
    if override is not None:
        if override not in ("0", "1"):
            raise ValueError(f"{OVERRIDE_ENV}={override!r}: expected 0 or 1")
        return Answer(override == "1", f"{OVERRIDE_ENV}={override}")
    return _library()


@functools.cache
def _library() -> Answer:
    kinds = MPI.COMM_WORLD.Get_info().Get("mpi_memory_alloc_kinds") or ""
    if "cuda" in kinds.split(","):
        return Answer(True, f"mpi_memory_alloc_kinds={kinds}")
    try:
        query = ctypes.CDLL(MPI.__file__).MPIX_Query_cuda_support
    except (OSError, AttributeError):
        return Answer(False, "MPIX_Query_cuda_support not found; mpi_memory_alloc_kinds="
                      + (kinds or "unset"))
    query.restype = ctypes.c_int
    answer = query()
    return Answer(bool(answer), f"MPIX_Query_cuda_support() returned {answer}")
