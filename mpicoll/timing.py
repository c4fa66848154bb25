"""Timing records: what each collective ran and how long each phase took.

Off by default; turn it on around the code to observe::

    with mpicoll.timing.recording() as rec:
        mpicoll.allreduce(x)
    rec.records[-1].algorithm, rec.records[-1].phases

When off, a call pays one attribute lookup. When on, a record costs a few microseconds per
call plus two clock reads per round. Records
never change results. ``mpicoll.h5.write`` gathers them to rank 0 and appends them to HDF5.
"""

from __future__ import annotations

import itertools
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Iterator

from mpi4py import MPI

from . import _env

__all__ = ["Record", "Recorder", "recording", "active"]


@dataclass(slots=True)
class Record:
    """One collective on one rank. Times are ``MPI.Wtime()`` seconds."""

    seq: int
    rank: int
    ranks: int
    nodes: int
    op: str
    algorithm: str
    codec: str
    dtype: str
    count: int
    nbytes: int
    transport: str = "host"  # host, cuda-aware or staged: how device buffers reached MPI
    collective: str = "allreduce"  # (mpicoll.collective's names); count is then a block's
    t0: float = 0.0
    t1: float = float("nan")  # nan until the collective completes
    phases: dict[str, float] = field(default_factory=dict)

    @property
    def seconds(self) -> float:
        return self.t1 - self.t0


class Recorder:
    """Collects the records of every collective started while it is active."""

    def __init__(self) -> None:
        self.records: list[Record] = []
        self._seq = itertools.count()

    def start(self, **fields: Any) -> Record:
        record = Record(seq=next(self._seq), t0=MPI.Wtime(), **fields)
        self.records.append(record)
        return record


_active: Recorder | None = None


def active() -> Recorder | None:
    """The recorder in force, or None when timing is off."""
    return _active


@contextmanager
def recording(recorder: Recorder | None = None) -> Iterator[Recorder]:
    """Record every collective started inside the block (nestable; the inner one wins)."""
    global _active
    previous, _active = _active, recorder or Recorder()
    _env.changed()  # recorded calls take the full path, which records
    try:
        yield _active
    finally:
        _active = previous
