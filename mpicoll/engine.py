"""Run a schedule on real buffers: to completion (blocking) or round by round (nonblocking)."""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING, Any, Callable, Protocol

import numpy as np
from mpi4py import MPI

from ._array import Array
from . import check, fault
from .check import MismatchError
from .local import Buffers, run_local
from .ops import Op
from .schedule import Copy, Local, Reduce, Region, Round, Scale, Schedule, Send
from .timing import Record

if TYPE_CHECKING:
    from .codecs import Codec
    from .node_window import NodeWindow
    from .transport import Binding

__all__ = ["Execution", "Stage", "BoundStage", "BoundExecution", "lower", "bind", "run_bound"]


def _where(schedule: Schedule, index: int, tag: int) -> str:
    """Round ``index`` of ``schedule`` and whom it waits on, for reports."""
    rnd = schedule.rounds[index]
    peers = ", ".join([f"{'send to' if isinstance(t, Send) else 'receive from'} rank {t.peer}"
                       for t in rnd.transfers]
                      + ([f"the barrier of node {list(schedule.node)}"] if rnd.sync else [])) \
        or "local steps"
    return (f"round {index + 1} of {len(schedule.rounds)}"
            + (f" ({rnd.phase})" if rnd.phase else "") + f", tag {tag}: {peers}")


_RECEIVE = "a message did not match its receive"
_STAMPS = "the node's ranks stamped different collectives"


def mismatch(schedule: Schedule, index: int, tag: int, what: str,
             lead: str = _RECEIVE) -> MismatchError:
    """The error for a message that did not fit its receive in round ``index`` (or ``lead``)."""
    return _mismatch(_where(schedule, index, tag), what, lead)


def _mismatch(where: str, what: str, lead: str = _RECEIVE) -> MismatchError:
    """A message that did not fit its receive, or stamps that differ (``lead``): the ranks run
    different collectives."""
    return MismatchError(
        f"mpicoll: {lead} in {where} "
        f"({what.strip()}): the ranks are running different collectives "
        "(count, dtype, op, algorithm or codec differ); MPICOLL_CHECK=1 compares every call "
        "before any data moves")


class Stage(Protocol):
    """What a request runs and the progress engine advances: an :class:`Execution`, or another
    kind of MPI work in flight (``algorithm.native``). Making one moves no data: its first
    ``test`` or ``wait`` posts it (the call's fingerprint check completes in between)."""

    progressed: float  # when it last moved (for the watchdog)

    @property
    def done(self) -> bool: ...
    def test(self) -> bool: ...
    def wait(self) -> None: ...
    def pending(self) -> list[MPI.Request]: ...
    def completed(self, index: int, status: MPI.Status) -> None: ...
    def where(self) -> str: ...


class _InWindow:
    """What a run of a plan in the node window does, for :class:`Execution` and
    :class:`BoundStage` alike: take its turn in the window's queue, and pass a round's barrier
    (its last request), fenced, the first one's stamps compared."""

    __slots__ = ("_window", "_queued", "_compare", "_pending")
    _comm: MPI.Comm  # what its messages travel on
    _window: NodeWindow | None
    _queued: bool
    _compare: bool
    _pending: list[MPI.Request] | None
    _next: int  # the next round to start

    def _mismatch(self, what: str, lead: str = _RECEIVE) -> MismatchError:
        raise NotImplementedError

    def _stopped(self, error: MPI.Exception) -> Exception:
        """What an MPI error in a round means: a process failed (ULFM), else the ranks run
        different collectives. Either way this run stops here."""
        failed = fault.failure(error, self._comm)
        if failed is None:
            return self._mismatch(str(error))
        if self._window is not None:
            self._window.leave(self)
        return failed

    def _not_its_turn(self) -> bool:
        """Whether an earlier collective still uses the node window (queued for it if so)."""
        window = self._window
        if window is None or self._next:
            return False
        if not self._queued:
            window.enqueue(self)
            self._queued = True
        return not window.turn(self)

    def _turn(self) -> None:
        """Take the window in a wait that runs alone (nothing else is in flight)."""
        if self._not_its_turn():
            raise RuntimeError("mpicoll: a collective on the node window waited alone while an "
                               "earlier one still held the window")

    def _barrier_done(self, block: bool) -> bool:
        """Whether the round's barrier has passed (waited for if ``block``); then it is
        :meth:`_barrier_passed`."""
        barrier = self._pending[-1]  # type: ignore[index]
        try:
            if block:
                barrier.Wait()
            elif not barrier.Test():
                return False
        except MPI.Exception as error:
            raise self._stopped(error) from None
        self._barrier_passed()
        return True

    def _barrier_passed(self) -> None:
        """The round's barrier completed: see the others' writes, and compare the stamps."""
        window = self._window
        assert window is not None
        window.fence()
        if self._compare:
            self._compare = False
            if not window.stamps_agree():
                raise self._mismatch(window.stamps(), _STAMPS)


class Execution(_InWindow):
    """One run of a schedule on bound buffers.

    ``wait()`` runs it to the end; ``test()`` advances it as far as it can without blocking and
    says whether it has finished. Both may be mixed; messages use the private communicator and
    the tag the caller reserved, so several executions can be in flight on one communicator.
    ``link`` is a transport's binding for device buffers (see :mod:`mpicoll.transport`), None
    for host arrays, which MPI takes as they are.
    """

    def __init__(self, schedule: Schedule, op: Op, comm: MPI.Comm, tag: int, bufs: Buffers,
                 codec: Codec | None = None, record: Record | None = None,
                 link: Binding | None = None, fingerprint: check.Channel | None = None):
        self.schedule = schedule
        self._op = op
        self._comm = comm
        self._tag = tag
        self._bufs = bufs
        self._codec = codec
        self._record = record  # timing: phases are filled in as rounds finish
        self._link = link
        if record is not None:  # a later stage of the same collective continues the clock
            self._mark = record.t0 if math.isnan(record.t1) else record.t1
        self._next = 0          # index of the next round to start
        self._pending: list[MPI.Request] | None = None  # requests of the round in flight
        self.progressed = time.monotonic()  # when a round last finished (for the watchdog)
        # Sizes of received messages are checked with MPICOLL_CHECK=1 only (statuses cost
        # microseconds a call); by default the fingerprint in the tags keeps other collectives'
        # messages away, and MPI reports a message larger than its receive.
        self._statuses: list[MPI.Status] | None = [] if check.every_call else None
        self._early: dict[int, int] | None = None  # sizes of receives a Waitany completed
        # Collectives on one node window run one after another, in the order they first move
        # (start order: the engine advances a collective as it starts it).
        self._window = bufs.window if schedule.node_count else None
        self._queued = False
        # The call's fingerprint check: the first barrier carries it if it was started to be
        # carried, that barrier is the whole communicator's and nothing was sent before it;
        # else it completes before the first round that reaches other ranks.
        self._check = fingerprint
        self._carrying: check.Channel | None = None  # the check posted as the round in flight's barrier
        # Else the first barrier in the node window is stamped with the tag, and the stamps of
        # the node's ranks compared once it passed (mpicoll.node_window).
        self._stamp = tag if schedule.node_count else None
        self._compare = False
        self._overlap = False  # the round in flight's overlap steps are still to run
        if not schedule.rounds:
            self._finished()

    @property
    def done(self) -> bool:
        return self._next == len(self.schedule.rounds) and self._pending is None

    def pending(self) -> list[MPI.Request]:
        """The MPI requests of the round in flight (empty between rounds)."""
        return self._pending or []

    def where(self) -> str:
        """Which round is in flight and whom it waits on, for reports."""
        if self.done:
            return "finished"
        index = max(self._next - 1, 0) if self._pending is not None else self._next
        return _where(self.schedule, index, self._tag)

    def test(self) -> bool:
        """Advance without blocking; return True once every round has finished."""
        if self._not_its_turn():
            return False
        while not self.done:
            if self._pending is None:
                self._start(self.schedule.rounds[self._next])
            if self._overlap and not self._run_overlap(block=False):
                return False
            if self._pending:
                try:
                    if self._carrying is not None:  # the check's persistent allreduce, alone:
                        if not self._pending[0].Test():  # MPICH 5.0.2's Testall fails on it
                            return False
                    elif self._statuses is None:
                        if not MPI.Request.Testall(self._pending):
                            return False
                    elif MPI.Request.Testall(self._pending, self._statuses):
                        self._check_sizes()
                    else:
                        return False
                except MPI.Exception as error:
                    raise self._stopped(error) from None
            self._finish(self.schedule.rounds[self._next - 1])
        return True

    def wait(self) -> None:
        """Run every remaining round to completion."""
        self._turn()
        while not self.done:
            if self._pending is None:
                self._start(self.schedule.rounds[self._next])
            if self._overlap:
                self._run_overlap(block=True)
            if self._pending:
                try:
                    MPI.Request.Waitall(self._pending, self._statuses)
                except MPI.Exception as error:
                    raise self._stopped(error) from None
                if self._statuses is not None:
                    self._check_sizes()
            self._finish(self.schedule.rounds[self._next - 1])

    def completed(self, index: int, status: MPI.Status) -> None:
        """Request ``index`` of the round was completed elsewhere (a ``Waitany``), with
        ``status``: its size is checked with the others'."""
        if self._statuses is None:
            return
        if self._early is None:
            self._early = {}
        self._early[index] = status.Get_count(MPI.BYTE)

    def _check_sizes(self) -> None:
        """Every message received has the size its receive expected: MPI reports a larger one
        (truncation), not a smaller one, which would leave stale bytes in the buffer."""
        early, statuses = self._early, self._statuses or []
        rnd = self.schedule.rounds[self._next - 1]
        sizes = [self._bufs.nbytes(t.region) for t in rnd.transfers if not isinstance(t, Send)]
        for i, expected in enumerate(sizes):
            got = early[i] if early is not None and i in early else statuses[i].Get_count(MPI.BYTE)
            if got != expected:
                raise self._mismatch(f"{got} bytes arrived where {expected} were expected")

    def _mismatch(self, what: str, lead: str = _RECEIVE) -> MismatchError:
        if self._window is not None:  # it stops here: the next collective may have the window
            self._window.leave(self)
        return _mismatch(self.where(), what, lead)

    def _start(self, rnd: Round) -> None:
        comm, tag, fingerprint = self._comm, self._tag, self._check
        if fingerprint is not None and (rnd.transfers or rnd.sync):
            # The first round that reaches other ranks: its barrier carries the fingerprint
            # check (one node: the barrier is every rank's), or the check completes before it.
            self._check = None
            if fingerprint.carried and rnd.sync and not rnd.transfers:
                self._carrying = fingerprint
            else:
                self._agreed(fingerprint.finish)
        raw: Callable[[Region], Array] = self._bufs.raw
        if self._link is not None and rnd.transfers:
            raw = self._link.post(self._next)
        # Receives first: a message that finds its receive posted skips the unexpected queue.
        reqs = [comm.Irecv(raw(t.region), t.peer, tag) for t in rnd.transfers if not isinstance(t, Send)]
        reqs += [comm.Isend(raw(t.region), t.peer, tag) for t in rnd.transfers if isinstance(t, Send)]
        if self._carrying is not None:
            self._stamp = None  # the check compares all the stamp would
            self._bufs.window.fence()  # as ibarrier does
            reqs.append(self._carrying.post())
        elif rnd.sync:
            reqs.append(self._bufs.window.ibarrier(self._stamp))
            self._compare, self._stamp = self._stamp is not None, None
        if self._statuses is not None:
            self._early = None
            if len(self._statuses) < len(reqs):
                self._statuses += [MPI.Status() for _ in range(len(reqs) - len(self._statuses))]
        self._pending = reqs
        self._next += 1
        self._overlap = bool(rnd.overlap)

    def _run_overlap(self, block: bool) -> bool:
        """Run the overlap steps of the round in flight once its barrier (its last request)
        passed, if it has one; False if it has not yet and ``block`` is False."""
        rnd = self.schedule.rounds[self._next - 1]
        if rnd.sync and not self._barrier_done(block):
            return False
        self._overlap = False
        if self._link is None:
            run_local(rnd.overlap, self._bufs, self._op, self._codec)
        else:
            with self._link.stream:
                run_local(rnd.overlap, self._bufs, self._op, self._codec)
        return True

    def _agreed(self, verdict: Callable[[], None]) -> None:
        """Have the check's ``verdict``; on a MismatchError this execution stops here (and
        leaves the window to the next collective)."""
        try:
            verdict()
        except MismatchError:
            if self._window is not None:
                self._window.leave(self)
            raise

    def _finish(self, rnd: Round) -> None:
        self._pending = None
        self.progressed = time.monotonic()
        if self._carrying is not None:  # the barrier passed: and the ranks agree?
            carrying, self._carrying = self._carrying, None
            self._agreed(carrying.verdict)
        if rnd.sync and not rnd.overlap:  # (with overlap steps, it passed before they ran)
            self._barrier_passed()
        if self._link is None:
            if rnd.local:
                run_local(rnd.local, self._bufs, self._op, self._codec)
        else:
            if rnd.transfers:
                self._link.received(self._next - 1)
            if rnd.local:
                with self._link.stream:
                    run_local(rnd.local, self._bufs, self._op, self._codec)
        if self._record is not None:
            # A phase is charged from the end of the previous round to the end of its own.
            now, phases = MPI.Wtime(), self._record.phases
            phases[rnd.phase] = phases.get(rnd.phase, 0.0) + now - self._mark
            self._mark = now
        if self._next == len(self.schedule.rounds):
            self._finished()

    def _finished(self) -> None:
        if self._window is not None:
            self._window.leave(self)
        if self._link is not None:
            self._link.close()
        if self._record is not None:
            self._record.t1 = self._mark if self.schedule.rounds else MPI.Wtime()


# ---- the blocking fast path: a cached schedule lowered to flat tuples, run in a tight loop

_BUFFERS = ("send", "recv", "tmp", "node")
_REDUCE, _COPY, _SCALE = 0, 1, 2


def lower(schedule: Schedule) -> tuple | None:
    """``schedule`` as flat per-round tuples for :func:`bind`: ``(receives, sends,
    overlap, steps, sync)`` with transfers ``(buffer index, start, stop, peer)`` and steps ``(kind, dst,
    left, right, factor)`` over regions ``(buffer index, start, stop)``. None when it uses
    what only the full engine runs (codec frames, error feedback)."""
    try:
        return tuple(_lower_round(rnd) for rnd in schedule.rounds)
    except LookupError:
        return None


def _lower_round(rnd: Round) -> tuple:
    def at(r: Region) -> tuple[int, int, int]:
        if r.buf not in _BUFFERS:  # a frame slot or a residual
            raise LookupError(r.buf)
        return _BUFFERS.index(r.buf), r.start, r.stop

    def lowered(local: tuple[Local, ...]) -> tuple:
        steps: list[tuple] = []
        for step in local:
            if isinstance(step, Reduce):
                steps.append((_REDUCE, at(step.dst), at(step.left), at(step.right), 0.0))
            elif isinstance(step, Copy):
                steps.append((_COPY, at(step.dst), at(step.src), None, 0.0))
            elif isinstance(step, Scale):
                steps.append((_SCALE, at(step.dst), at(step.src), None, step.factor))
            else:  # codec steps
                raise LookupError(step)
        return tuple(steps)

    receives = tuple((*at(t.region), t.peer) for t in rnd.transfers if not isinstance(t, Send))
    sends = tuple((*at(t.region), t.peer) for t in rnd.transfers if isinstance(t, Send))
    return receives, sends, lowered(rnd.overlap), lowered(rnd.local), rnd.sync


def bind(rounds: tuple, arrays: tuple, window: NodeWindow | None = None) -> tuple:
    """Lowered rounds on ``arrays`` (flat send, recv, tmp, and the node window's memory for a
    schedule that uses it): per round ``(pair, receives, sends, overlap, steps, barrier)`` with
    message specs ``([view, MPI.BYTE], peer)``, ``pair`` when it is one receive and one send and
    nothing overlaps them (then one ``Sendrecv``: the same messages, a third of the calls), the
    steps of :func:`bind_steps`, and ``window`` for a round that passes its barrier."""
    byte = MPI.BYTE
    return tuple((len(receives) == 1 and len(sends) == 1 and not overlap,
                  tuple(([arrays[b][lo:hi], byte], peer) for b, lo, hi, peer in receives),
                  tuple(([arrays[b][lo:hi], byte], peer) for b, lo, hi, peer in sends),
                  bind_steps(overlap, arrays), bind_steps(steps, arrays),
                  window if sync else None)
                 for receives, sends, overlap, steps, sync in rounds)


def run_bound(rounds: tuple, comm: MPI.Comm, tag: int, op: Op, schedule: Schedule) -> None:
    """Run rounds from :func:`bind` to the end: what :class:`Execution` does for a blocking call
    alone, without its per-round objects."""
    index = 0
    stamp: int | None = tag  # the first barrier is stamped (mpicoll.node_window)
    try:
        for index, (pair, receives, sends, overlap, steps, barrier) in enumerate(rounds):
            if pair:
                comm.Sendrecv(sends[0][0], sends[0][1], tag, receives[0][0], receives[0][1], tag)
            elif receives or sends:
                requests = [comm.Irecv(spec, peer, tag) for spec, peer in receives]
                requests += [comm.Isend(spec, peer, tag) for spec, peer in sends]
                if overlap:  # after the barrier, while the messages are in flight
                    if barrier is not None:
                        if not barrier.barrier(stamp):
                            raise mismatch(schedule, index, tag, barrier.stamps(), _STAMPS)
                        stamp = barrier = None
                    run_bound_steps(overlap, op)
                MPI.Request.Waitall(requests)
            if barrier is not None:
                if not barrier.barrier(stamp):
                    raise mismatch(schedule, index, tag, barrier.stamps(), _STAMPS)
                stamp = None
            if steps:
                run_bound_steps(steps, op)
    except MPI.Exception as error:
        raise fault.failure(error, comm) or mismatch(schedule, index, tag, str(error)) from None



class BoundStage(_InWindow):
    """Lowered rounds bound to the call's arrays (:func:`bind`), run as a request's stage
    (:class:`Stage`) round by round: what :class:`Execution` does for a plain plan on host
    arrays, without its per-round objects. How a round's messages are posted is the
    subclass's: fresh ones (:class:`BoundExecution`) or persistent requests
    (``mpicoll.persistent.BoundRounds``).

    A plan in the node window (``window``) takes its turn in the window's queue before its
    first round, as an :class:`Execution` does; a round with a barrier passes it (the first
    one stamped with the tag and compared), and a round's overlap steps run once its barrier
    has passed, while its messages are in flight."""

    __slots__ = ("_rounds", "_op", "_schedule", "_tag", "_next", "progressed", "_stamp",
                 "_overlap")

    def __init__(self, rounds: tuple, tag: int, op: Op, schedule: Schedule,
                 window: NodeWindow | None = None):
        self._take(rounds)
        self._op, self._schedule = op, schedule
        self._window = window
        self._pending: list[MPI.Request] | None = None
        self._rewind(tag)

    def _rewind(self, tag: int) -> None:
        """Ready to run the rounds from the first, on ``tag`` (again, once done)."""
        self._tag, self._next, self._pending = tag, 0, None
        self.progressed = time.monotonic()  # (the watchdog's: a start is a move)
        self._queued = self._compare = self._overlap = False
        self._stamp: int | None = tag

    def _take(self, rounds: tuple) -> None:
        """Run ``rounds`` (from :func:`bind`): their steps and barriers are this class's."""
        self._rounds = [(overlap, steps, barrier) for _, _, _, overlap, steps, barrier in rounds]

    def _post(self, index: int) -> list[MPI.Request]:
        """Post round ``index``'s messages."""
        raise NotImplementedError

    @property
    def done(self) -> bool:
        return self._next == len(self._rounds) and self._pending is None

    def pending(self) -> list[MPI.Request]:
        return list(self._pending or ())

    def completed(self, index: int, status: MPI.Status) -> None:
        """Completed by the progress engine's Waitany: the next Testall sees it inactive."""

    def where(self) -> str:
        if self.done:
            return "finished"
        index = self._next - 1 if self._pending is not None else self._next
        return _where(self._schedule, index, self._tag)

    def test(self) -> bool:
        if self._not_its_turn():
            return False
        while not self.done:
            if self._pending is None:
                self._start()
            if self._overlap and not self._run_overlap(block=False):
                return False
            if self._pending:
                try:
                    if not MPI.Request.Testall(self._pending):
                        return False
                except MPI.Exception as error:
                    raise self._stopped(error) from None
            self._finish()
        return True

    def wait(self) -> None:
        self._turn()
        while not self.done:
            if self._pending is None:
                self._start()
            if self._overlap:
                self._run_overlap(block=True)
            if self._pending:
                try:
                    MPI.Request.Waitall(self._pending)
                except MPI.Exception as error:
                    raise self._stopped(error) from None
            self._finish()

    def _start(self) -> None:
        index = self._next
        requests = self._post(index)
        overlap, _, barrier = self._rounds[index]
        if barrier is not None:
            requests = requests + [barrier.ibarrier(self._stamp)]
            self._compare, self._stamp = self._stamp is not None, None
        self._overlap = bool(overlap)
        self._pending = requests
        self._next = index + 1

    def _run_overlap(self, block: bool) -> bool:
        """Run the overlap steps of the round in flight once its barrier (its last request)
        passed, if it has one; False if it has not yet and ``block`` is False."""
        overlap, _, barrier = self._rounds[self._next - 1]
        if barrier is not None and not self._barrier_done(block):
            return False
        self._overlap = False
        run_bound_steps(overlap, self._op)
        return True

    def _mismatch(self, what: str, lead: str = _RECEIVE) -> MismatchError:
        """The error that stops this run (which leaves the window to the next collective)."""
        index = self._next - 1 if self._pending is not None else self._next
        if self._window is not None:
            self._window.leave(self)
        return mismatch(self._schedule, max(index, 0), self._tag, what, lead)

    def _finish(self) -> None:
        self._pending = None
        self.progressed = time.monotonic()
        overlap, steps, barrier = self._rounds[self._next - 1]
        if barrier is not None and not overlap:  # (with overlap steps it passed before them)
            self._barrier_passed()
        if steps:
            run_bound_steps(steps, self._op)
        if self.done:
            if self._window is not None:
                self._window.leave(self)
            self._finished()

    def _finished(self) -> None:
        """After the last round (the subclass's to use)."""


class BoundExecution(BoundStage):
    """One run of rounds from :func:`bind` on fresh ``Irecv``/``Isend`` requests, on its own
    scratch, given back to ``plan`` at the end: the nonblocking fast path's stage
    (``mpicoll.fastpath.LoweredCall.start``)."""

    __slots__ = ("_messages", "_comm", "_plan", "_scratch")

    def __init__(self, rounds: tuple, comm: MPI.Comm, tag: int, op: Op, schedule: Schedule,
                 plan: Any, scratch: tuple, window: NodeWindow | None = None):
        super().__init__(rounds, tag, op, schedule, window)
        self._messages = [(receives, sends) for _, receives, sends, _, _, _ in rounds]
        self._comm, self._plan, self._scratch = comm, plan, scratch

    def _post(self, index: int) -> list[MPI.Request]:
        comm, tag = self._comm, self._tag
        receives, sends = self._messages[index]
        return [comm.Irecv(spec, peer, tag) for spec, peer in receives] \
            + [comm.Isend(spec, peer, tag) for spec, peer in sends]

    def again(self, tag: int, scratch: tuple) -> BoundExecution:
        """Run the same rounds once more (done, on the same scratch given back by the last
        run): a start of a loop's same arrays reuses its stage rather than building one."""
        self._scratch = scratch
        self._rewind(tag)
        return self

    def _finished(self) -> None:
        self._plan.give_back(self._scratch)  # (not on a mismatch: MPI might still write it)


def bind_steps(steps: tuple, arrays: tuple) -> tuple:
    """A lowered round's local steps on ``arrays``: ``(kind, dst, src, other, factor)`` views."""
    return tuple((kind, arrays[d][dlo:dhi], arrays[a][alo:ahi],
                  None if right is None else arrays[right[0]][right[1]:right[2]], factor)
                 for kind, (d, dlo, dhi), (a, alo, ahi), right, factor in steps)


def run_bound_steps(steps: tuple, op: Op) -> None:
    """Steps from :func:`bind_steps`. Overflow is left to NumPy's error settings: an
    ``np.errstate`` costs as much as a small call's whole reduction, and what overflows still
    gives the MPI result (inf, or wrapped)."""
    kernel = op.kernel
    for kind, dst, src, other, factor in steps:
        try:
            if kind == _REDUCE:
                kernel(src, other, out=dst)
            elif kind == _COPY:
                np.copyto(dst, src)
            else:
                np.multiply(src, factor, out=dst, casting="unsafe")
        except (FloatingPointError, RuntimeWarning):
            pass  # raised after the whole result was written: the MPI result too
