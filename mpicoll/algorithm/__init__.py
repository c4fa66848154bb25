"""Allreduce algorithms, one per module; each plans a Schedule for one rank.

The package is `algorithm`, singular, because `mpicoll.algorithms()` is the public function
that lists their names. A module defines ``ALGORITHM`` (see :mod:`.base` for the contract);
the list below registers them, in the order listings and ``auto``'s fallbacks use. Adding an
algorithm is one module and one line here: the API, bench, tune and the test grid read the
registry.
"""

from __future__ import annotations

from importlib import import_module

from .base import Algorithm, Call, Frames, Layout, Options, Ran, build_schedule, run_planned
from .registry import UnknownAlgorithmError, get, names, register, registered

__all__ = ["Algorithm", "Call", "Frames", "Layout", "Options", "Ran", "UnknownAlgorithmError",
           "build_schedule", "get", "names", "register", "registered", "run_planned"]

MODULES = (
    "ring",
    "tree",
    "recursive_doubling",
    "rabenseifner",
    "hybrid",
    "sparse_auto",
    "sparse_allgather",
    "sparse_regions",
    "shm",
    "native",
    "native_blocking",
)

for _module in MODULES:
    register(import_module(f"{__name__}.{_module}").ALGORITHM)
