"""How a round's messages reach MPI: host arrays as they are; device arrays directly when the MPI
library is CUDA-aware, else through pinned host staging buffers.

:func:`choose` picks a transport once per call from the send buffer. The engine asks it to
``bind`` an execution; host arrays bind to None, so the NumPy path pays one ``is None`` test per
round. A binding's ``post(i)`` makes round ``i``'s outgoing device data visible to MPI (the stream
that produced it synchronised; staged: copied to pinned memory first) and returns the function
that maps a region to the buffer MPI gets; ``received(i)`` runs once the round's messages have
arrived (staged: copies them back to the device); ``stream`` is where the round's local steps run.

A non-CUDA-aware MPI given a device pointer crashes, hence staging unless
:func:`mpicoll.cuda_aware.detect` says yes. Devices are a five-method interface
(:class:`CupyDevice`); the tests run the staged and direct code with NumPy standing in for device
memory.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Protocol

import numpy as np

from . import cuda_aware
from ._array import Array, is_device
from .schedule import Region, Schedule, Send

if TYPE_CHECKING:
    from .local import Buffers

__all__ = ["Transport", "HOST", "Direct", "Staged", "StagingPlan", "staging_plan", "CupyDevice",
           "choose"]

KEEP_PINNED = 8  # free pinned buffers a staged transport keeps for reuse


class Device(Protocol):
    """What a transport needs of a device: streams, pinned host memory, asynchronous copies.

    A stream is whatever the device uses (a ``cupy.cuda.Stream``); the engine enters it as a
    context manager around a round's local steps.
    """

    def stream(self) -> Any: ...

    def pinned(self, nbytes: int) -> np.ndarray: ...

    def to_host(self, src: Array, dst: np.ndarray, stream: Any) -> None: ...

    def to_device(self, src: np.ndarray, dst: Array, stream: Any) -> None: ...

    def synchronize(self, stream: Any) -> None: ...


class Binding(Protocol):
    """One execution's use of a transport (see the module docstring)."""

    stream: Any

    def post(self, index: int) -> Callable[[Region], Array]: ...

    def received(self, index: int) -> None: ...

    def close(self) -> None: ...


class CachesStaging(Protocol):
    """Where ``Staged.bind`` keeps a schedule's staging plan (a ``context.Plan``)."""

    staging: StagingPlan | None


class Transport:
    """Host arrays: MPI gets the buffers themselves."""

    name = "host"

    def bind(self, schedule: Schedule, bufs: Buffers,
             plan: CachesStaging | None = None) -> Binding | None:
        return None


HOST = Transport()


class Direct(Transport):
    """Device buffers straight to a CUDA-aware MPI, after synchronising the producing stream."""

    name = "cuda-aware"

    def __init__(self, device: Device) -> None:
        self.device = device

    def bind(self, schedule: Schedule, bufs: Buffers,
             plan: CachesStaging | None = None) -> Binding:
        return _DirectBinding(self.device, bufs)


class _DirectBinding:
    def __init__(self, device: Device, bufs: Buffers) -> None:
        self.stream = device.stream()
        self._device, self._raw = device, bufs.raw

    def post(self, index: int) -> Callable[[Region], Array]:
        self._device.synchronize(self.stream)
        return self._raw

    def received(self, index: int) -> None:
        pass

    def close(self) -> None:
        pass


@dataclass(frozen=True, eq=False)
class StagingPlan:
    """Where each round's messages sit in one pinned host buffer.

    A round's distinct regions get consecutive byte ranges from offset 0 (a region sent to two
    peers is staged once). Rounds run one after another and share the buffer, so it is as large
    as the largest round, not as the whole collective.
    """

    sends: tuple[tuple[Region, ...], ...]  # per round: copied to the host before posting
    recvs: tuple[tuple[Region, ...], ...]  # per round: copied back to the device once arrived
    spans: tuple[dict[Region, slice], ...]  # per round: region -> bytes of the host buffer
    nbytes: int


def staging_plan(schedule: Schedule, nbytes: Callable[[Region], int]) -> StagingPlan:
    """The staging plan of ``schedule``; ``nbytes(region)`` is a region's size in bytes."""
    sends: list[tuple[Region, ...]] = []
    recvs: list[tuple[Region, ...]] = []
    spans: list[dict[Region, slice]] = []
    largest = 0
    for rnd in schedule.rounds:
        span: dict[Region, slice] = {}
        at = 0
        for t in rnd.transfers:
            if t.region not in span:
                span[t.region] = slice(at, at + nbytes(t.region))
                at += nbytes(t.region)
        sends.append(tuple(dict.fromkeys(t.region for t in rnd.transfers if isinstance(t, Send))))
        recvs.append(tuple(t.region for t in rnd.transfers if not isinstance(t, Send)))
        spans.append(span)
        largest = max(largest, at)
    return StagingPlan(tuple(sends), tuple(recvs), tuple(spans), largest)


class Staged(Transport):
    """Device buffers through pinned host memory, for an MPI that is not CUDA-aware.

    Pinned buffers are expensive to allocate (a page-locking system call), so they are kept and
    reused: each execution in flight holds one, sized by its :class:`StagingPlan`.
    """

    name = "staged"

    def __init__(self, device: Device) -> None:
        self.device = device
        self.free: list[np.ndarray] = []

    def bind(self, schedule: Schedule, bufs: Buffers,
             plan: CachesStaging | None = None) -> Binding:
        """``plan`` (a ``context.Plan``) caches the staging plan with the schedule it serves."""
        staging = None if plan is None else plan.staging
        if staging is None:
            staging = staging_plan(schedule, bufs.nbytes)
            if plan is not None:
                plan.staging = staging
        return _StagedBinding(self, staging, bufs)

    def take(self, nbytes: int) -> np.ndarray:
        """The smallest free pinned buffer of at least ``nbytes``, or a new one (a power of 2)."""
        fits = [b for b in self.free if b.size >= nbytes]
        if fits:
            best = min(fits, key=len)
            self._drop(best)
            return best
        return self.device.pinned(1 << max(nbytes - 1, 0).bit_length())

    def give_back(self, buf: np.ndarray) -> None:
        self.free.append(buf)
        if len(self.free) > KEEP_PINNED:
            self._drop(min(self.free, key=len))

    def _drop(self, buf: np.ndarray) -> None:
        """Take ``buf`` off the free list, by identity (``list.remove`` compares arrays with
        ``==``, element by element: ambiguous once two are free)."""
        self.free = [b for b in self.free if b is not buf]


class _StagedBinding:
    def __init__(self, transport: Staged, plan: StagingPlan, bufs: Buffers) -> None:
        self.stream = transport.device.stream()
        self._transport, self._device, self._plan, self._raw = transport, transport.device, plan, bufs.raw
        self._host = transport.take(plan.nbytes)

    def post(self, index: int) -> Callable[[Region], np.ndarray]:
        host, span = self._host, self._plan.spans[index]
        for region in self._plan.sends[index]:
            self._device.to_host(self._raw(region), host[span[region]], self.stream)
        self._device.synchronize(self.stream)  # copies done: MPI reads them, writes the rest
        return lambda region: host[span[region]]

    def received(self, index: int) -> None:
        span = self._plan.spans[index]
        for region in self._plan.recvs[index]:
            self._device.to_device(self._host[span[region]], self._raw(region), self.stream)

    def close(self) -> None:
        self._device.synchronize(self.stream)  # the last copies read the buffer we hand back
        self._transport.give_back(self._host)


class CupyDevice:
    """CuPy: copies on the stream current when the call was made, pinned memory from CuPy."""

    name = "cupy"

    def __init__(self) -> None:
        import cupy
        self._cupy = cupy

    def stream(self) -> Any:
        return self._cupy.cuda.get_current_stream()

    def pinned(self, nbytes: int) -> np.ndarray:
        return np.frombuffer(self._cupy.cuda.alloc_pinned_memory(nbytes), np.uint8, nbytes)

    def to_host(self, src: Array, dst: np.ndarray, stream: Any) -> None:
        self._cupy.asnumpy(src, out=dst, stream=stream, blocking=False)

    def to_device(self, src: np.ndarray, dst: Array, stream: Any) -> None:
        dst.set(src, stream=stream)

    def synchronize(self, stream: Any) -> None:
        stream.synchronize()


def choose(array: Array) -> Transport:
    """HOST for NumPy arrays; for CuPy arrays Direct when ``cuda_aware.detect()`` says the MPI
    library is CUDA-aware (``MPICOLL_CUDA_AWARE`` overrides it), else Staged."""
    if not is_device(array):
        return HOST
    direct, staged = _cupy_transports()
    return direct if cuda_aware.detect().aware else staged


@functools.cache
def _cupy_transports() -> tuple[Direct, Staged]:
    device = CupyDevice()
    return Direct(device), Staged(device)
