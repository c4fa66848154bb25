"""Collective fingerprints: ranks agree on what they are about to run before any data moves.

A collective is described by its sequence number on the communicator, count, dtype, op, the
algorithm that will run and the codec with its parameters. Ranks compare the sequence number
and a 32-bit hash of the rest in one small native allreduce (MIN over the values and their
negations: equal everywhere iff min == max, as MPICH's ``MPIX_EQUAL`` does; nonblocking, so that
its latency hides behind preparing the call, which ends before anything is sent), and on a
difference **every** rank raises :class:`MismatchError` naming the fields that differ and the
ranks (an allgather of the fingerprints, on the error path only; PyTorch's
``TORCH_DISTRIBUTED_DEBUG=DETAIL`` does the same).

When: every call with ``MPICOLL_CHECK=1``; otherwise the first call of each kind on a
communicator — a kind that every rank has already verified is not checked again. That decision
must be the same on every rank or the check itself hangs: it is, in a program whose ranks make
the same calls, because the set of verified kinds grows by the same checks everywhere. Between
checks, every message's tag carries a hash of the fingerprint, so a message of one collective
never matches a receive of a different one: mismatched calls then stall (the watchdog,
``MPICOLL_TIMEOUT``, reports and aborts) instead of returning wrong bits.
"""

from __future__ import annotations

import os
import zlib
from array import array
from typing import TYPE_CHECKING

import numpy as np
from mpi4py import MPI

from . import watchdog
from ._mpi import complete

if TYPE_CHECKING:
    from .context import Context

__all__ = ["MismatchError", "CHECK_ENV", "every_call", "start", "Check", "refresh",
           "tag_bits", "say"]

CHECK_ENV = "MPICOLL_CHECK"
FIELDS = ("call", "count", "dtype", "op", "algorithm", "codec")


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
    from . import fastpath  # which calls are checked changed: no call may skip that
    fastpath.forget()


def tag_bits(kind: tuple) -> int:
    """A stable hash of a fingerprint ``(count, dtype, op, algorithm, codec)``, for message tags
    and the check (the same on every rank and run)."""
    count, dtype, op, algorithm, codec = kind
    return zlib.crc32(f"{count}|{dtype.str}|{op}|{algorithm}|{codec}".encode())


def start(ctx: Context, call: int, kind: tuple, bits: int) -> Check | None:
    """Start comparing, across the ranks of ``ctx``, the ``kind`` (whose :func:`tag_bits` are
    ``bits``) of their ``call``-th collective; None on one rank. Collective: every rank starts
    it for the same call. The caller finishes it (:meth:`Check.finish`: MismatchError on every
    rank if they differ) before the call moves any data, and meanwhile prepares the call, which
    hides the check's latency."""
    return None if ctx.size == 1 else Check(ctx, call, kind, bits)


class Check:
    """A fingerprint check in flight: one nonblocking allreduce of four integers on the
    context's own communicator (MIN over the values and their negations)."""

    __slots__ = ("_ctx", "_call", "_kind", "_values", "_request")

    def __init__(self, ctx: Context, call: int, kind: tuple, bits: int):
        self._ctx, self._call, self._kind = ctx, call, kind
        self._values = array("q", (call, bits, -call, -bits))
        self._request = ctx.check_comm.Iallreduce(MPI.IN_PLACE, self._values, op=MPI.MIN)

    def finish(self) -> None:
        """Wait for it; MismatchError on every rank if the ranks differ."""
        with watchdog.Blocked(lambda: f"the fingerprint check of collective #{self._call} "
                                      f"({say(self._kind)})"):
            complete(self._request, self._ctx.spins)
        both = self._values
        if both[0] == -both[2] and both[1] == -both[3]:  # min == max: the same everywhere
            return
        # everyone knows it differs: say how, everywhere
        every = self._ctx.check_comm.allgather((self._call, *self._kind))
        raise MismatchError(_explain(every))


def say(kind: tuple) -> str:
    """A fingerprint in words."""
    count, dtype, op, algorithm, codec = kind
    return (f"allreduce of {count} × {np.dtype(dtype).name}, op {op}, algorithm {algorithm}"
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
