"""Algorithms by name: the one table the API, ``auto``, bench, tune and the tests read."""

from __future__ import annotations

from .. import _plugins, collective as collectives
from .base import Algorithm

__all__ = ["register", "get", "registered", "names", "generation", "UnknownAlgorithmError"]

_BY_NAME: dict[str, Algorithm] = {}
AUTO = "auto"
_generation = 0  # registrations so far: what caches of choices among the algorithms key on
PLUGINS = "mpicoll.algorithms"  # the entry point group other packages' algorithms are in
_plugins_loaded = False


class UnknownAlgorithmError(ValueError):
    """No algorithm of that name is registered."""


def register(algorithm: Algorithm) -> Algorithm:
    """Add ``algorithm``; a name already taken (or "auto") raises ValueError."""
    if not isinstance(algorithm, Algorithm):
        raise TypeError(f"register takes an Algorithm, not {type(algorithm).__name__}")
    if algorithm.name in _BY_NAME or algorithm.name == AUTO:
        raise ValueError(f"an algorithm named {algorithm.name!r} is already registered")
    global _generation
    _BY_NAME[algorithm.name] = algorithm
    _generation += 1
    return algorithm


def generation() -> int:
    """How many registrations were made: a cached choice among the algorithms made at another
    generation is stale."""
    return _generation


def _load_plugins() -> None:
    """Register the installed plugins' algorithms (:mod:`mpicoll._plugins`), once."""
    global _plugins_loaded
    if not _plugins_loaded:
        _plugins_loaded = True
        _plugins.load(PLUGINS, register)


def get(name: str, collective: str = collectives.ALLREDUCE.name) -> Algorithm:
    """The algorithm called ``name`` (a plugin's too) that runs ``collective``."""
    algorithm = _BY_NAME.get(name) if isinstance(name, str) else None
    if algorithm is None and isinstance(name, str):
        _load_plugins()
        algorithm = _BY_NAME.get(name)
    if algorithm is None or collective not in algorithm.collectives:
        what = "unknown algorithm" if algorithm is None else \
            f"{collective} has no algorithm"
        raise UnknownAlgorithmError(f"{what} {name!r}; choose one of "
                                    f"{names(collective=collective) + (AUTO,)}")
    return algorithm


def registered(collective: str | None = collectives.ALLREDUCE.name) -> tuple[Algorithm, ...]:
    """Every algorithm that runs ``collective`` (None: every one), in registration order."""
    _load_plugins()
    return tuple(a for a in _BY_NAME.values()
                 if collective is None or collective in a.collectives)


def names(*, plain: bool | None = None, compresses: str | None = None,
          planned: bool | None = None, collective: str = collectives.ALLREDUCE.name
          ) -> tuple[str, ...]:
    """Names of the registered algorithms of ``collective``, optionally only those that run
    without a codec (``plain=True``), that run codecs of a kind (``compresses="dense"`` or
    ``"sparse"``), or that have a schedule of their own (``planned=True``: not ``native``,
    MPI's)."""
    _load_plugins()
    collectives.get(collective)  # ValueError: not a collective
    return tuple(a.name for a in _BY_NAME.values()
                 if collective in a.collectives
                 and (plain is None or a.plain == plain)
                 and (compresses is None or compresses in a.compresses)
                 and (planned is None or (a.plan is not None) == planned))
