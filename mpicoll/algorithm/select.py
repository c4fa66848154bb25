"""Which algorithm a call runs: ``auto``'s rule, and the reroutes a codec or an op needs."""

from __future__ import annotations

from typing import Any, Callable

from .. import tune
from .base import Algorithm, Layout
from .registry import AUTO, get, registered

__all__ = ["choose", "resolve", "accepts", "codec_kind", "TREE_MAX_BYTES"]

TREE_MAX_BYTES = 64 * 1024
"""Up to this many bytes the tree's 2⌈lg p⌉ steps beat the ring's 2(p-1); see docs/results.md."""


def choose(nbytes: int, layout: Layout) -> str:
    """Follow ``$MPICOLL_TUNING`` when it fits this layout; else tree for small messages, hybrid
    across several multi-rank nodes, ring otherwise."""
    if layout.size == 1:
        return "ring"
    rules = tune.rules_for(layout.size, len(layout.nodes))
    if rules:
        return next((r["algorithm"] for r in rules if nbytes <= r["max_bytes"]), rules[-1]["algorithm"])
    if nbytes <= TREE_MAX_BYTES:
        return "tree"
    if 1 < len(layout.nodes) < layout.size:
        return "hybrid"
    return "ring"


def codec_kind(codec: Any) -> str | None:
    """"dense" (frame size fixed by the count), "sparse", or None without a codec."""
    if codec is None:
        return None
    return "dense" if codec.dense else "sparse"


def accepts(algorithm: Algorithm, codec_kind: str | None) -> bool:
    """Whether ``algorithm=`` may name this algorithm with a codec of this kind (None: no codec).

    A sparse codec goes to a sparse algorithm whatever was asked (its frames cannot be reduced
    hop by hop), so any algorithm that compresses accepts one.
    """
    if codec_kind is None:
        return algorithm.plain
    return codec_kind in algorithm.compresses or (codec_kind == "sparse" and bool(algorithm.compresses))


def resolve(asked: Algorithm | str | None, nbytes: int, layout: Layout, codec_kind: str | None,
            commutative: bool = True) -> Algorithm:
    """The algorithm that runs when ``asked`` (an algorithm or its name that :func:`accepts` the
    codec; None or "auto" for auto) is asked for.

    Decided from what every rank knows alike (sizes, layout, codec kind), so all agree.
    """
    if isinstance(asked, str):
        asked = None if asked == AUTO else get(asked)
    if codec_kind == "sparse" and layout.size > 1:
        if asked is not None and "sparse" in asked.compresses:
            return asked
        return _first(lambda a: "sparse" in a.compresses)
    if asked is not None:
        return asked
    chosen = get(choose(nbytes, layout))
    if (codec_kind is None or codec_kind in chosen.compresses) and not _misfit(chosen, layout, commutative):
        return chosen
    return _first(lambda a: accepts(a, codec_kind) and not _misfit(a, layout, commutative))


def _misfit(algorithm: Algorithm, layout: Layout, commutative: bool) -> bool:
    return (algorithm.needs_commutative and not commutative) or \
        (algorithm.one_node and len(layout.nodes) > 1)


def _first(fits: Callable[[Algorithm], bool]) -> Algorithm:
    found = next((a for a in registered() if fits(a)), None)
    if found is None:
        raise ValueError("no registered algorithm can run this call")
    return found
