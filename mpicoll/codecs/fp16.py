"""fp16: IEEE half-precision cast, 2 bytes per element (Horovod's and DDP's fp16 compression).

Rounds to nearest even. Magnitudes above 65504 become ±inf and below ~6e-8 become ±0, as NumPy's
cast does; NaN stays NaN. Use ``bf16`` when gradients may exceed half's range.

Payload: ``count`` × float16 (little-endian).
"""

from __future__ import annotations

import struct

from .._array import array_module, is_device
from . import half
from .abc import Codec
from .wire import CodecError

__all__ = ["FP16"]


class FP16(Codec):
    name = "fp16"
    codec_id = 1
    dense = True
    params = struct.Struct("<")

    def _encode(self, flat):
        def fill(payload):
            if is_device(flat):
                array_module(flat).copyto(payload.view("<f2"), flat, casting="unsafe")
            else:  # (NumPy's bits, a chunk at a time: half.py)
                half.to_half(flat, payload.view("<f2"))
        return (), 2 * flat.size, fill

    def _parse(self, header, payload):
        if payload.size != 2 * header.count:
            raise CodecError(f"fp16 payload is {payload.size} bytes, expected {2 * header.count}")
        return payload.view("<f2")

    def _decode_into(self, header, parsed, out):
        if is_device(out):
            out[...] = parsed
        else:
            half.from_half(parsed, out)

    def _add_into(self, header, parsed, acc):
        if is_device(acc):
            acc += parsed
        else:
            half.from_half(parsed, acc, add=True)

    def _max_payload_nbytes(self, count, dtype):
        return 2 * count
