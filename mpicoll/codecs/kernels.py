"""Block-scaled int8 arithmetic shared by the int8 and sign codecs: NumPy a cache-sized chunk at a
time, or fused CuPy kernels (one pass, no temporaries) for device arrays.

:func:`for_array` picks the implementation. Both give the same bits: ``value · scale`` is one
float32 product, rounded once into the output (an add rounds ``out + product`` once, in float32,
or in float64 for float64 outputs); quantizing multiplies in the block's working precision and
rounds half to even (or adds the noise and floors). The CUDA code multiplies with ``__fmul_rn`` /
``__dmul_rn`` so the compiler cannot fuse a product and a sum into one differently rounded FMA.
"""

from __future__ import annotations

import functools

import numpy as np

from .._array import is_device
from .blocks import block_rows

__all__ = ["for_array", "NumpyKernels", "CupyKernels"]


def for_array(a):
    """The kernels for where ``a`` lives."""
    return _cupy_kernels() if is_device(a) else NUMPY


class NumpyKernels:
    name = "numpy"

    def dequantize(self, q, scales, block: int, out, add: bool = False) -> None:
        """``out (+)= q[i] · scales[i // block]`` for flat int8 ``q``, float32 ``scales``."""
        for elems, rows, width in block_rows(out.size, block):
            values, target = q[elems].reshape(-1, width), out[elems].reshape(-1, width)
            if add:
                target += values * scales[rows, None]
            else:
                np.multiply(values, scales[rows, None], out=target, casting="unsafe")

    def quantize(self, x, inv, q, noise=None) -> None:
        """``q = clip(round(x · inv[row]), ±127)`` for (blocks, width) ``x``, NaN to 0; rounding
        half to even, or ``floor(· + noise)`` when ``noise`` is given (stochastic)."""
        y = x.astype(inv.dtype) * inv[:, None]
        y = np.rint(y, out=y) if noise is None else np.floor(y + noise)
        np.clip(y, -127, 127, out=y)
        y[np.isnan(y)] = 0
        q[...] = y


NUMPY = NumpyKernels()


class CupyKernels:
    """``cupy.ElementwiseKernel`` versions, compiled on first use per dtype."""

    name = "cupy"

    def __init__(self):
        import cupy
        self._cupy = cupy

    def dequantize(self, q, scales, block: int, out, add: bool = False) -> None:
        self._dequantize(np.dtype(out.dtype), add)(q.reshape(-1), scales, block, out.reshape(-1))

    def quantize(self, x, inv, q, noise=None) -> None:
        kernel = self._quantize(np.dtype(x.dtype), np.dtype(inv.dtype), noise is not None)
        args = (x.reshape(-1), inv, x.shape[1])
        kernel(*args, *(() if noise is None else (noise.reshape(-1),)), q.reshape(-1))

    @functools.cache
    def _dequantize(self, dtype: np.dtype, add: bool):
        wide = "double" if dtype == np.float64 else "float"
        value = f"({wide})out + ({wide})v" if add else "v"
        return self._cupy.ElementwiseKernel(
            "raw int8 q, raw float32 s, int64 block", "T out",
            f"float v = __fmul_rn((float)q[i], s[i / block]); out = (T)({value});",
            f"mpicoll_dequantize_{'add_' if add else ''}{dtype.name}")

    @functools.cache
    def _quantize(self, dtype: np.dtype, work: np.dtype, stochastic: bool):
        mul = "__dmul_rn" if work == np.float64 else "__fmul_rn"
        load = "(float)x[i]" if dtype == np.float16 else "x[i]"
        rounded = "floor(y + noise[i])" if stochastic else "rint(y)"
        return self._cupy.ElementwiseKernel(
            "raw T x, raw W inv, int64 block" + (", raw W noise" if stochastic else ""), "int8 q",
            f"W y = {mul}((W){load}, inv[i / block]); y = {rounded}; "
            "q = isnan(y) ? 0 : (signed char)fmin(fmax(y, (W)-127), (W)127);",
            f"mpicoll_quantize_{'stochastic_' if stochastic else ''}{dtype.name}")


@functools.cache
def _cupy_kernels() -> CupyKernels:
    return CupyKernels()
