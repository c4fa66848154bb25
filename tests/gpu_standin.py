"""NumPy standing in for device memory, so mpicoll.transport's staged and direct code runs
without a GPU (same code path, host copies instead of cudaMemcpyAsync).

It counts what it does, and its "pinned" buffers start as garbage: a round whose staging copy
were missing would hand MPI (or the device) garbage, and the results would show it.
"""

from __future__ import annotations

import contextlib

import numpy as np


class StandIn:
    name = "standin"

    def __init__(self):
        self.allocated: list[int] = []  # sizes of the pinned buffers it made
        self.to_host_bytes = self.to_device_bytes = self.synchronized = 0

    def stream(self):
        return contextlib.nullcontext()

    def pinned(self, nbytes: int) -> np.ndarray:
        self.allocated.append(nbytes)
        return np.full(nbytes, 0xEE, np.uint8)

    def to_host(self, src, dst, stream) -> None:
        np.copyto(dst, src)
        self.to_host_bytes += src.nbytes

    def to_device(self, src, dst, stream) -> None:
        np.copyto(dst, src)
        self.to_device_bytes += src.nbytes

    def synchronize(self, stream) -> None:
        self.synchronized += 1
