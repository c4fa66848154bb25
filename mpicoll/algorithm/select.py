"""The ``auto`` rule: which algorithm a call runs when the user does not say."""

from __future__ import annotations

TREE_MAX_BYTES = 64 * 1024
"""Up to this many bytes the tree's 2⌈lg p⌉ steps beat the ring's 2(p-1); see docs/results.md."""


def choose(nbytes: int, topo) -> str:
    """Tree for small messages, hybrid across several multi-rank nodes, ring otherwise."""
    if topo.size == 1:
        return "ring"
    if nbytes <= TREE_MAX_BYTES:
        return "tree"
    if 1 < len(topo.nodes) < topo.size:
        return "hybrid"
    return "ring"
