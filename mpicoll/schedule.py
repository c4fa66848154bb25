"""Schedules: what one rank does in an allreduce, as rounds of transfers and local steps.

A schedule names buffer regions, never arrays, so one plan serves every call with the same
(communicator, algorithm, count, element size, tunables): the engine binds it to the
caller's buffers.
Buffers: ``send`` (this rank's contribution, never written unless it is also ``recv``),
``recv`` (the result), ``tmp`` (scratch, ``Schedule.tmp_count`` elements), and for compressed
schedules ``wire`` (frame slots, ``Schedule.wire_nbytes`` bytes; its regions count bytes) and
``residual`` (what error feedback still owes, the shape of ``recv``), and for schedules that
work in shared memory ``node`` (the node's window, ``Schedule.node_count`` elements, one flat
array that every rank of the node reads and writes: see :mod:`mpicoll.node_window`).

A round posts all its receives and sends (and with ``sync`` enters the node's barrier,
``Schedule.node``: the ranks that share the window), runs its ``overlap`` steps while they are
in flight (once the barrier passed), waits for them, then runs its local steps in order. A
barrier orders the window: what any rank of the node wrote before it, every rank sees after it.
Overlap steps are what lets a pipeline keep a slow link busy while a rank copies and reduces
(hybrid's node stages under its inter-node ring) or encodes and decodes (the compressed ring's
streams of pieces); they never touch the round's transfer regions. Rounds are the unit the
engine advances, which is what lets a nonblocking request progress the same schedule the
blocking call runs to completion.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Iterable, Iterator, Literal, Union

__all__ = ["BufferName", "Transfer", "Local", "Region", "Send", "Recv", "Reduce", "Copy", "Scale", "Zero", "Encode", "Decode", "DecodeSum", "Round",
           "Schedule", "Builder", "split"]

BufferName = Literal["send", "recv", "tmp", "wire", "residual", "node"]


@dataclass(frozen=True)
class Region:
    """Elements ``[start, stop)`` of one of the three buffers."""

    buf: BufferName
    start: int
    stop: int

    def __len__(self) -> int:
        return self.stop - self.start


@dataclass(frozen=True)
class Send:
    peer: int
    region: Region


@dataclass(frozen=True)
class Recv:
    peer: int
    region: Region


@dataclass(frozen=True)
class Reduce:
    """``dst = left op right``: operand order is kept, so lower ranks' data can stay on the left."""

    dst: Region
    left: Region
    right: Region


@dataclass(frozen=True)
class Copy:
    dst: Region
    src: Region


@dataclass(frozen=True)
class Scale:
    """``dst = src * factor`` (averages divide before summing, so low precision cannot overflow)."""

    dst: Region
    src: Region
    factor: float


@dataclass(frozen=True)
class Zero:
    dst: Region


@dataclass(frozen=True)
class Encode:
    """Encode ``src`` into the frame slot ``dst`` (a ``wire`` region). With error feedback, what
    the frame loses is added to ``residual`` at ``src``'s positions: this rank owes it."""

    dst: Region
    src: Region


@dataclass(frozen=True)
class Decode:
    """``dst = decoded frame``."""

    dst: Region
    src: Region


@dataclass(frozen=True)
class DecodeSum:
    """``dst = the sum of the decoded frames srcs``, added in order (the codec's
    ``decode_sum``: one pass over ``dst`` where it can)."""

    dst: Region
    srcs: tuple[Region, ...]


Transfer = Union[Send, Recv]
Local = Union[Reduce, Copy, Scale, Zero, Encode, Decode, DecodeSum]


@dataclass(frozen=True)
class Round:
    transfers: tuple[Transfer, ...]
    local: tuple[Local, ...]
    phase: str = ""  # e.g. "reduce-scatter" or "inter-node/allgather", for timing records
    sync: bool = False  # the node's ranks pass a barrier with the transfers (shared memory)
    overlap: tuple[Local, ...] = ()  # run while the transfers are in flight (after the barrier)


@dataclass(frozen=True)
class Schedule:
    algorithm: str
    count: int
    rounds: tuple[Round, ...]
    tmp_count: int
    wire_nbytes: int = 0
    node_count: int = 0  # elements of the node window the rounds address
    node: tuple[int, ...] = ()  # the ranks whose barriers ``sync`` rounds pass, in node order

    @property
    def phases(self) -> tuple[str, ...]:
        """Phase labels in the order they run."""
        return tuple(dict.fromkeys(r.phase for r in self.rounds))

    @property
    def messages(self) -> int:
        """Messages this rank sends."""
        return sum(isinstance(t, Send) for r in self.rounds for t in r.transfers)

    @property
    def elements_sent(self) -> int:
        return sum(len(t.region) for r in self.rounds for t in r.transfers if isinstance(t, Send))


@dataclass
class Builder:
    """Collects rounds; algorithms append to it, phase after phase."""

    rounds: list[Round] = field(default_factory=list)
    tmp_count: int = 0
    wire_nbytes: int = 0
    node_count: int = 0
    node: tuple[int, ...] = ()
    _phases: list[str] = field(default_factory=list)

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Label the rounds appended inside; nested labels join with "/"."""
        self._phases.append(name)
        try:
            yield
        finally:
            self._phases.pop()

    def round(self, transfers: Iterable[Transfer] = (), local: Iterable[Local] = (),
              sync: bool = False, overlap: Iterable[Local] = ()) -> None:
        """Append a round, dropping empty transfers and steps (count < p gives empty chunks).
        ``sync``: the node's ranks (:meth:`window`) pass a barrier in it, even if it is empty.
        ``overlap``: steps to run while the transfers are in flight (once the barrier passed,
        with ``sync``; with no transfers, they run first among the local steps)."""
        transfers = tuple(t for t in transfers if len(t.region))
        local = tuple(s for s in local if len(s.src if isinstance(s, Encode) else s.dst))
        overlap = tuple(s for s in overlap if len(s.src if isinstance(s, Encode) else s.dst))
        if not transfers:
            local, overlap = overlap + local, ()
        if transfers or local or sync:
            self.rounds.append(Round(transfers, local, "/".join(self._phases), sync, overlap))

    def window(self, node: tuple[int, ...], count: int) -> None:
        """Use ``count`` elements of the shared window of the ranks ``node``."""
        if self.node and self.node != node:
            raise ValueError(f"one schedule, one node window: {self.node} and {node}")
        self.node = node
        self.node_count = max(self.node_count, count)

    def tmp(self, count: int) -> None:
        """Reserve ``count`` elements of scratch (phases run one after another and share it)."""
        self.tmp_count = max(self.tmp_count, count)

    def wire(self, nbytes: int) -> Region:
        """A fresh frame slot of ``nbytes`` (slots are never shared: each chunk keeps its own)."""
        slot = Region("wire", self.wire_nbytes, self.wire_nbytes + nbytes)
        self.wire_nbytes += nbytes
        return slot

    def build(self, algorithm: str, count: int) -> Schedule:
        # A node window's collectives stamp their first barrier and read the stamps before the
        # second: without one, a rank could stamp the next collective first (mpicoll.node_window).
        assert not self.node_count or sum(r.sync for r in self.rounds) >= 2, \
            f"{algorithm}: a schedule in the node window passes fewer than two barriers"
        return Schedule(algorithm, count, tuple(self.rounds), self.tmp_count, self.wire_nbytes,
                        self.node_count, self.node)


def split(start: int, stop: int, parts: int) -> list[tuple[int, int]]:
    """Cut ``[start, stop)`` into ``parts`` contiguous pieces whose sizes differ by at most one.

    The remainder goes one element each to the first pieces, never all to one rank.
    """
    size, extra = divmod(stop - start, parts)
    bounds, lo = [], start
    for i in range(parts):
        hi = lo + size + (i < extra)
        bounds.append((lo, hi))
        lo = hi
    return bounds
