"""NumPy/CuPy shim: one place that decides which array module a buffer belongs to.

Code written against ``xp = array_module(x)`` runs unchanged on host (NumPy) and device (CuPy)
arrays. CuPy is never imported here: an array can only be a CuPy array if the caller has already
imported CuPy, so looking in ``sys.modules`` is enough and keeps ``import mpicoll`` cheap.
"""

from __future__ import annotations

import sys
from types import ModuleType
from typing import Any, TypeAlias

import numpy as np

__all__ = ["Array", "array_module", "is_device", "address", "writeable", "to_host", "same_module",
           "flat", "MIXED"]

Array: TypeAlias = Any
"""A NumPy or CuPy ndarray. CuPy has no type information (and is optional), so annotations say
``Array`` where either kind may appear and ``np.ndarray`` where only host memory is possible."""

MIXED = ("host (NumPy) and device (CuPy) arrays cannot be mixed; move one with cupy.asarray / "
         "cupy.asnumpy")


def array_module(a: Array) -> ModuleType:
    """Return ``cupy`` for a CuPy array, else ``numpy``."""
    if type(a) is np.ndarray:  # the common case first: this runs several times per call
        return np
    cupy = sys.modules.get("cupy")
    if cupy is not None and isinstance(a, cupy.ndarray):
        return cupy
    return np


def is_device(a: Array) -> bool:
    return array_module(a) is not np


def address(a: Array) -> int:
    """Where the array's first element lives (a device pointer for device arrays)."""
    interface = a.__cuda_array_interface__ if is_device(a) else a.__array_interface__
    return interface["data"][0]


def writeable(a: Array) -> bool:
    return getattr(a.flags, "writeable", True)  # CuPy arrays have no read-only flag


def flat(a: Array) -> Array:
    """A 1-D view of a contiguous array's elements in memory order (C or Fortran): the message
    MPI sees in it, whatever its shape; ``reshape(-1)`` would copy a Fortran-ordered one."""
    return a.reshape(-1) if a.flags.c_contiguous else a.T.reshape(-1)


def to_host(a: Array) -> np.ndarray:
    """``a`` itself on the host, a NumPy copy of a device array (synchronous: keep it small)."""
    return a.get() if is_device(a) else a


def same_module(what: str, first: Array, *others: Array | None) -> ModuleType:
    """The array module of ``first``; TypeError if any of ``others`` lives elsewhere."""
    xp = array_module(first)
    for other in others:
        if other is not None and array_module(other) is not xp:
            raise TypeError(f"{what}: {MIXED}")
    return xp
