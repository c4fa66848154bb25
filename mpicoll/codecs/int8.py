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

Payload (a block-scaled frame, :mod:`mpicoll.codecs.scaled`): ``ceil(count / block_size)`` ×
float32 scales, then ``count`` × int8.
"""

from __future__ import annotations

import numpy as np

from .._array import array_module
from . import kernels, wire
from .blocks import block_rows, chunk_elements
from .scaled import BlockScaledCodec, ScaledBlocks

__all__ = ["Int8"]


class Int8(BlockScaledCodec):
    name = "int8"
    codec_id = 3
    config_keys = ("block_size", "stochastic", "seed")

    def __init__(self, block_size: int = 256, stochastic: bool = False,
                 seed: int | None = None) -> None:
        super().__init__(block_size)
        self.stochastic = bool(stochastic)
        self.seed = seed
        self._rng = np.random.default_rng(seed)

    def _body_nbytes(self, count: int) -> int:
        return count

    def _fill(self, flat: np.ndarray, scales: np.ndarray, body: np.ndarray) -> None:
        q = body.view(np.int8)
        for elems, rows, width in block_rows(flat.size, self.block_size, chunk_elements(flat)):
            self._quantize(flat[elems].reshape(-1, width), scales[rows],
                           q[elems].reshape(-1, width))

    def _quantize(self, x: np.ndarray, scales: np.ndarray, q: np.ndarray) -> None:
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

    def _view_body(self, header: wire.Header, body: np.ndarray) -> np.ndarray:
        return body.view(np.int8)

    def _expand(self, parsed: ScaledBlocks, out: np.ndarray, add: bool) -> None:
        kernels.for_array(out).dequantize(parsed.body, parsed.scales, parsed.block, out, add)
