"""bf16: bfloat16 (the top 16 bits of a float32), 2 bytes per element with float32's range.

Rounding is to nearest, ties to even, on the float32 bit pattern; float64 input is cast to
float32 first (so it is rounded twice), float16 input converts exactly to float32 first. ±inf
stays ±inf, finite values too large for bf16 round to ±inf as IEEE rounding says, and every NaN
stays a quiet NaN of the same sign (its payload's top bits kept, quiet bit set) — a NaN is never
rounded into inf.

Payload: ``count`` × u16 (little-endian), the bf16 bit patterns.
"""

from __future__ import annotations

import struct

import numpy as np

from .._array import array_module
from .abc import Codec
from .blocks import chunk_elements, chunks
from .wire import CodecError

__all__ = ["BF16", "to_bf16_bits", "from_bf16_bits"]


def to_bf16_bits(x):
    """Round float32 ``x`` to bfloat16 bit patterns (uint16), to nearest even; NaN stays NaN."""
    xp = array_module(x)
    bits = x.view(xp.uint32)
    rounded = (bits + (0x7FFF + ((bits >> 16) & 1))) >> 16
    nan = (bits & 0x7FFFFFFF) > 0x7F800000
    return xp.where(nan, (bits >> 16) | 0x0040, rounded).astype(xp.uint16)


def from_bf16_bits(bits):
    """Widen bfloat16 bit patterns (uint16) to float32, exactly."""
    xp = array_module(bits)
    return (bits.astype(xp.uint32) << 16).view(xp.float32)


class BF16(Codec):
    name = "bf16"
    codec_id = 2
    dense = True
    params = struct.Struct("<")

    def _encode(self, flat):
        def fill(payload):
            bits = payload.view("<u2")
            for part in chunks(flat.size, chunk_elements(flat)):
                with np.errstate(over="ignore"):  # float64 beyond float32's range -> inf, as bf16
                    x32 = flat[part].astype(np.float32, copy=False)
                bits[part] = to_bf16_bits(x32)
        return (), 2 * flat.size, fill

    def _parse(self, header, payload):
        if payload.size != 2 * header.count:
            raise CodecError(f"bf16 payload is {payload.size} bytes, expected {2 * header.count}")
        return payload.view("<u2")

    def _decode_into(self, header, parsed, out):
        for part in chunks(out.size, chunk_elements(out)):
            out[part] = from_bf16_bits(parsed[part])

    def _add_into(self, header, parsed, acc):
        for part in chunks(acc.size, chunk_elements(acc)):
            acc[part] += from_bf16_bits(parsed[part])

    def _max_payload_nbytes(self, count, dtype):
        return 2 * count
