"""``auto``'s measured choice: the model's shortlist for a size, each run in real calls, the
fastest kept.

The cost model ranks the algorithms from figures fitted on one machine, one MPI library, one
load; on another, or on a busy node, it can rank them wrong by 2× and more (``rd`` at 1 MiB on
2 ranks ran 0.22× MPI's own where ``auto``'s ``shm`` ran 0.83×). So a communicator's first
blocking ``auto`` calls of each size class (powers of two) try the shortlist round by round,
one sample of each candidate per round (:func:`per_sample` calls back to back), the first
round untimed and then :data:`REPS` timed. In turn: a call of megabytes runs after the
program's other work, not after itself (all of one candidate's calls back to back, ``rd``
measured fastest at 4 MiB on 2 ranks in 12 runs of 12, where the bench's interleaved calls
find it 1.3× slower than ``ring``); calls of kilobytes come in loops (:data:`SAMPLE_BYTES`).
Each timed call of a larger size starts behind a barrier, as bench's samples do: a call can
return while its last bytes still wait in the link's queue, and the next candidate in turn
would pay for them (emulated 2×2 nodes, 1 Gbit/s: ``hybrid``'s reduce_scatter ran 1.03–1.32×
``ring``'s time right after ``rabenseifner``, 0.63–0.72× right after ``ring``).
Then the ranks take the maximum over
ranks of each candidate's median time per call (a collective runs at its slowest rank's pace) in one ``MPI_Allreduce``
and keep the fastest for that size class, in every call form. Every rank makes the same calls,
so each reaches that allreduce at the same call and keeps the same algorithm.

A trial is a real call: every candidate reduces exactly, the same bits on every rank (their
roundings of a float sum differ from one another, as MPI's own algorithms' do from one size to
the next). ``MPICOLL_AUTO=model`` skips the trials: ``auto`` is then the model's pick.

A choice measured once can go wrong later: the node gets busy and an algorithm that spins
while it waits collapses (``shm`` at 16 MiB on 2 ranks: 0.7× MPI's own on a quiet node, 1.7×
beside other work). So above :data:`~mpicoll.algorithm.select.OWN_UP_TO` a :class:`Watch`
guards each kept choice: every :data:`CHECK_EVERY` blocking calls of its size class it times
:data:`REPS` of them, the ranks take the slowest median, and where the choice now runs more
than :data:`SLOWER` times what its trial measured *and* slower than another candidate's trial,
the size class is tried again (the period doubling after each new trial, so a node whose speed
keeps changing costs a bounded share of calls). ``MPICOLL_AUTO=once`` keeps the first choice
(the same algorithm, so the same rounding, for the whole run).
"""

from __future__ import annotations

import numpy as np
from mpi4py import MPI

from . import _env
from .algorithm import select

__all__ = ["Trials", "Watch", "REPS", "CHECK_EVERY", "SLOWER", "SAMPLE_BYTES", "per_sample"]

REPS = 3
"""Timed calls per candidate, after an untimed one (its first call builds its plan, checks its
kind on every rank, touches its buffers): the median of three leaves out one lucky or
preempted call, and ranks an algorithm that is fast only now and then (one that spins on a
busy core) by what it usually takes."""

CHECK_EVERY = 128
"""Blocking calls of a kept size class between two checks of its choice (:class:`Watch`), the
last :data:`REPS` of each period timed (where the trials timed theirs: around the call, on the
fast path) and one allreduce of a float to agree: a few microseconds per 128 calls of 16 KiB
and up, tens of microseconds each (docs/algorithms.md, the auto rule)."""

SLOWER = 1.5
"""How much slower than its trial a kept choice must now run to be tried again (and slower
than another candidate's trial): above the 10-30% a single call varies here."""


SAMPLE_BYTES = 2 << 20
"""A trial above :data:`~mpicoll.algorithm.select.OWN_UP_TO` is a sample of calls back to back,
as many as move about this many bytes (1 to 16): a program that makes calls of 256 KiB makes
them in a loop (the bench's samples last 2 ms), whose cache keeps what the last call left, and
``rd`` is fastest there (0.3× MPI's own, Open MPI, 2 ranks) while one call after six others
ranked it behind ``rabenseifner`` (0.9×); calls of megabytes leave nothing in the cache."""


def per_sample(size_class: int) -> int:
    """Calls per trial sample for a size class (1 up to ``OWN_UP_TO``: ``api._sampled``
    samples those itself)."""
    if size_class <= select.OWN_UP_TO:
        return 1
    return max(1, min(16, SAMPLE_BYTES // size_class))


class Watch:
    """A kept choice's guard (see the module): counts the blocking calls of its size class and
    says which are timed checks (:attr:`timing`)."""

    __slots__ = ("key", "name", "due", "samples")

    def __init__(self, key: tuple, name: str, period: int):
        self.key, self.name = key, name
        self.due = period  # calls until this period's checks are done
        self.samples: list[float] = []

    @property
    def timing(self) -> bool:
        """Whether the next blocking call of the size class is one of the timed checks."""
        return self.due <= REPS

    def passed(self) -> None:
        """A blocking call of the size class ran the kept choice untimed (on the fast path;
        the full path counts through :meth:`Trials.counted`); a timed one goes to
        :meth:`Trials.ran`."""
        self.due -= 1


class Trials:
    """One communicator's trials and choices, by key (the size class and its shortlist)."""

    def __init__(self, comm: MPI.Intracomm):
        self.comm = comm
        self.kept: dict[tuple, str] = {}
        self.measured: dict[tuple, dict[str, float]] = {}  # the slowest rank's median seconds
        self._times: dict[tuple, list[float]] = {}  # each trial's seconds, in call order
        self.watches: dict[tuple, Watch] = {}  # the kept choices guarded (select.OWN_UP_TO up)
        self.checks: dict[tuple, int] = {}  # checks made, per key
        self.again: dict[tuple, int] = {}  # times a check sent the key back to its trials

    def next(self, key: tuple, shortlist: tuple[str, ...]) -> tuple[str, bool]:
        """The algorithm a blocking call of ``key`` runs, and whether it is a trial (to be
        timed and given to :meth:`ran`)."""
        kept = self.kept.get(key)
        if kept is not None:
            return kept, False
        times = self._times.setdefault(key, [])
        return shortlist[len(times) // per_sample(key[0]) % len(shortlist)], True

    def left(self, key: tuple, shortlist: tuple[str, ...]) -> int:
        """How many more blocking calls of ``key`` are trials."""
        if key in self.kept:
            return 0
        return (1 + REPS) * len(shortlist) * per_sample(key[0]) - len(self._times.get(key, ()))

    def counted(self, key: tuple) -> bool:
        """A blocking call of ``key`` is about to run its kept choice: count it, and say
        whether it is a timed check (then it goes to :meth:`ran`, timed, like a trial)."""
        watch = self.watches.get(key)
        if watch is None:
            return False
        if watch.timing:
            return True
        watch.due -= 1
        return False

    def ran(self, key: tuple, shortlist: tuple[str, ...], name: str, seconds: float,
            guard: bool = True) -> bool:
        """A trial (or a check of the kept choice) of ``name`` took ``seconds`` here; after
        the last, the ranks agree (and, ``guard``, a :class:`Watch` guards the choice). True
        when that changed what the key's calls run (a choice kept, or sent back to its
        trials): calls lowered for the old one must go."""
        if key in self.watches:
            return self._checked(key, seconds)
        times = self._times[key]
        times.append(seconds)
        n, k = len(shortlist), per_sample(key[0])
        if len(times) < (1 + REPS) * n * k:
            return False
        samples = np.reshape(times, (1 + REPS, n, k)).mean(axis=2)  # round, candidate
        mine = np.median(samples[1:], axis=0)  # (the first round untimed)
        slowest = np.empty_like(mine)
        self.comm.Allreduce(mine, slowest, op=MPI.MAX)
        kept = self.kept[key] = shortlist[int(np.argmin(slowest))]  # ties: the first, MPI's own
        self.measured[key] = dict(zip(shortlist, slowest.tolist()))
        del self._times[key]
        if guard and key[0] > select.OWN_UP_TO and len(shortlist) > 1 \
                and _env.settings().auto != "once":
            self.watches[key] = Watch(key, kept, CHECK_EVERY << self.again.get(key, 0))
        return True

    def _checked(self, key: tuple, seconds: float) -> bool:
        """One timed check of the kept choice; after :data:`REPS`, the ranks agree whether it
        stays (the slowest rank's median against the trials': one allreduce of a float)."""
        watch = self.watches[key]
        watch.samples.append(seconds)
        watch.due -= 1
        if watch.due > 0:
            return False
        mine = np.array([np.median(watch.samples)])
        slowest = np.empty_like(mine)
        self.comm.Allreduce(mine, slowest, op=MPI.MAX)
        self.checks[key] = self.checks.get(key, 0) + 1
        measured = self.measured[key]
        now, then = float(slowest[0]), measured[watch.name]
        others = min((t for name, t in measured.items() if name != watch.name), default=now)
        if now <= SLOWER * then or now <= others:
            watch.due, watch.samples = CHECK_EVERY << self.again.get(key, 0), []
            return False
        del self.watches[key], self.kept[key]
        self.again[key] = self.again.get(key, 0) + 1
        return True
