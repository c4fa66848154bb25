"""NumPy/CuPy shim: one place that decides which array module a buffer belongs to.

Code written against ``xp = array_module(x)`` runs unchanged on host (NumPy) and device (CuPy)
arrays. CuPy is never imported here: an array can only be a CuPy array if the caller has already
imported CuPy, so looking in ``sys.modules`` is enough and keeps ``import mpicoll`` cheap.
"""

from __future__ import annotations

import sys
from types import ModuleType

import numpy as np

__all__ = ["array_module"]


def array_module(a) -> ModuleType:
    """Return ``cupy`` for a CuPy array, else ``numpy``."""
    cupy = sys.modules.get("cupy")
    if cupy is not None and isinstance(a, cupy.ndarray):
        return cupy
    return np
