"""Run the schedules of every rank in one process, without MPI.

Tests use it to check algorithms at world sizes no small machine can launch (1..64 ranks),
and it finds what a real run would only show as a hang or a race: a receive nobody sends, a
deadlock, a round that receives into a region it is also sending from (or that its overlap
steps touch while the messages are in flight), two ranks of a node
touching the same window elements between the same two barriers (one of them writing).

The ranks of a node share one ``node`` array; a ``sync`` round completes once every rank of the
node has reached its barrier of the same number. Schedules concatenated (two calls in a row)
check that one call's use of the window is safe against the next's.
"""

from __future__ import annotations

from collections import Counter, defaultdict, deque
from typing import TYPE_CHECKING

import numpy as np

from .local import Buffers, run_local
from .ops import Op
from .schedule import (Copy, Decode, DecodeSum, Encode, Local, Recv, Reduce, Region, Round,
                       Scale, Schedule, Send)

if TYPE_CHECKING:
    from .codecs import Codec

__all__ = ["simulate", "ScheduleError"]


class ScheduleError(AssertionError):
    """The schedules cannot run correctly together."""


def simulate(schedules: list[Schedule], inputs: list[np.ndarray], op: Op, inplace: bool = False,
             codec: Codec | None = None, residuals: list[np.ndarray] | None = None,
             recv_sizes: list[int] | None = None) -> list[np.ndarray]:
    """Each rank's result. Sends are buffered when posted, as an eager MPI would.

    ``codec`` runs compressed schedules; ``residuals`` (one per rank, updated in place) are
    their error-feedback state; ``recv_sizes``: each rank's result's elements where they are
    not its input's (allgather, reduce_scatter).
    """
    size = len(schedules)
    bufs: list[Buffers] = []
    results: list[np.ndarray] = []
    windows: dict[tuple[int, ...], np.ndarray] = {}
    for s, x in zip(schedules, inputs):
        if s.node_count and s.node not in windows:  # (a window of many ranks is large)
            count = max(t.node_count for t in schedules if t.node == s.node)
            windows[s.node] = np.full(count, 55, x.dtype)
    for r, (s, x) in enumerate(zip(schedules, inputs)):
        send = x.copy()
        recv = send if inplace else np.full(  # garbage that must be overwritten
            send.size if recv_sizes is None else recv_sizes[r], 99, send.dtype)
        results.append(recv)
        bufs.append(Buffers(send, recv, np.full(s.tmp_count, 77, x.dtype),
                            np.full(s.wire_nbytes, 0xEE, np.uint8),
                            None if residuals is None else residuals[r],
                            node=windows.get(s.node)))
    channels: dict[tuple[int, int], deque[np.ndarray]] = defaultdict(deque)
    position = [0] * size
    posted = [False] * size
    barriers = [0] * size  # barriers reached
    touched: dict[tuple[int, ...], _Touched] = {}  # per node window
    while any(position[r] < len(schedules[r].rounds) for r in range(size)):
        progressed = False
        for r in range(size):
            if position[r] == len(schedules[r].rounds):
                continue
            rnd = schedules[r].rounds[position[r]]
            if not posted[r]:
                _check_hazards(r, rnd)
                for t in rnd.transfers:
                    if isinstance(t, Send):
                        channels[(r, t.peer)].append(bufs[r].view(t.region).copy())
                barriers[r] += rnd.sync
                posted[r] = progressed = True
            wanted = Counter(t.peer for t in rnd.transfers if isinstance(t, Recv))
            node = schedules[r].node
            if all(len(channels[(peer, r)]) >= n for peer, n in wanted.items()) \
                    and (not rnd.sync or all(barriers[q] >= barriers[r] for q in node)):
                for t in rnd.transfers:
                    if isinstance(t, Recv):
                        data = channels[(t.peer, r)].popleft()
                        if len(data) != len(t.region):
                            raise ScheduleError(f"rank {r} expects {len(t.region)} elements from "
                                                f"{t.peer}, gets {len(data)}")
                        bufs[r].view(t.region)[...] = data
                if node in windows:
                    if node not in touched:
                        touched[node] = _Touched(windows[node].size)
                    touched[node].check(barriers[r], r, rnd)
                # Overlap steps touch none of the round's transfer regions (_check_hazards),
                # so running them before the messages land is running them in flight.
                run_local(rnd.overlap + rnd.local, bufs[r], op, codec)
                position[r] += 1
                posted[r] = False
                progressed = True
        if not progressed:
            stuck = {r: position[r] for r in range(size) if position[r] < len(schedules[r].rounds)}
            raise ScheduleError(f"deadlock: ranks stuck at rounds {stuck}")
    leftovers = {k: len(v) for k, v in channels.items() if v}
    if leftovers:
        raise ScheduleError(f"messages sent but never received: {leftovers}")
    return results  # the recv buffers the schedules wrote


def _reads(step: Local) -> list[Region]:
    """The regions a local step reads."""
    if isinstance(step, Reduce):
        return [step.left, step.right]
    if isinstance(step, DecodeSum):
        return list(step.srcs)
    return [step.src] if isinstance(step, (Copy, Scale, Encode, Decode)) else []


class _Touched:
    """Who wrote and who touched each element of a node window since its last barrier, to
    find races: between two barriers the ranks of a node run in any order, so no element may
    be written by one of them and touched by another. The ranks of a node run one epoch (the
    steps between two barriers) after the other: a rank finishes its steps of an epoch before
    it posts the barrier that ends it, and nobody passes that barrier before everyone posted
    it. So one record per window serves every epoch, cleared where it was written."""

    def __init__(self, size: int):
        self.epoch = 0
        self.writer = np.full(size, -1, np.int32)  # -1: nobody yet
        self.toucher = np.full(size, -1, np.int32)  # -2: several ranks
        self.regions: list[Region] = []  # what this epoch recorded

    def check(self, epoch: int, rank: int, rnd: Round) -> None:
        """Rank ``rank`` runs the steps of ``rnd`` in ``epoch``: ScheduleError on a race."""
        assert epoch >= self.epoch, "the simulator ran a rank's steps past its node's barrier"
        if epoch != self.epoch:
            for region in self.regions:
                self.writer[region.start:region.stop] = -1
                self.toucher[region.start:region.stop] = -1
            self.epoch, self.regions = epoch, []
        steps = rnd.overlap + rnd.local
        mine = [(r, False) for step in steps for r in _reads(step) if r.buf == "node"]
        mine += [(step.dst, True) for step in steps
                 if getattr(step, "dst", None) is not None and step.dst.buf == "node"]
        for region, writes in mine:  # a write clashes with any touch, a read with a write
            others = (self.toucher if writes else self.writer)[region.start:region.stop]
            clash = np.flatnonzero((others != -1) & (others != rank))
            if clash.size:
                who = int(others[clash[0]])
                raise ScheduleError(
                    f"{'several ranks' if who == -2 else f'rank {who}'} and rank {rank} race "
                    f"on the node window: element {region.start + int(clash[0])}, "
                    f"{'touched' if writes else 'written'} by the former, "
                    f"{'written' if writes else 'read'} by the latter ({region}), "
                    "between the same barriers")
        for region, writes in mine:
            touched = self.toucher[region.start:region.stop]
            touched[(touched != -1) & (touched != rank)] = -2
            touched[touched == -1] = rank
            if writes:
                self.writer[region.start:region.stop] = rank
            self.regions.append(region)


def _check_hazards(rank: int, rnd: Round) -> None:
    """MPI may read a send buffer, or write a receive buffer, at any time until the wait."""
    def key(region: Region) -> str:  # send and recv alias when in place, so they count as one buffer
        return "user" if region.buf in ("send", "recv") else region.buf
    def clash(a: Region, b: Region) -> bool:
        return key(a) == key(b) and a.start < b.stop and b.start < a.stop

    recvs = [t.region for t in rnd.transfers if isinstance(t, Recv)]
    sends = [t.region for t in rnd.transfers if isinstance(t, Send)]
    for i, a in enumerate(recvs):
        for b in recvs[i + 1:] + sends:
            if clash(a, b):
                raise ScheduleError(f"rank {rank} round {rnd}: receive into {a} overlaps {b}")
    for step in rnd.overlap:  # they run while MPI may read the sends and write the receives
        for a in recvs + sends:
            if clash(a, step.dst) or any(clash(a, b) for b in _reads(step) if a in recvs):
                raise ScheduleError(f"rank {rank}: {step} runs while a message of {a} is in flight")
