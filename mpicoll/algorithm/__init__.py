"""Allreduce algorithms, one per module; each plans a Schedule for one rank.

The package is `algorithm`, singular, because `mpicoll.algorithms()` is the public function
that lists their names. A module defines ``ALGORITHM`` (see :mod:`.base` for the contract);
:mod:`mpicoll.builtin` registers them, one line each, in the order listings and ``auto``'s
fallbacks use. Adding an algorithm is one module and one line there: the API, bench, tune and
the test grid read the registry. Importing this package registers nothing and runs nothing.
"""

from __future__ import annotations

from .base import Algorithm, Frames, Layout, Options
from .base import build_schedule as _build
from .registry import UnknownAlgorithmError, get, names, register, registered
from ..schedule import Schedule

__all__ = ["Algorithm", "Frames", "Layout", "Options", "UnknownAlgorithmError",
           "build_schedule", "get", "names", "register", "registered"]


def build_schedule(algorithm: Algorithm | str, layout: Layout, count: int, options: Options,
                   frames: Frames | None = None, feedback: bool = False,
                   average: bool = False) -> Schedule:
    """The schedule of ``algorithm`` (or the one registered by that name) for this rank: see
    :func:`.base.build_schedule`."""
    return _build(get(algorithm) if isinstance(algorithm, str) else algorithm, layout, count,
                  options, frames, feedback, average)
