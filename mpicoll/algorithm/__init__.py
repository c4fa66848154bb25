"""Allreduce algorithms, one per module; each plans a Schedule for one rank.

The package is `algorithm`, singular, because `mpicoll.algorithms()` is the public function
that lists their names.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..schedule import Builder, Copy, Reduce, Region, Scale, Schedule, Zero
from . import hybrid, ring, tree

__all__ = ["Topology", "Options", "Frames", "NAMES", "plan"]

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
    dtype: str

    @property
    def segment(self) -> int:
        """Tree segment in elements (at least one)."""
        return max(1, self.segment_bytes // np.dtype(self.dtype).itemsize)


@dataclass(frozen=True)
class Frames:
    """How big a dense codec's frame of n elements is: what a compressed plan sizes slots by."""

    codec: object
    dtype: object

    def nbytes(self, count: int) -> int:
        return self.codec.max_frame_nbytes(count, self.dtype)


def plan(name: str, topo: Topology, count: int, options: Options, frames: Frames | None = None,
         feedback: bool = False, average: bool = False) -> Schedule:
    """Plan ``name`` for this rank.

    A prologue prepares this rank's contribution in ``recv`` when it is not ``send`` as given:
    an average divides by p first; error feedback then adds what earlier calls still owe (in the
    units that travel, so divided ones for an average) and starts owing anew. A lone rank only
    copies its input: there is nothing to add, nothing to compress.
    """
    b = Builder()
    src, everything = "send", (0, count)
    if average:
        b.round(local=[Scale(Region("recv", *everything), Region("send", *everything), 1 / topo.size)])
        src = "recv"
    if feedback:
        b.round(local=[Reduce(Region("recv", *everything), Region(src, *everything),
                              Region("residual", *everything)), Zero(Region("residual", *everything))])
        src = "recv"
    if topo.size == 1:
        if src == "send":
            b.round(local=[Copy(Region("recv", *everything), Region("send", *everything))])
    else:
        _MODULES[name].plan(b, topo, count, options, src, frames)
    return b.build(name, count)
