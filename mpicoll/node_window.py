"""Shared memory inside a node: one MPI-3 window that every rank of the node reads and writes.

Ranks on one node can read each other's memory: ``MPI.Win.Allocate_shared`` gives each a NumPy
view of one block all of them share, so a node's reduce-scatter becomes "each rank reduces its
slice across the inputs, reading them in place" and its allgather "each rank copies the
reduced slices out", with no messages at all (Li, Hoefler, Hu & Snir 2014; Open MPI's
``coll/acoll``; MPICH's ``release_gather`` for small messages). Schedules address the window
as the buffer ``node`` and order its use with ``sync`` rounds, which pass a barrier of the
node's ranks between two ``Win.Sync`` fences (the MPI-3 idiom for shared windows under the
unified memory model).

One window per communicator and node, grown on demand (collectively: every rank of the node
binds the same plan at the same call) and freed with the communicator. A grown window replaces
the old one for every call after (a fast-path shortcut bound to the old one steps aside, so
that all ranks use the same memory); the old one, which a collective in flight may still use,
is freed with the communicator. Collectives that use the window run one at a time, in the
order they were started (the same on every rank): their schedules are safe against the
collective just before them, not against one running at the same time.

Its ranks exchange no messages, so no tag keeps two different collectives apart (as the tags of
:mod:`mpicoll.check` do between checks): a rank that runs one verified kind of call while
another runs a different one would read the other's input at the wrong offsets and return wrong
bits. So each collective *stamps* its first barrier: every rank writes its tag (a hash of the
kind and the collective's sequence number) into its slot of a small window of its own before
the barrier, and compares every rank's slot after it, before it reads anything of theirs. One
slot per rank is enough because every collective in the window passes at least two barriers
(shm's allreduce and reduce pipeline three stages, its two-stage collectives end with a barrier,
hybrid's allreduce has two node stages and its other collectives use shm's; ``Builder.build``
asserts it): no rank
stamps the next collective before every rank has entered this one's second barrier, after
reading the stamps.
"""

from __future__ import annotations

import itertools
from collections import deque
from typing import Any, Iterable

import numpy as np
from mpi4py import MPI

from ._mpi import complete

__all__ = ["NodeWindow", "NotOneNodeError", "free_all"]

_CREATED = itertools.count()
_OFFSET = 2048
"""Where the window's data starts in its first page. Copying cache-resident data into a
destination 16 bytes past its source modulo 4096 runs about ten times slower here (4K aliasing in
glibc's memcpy), and NumPy puts large arrays 16 bytes past a page boundary: a window starting
on one made every copy out of it into such an array that slow (shm at 64-256 KiB on 2 ranks
took up to 1.4 times as long as into an array elsewhere: abc5a13:benchmarks/page_offsets.py)."""


class NotOneNodeError(ValueError):
    """The ranks grouped as one node do not share memory."""


class NodeWindow:
    """The shared window of the ranks ``node`` (ranks of ``comm``, this one among them)."""

    def __init__(self, comm: MPI.Intracomm, node: tuple[int, ...], spins: Iterable[int]):
        group = comm.Get_group()
        mine = group.Incl(list(node))
        try:
            self.comm = comm.Create_group(mine)  # collective over the node's ranks only
        finally:
            mine.Free()
            group.Free()
        probe = self.comm.Split_type(MPI.COMM_TYPE_SHARED)
        shared = probe.Get_size()
        probe.Free()
        if shared != self.comm.Get_size():
            self.comm.Free()
            raise NotOneNodeError(
                f"mpicoll: ranks {list(node)} are grouped as one node, but only {shared} of them "
                "share memory (MPICOLL_RANKS_PER_NODE groups ranks of different hosts?): "
                "shared-memory algorithms need a node whose ranks share memory")
        self.node = node
        world = MPI.COMM_WORLD.Get_group()
        mine = self.comm.Get_group()
        try:  # who shares it, in world ranks, and which of theirs it is: the order of frees.
            # Each rank's count of windows it made, gathered: threads may make windows on
            # different communicators in a different order on each rank, and a count of one's
            # own would then order the frees differently (a hang at exit).
            self.order = (tuple(MPI.Group.Translate_ranks(mine, range(mine.Get_size()), world)),
                          tuple(self.comm.allgather(next(_CREATED))))
        finally:
            mine.Free()
            world.Free()
        self._spins = spins  # (the context's: a fault-tolerant job's never block in Wait)
        self._windows: list[MPI.Win] = []
        # The stamps: one int64 per rank, in a window of their own (never grown).
        self._size, self._me = self.comm.Get_size(), self.comm.Get_rank()
        self._stamps = self._allocate(self._size * 8).cast("q")
        self._stamp = 0  # this rank's last stamp, compared with the others' after its barrier
        self.memory = np.empty(0, np.uint8)  # the newest window's: what every call binds
        self._queue: deque[Any] = deque()  # executions using the window, in start order

    def view(self, dtype: np.dtype, count: int) -> np.ndarray:
        """The window's first ``count`` elements as ``dtype`` (collective when it must grow)."""
        nbytes = count * dtype.itemsize
        if nbytes > self.memory.size:
            self._grow(max(nbytes, 2 * self.memory.size))
        return self.memory[:nbytes].view(dtype)

    def _grow(self, nbytes: int) -> None:
        nbytes = -(-nbytes // 4096) * 4096
        self.memory = np.frombuffer(self._allocate(nbytes + 4096), np.uint8, nbytes, _OFFSET)

    def _allocate(self, nbytes: int) -> memoryview:
        """A new shared block of ``nbytes`` (collective over the node)."""
        win = MPI.Win.Allocate_shared(nbytes if self._me == 0 else 0, 1, comm=self.comm)
        win.Lock_all(MPI.MODE_NOCHECK)  # a passive epoch for Win.Sync, held until freed
        memory, _ = win.Shared_query(0)
        self._windows.append(win)
        return memoryview(memory)[:nbytes]  # type: ignore[arg-type]

    def fence(self) -> None:
        """Make this rank's writes to the window visible, and others' visible to it."""
        for win in self._windows:
            win.Sync()

    def ibarrier(self, stamp: int | None = None) -> MPI.Request:
        """Start a barrier of the node (fenced first; :meth:`fence` again once it completes),
        with this rank's ``stamp`` in its slot if given (a collective's first barrier; then
        :meth:`stamps_agree` once it completes)."""
        if stamp is not None:
            self._stamps[self._me] = self._stamp = stamp
        self.fence()
        return self.comm.Ibarrier()

    def stamps_agree(self) -> bool:
        """After a stamped barrier (and its fence): whether every rank stamped the same."""
        return self._stamps.tolist() == [self._stamp] * self._size

    def stamps(self) -> str:
        """Who stamped what in the last stamped barrier, for the error."""
        return ", ".join(f"{value} on rank {rank}"
                         for rank, value in zip(self.node, self._stamps.tolist()))

    def barrier(self, stamp: int | None = None) -> bool:
        """The barrier, blocking (the fast path's): still ``Ibarrier``, since MPI never matches
        a blocking collective with a nonblocking one, and another rank may be in the engine.
        Whether the ranks' ``stamp`` s agree (True when not stamped)."""
        complete(self.ibarrier(stamp), self._spins)
        self.fence()
        return stamp is None or self.stamps_agree()

    # ---- one collective at a time: the engine's executions queue for the window
    def enqueue(self, execution: Any) -> None:
        self._queue.append(execution)

    def turn(self, execution: Any) -> bool:
        """Whether ``execution`` may start: every one started before it has finished."""
        return self._queue[0] is execution

    def leave(self, execution: Any) -> None:
        try:
            self._queue.remove(execution)
        except ValueError:
            pass

    def free(self) -> None:
        """Collective over the node's ranks (when the communicator is freed, or at exit: MPICH
        over libfabric fails its finalize while a window is left). Once."""
        if self.comm == MPI.COMM_NULL:
            return
        for win in self._windows:
            win.Unlock_all()
            win.Free()
        self._windows, self.memory = [], np.empty(0, np.uint8)
        self.comm.Free()


def free_all(windows: list[NodeWindow]) -> None:
    """Free ``windows`` in an order every rank agrees on (each free is collective): by the
    world ranks that share them, then by the counts of windows their ranks had made when they
    made them (the same tuple on every rank)."""
    for window in sorted(windows, key=lambda w: w.order):
        window.free()
