"""Fit ``auto`` to this machine: measure each algorithm per size, keep the fastest, save the rules.

``python -m mpicoll tune --rules tuning.json`` writes a file; ``MPICOLL_TUNING=tuning.json``
makes ``auto`` follow it on the same number of ranks and nodes. Elsewhere the file does not
apply: ``auto`` then keeps its built-in rule and warns once, rather than guess.
"""

from __future__ import annotations

import json
import os
import warnings
from functools import lru_cache

import numpy as np

__all__ = ["fit", "save", "rules_for", "candidates", "TUNING_ENV"]

TUNING_ENV = "MPICOLL_TUNING"
FORMAT = 1


def candidates(nodes: int = 1) -> tuple[str, ...]:
    """What tune measures and ``auto`` may follow: every algorithm that runs without a codec
    and fits ``nodes`` nodes."""
    from .algorithm import registry  # the registry imports the rule that reads this module
    return tuple(a.name for a in registry.registered()
                 if a.plain and not (a.one_node and nodes > 1))


def fit(rows: np.ndarray) -> list[dict]:
    """Bench rows -> [{"max_bytes": n, "algorithm": name}, ...]: the fastest up to each size
    (lowest median ratio to native, measured interleaved, so drift on a busy machine cancels).

    Neighbouring sizes with the same winner merge; the last rule covers every larger size.
    """
    rules: list[dict] = []
    for size in np.unique(rows["size"]):
        at = rows[rows["size"] == size]
        best = at["algorithm"][np.argmin(at["ratio"])].decode()  # ratios survive drift
        if rules and rules[-1]["algorithm"] == best:
            rules[-1]["max_bytes"] = int(size)
        else:
            rules.append({"max_bytes": int(size), "algorithm": best})
    return rules


def save(path: str, rules: list[dict], ranks: int, nodes: int, library: str) -> None:
    with open(path, "w") as f:
        json.dump({"mpicoll_tuning": FORMAT, "ranks": ranks, "nodes": nodes,
                   "mpi_library": library, "rules": rules}, f, indent=1)


def rules_for(ranks: int, nodes: int) -> list[dict] | None:
    """The rules of ``$MPICOLL_TUNING`` when it was measured on this many ranks and nodes."""
    path = os.environ.get(TUNING_ENV)
    if not path:
        return None
    stamp = os.stat(path).st_mtime_ns if os.path.exists(path) else None
    return _load(path, stamp, ranks, nodes)


@lru_cache(maxsize=8)
def _load(path: str, stamp: int | None, ranks: int, nodes: int) -> list[dict] | None:
    if stamp is None:
        raise ValueError(f"{TUNING_ENV}={path!r}: no such file")
    try:
        with open(path) as f:
            data = json.load(f)
        rules = data["rules"]
        ok = data["mpicoll_tuning"] == FORMAT and all(
            r["algorithm"] in candidates() and int(r["max_bytes"]) >= 0 for r in rules) and rules
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise ValueError(f"{TUNING_ENV}={path!r} is not a tuning file: {error}") from None
    if not ok:
        raise ValueError(f"{TUNING_ENV}={path!r} is not a tuning file of format {FORMAT}")
    if (data.get("ranks"), data.get("nodes")) != (ranks, nodes):
        warnings.warn(f"{path} was tuned on {data.get('ranks')} ranks / {data.get('nodes')} nodes, "
                      f"not {ranks} / {nodes}: auto keeps its built-in rule", stacklevel=4)
        return None
    return rules
