"""int8: one float32 scale per block of ``block_size`` elements, and a signed byte per element.

``scale = max|x| / 127`` over the block and ``q = round(x / scale)`` in [-127, 127], so the
decoded ``q · scale`` is within ``scale / 2`` of ``x`` (within ``scale`` with
``stochastic=True``, which rounds up with probability equal to the fraction, making the
quantizer unbiased: QSGD's rule; ``seed`` makes the random stream reproducible). An all-zero block
has scale 0 and decodes to zeros. Without error feedback, values far below their block's maximum
quantize to 0 on every call — wrap the codec in :class:`~mpicoll.codecs.ErrorFeedback`.

Non-finite input is never hidden: a block holding NaN or ±inf gets a NaN scale and decodes to all
NaN, so a sum of such frames is not finite, as the fp32 sum would not be. Scales are float32: a
float64 block whose maximum is beyond float32's range also becomes NaN, and one whose maximum is
below float32's smallest subnormal decodes to zeros.

Payload: ``ceil(count / block_size)`` × float32 scales, then ``count`` × int8.
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

__all__ = ["Int8"]

_MAX_BLOCK = 2**31


class Int8(Codec):
    name = "int8"
    codec_id = 3
    dense = True
    params = struct.Struct("<II")
    config_keys = ("block_size", "stochastic", "seed")

    def __init__(self, block_size: int = 256, stochastic: bool = False, seed: int | None = None):
        if not 1 <= int(block_size) <= _MAX_BLOCK:
            raise ValueError(f"block_size must be in 1..{_MAX_BLOCK}, not {block_size}")
        self.block_size = int(block_size)
        self.stochastic = bool(stochastic)
        self.seed = seed
        self._rng = np.random.default_rng(seed)

    def _encode(self, flat):
        nblocks = -(-flat.size // self.block_size)

        def fill(payload):
            scales = payload[:4 * nblocks].view("<f4")
            q = payload[4 * nblocks:].view(np.int8)
            for elems, rows, width in block_rows(flat.size, self.block_size, chunk_elements(flat)):
                self._quantize(flat[elems].reshape(-1, width), scales[rows],
                               q[elems].reshape(-1, width))
        return (self.block_size, 0), 4 * nblocks + flat.size, fill

    def _quantize(self, x, scales, q):
        """Quantize the (blocks, width) array ``x`` into ``q``, one scale per row."""
        xp = array_module(x)
        work = xp.float64 if x.dtype == xp.float64 else xp.float32
        # the random stream is NumPy's on the host too, so a seed gives the same frames anywhere
        noise = xp.asarray(self._rng.random(x.shape, dtype=work)) if self.stochastic else None
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            scale = (xp.abs(x).max(axis=1).astype(work) / 127).astype(xp.float32)
            scale[~xp.isfinite(scale)] = xp.nan
            inv = xp.where(scale > 0, 1 / scale.astype(work), 0).astype(work)
            kernels.for_array(x).quantize(x, inv, q, noise)
        scales[...] = scale

    def _parse(self, header, payload):
        block, reserved = header.params
        if reserved:
            raise CodecError(f"reserved header field is {reserved}, not 0")
        if block == 0:
            raise CodecError("int8 frame with block size 0")
        nblocks = -(-header.count // block)
        expected = 4 * nblocks + header.count
        if payload.size != expected:
            raise CodecError(f"int8 payload is {payload.size} bytes, expected {expected}")
        return block, payload[:4 * nblocks].view("<f4"), payload[4 * nblocks:].view(np.int8)

    def _decode_into(self, header, parsed, out):
        block, scales, q = parsed
        kernels.for_array(out).dequantize(q, scales, block, out)

    def _add_into(self, header, parsed, acc):
        block, scales, q = parsed
        kernels.for_array(acc).dequantize(q, scales, block, acc, add=True)

    def _max_payload_nbytes(self, count, dtype):
        return 4 * -(-count // self.block_size) + count
