"""The block-scaled frame int8 and sign share: one float32 scale per block, then a body.

Each block of ``block_size`` elements (the last one may be shorter) gets a scale; the body holds
what the codec sends per element (int8 values, sign bits), sized by the element count alone, so
these codecs are dense.

Payload: ``ceil(count / block_size)`` × float32 scales, then the codec's body.
Header parameters (8 bytes): u32 block size, u32 reserved (0; decoders reject other values).
"""

from __future__ import annotations

import struct
from abc import abstractmethod
from typing import Callable, NamedTuple

import numpy as np

from . import wire
from .abc import Codec
from .wire import CodecError

__all__ = ["BlockScaledCodec", "ScaledBlocks"]

_MAX_BLOCK = 2**31


class ScaledBlocks(NamedTuple):
    """A parsed payload: the block size, its scales and the codec's body, views of the frame."""

    block: int
    scales: np.ndarray
    body: np.ndarray


def _block_count(count: int, block: int) -> int:
    return -(-count // block)


class BlockScaledCodec(Codec):
    """A codec that sends a float32 scale per block and a body per element."""

    dense = True
    params = struct.Struct("<II")

    def __init__(self, block_size: int = 256) -> None:
        if not 1 <= int(block_size) <= _MAX_BLOCK:
            raise ValueError(f"block_size must be in 1..{_MAX_BLOCK}, not {block_size}")
        self.block_size = int(block_size)

    # ---- what a block-scaled codec implements
    @abstractmethod
    def _body_nbytes(self, count: int) -> int:
        """Size of the body for ``count`` elements."""

    @abstractmethod
    def _fill(self, flat: np.ndarray, scales: np.ndarray, body: np.ndarray) -> None:
        """Write the float32 ``scales`` (one per block of ``self.block_size``) and the uint8
        ``body`` of ``flat``."""

    @abstractmethod
    def _view_body(self, header: wire.Header, body: np.ndarray) -> np.ndarray:
        """Check the body (raise CodecError) and return it as the codec reads it."""

    @abstractmethod
    def _expand(self, parsed: ScaledBlocks, out: np.ndarray, add: bool) -> None:
        """Write the decoded values of ``parsed`` into the flat ``out`` (add them with ``add``)."""

    # ---- the frame
    def _encode(self, flat: np.ndarray) -> tuple[tuple, int, Callable[[np.ndarray], None]]:
        nscales = 4 * _block_count(flat.size, self.block_size)

        def fill(payload: np.ndarray) -> None:
            self._fill(flat, payload[:nscales].view("<f4"), payload[nscales:])
        return (self.block_size, 0), nscales + self._body_nbytes(flat.size), fill

    def _parse(self, header: wire.Header, payload: np.ndarray) -> ScaledBlocks:
        block, reserved = header.params
        if reserved:
            raise CodecError(f"reserved header field is {reserved}, not 0")
        if block == 0:
            raise CodecError(f"{self.name} frame with block size 0")
        nscales = 4 * _block_count(header.count, block)
        expected = nscales + self._body_nbytes(header.count)
        if payload.size != expected:
            raise CodecError(f"{self.name} payload is {payload.size} bytes, expected {expected}")
        return ScaledBlocks(block, payload[:nscales].view("<f4"),
                            self._view_body(header, payload[nscales:]))

    def _decode_into(self, header: wire.Header, parsed: ScaledBlocks, out: np.ndarray) -> None:
        self._expand(parsed, out, add=False)

    def _add_into(self, header: wire.Header, parsed: ScaledBlocks, acc: np.ndarray) -> None:
        self._expand(parsed, acc, add=True)

    def _max_payload_nbytes(self, count: int, dtype: np.dtype) -> int:
        return 4 * _block_count(count, self.block_size) + self._body_nbytes(count)
