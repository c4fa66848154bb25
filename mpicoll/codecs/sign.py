"""sign: one bit per element (its sign) and one float32 scale per block, the mean |x| of the block.

Decodes to ``±scale``: 1-bit SGD's and 1-bit Adam's compression, about 29× smaller than float32
with the default 256-element blocks. It is biased — almost nothing is decoded exactly — so use it
through :class:`~mpicoll.codecs.ErrorFeedback`, which sends the error back in later calls.

Bits are packed 8 per byte, element ``i`` in bit ``i % 8`` (least significant first) of byte
``i // 8``; a set bit means negative (``x < 0``), so zeros and NaN decode as ``+scale``. Unused
bits of the last byte are zero, and decoders reject frames where they are not. A block holding NaN
or ±inf has a NaN scale and decodes to all NaN (as in ``int8``).

Payload (a block-scaled frame, :mod:`mpicoll.codecs.scaled`): ``ceil(count / block_size)`` ×
float32 scales, then ``ceil(count / 8)`` bytes of bits.
"""

from __future__ import annotations

import numpy as np

from .._array import array_module
from . import kernels, wire
from .blocks import block_rows, chunk_elements
from .scaled import BlockScaledCodec, ScaledBlocks
from .wire import CodecError

__all__ = ["Sign"]


def _signs(bits: np.ndarray, elems: slice) -> np.ndarray:
    """Unpack the bits of elements ``elems`` into ±1 as int8."""
    xp = array_module(bits)
    lo, hi = elems.start, elems.stop
    negative = xp.unpackbits(bits[lo // 8:-(-hi // 8)], bitorder="little")[lo % 8:lo % 8 + hi - lo]
    return (1 - 2 * negative.view(np.int8)).astype(np.int8, copy=False)  # the kernels take int8


class Sign(BlockScaledCodec):
    name = "sign"
    codec_id = 6
    config_keys = ("block_size",)

    def _body_nbytes(self, count: int) -> int:
        return -(-count // 8)

    def _fill(self, flat: np.ndarray, scales: np.ndarray, body: np.ndarray) -> None:
        xp = array_module(flat)
        work = xp.float64 if flat.dtype == xp.float64 else xp.float32
        for elems, rows, width in block_rows(flat.size, self.block_size, chunk_elements(flat)):
            with np.errstate(over="ignore", invalid="ignore"):
                scale = xp.abs(flat[elems].reshape(-1, width)).mean(axis=1, dtype=work)
                scale = scale.astype(xp.float32)
            scale[~xp.isfinite(scale)] = xp.nan
            scales[rows] = scale
        body[...] = xp.packbits(flat < 0, bitorder="little")

    def _view_body(self, header: wire.Header, body: np.ndarray) -> np.ndarray:
        if header.count % 8 and body[-1] >> (header.count % 8):
            raise CodecError("sign frame with nonzero padding bits")
        return body

    def _expand(self, parsed: ScaledBlocks, out: np.ndarray, add: bool) -> None:
        """``out (+)= ±scale``, the signs unpacked a chunk at a time (all at once on a device)."""
        kernel = kernels.for_array(out)
        for elems, rows, _ in block_rows(out.size, parsed.block, chunk_elements(out)):
            kernel.dequantize(_signs(parsed.body, elems), parsed.scales[rows], parsed.block,
                             out[elems], add)
