"""``auto``'s measured choice: the model's shortlist for a size, each run in real calls, the
fastest kept.

The cost model ranks the algorithms from figures fitted on one machine, one MPI library, one
load; on another, or on a busy node, it can rank them wrong by 2× and more (``rd`` at 1 MiB on
2 ranks ran 0.22× MPI's own where ``auto``'s ``shm`` ran 0.83×). So a communicator's first
blocking ``auto`` calls of each size class (powers of two) try the shortlist in turn, each
candidate once untimed and then :data:`REPS` times timed; then the ranks take the maximum over
ranks of each candidate's median time (a collective runs at its slowest rank's pace) in one ``MPI_Allreduce``
and keep the fastest for that size class, in every call form. Every rank makes the same calls,
so each reaches that allreduce at the same call and keeps the same algorithm.

A trial is a real call: every candidate reduces exactly, the same bits on every rank (their
roundings of a float sum differ from one another, as MPI's own algorithms' do from one size to
the next). ``MPICOLL_AUTO=model`` skips the trials: ``auto`` is then the model's pick.
"""

from __future__ import annotations

import numpy as np
from mpi4py import MPI

__all__ = ["Trials", "REPS"]

REPS = 3
"""Timed calls per candidate, after an untimed one (its first call builds its plan, checks its
kind on every rank, touches its buffers), one after another as a program repeats a call (so
each runs in the cache state its own calls leave): the median of three leaves out one lucky
or preempted call, and ranks an algorithm that is fast only now and then (one that spins on a
busy core) by what it usually takes."""


class Trials:
    """One communicator's trials and choices, by key (the size class and its shortlist)."""

    def __init__(self, comm: MPI.Intracomm):
        self.comm = comm
        self.kept: dict[tuple, str] = {}
        self.measured: dict[tuple, dict[str, float]] = {}  # the slowest rank's median seconds
        self._times: dict[tuple, list[float]] = {}  # each trial's seconds, in call order

    def next(self, key: tuple, shortlist: tuple[str, ...]) -> tuple[str, bool]:
        """The algorithm a blocking call of ``key`` runs, and whether it is a trial (to be
        timed and given to :meth:`ran`)."""
        kept = self.kept.get(key)
        if kept is not None:
            return kept, False
        times = self._times.setdefault(key, [])
        return shortlist[len(times) // (1 + REPS)], True

    def left(self, key: tuple, shortlist: tuple[str, ...]) -> int:
        """How many more blocking calls of ``key`` are trials."""
        if key in self.kept:
            return 0
        return (1 + REPS) * len(shortlist) - len(self._times.get(key, ()))

    def ran(self, key: tuple, shortlist: tuple[str, ...], name: str, seconds: float) -> None:
        """A trial of ``name`` took ``seconds`` here; after the last, the ranks agree."""
        times = self._times[key]
        times.append(seconds)
        runs = 1 + REPS
        if len(times) < runs * len(shortlist):
            return
        mine = np.array([np.median(times[i + 1:i + runs]) for i in range(0, len(times), runs)])
        slowest = np.empty_like(mine)
        self.comm.Allreduce(mine, slowest, op=MPI.MAX)
        self.kept[key] = shortlist[int(np.argmin(slowest))]  # ties: the first, MPI's own
        self.measured[key] = dict(zip(shortlist, slowest.tolist()))
        del self._times[key]
