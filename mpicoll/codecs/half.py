"""float32 to IEEE half precision and back, in NumPy, a cache-sized chunk at a time.

NumPy's own cast converts one element at a time in software: 4.6 ms for 2**20 float32 here,
2.2 ms back, which made the fp16 codec spend more CPU than the bytes it saves are worth on a
1 Gbit/s link. These take a few integer and float ufuncs per chunk instead (rounding half to
even as the cast does: Fabian Giesen's ``float_to_half_fast3_rtne``, vectorized) and give the
cast's bits for every one of the 2**32 float32 inputs (NaN payloads included) and every half.
Small arrays, and other dtypes, take NumPy's cast.
"""

from __future__ import annotations

import numpy as np

from .blocks import CHUNK_ELEMENTS as CHUNK

__all__ = ["to_half", "from_half", "SMALL"]

SMALL = 4096
"""Below this many elements NumPy's cast is as fast (the ufuncs' fixed cost per call)."""

_ABS = np.uint32(0x7FFF_FFFF)
_REBIAS = np.uint32(0xC800_0FFF)        # ((15 - 127) << 23) + 0xfff, modulo 2**32
_SUBNORMAL = np.uint32(113 << 23)       # |x| below 2**-14: a subnormal half (or zero)
_SUBNORMAL_ROUND = np.float32(0.5)      # its bits (126 << 23): the hardware add rounds for us
_INF_OR_NAN = np.uint32(143 << 23)      # |x| from 2**16 on: inf, or NaN
_SIGN = np.uint32(0x8000)
_SCALE_UP = np.float32(2.0**112)        # a half's bits, shifted into a float32's, times this


def to_half(x: np.ndarray, out: np.ndarray) -> None:
    """``out[...] = x`` cast to float16 (``out`` float16, C-contiguous; the fast path for
    C-contiguous float32 ``x`` of ``out``'s size)."""
    if x.dtype != np.float32 or x.size < SMALL or x.size != out.size \
            or not (x.flags.c_contiguous and out.flags.c_contiguous):
        with np.errstate(over="ignore"):  # beyond half's range -> inf, as documented
            np.copyto(out, x, casting="unsafe")
        return
    bits, half = x.reshape(-1).view(np.uint32), out.reshape(-1).view(np.uint16)
    n = min(CHUNK, x.size)
    a, h, sign = (np.empty(n, np.uint32) for _ in range(3))
    mask, rounded = np.empty(n, bool), np.empty(n, np.float32)
    for lo in range(0, x.size, CHUNK):
        hi = min(lo + CHUNK, x.size)
        k = hi - lo
        u, ak, hk, sk, mk = bits[lo:hi], a[:k], h[:k], sign[:k], mask[:k]
        np.bitwise_and(u, _ABS, out=ak)
        # A normal half: rebias the exponent and round the 13 dropped bits half to even.
        np.right_shift(ak, 13, out=hk)
        np.bitwise_and(hk, 1, out=hk)
        np.add(hk, ak, out=hk)
        np.add(hk, _REBIAS, out=hk)
        np.right_shift(hk, 13, out=hk)
        np.less(ak, _SUBNORMAL, out=mk)
        if mk.any():  # adding 0.5 aligns the bits of a subnormal half, rounded by the FPU
            rk = rounded[:k]
            with np.errstate(invalid="ignore"):  # (the chunk's signalling NaNs, not used)
                np.add(ak.view(np.float32), _SUBNORMAL_ROUND, out=rk)
            np.copyto(hk, rk.view(np.uint32) - _SUBNORMAL_ROUND.view(np.uint32), where=mk)
        np.greater_equal(ak, _INF_OR_NAN, out=mk)
        if mk.any():  # inf, or NaN keeping the payload's top bits (never turning into inf)
            nan = ak > np.uint32(0x7F80_0000)
            special = np.uint32(0x7C00) + np.where(nan, (ak >> 13) & np.uint32(0x3FF), 0)
            special[nan & (special == 0x7C00)] += 1
            np.copyto(hk, special.astype(np.uint32), where=mk)
        np.right_shift(u, 16, out=sk)
        np.bitwise_and(sk, _SIGN, out=sk)
        np.bitwise_or(hk, sk, out=hk)
        np.copyto(half[lo:hi], hk, casting="unsafe")


def from_half(h: np.ndarray, out: np.ndarray, add: bool = False) -> None:
    """``out[...] = h`` (or ``out += h``, rounded once in ``out``'s precision) for float16 ``h``
    (the fast path for C-contiguous ``h`` and float32 ``out`` of the same size)."""
    if out.dtype != np.float32 or out.size < SMALL or out.size != h.size \
            or not (out.flags.c_contiguous and h.flags.c_contiguous):
        if add:
            out += h
        else:
            out[...] = h
        return
    half, target = h.reshape(-1).view(np.uint16), out.reshape(-1)
    n = min(CHUNK, out.size)
    a, sign, mask = np.empty(n, np.uint32), np.empty(n, np.uint32), np.empty(n, bool)
    for lo in range(0, out.size, CHUNK):
        hi = min(lo + CHUNK, out.size)
        k = hi - lo
        ak, sk, mk = a[:k], sign[:k], mask[:k]
        np.copyto(ak, half[lo:hi], casting="unsafe")
        np.bitwise_and(ak, _SIGN, out=sk)
        np.left_shift(sk, 16, out=sk)
        np.bitwise_and(ak, np.uint32(0x7FFF), out=ak)
        np.left_shift(ak, 13, out=ak)
        np.greater_equal(ak, np.uint32(0x7C00 << 13), out=mk)
        special = ak[mk] | np.uint32(0x7F80_0000) if mk.any() else None  # inf and NaN
        value = ak.view(np.float32)
        np.multiply(value, _SCALE_UP, out=value)  # exact: normal and subnormal halves alike
        if special is not None:
            ak[mk] = special
        np.bitwise_or(ak, sk, out=ak)
        if add:
            np.add(target[lo:hi], value, out=target[lo:hi])
        else:
            target[lo:hi] = value
