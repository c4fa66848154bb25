"""The frame header every codec writes first, and the checks every decoder runs before reading.

All integers are little-endian. The header is the fixed part, then the shape, then the codec's own
parameters (a :class:`struct.Struct` per codec, padded to 8 bytes), so the payload starts on an
8-byte boundary and can be viewed as any element type without copying:

======  =======  =========  ===============================================================
offset  size     type       field
======  =======  =========  ===============================================================
0       4        bytes      magic ``b"MPCC"``
4       1        u8         format version (1)
5       1        u8         codec id (registry)
6       1        u8         dtype code of the encoded array: 1 float16, 2 float32, 3 float64
7       1        u8         ndim, 0..8
8       8        u64        element count, equal to the product of the shape
16      8·ndim   u64[ndim]  shape
16+8·ndim  P     (codec)    codec parameters (P bytes, fixed per codec id)
======  =======  =========  ===============================================================

A frame is exactly header + payload: decoders reject trailing bytes as well as missing ones.
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass

import numpy as np

from .._array import is_device, to_host

__all__ = ["CodecError", "Header", "MAGIC", "VERSION", "MAX_NDIM", "DTYPE_CODES", "CODE_DTYPES",
           "frame_bytes", "header_nbytes", "pack", "peek_codec_id", "unpack", "check_allocation"]

MAGIC = b"MPCC"
VERSION = 1
MAX_NDIM = 8
_FIXED = struct.Struct("<4sBBBBQ")
_MAX_BYTES = 2**63 - 1  # sizes are NumPy intp on the receiving side

DTYPE_CODES: dict[np.dtype, int] = {np.dtype("<f2"): 1, np.dtype("<f4"): 2, np.dtype("<f8"): 3}
CODE_DTYPES: dict[int, np.dtype] = {code: dtype for dtype, code in DTYPE_CODES.items()}

# Decoding without ``out`` allocates count elements: a frame may claim at most this many, so a
# forged 40-byte frame cannot ask for terabytes. Dense payload lengths already tie count to the
# frame size; sparse frames legitimately expand (top-0.01% is ~3 bytes per 10⁴ elements).
_ALLOC_FLOOR = 2**22
_ALLOC_PER_BYTE = 2**12


class CodecError(ValueError):
    """A frame is malformed: truncated, corrupted, of another codec or version, or hostile."""


@dataclass(frozen=True)
class Header:
    """A validated header. ``nbytes`` is where the payload starts."""

    codec_id: int
    dtype: np.dtype
    shape: tuple[int, ...]
    count: int
    params: tuple
    nbytes: int


def frame_bytes(frame) -> np.ndarray:
    """View a bytes-like frame (bytes, bytearray, memoryview, contiguous array) as uint8, no copy.

    A device frame (a contiguous CuPy uint8 array) stays on the device.
    """
    if is_device(frame):
        if frame.dtype != np.uint8 or not frame.flags.c_contiguous:
            raise TypeError("a device frame must be a contiguous uint8 array")
        return frame.reshape(-1)
    try:
        view = memoryview(frame)
    except TypeError:
        raise TypeError(f"a frame must be bytes-like, not {type(frame).__name__}") from None
    if not view.c_contiguous:
        raise TypeError("a frame must be a contiguous buffer")
    return np.frombuffer(view.cast("B"), np.uint8)


def header_nbytes(ndim: int, params: struct.Struct) -> int:
    return _FIXED.size + 8 * ndim + params.size


def pack(codec_id: int, dtype: np.dtype, shape: tuple[int, ...], params: struct.Struct,
         values: tuple) -> bytes:
    """Return the header bytes for an array of ``dtype`` and ``shape``."""
    return (_FIXED.pack(MAGIC, VERSION, codec_id, DTYPE_CODES[dtype], len(shape), math.prod(shape))
            + struct.pack(f"<{len(shape)}Q", *shape) + params.pack(*values))


def peek_codec_id(buf: np.ndarray) -> int:
    """Return the codec id of a frame after checking its magic and version."""
    if buf.size < _FIXED.size:
        raise CodecError(f"truncated frame: {buf.size} bytes, a header needs {_FIXED.size}")
    magic, version, codec_id, _, _, _ = _FIXED.unpack_from(to_host(buf[:_FIXED.size]).data)
    if magic != MAGIC:
        raise CodecError(f"not a codec frame: magic {magic!r}, expected {MAGIC!r}")
    if version != VERSION:
        raise CodecError(f"frame format version {version}; this mpicoll reads version {VERSION}")
    return codec_id


def unpack(buf: np.ndarray, codec_id: int, params: struct.Struct) -> Header:
    """Parse and check a header: magic, version, codec id, dtype, ndim, shape against count."""
    found = peek_codec_id(buf)
    if found != codec_id:
        raise CodecError(f"frame of codec id {found}, expected {codec_id}")
    raw = buf.data  # the bytes struct reads (NumPy's stubs before 3.12 do not call ndarray a buffer)
    _, _, _, dtype_code, ndim, count = _FIXED.unpack_from(raw)
    if dtype_code not in CODE_DTYPES:
        raise CodecError(f"unknown dtype code {dtype_code}")
    if ndim > MAX_NDIM:
        raise CodecError(f"ndim {ndim} > {MAX_NDIM}")
    nbytes = header_nbytes(ndim, params)
    if buf.size < nbytes:
        raise CodecError(f"truncated frame: {buf.size} bytes, its header needs {nbytes}")
    shape = struct.unpack_from(f"<{ndim}Q", raw, _FIXED.size)
    if math.prod(shape) != count:
        raise CodecError(f"element count {count} != product of shape {shape}")
    # NumPy refuses shapes whose nonzero extents times the itemsize overflow, even with a 0 extent
    if math.prod(max(d, 1) for d in shape) * CODE_DTYPES[dtype_code].itemsize > _MAX_BYTES:
        raise CodecError(f"shape {shape} out of range")
    values = params.unpack_from(raw, _FIXED.size + 8 * ndim)
    return Header(codec_id, CODE_DTYPES[dtype_code], shape, count, values, nbytes)


def check_allocation(header: Header, frame_nbytes: int) -> None:
    """Refuse to allocate an output far larger than the frame could plausibly describe."""
    limit = max(_ALLOC_FLOOR, _ALLOC_PER_BYTE * frame_nbytes)
    if header.count > limit:
        raise CodecError(f"frame of {frame_nbytes} bytes claims {header.count} elements "
                         f"(limit {limit} without out=); decode into a buffer you allocate")
