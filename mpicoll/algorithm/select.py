"""The ``auto`` rule: which algorithm a call runs when the user does not say."""

from __future__ import annotations

from .. import tune

TREE_MAX_BYTES = 64 * 1024
"""Up to this many bytes the tree's 2⌈lg p⌉ steps beat the ring's 2(p-1); see docs/results.md."""


def choose(nbytes: int, topo) -> str:
    """Follow ``$MPICOLL_TUNING`` when it fits this layout; else tree for small messages, hybrid
    across several multi-rank nodes, ring otherwise."""
    if topo.size == 1:
        return "ring"
    rules = tune.rules_for(topo.size, len(topo.nodes))
    if rules:
        return next((r["algorithm"] for r in rules if nbytes <= r["max_bytes"]), rules[-1]["algorithm"])
    if nbytes <= TREE_MAX_BYTES:
        return "tree"
    if 1 < len(topo.nodes) < topo.size:
        return "hybrid"
    return "ring"
