"""Collective fingerprints: ranks agree on what they are about to run before any data moves.

A collective is described by its sequence number on the communicator, count (a block: what
one rank gives or gets), dtype, op, the algorithm that will run, the codec with its parameters
and which collective it is (:mod:`mpicoll.collective`). Ranks compare the sequence number
and a 32-bit hash of the rest in one small native allreduce (MIN over the values and their
negations: equal everywhere iff min == max, as MPICH's ``MPIX_EQUAL`` does; a persistent
request, started when the call is numbered, so that its latency hides behind preparing the call,
which ends before anything is sent; in a blocking call of a one-node algorithm, ``shm``, whose
ranks read each other's data only after a first node barrier, it is posted as that barrier and
replaces it), and on a
difference **every** rank raises :class:`MismatchError` naming the fields that differ and the
ranks (an allgather of the fingerprints, on the error path only; PyTorch's
``TORCH_DISTRIBUTED_DEBUG=DETAIL`` does the same).

When: every call with ``MPICOLL_CHECK=1``; otherwise the first call of each kind on a
communicator — a kind that every rank has already verified is not checked again. That decision
must be the same on every rank or the check itself hangs: it is, in a program whose ranks make
the same calls, because the set of verified kinds grows by the same checks everywhere. Between
checks, every message's tag carries a hash of the fingerprint, so a message of one collective
never matches a receive of a different one: mismatched calls then stall (the watchdog,
``MPICOLL_TIMEOUT``, reports and aborts) instead of returning wrong bits; in a node's shared
window, where no messages travel, the first barrier's stamps do the same
(:mod:`mpicoll.node_window`).
"""

from __future__ import annotations

import os
import zlib
from typing import Callable, Iterable

import numpy as np
from mpi4py import MPI

from . import _env, watchdog
from ._mpi import complete

__all__ = ["MismatchError", "CHECK_ENV", "every_call", "Channel", "refresh",
           "tag_bits", "say"]

CHECK_ENV = "MPICOLL_CHECK"
FIELDS = ("call", "count", "dtype", "op", "algorithm", "codec", "collective", "blocking")


class MismatchError(ValueError):
    """Ranks disagree on a collective's arguments; raised on every rank, before data moves."""


def _read() -> bool:
    value = os.environ.get(CHECK_ENV, "0")
    if value not in ("0", "1"):
        raise ValueError(f"{CHECK_ENV}={value!r}: expected 0 or 1")
    return value == "1"


every_call = _read()
"""``MPICOLL_CHECK=1``: compare every call (and check every message's size); read when mpicoll is
imported, again by :func:`refresh`. An attribute, not a call: it is read on every collective."""


def refresh() -> None:
    """Read ``MPICOLL_CHECK`` again."""
    global every_call
    every_call = _read()
    _env.changed()  # which calls are checked changed: no call may skip that


def tag_bits(count: int | tuple[int, ...], rest: tuple) -> int:
    """A stable 32-bit hash of a fingerprint ``(count, *rest)`` (``count``: a tuple of every
    rank's where blocks are uneven), ``rest`` being ``(dtype, op,
    algorithm, codec, collective)``, for message tags and the check (the same on every rank and run). On a
    first call's path, which it lengthens on every rank, with cold caches: the rest, the same
    for many counts, is hashed once per kind of call (CRC-32 of its text); the count, the field
    that changes most, by one multiplication (Fibonacci hashing: the high half of the product
    with 2**64 / golden ratio, whose every bit depends on the count's lower bits; CRC-32 of the
    count, with its tables and a struct, took three times as long there)."""
    rest_bits = _REST_BITS.get(rest)
    if rest_bits is None:
        if len(_REST_BITS) >= 1024:
            _REST_BITS.clear()
        dtype, op, algorithm, codec, collective = rest
        rest_bits = _REST_BITS[rest] = zlib.crc32(
            f"{dtype.str}|{op}|{algorithm}|{codec}|{collective}".encode())
    number = zlib.crc32(repr(count).encode()) if isinstance(count, tuple) else count  # uneven
    return (number * _GOLDEN >> 32 & 0xFFFFFFFF) ^ rest_bits  # blocks: every rank's count


_REST_BITS: dict[tuple, int] = {}
_GOLDEN = 0x9E3779B97F4A7C15  # 2**64 / golden ratio, odd
_CALL_BITS = (1 << 29) - 1
"""The sequence number is compared modulo 2**29 (with the 34 bits of the rest, one int64): ranks
whose calls are numbered 2**29 apart are not told apart, a case no program reaches in step."""


class Channel:
    """Where a communicator's checks run: a duplicate of it (no collective of a call, not even
    ``native``'s, can match a check, whatever the ranks disagree on) and one persistent
    allreduce of two integers on it (MIN over the value and its negation), restarted for each
    check: half the cost of posting an ``Iallreduce`` each time. Created collectively, with the
    communicator's context. It holds one check at a time (a call finishes its check before it
    returns). Every cycle saved here is a first call's, and a first call runs with cold caches
    after the data it moved, where Python costs far more than in a loop
    (``git show abc5a13:benchmarks/check_prepare.py``): starting a check is one method, with no copy and no struct."""

    __slots__ = ("comm", "spins", "_sent", "_mine", "_values", "_persistent", "_request", "_about",
                 "_remember", "pending", "carried")

    def __init__(self, comm: MPI.Intracomm, spins: Iterable[int],
                 remember: Callable[[tuple, int], None]):
        self.comm, self.spins = comm.Dup(), spins
        self._remember = remember  # a new kind every rank agreed on: not checked again
        self._sent = bytearray(16)  # what this rank puts in: value, -value
        self._mine = memoryview(self._sent).cast("q")  # the same, written as integers
        self._values = bytearray(16)  # the result: equal to this rank's iff every rank's is
        self._persistent: MPI.Prequest | None = None
        if self.comm.Get_size() > 1:
            try:
                self._persistent = self.comm.Allreduce_init(
                    [self._sent, MPI.INT64_T], [self._values, MPI.INT64_T], op=MPI.MIN)
            except NotImplementedError:  # an MPI older than 4: an Iallreduce per check
                pass
        self._request: MPI.Request | None = None
        self._about: tuple = (0, (), 0, False, False)  # call, kind, bits, new, blocking
        self.pending = False  # started, no verdict yet
        self.carried = False  # the check started last is to be posted as a barrier

    def start(self, call: int, kind: tuple, rest: tuple, known: int | None,
              carried: bool = False, blocking: bool = False, blocks: bool = False) -> int:
        """Start comparing, across the ranks, the ``kind`` (``(count, *rest)``) of their
        ``call``-th collective, and return its :func:`tag_bits` (``known``: computed already,
        the kind verified before); then ``pending`` is True unless this is the only rank. A new
        kind (``known`` None) is remembered once every rank agreed on it. Collective: every rank
        starts it for the same call. The caller finishes it (MismatchError on every rank if they
        differ) before the call moves any data, and meanwhile prepares the call, which hides the
        check's latency.

        ``carried``: posted later, by :meth:`post`, as the first node barrier of the call (a
        blocking call of a one-node algorithm, whose ranks read each other's data only after
        that barrier): then it costs no more than the barrier it replaces. That it is carried
        is compared too: a rank whose check is its barrier must not meet one whose is not.
        ``blocks``: the call blocks in an MPI collective (``Algorithm.blocks``), which never
        matches a nonblocking one: compared too. Else ``blocking`` only explains a mismatch."""
        bits = tag_bits(kind[0], rest) if known is None else known
        if self._persistent is None and self.comm.Get_size() == 1:
            return bits
        value = (call & _CALL_BITS) << 34 | blocks << 33 | carried << 32 | bits
        mine = self._mine
        mine[0], mine[1] = value, -value
        self._about = (call, kind, bits, known is None, blocking)
        self.pending, self.carried = True, carried
        if not carried:
            self.post()
        return bits

    def post(self) -> MPI.Request:
        """Post the check :meth:`start` ed last (where it was ``carried``, as a barrier)."""
        if self._persistent is None:
            self._request = self.comm.Iallreduce([self._sent, MPI.INT64_T],
                                                 [self._values, MPI.INT64_T], op=MPI.MIN)
        else:
            self._request = self._persistent
            self._request.Start()
        return self._request

    def finish(self) -> None:
        """Wait for the check started last (posting it if it is not yet; nothing if it has its
        verdict already); MismatchError on every rank if the ranks differ."""
        if not self.pending:
            return
        request = self._request if self._request is not None else self.post()
        if not request.Test():
            with watchdog.Blocked(self._blocked_in):
                complete(request, self.spins)
        self.verdict()

    def verdict(self) -> None:
        """After the posted check completed: MismatchError on every rank if the ranks differ."""
        self._request, self.pending = None, False
        call, kind, bits, new, blocking = self._about
        if self._values == self._sent:  # min == max: the same everywhere
            if new:
                self._remember(kind, bits)
            return
        # everyone knows it differs: say how, everywhere
        every = self.comm.allgather((call, *kind, blocking))
        raise MismatchError(_explain(every))

    def _blocked_in(self) -> str:
        call, kind = self._about[:2]
        return f"the fingerprint check of collective #{call} ({say(kind)})"

    def free(self) -> None:
        if self._persistent is not None:
            self._persistent.Free()
        self.comm.Free()


def say(kind: tuple) -> str:
    """A fingerprint in words."""
    count, dtype, op, algorithm, codec, collective = kind
    return (f"{collective} of {count} × {np.dtype(dtype).name}"
            + (f", op {op}" if op else "") + f", algorithm {algorithm}"
            + (f", codec {codec}" if codec else ""))


def _explain(every: list[tuple]) -> str:
    """Which fields differ, and which ranks hold which value."""
    lines = []
    for i, field in enumerate(FIELDS):
        holders: dict[str, list[int]] = {}
        for rank, values in enumerate(every):
            value = values[i]
            text = np.dtype(value).name if field == "dtype" else str(value)
            holders.setdefault(text or "none", []).append(rank)
        if len(holders) > 1:
            lines.append(f"  {field}: " + "; ".join(f"{value} on {_ranks(ranks)}"
                                                     for value, ranks in holders.items()))
    return ("mpicoll: ranks disagree on a collective (Detected mismatch between collectives on "
            "ranks); nothing was sent:\n" + "\n".join(lines))


def _ranks(ranks: list[int]) -> str:
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(map(str, ranks))
