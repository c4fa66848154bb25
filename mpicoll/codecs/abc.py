"""The codec interface. This docstring is the specification every codec follows.

A codec turns a contiguous float16/float32/float64 array of any shape (0-size included) into a
*frame*: a uint8 array holding a self-describing header (:mod:`mpicoll.codecs.wire`) and a
payload. Frames carry everything needed to decode them — codec, dtype, shape, codec parameters —
so any instance of the codec (or :func:`mpicoll.codecs.decode`) decodes any of its frames.

Arrays may be NumPy or CuPy arrays: a device array encodes to a device frame and decodes from
one, the arithmetic runs on the device, and mixing host and device arrays in one call raises
``TypeError``. Headers are read on the host (a small copy from a device frame).

``encode(array, out=None) -> uint8 ndarray``
    Encode ``array``. With ``out`` (a contiguous uint8 array of at least
    ``max_frame_nbytes(array.size, array.dtype, array.ndim)`` bytes) the frame is written there and
    a view of ``out`` is returned. Other dtypes raise ``TypeError``; non-contiguous arrays
    ``ValueError``.
``decode(frame, out=None) -> ndarray``
    Return the decoded array, with the shape and dtype the frame records; into ``out`` when given
    (same shape and dtype, C-contiguous, writeable). ``frame`` is any bytes-like object.
``decode_add(frame, acc) -> acc``
    ``acc += decode(frame)`` with ``acc``'s dtype as the accumulator (float32/float64 for sums of
    low-precision frames), without a full-size temporary where the codec allows it (sparse codecs
    scatter-add). ``acc`` must have the frame's shape.
``decode_sum(frames, out) -> out``
    ``out`` = the sum of the decoded ``frames`` (a sequence, each of ``out``'s shape), the first
    decoded into ``out`` and each next one added as ``decode_add`` adds it, in order: the same
    bits as those calls, which it may make in one pass over ``out`` (sparse codecs do).
``max_frame_nbytes(count, dtype, ndim=1) -> int``
    An upper bound of ``encode``'s output size, exact for ``dense`` codecs, so a receiver can size
    its buffer before the frame arrives.
``name``, ``codec_id``, ``dense``
    Registry name, the id written in frames, and whether the frame size depends on the element
    count alone.
``get_config() -> dict``
    Constructor parameters as plain data, with ``"name"``; :func:`mpicoll.codecs.from_config`
    rebuilds an equal codec. State (a codec's random stream, an adaptive threshold) is not config.

Every malformed frame — truncated, corrupted, of another codec or format version, claiming more
elements than its size can describe — raises :class:`~mpicoll.codecs.wire.CodecError` (a
``ValueError``) before anything is read out of bounds or allocated.
"""

from __future__ import annotations

import struct
from abc import ABC, abstractmethod
from typing import Any, Callable, ClassVar

import numpy as np

from .._array import address, array_module, is_device, same_module, to_host, writeable
from . import wire
from .wire import CodecError

__all__ = ["Codec", "checked_input"]


def checked_input(array) -> np.ndarray:
    """Return ``array`` if a codec can encode it: a C-contiguous float16/32/64 ndarray."""
    if not isinstance(array, array_module(array).ndarray):
        raise TypeError(f"codecs encode NumPy or CuPy arrays, not {type(array).__name__}")
    if array.dtype not in wire.DTYPE_CODES:
        raise TypeError(f"codecs encode float16, float32 or float64 arrays, not {array.dtype}")
    if not array.flags.c_contiguous:
        raise ValueError("codecs encode C-contiguous arrays")
    if array.ndim > wire.MAX_NDIM:
        raise ValueError(f"codecs encode arrays of at most {wire.MAX_NDIM} dimensions")
    return array


class Codec(ABC):
    """Base class: the frame plumbing is here, each codec's arithmetic in its ``_`` methods."""

    name: ClassVar[str]
    codec_id: ClassVar[int]
    dense: ClassVar[bool]
    params: ClassVar[struct.Struct]  # the codec's fields in the header
    config_keys: ClassVar[tuple[str, ...]] = ()

    # ---- what a codec implements
    @abstractmethod
    def _encode(self, flat: np.ndarray) -> tuple[tuple, int, Callable[[np.ndarray], None]]:
        """Return (header params, payload size, a function that writes the payload)."""

    @abstractmethod
    def _parse(self, header: wire.Header, payload: np.ndarray) -> Any:
        """Check the payload against the header (raise CodecError) and return typed views."""

    @abstractmethod
    def _decode_into(self, header: wire.Header, parsed: Any, out: np.ndarray) -> None:
        """Write decoded values into the flat ``out``.

        Runs with overflow warnings off: a value too large for a narrower output (a bf16 frame of
        a float16 array holding 65504, which bf16 rounds to 65536) becomes ±inf, as a cast does.
        """

    @abstractmethod
    def _add_into(self, header: wire.Header, parsed: Any, acc: np.ndarray) -> None:
        """Add decoded values into the flat ``acc``."""

    def _sub_from(self, header: wire.Header, parsed: Any, acc: np.ndarray) -> None:
        """Subtract decoded values from the flat ``acc`` (what error feedback owes after the
        frame is sent): decoded in full, then subtracted. A sparse codec subtracts where it
        sent, and nothing else is touched."""
        decoded = array_module(acc).empty(acc.size, acc.dtype)
        self._decode_into(header, parsed, decoded)
        acc -= decoded

    def _sum_into(self, parsed: list[tuple[wire.Header, Any]], out: np.ndarray) -> None:
        """Write the sum of the parsed frames into the flat ``out``: the first decoded, the
        others added, in order."""
        (header, first), *others = parsed
        self._decode_into(header, first, out)
        for header, frame in others:
            self._add_into(header, frame, out)

    @abstractmethod
    def _max_payload_nbytes(self, count: int, dtype: np.dtype) -> int: ...

    # ---- the public interface
    def encode(self, array, out=None) -> np.ndarray:
        """Encode ``array`` into a frame (into ``out`` when given)."""
        x = checked_input(array)
        return self._framed(x, out, *self._encode(x.reshape(-1)))

    def encode_regions(self, array, edges: list[int]) -> list[np.ndarray]:
        """One frame per region ``array[edges[r]:edges[r + 1]]`` of a 1-D array: each encoded
        on its own here; a sparse codec selects over the whole array instead (its top k are the
        array's, not each region's)."""
        x = checked_input(array)
        return [self.encode(x[lo:hi]) for lo, hi in zip(edges, edges[1:])]

    def _framed(self, x, out, values, payload_nbytes: int, fill) -> np.ndarray:
        """The frame of ``x`` (into ``out`` when given) from what ``_encode`` returned."""
        xp = same_module("encode: array and out", x, out)
        head = wire.pack(self.codec_id, x.dtype, x.shape, self.params, values)
        frame = _frame_buffer(out, len(head) + payload_nbytes, xp)
        work = xp.empty_like(frame) if _misaligned(frame) else frame
        work[:len(head)] = xp.asarray(np.frombuffer(head, np.uint8))
        fill(work[len(head):])
        if work is not frame:
            frame[...] = work
        return frame

    def decode(self, frame, out=None) -> np.ndarray:
        """Decode ``frame`` into a new array, or into ``out``."""
        header, parsed, nbytes, xp = self._read(frame)
        if out is None:
            wire.check_allocation(header, nbytes)
            out = xp.empty(header.shape, header.dtype)
        else:
            same_module("decode: frame and out", frame, out)
            _check_target(out, header, "out", same_dtype=True)
        with np.errstate(over="ignore", invalid="ignore"):  # see _decode_into
            self._decode_into(header, parsed, out.reshape(-1))
        return out

    def decode_add(self, frame, acc: np.ndarray) -> np.ndarray:
        """Add the decoded values of ``frame`` into ``acc``, in ``acc``'s dtype; return ``acc``."""
        header, parsed, _, _ = self._read(frame)
        same_module("decode_add: frame and acc", frame, acc)
        _check_target(acc, header, "acc", same_dtype=False)
        with np.errstate(over="ignore", invalid="ignore"):  # see _decode_into
            self._add_into(header, parsed, acc.reshape(-1))
        return acc

    def decode_sum(self, frames, out: np.ndarray) -> np.ndarray:
        """Decode the sum of ``frames`` into ``out``, in order (``decode`` of the first, then
        ``decode_add`` of each other, in one pass where the codec can); return ``out``. Every
        frame is read and checked before ``out`` is written."""
        if not frames:
            raise ValueError("decode_sum needs at least one frame")
        parsed = []
        for i, frame in enumerate(frames):
            header, frame_parsed, _, _ = self._read(frame)
            same_module("decode_sum: frames and out", frame, out)
            _check_target(out, header, "out", same_dtype=i == 0)
            parsed.append((header, frame_parsed))
        with np.errstate(over="ignore", invalid="ignore"):  # see _decode_into
            self._sum_into(parsed, out.reshape(-1))
        return out

    def decode_sub(self, frame, acc: np.ndarray) -> np.ndarray:
        """Subtract the decoded values of ``frame`` from ``acc``, in ``acc``'s dtype; return
        ``acc``. Error feedback's step: ``owed -= sent``."""
        header, parsed, _, _ = self._read(frame)
        same_module("decode_sub: frame and acc", frame, acc)
        _check_target(acc, header, "acc", same_dtype=False)
        with np.errstate(over="ignore", invalid="ignore"):  # see _decode_into
            self._sub_from(header, parsed, acc.reshape(-1))
        return acc

    def max_frame_nbytes(self, count: int, dtype, ndim: int = 1) -> int:
        """Bound the size of a frame of ``count`` elements (exact for dense codecs)."""
        dtype = np.dtype(dtype)
        if dtype not in wire.DTYPE_CODES:
            raise TypeError(f"codecs encode float16, float32 or float64 arrays, not {dtype}")
        return wire.header_nbytes(ndim, self.params) + self._max_payload_nbytes(count, dtype)

    def get_config(self) -> dict:
        """Return the constructor parameters as plain data, with ``"name"``."""
        return {"name": self.name, **{key: getattr(self, key) for key in self.config_keys}}

    def __repr__(self) -> str:
        args = ", ".join(f"{key}={getattr(self, key)!r}" for key in self.config_keys)
        return f"codecs.get({self.name!r}{', ' if args else ''}{args})"

    def _read(self, frame):
        """(header, parsed payload, frame size, array module of the frame)."""
        buf = wire.frame_bytes(frame)
        # the header's bytes on the host: a view of a host frame, a small copy of a device one
        header = wire.unpack(to_host(buf[:wire.header_nbytes(wire.MAX_NDIM, self.params)]),
                             self.codec_id, self.params)
        payload = buf[header.nbytes:]
        if _misaligned(payload):
            payload = payload.copy()
        return header, self._parse(header, payload), buf.size, array_module(buf)


def _misaligned(buf) -> bool:
    """A device buffer not on an 8-byte boundary: kernels cannot read float32 scales there.

    Frame slots in a compressed plan follow each other at any byte offset; NumPy copes, CUDA
    faults, so device frames there are encoded or decoded through an aligned copy.
    """
    return is_device(buf) and address(buf) % 8 != 0


def _frame_buffer(out, nbytes: int, xp) -> np.ndarray:
    if out is None:
        return xp.empty(nbytes, np.uint8)
    if not isinstance(out, xp.ndarray) or out.dtype != np.uint8:
        raise TypeError("out must be a uint8 ndarray")
    if not out.flags.c_contiguous or not writeable(out):
        raise ValueError("out must be C-contiguous and writeable")
    if out.size < nbytes:
        raise ValueError(f"out holds {out.size} bytes; this frame needs {nbytes}")
    return out.reshape(-1)[:nbytes]


def _check_target(target, header: wire.Header, what: str, same_dtype: bool) -> None:
    if not isinstance(target, array_module(target).ndarray):
        raise TypeError(f"{what} must be a NumPy or CuPy array, not {type(target).__name__}")
    if same_dtype and target.dtype != header.dtype:
        raise CodecError(f"frame holds {header.dtype}, {what} is {target.dtype}")
    if target.dtype not in wire.DTYPE_CODES:
        raise TypeError(f"{what} must be float16, float32 or float64, not {target.dtype}")
    if target.shape != header.shape:
        raise CodecError(f"frame holds shape {header.shape}, {what} has shape {target.shape}")
    if not target.flags.c_contiguous or not writeable(target):
        raise ValueError(f"{what} must be C-contiguous and writeable")
