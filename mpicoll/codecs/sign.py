"""sign: one bit per element (its sign) and one float32 scale per block, the mean |x| of the block.

Decodes to ``±scale``: 1-bit SGD's and 1-bit Adam's compression, about 29× smaller than float32
with the default 256-element blocks. It is biased — almost nothing is decoded exactly — so use it
through :class:`~mpicoll.codecs.ErrorFeedback`, which sends the error back in later calls.

Bits are packed 8 per byte, element ``i`` in bit ``i % 8`` (least significant first) of byte
``i // 8``; a set bit means negative (``x < 0``), so zeros and NaN decode as ``+scale``. Unused
bits of the last byte are zero, and decoders reject frames where they are not. A block holding NaN
or ±inf has a NaN scale and decodes to all NaN (as in ``int8``).

Payload: ``ceil(count / block_size)`` × float32 scales, then ``ceil(count / 8)`` bytes of bits.
Header parameters (8 bytes): u32 block size, u32 reserved (0; decoders reject other values).
"""

from __future__ import annotations

import struct

import numpy as np

from .._array import array_module
from . import kernels
from .abc import Codec
from .blocks import block_rows, chunk_elements
from .wire import CodecError

__all__ = ["Sign"]

_MAX_BLOCK = 2**31


def _signs(bits: np.ndarray, elems: slice) -> np.ndarray:
    """Unpack the bits of elements ``elems`` into ±1 as int8."""
    xp = array_module(bits)
    lo, hi = elems.start, elems.stop
    negative = xp.unpackbits(bits[lo // 8:-(-hi // 8)], bitorder="little")[lo % 8:lo % 8 + hi - lo]
    return (1 - 2 * negative.view(np.int8)).astype(np.int8, copy=False)  # the kernels take int8


class Sign(Codec):
    name = "sign"
    codec_id = 6
    dense = True
    params = struct.Struct("<II")
    config_keys = ("block_size",)

    def __init__(self, block_size: int = 256):
        if not 1 <= int(block_size) <= _MAX_BLOCK:
            raise ValueError(f"block_size must be in 1..{_MAX_BLOCK}, not {block_size}")
        self.block_size = int(block_size)

    def _encode(self, flat):
        nblocks = -(-flat.size // self.block_size)

        def fill(payload):
            xp = array_module(flat)
            scales = payload[:4 * nblocks].view("<f4")
            work = xp.float64 if flat.dtype == xp.float64 else xp.float32
            for elems, rows, width in block_rows(flat.size, self.block_size, chunk_elements(flat)):
                with np.errstate(over="ignore", invalid="ignore"):
                    scale = xp.abs(flat[elems].reshape(-1, width)).mean(axis=1, dtype=work)
                    scale = scale.astype(xp.float32)
                scale[~xp.isfinite(scale)] = xp.nan
                scales[rows] = scale
            payload[4 * nblocks:] = xp.packbits(flat < 0, bitorder="little")
        return (self.block_size, 0), 4 * nblocks + -(-flat.size // 8), fill

    def _parse(self, header, payload):
        block, reserved = header.params
        if reserved:
            raise CodecError(f"reserved header field is {reserved}, not 0")
        if block == 0:
            raise CodecError("sign frame with block size 0")
        nblocks = -(-header.count // block)
        expected = 4 * nblocks + -(-header.count // 8)
        if payload.size != expected:
            raise CodecError(f"sign payload is {payload.size} bytes, expected {expected}")
        bits = payload[4 * nblocks:]
        if header.count % 8 and bits[-1] >> (header.count % 8):
            raise CodecError("sign frame with nonzero padding bits")
        return block, payload[:4 * nblocks].view("<f4"), bits

    def _decode_into(self, header, parsed, out):
        self._apply(parsed, out, add=False)

    def _add_into(self, header, parsed, acc):
        self._apply(parsed, acc, add=True)

    @staticmethod
    def _apply(parsed, out, add: bool) -> None:
        """``out (+)= ±scale``, the signs unpacked a chunk at a time (all at once on a device)."""
        block, scales, bits = parsed
        scale = kernels.for_array(out)
        for elems, rows, _ in block_rows(out.size, block, chunk_elements(out)):
            scale.dequantize(_signs(bits, elems), scales[rows], block, out[elems], add)

    def _max_payload_nbytes(self, count, dtype):
        return 4 * -(-count // self.block_size) + -(-count // 8)
