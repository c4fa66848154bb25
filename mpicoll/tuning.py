"""Which tuning model ``auto`` predicts with: ``$MPICOLL_TUNING``'s file, read and checked, or
the built-in one; and what ``tune`` measures and ``auto`` may pick.

The measuring tool itself is :mod:`mpicoll.tune`; this is the part a call needs.
"""

from __future__ import annotations

import json
import os
from functools import lru_cache

from . import _env
from .algorithm import registry
from .costmodel import BUILTIN, Model

__all__ = ["candidates", "save", "load", "model_in_force", "TUNING_ENV", "FORMAT"]

TUNING_ENV = _env.TUNING_ENV
FORMAT = 2


def candidates(nodes: int = 1, collective: str = "allreduce") -> tuple[str, ...]:
    """What tune measures and ``auto`` may pick for ``collective``: every algorithm that runs
    it without a codec and fits ``nodes`` nodes."""
    return tuple(a.name for a in registry.registered(collective)
                 if a.plain and not (a.one_node and nodes > 1))


def save(path: str, model: Model, ranks: int, nodes: int, library: str) -> None:
    with open(path, "w") as f:
        json.dump({"mpicoll_tuning": FORMAT, "ranks": ranks, "nodes": nodes,
                   "mpi_library": library, "alpha": model.alpha, "beta": model.beta,
                   "gamma": model.gamma, "cache_bytes": model.cache_bytes, "fresh": model.fresh,
                   "algorithms": {k: list(v) for k, v in model.algorithms.items()},
                   "fastest_measured": [list(m) for m in model.measured],
                   "fastest_measured_by_collective": {
                       name: [list(m) for m in measured] for name, measured in model.measured_by}},
                  f, indent=1)


def _figures(values: list) -> tuple[float, float, float]:
    """An algorithm's (overhead, factor, factor in the cache); files of format 2 before the cache
    figure have two, the one factor for both."""
    overhead, factor, *cached = map(float, values)
    return overhead, factor, cached[0] if cached else factor


def model_in_force() -> Model:
    """The model of ``$MPICOLL_TUNING`` (read once, see ``reload_environment``), else the built-in."""
    path = _env.settings().tuning
    return load(path) if path else BUILTIN


def load(path: str) -> Model:
    """The model of the tuning file ``path`` (read again when it changes)."""
    return _load(path, os.stat(path).st_mtime_ns if os.path.exists(path) else None)


@lru_cache(maxsize=8)
def _load(path: str, stamp: int | None) -> Model:
    if stamp is None:
        raise ValueError(f"{TUNING_ENV}={path!r}: no such file")
    try:
        with open(path) as f:
            data = json.load(f)
        if data.get("mpicoll_tuning") != FORMAT:
            raise ValueError(f"format {data.get('mpicoll_tuning')}, expected {FORMAT} "
                             "(run `python -m mpicoll tune` again)")
        levels = ("local", "remote")
        model = Model({k: float(data["alpha"][k]) for k in levels},
                      {k: float(data["beta"][k]) for k in levels}, float(data["gamma"]),
                      {k: _figures(v) for k, v in data["algorithms"].items()},
                      f"{path} ({data.get('ranks')} ranks, {data.get('nodes')} nodes, "
                      f"{data.get('mpi_library')})",
                      tuple((int(size), str(name)) for size, name in data.get("fastest_measured", ())),
                      (int(data["ranks"]), int(data["nodes"])),
                      cache_bytes=int(data.get("cache_bytes", 0)),
                      fresh=float(data.get("fresh", 0.0)),  # (0: a file from before the term)
                      measured_by=tuple(
                          (str(name), tuple((int(size), str(pick)) for size, pick in measured))
                          for name, measured in data.get("fastest_measured_by_collective",
                                                         {}).items()))
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise ValueError(f"{TUNING_ENV}={path!r} is not a tuning file: {error}") from None
    return model
