"""Allreduce algorithms, one per module; each plans a Schedule for one rank.

The package is `algorithm`, singular, because `mpicoll.algorithms()` is the public function
that lists their names.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..schedule import Builder, Copy, Region, Schedule
from . import hybrid, ring, tree

__all__ = ["Topology", "Options", "NAMES", "plan"]

_MODULES = {m.NAME: m for m in (ring, tree, hybrid)}
NAMES = tuple(_MODULES)


@dataclass(frozen=True)
class Topology:
    """Where this rank sits: its rank, the group size, and the ranks of every node in order."""

    rank: int
    size: int
    nodes: tuple[tuple[int, ...], ...]


@dataclass(frozen=True)
class Options:
    """Tunables that change a plan (and so belong to its cache key)."""

    segment_bytes: int
    itemsize: int

    @property
    def segment(self) -> int:
        """Tree segment in elements (at least one)."""
        return max(1, self.segment_bytes // self.itemsize)


def plan(name: str, topo: Topology, count: int, options: Options) -> Schedule:
    """Plan ``name`` for this rank. A lone rank only copies its input (nothing else to add)."""
    if topo.size == 1:
        b = Builder()
        b.round(local=[Copy(Region("recv", 0, count), Region("send", 0, count))])
    else:
        b = _MODULES[name].plan(topo, count, options)
    return b.build(name, count)
