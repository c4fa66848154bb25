"""The sparse frame topk and threshold share: kept values, then their indices as varint gaps.

Indices are sorted and sent as gaps: ``g0 = i0`` and ``gj = ij - i(j-1) - 1``, each as an
unsigned LEB128 varint (7 bits per byte, least significant group first, high bit set on every
byte but the last; minimal length, at most 9 bytes). At top-1% the gaps average ~100, so an index
costs ~1.3 bytes instead of GRACE's 8 — with float16 values ~3.3 bytes per kept element, 120×
smaller than float32. Gaps are non-negative by construction, so decoded indices are strictly
increasing: a decoder checks only that none overflows and the last is below the count.

On a device, selecting, gathering and scatter-adding run there; the varint stream (O(k) bytes,
sequential by nature) is built and read on the host.

Payload: ``k`` × values (value dtype, little-endian), then the varint stream.
Header parameters (24 bytes): u64 k, u64 varint stream length in bytes, u8 value dtype code
(as the header's dtype codes), 7 reserved bytes (zero; decoders reject others).
"""

from __future__ import annotations

import math
import struct
from abc import abstractmethod
from fractions import Fraction

import numpy as np

from .._array import array_module, same_module, to_host
from . import wire
from .abc import Codec, checked_input
from .wire import CodecError

__all__ = ["SparseCodec", "above", "gap_indices", "kept_count", "value_dtype_name",
           "varint_decode", "varint_encode", "varint_lengths"]

_MAX_VARINT = 9  # 63 bits: every index fits an int64
_CHUNK = 1 << 18  # elements per step of the candidate pass: their magnitudes and mask stay cached


def varint_lengths(values: np.ndarray) -> np.ndarray:
    """How many bytes each of the uint64 ``values`` takes as a minimal varint (int64)."""
    lengths = np.ones(values.size, np.int64)
    top = int(values.max(initial=0))
    for bits in range(7, 7 * _MAX_VARINT, 7):
        if top < 1 << bits:  # (no value needs more: spare the passes)
            break
        lengths += values >= np.uint64(1 << bits)
    return lengths


def varint_encode(values: np.ndarray) -> np.ndarray:
    """Encode uint64 ``values`` (< 2**63) as a concatenated LEB128 byte stream."""
    lengths = varint_lengths(values)
    starts = np.cumsum(lengths) - lengths
    stream = np.empty(int(lengths.sum()), np.uint8)
    # every varint's first byte at once (no index list for all k), then those of the longer ones
    more = (lengths > 1).view(np.uint8) << 7
    stream[starts] = (values & np.uint64(0x7F)).astype(np.uint8) | more
    for j in range(1, int(lengths.max(initial=0))):
        longer = np.flatnonzero(lengths > j)
        group = ((values[longer] >> np.uint64(7 * j)) & np.uint64(0x7F)).astype(np.uint8)
        stream[starts[longer] + j] = group | ((lengths[longer] > j + 1).view(np.uint8) << 7)
    return stream


def varint_decode(stream: np.ndarray, k: int) -> np.ndarray:
    """Decode exactly ``k`` minimal varints filling ``stream``; raise CodecError otherwise.

    Byte position by byte position, as the encoder writes them: a pass over the ``k`` varints
    per byte of the longest (two at top-1%), not a pass over every byte of the stream."""
    ends = np.flatnonzero(stream < 0x80)
    if ends.size != k or (k and ends[-1] != stream.size - 1) or (not k and stream.size):
        raise CodecError(f"index stream of {stream.size} bytes does not hold exactly {k} varints")
    if not k:
        return np.zeros(0, np.uint64)
    starts = np.empty_like(ends)
    starts[0], starts[1:] = 0, ends[:-1] + 1
    lengths = ends - starts + 1
    longest = int(lengths.max())
    if longest > _MAX_VARINT:
        raise CodecError(f"varint longer than {_MAX_VARINT} bytes")
    values = (stream[starts] & 0x7F).astype(np.uint64)
    # not minimal: a varint that ends in a zero byte after others (a byte that says "more")
    if longest > 1 and np.any((stream[1:] == 0) & (stream[:-1] >= 0x80)):
        raise CodecError("varint with a redundant zero byte (not minimal)")
    for j in range(1, longest):
        longer = np.flatnonzero(lengths > j)
        values[longer] |= (stream[starts[longer] + j] & 0x7F).astype(np.uint64) << np.uint64(7 * j)
    return values


def gap_indices(stream: np.ndarray, k: int, count: int) -> np.ndarray:
    """The ``k`` indices (int64, increasing) that a stream of varint gaps encodes; CodecError
    unless it holds exactly ``k`` minimal varints and every index is below ``count``.

    Where no varint is longer than two bytes (every gap below 16384: a top-1% frame's largest is
    a few thousand), one cumulative sum over the stream's bytes gives them all: each byte adds
    its seven bits, shifted by seven where the byte before it said "more", and a varint's last
    byte one more; index j is that sum at varint j's last byte, less one. Otherwise the varints
    are decoded one byte position at a time (:func:`varint_decode`) and summed."""
    more = stream >= 0x80
    if k and stream.size and not more[-1] and not np.any(more[:-1] & more[1:]):
        if np.count_nonzero(more) != stream.size - k:
            raise CodecError(f"index stream of {stream.size} bytes does not hold exactly {k} "
                             "varints")
        if np.any(more[:-1] & (stream[1:] == 0)):
            raise CodecError("varint with a redundant zero byte (not minimal)")
        last = ~more
        bits = (stream & 0x7F).astype(np.int64)
        bits[1:] <<= more[:-1].view(np.uint8) * np.uint8(7)
        bits += last  # an index is the one before it plus its gap plus one
        idx = np.cumsum(bits, out=bits).compress(last)
        idx -= 1
    else:
        # each step adds at most 2**63, so an overflow would show as a decrease
        steps = np.cumsum(varint_decode(stream, k) + np.uint64(1)) - np.uint64(1)
        if k and np.any(steps[1:] <= steps[:-1]):
            raise CodecError(f"index out of range for {count} elements")
        idx = steps.view(np.int64)  # (one beyond 2**63 - 1 is negative: out of range below)
    if k and not 0 <= idx[-1] < count:
        raise CodecError(f"index out of range for {count} elements")
    return idx


def value_dtype_name(value_dtype) -> str | None:
    """Check a ``value_dtype`` parameter: None (the input's dtype) or a float dtype's name."""
    if value_dtype is None:
        return None
    dtype = np.dtype(value_dtype)
    if dtype not in wire.DTYPE_CODES:
        raise ValueError(f"value_dtype must be None, float16, float32 or float64, not {dtype}")
    return dtype.name


def _varint_nbytes(value: int) -> int:
    return max(1, -(-value.bit_length() // 7))


class SparseCodec(Codec):
    """A codec that sends some elements exactly (up to the value dtype) and the rest as zeros."""

    dense = False
    params = struct.Struct("<QQB7s")
    value_dtype: str | None

    @abstractmethod
    def _select(self, flat: np.ndarray, plus: np.ndarray | None = None) -> np.ndarray:
        """Return the sorted, unique int64 indices of the elements to send (in ``flat``'s array
        module). Every element that is not finite (NaN, ±inf) is among them, unless all of them
        are such elements: a NaN is never hidden, and error feedback checks only what was
        kept for one (:meth:`mpicoll.codecs.ErrorFeedback.keep_finite`). ``plus`` (like
        ``flat``): select from ``flat + plus``, added into ``flat`` by the pass that selects."""

    @abstractmethod
    def _max_kept(self, count: int) -> int: ...

    def _encode(self, flat):
        idx = self._select(flat)
        return self._payload(idx, self._values(flat, idx))

    def select_kept(self, array, plus=None):
        """The sorted indices of ``array``'s elements this codec keeps, and the values it sends
        for them: a frame's content before it is framed (:meth:`frames_kept`). Stateful codecs
        (threshold) adapt here, once per selection.

        ``plus`` (of ``array``'s size and dtype, on the host or device as it is): select from
        ``array + plus``, which is left in ``array``; the selection's pass adds it a chunk at a
        time, so error feedback's ``owed += given`` costs no trip through memory of its own."""
        flat = checked_input(array).reshape(-1)
        if plus is not None:
            same_module("select_kept: array and plus", array, plus)
            if plus.size != flat.size or plus.dtype != flat.dtype:
                raise ValueError(f"plus must be {flat.size} × {flat.dtype}, like the array, "
                                 f"not {plus.size} × {plus.dtype}")
            plus = plus.reshape(-1)
        idx = self._select(flat, plus)
        return idx, self._values(flat, idx)

    def encode_kept(self, array, plus=None):
        """``encode(array)`` (of ``array + plus``, left in ``array``, as :meth:`select_kept`),
        with the indices the frame keeps and the values it sends for them: what error feedback
        subtracts (``owed[idx] -= values``) without reading the frame back."""
        idx, values = self.select_kept(array, plus)
        return self.frames_kept(array, idx, values), idx, values

    def encode_regions(self, array, edges):
        idx, values = self.select_kept(array)
        return self.frames_kept(array, idx, values, edges)

    def frames_kept(self, array, idx, values, edges=None):
        """The frame of ``array`` keeping the elements ``idx`` (sorted), sent as ``values``; or,
        with ``edges`` (a 1-D array), its frames cut at the edges, one per region."""
        x = checked_input(array)
        if edges is None:
            return self._framed(x, None, *self._payload(idx, values))
        if x.ndim != 1:
            raise ValueError(f"frames cut at edges are of a 1-D array, not {x.ndim}-D")
        cuts = np.searchsorted(to_host(idx), edges)  # idx is sorted
        frames = []
        for lo, hi, a, b in zip(edges, edges[1:], cuts, cuts[1:]):
            frames.append(self._framed(x[lo:hi], None, *self._payload(idx[a:b] - lo, values[a:b])))
        return frames

    def kept_nbytes(self, array, idx, values, edges) -> tuple[int, list[int]]:
        """The sizes of :meth:`frames_kept`'s frames, without building them: the whole array's
        frame, and the frames cut at ``edges`` (a 1-D array). They differ only in headers and in
        each region's first index gap, counted from the region's start."""
        x = checked_input(array)
        host = to_host(idx).astype(np.int64)
        if x.ndim != 1 or len(edges) < 2 or edges[0] != 0 or edges[-1] != x.size:
            raise ValueError("kept_nbytes takes a 1-D array and edges from 0 to its size")
        gaps = varint_lengths(np.diff(host, prepend=-1).astype(np.uint64) - np.uint64(1))
        total = np.concatenate([[0], np.cumsum(gaps)])
        head, size = wire.header_nbytes(1, self.params), values.dtype.itemsize
        whole = head + host.size * size + int(total[-1])
        cuts = np.searchsorted(host, edges)
        regions = [head + int(b - a) * size
                   + (int(total[b] - total[a + 1]) + _varint_nbytes(int(host[a]) - lo) if b > a else 0)
                   for lo, a, b in zip(edges, cuts, cuts[1:])]
        return whole, regions

    def _values(self, flat, idx):
        """The values sent for the elements ``idx`` of ``flat``, in the value dtype."""
        with np.errstate(over="ignore"):  # beyond float16's range -> inf, as the fp16 codec
            return flat[idx].astype(np.dtype(self.value_dtype or flat.dtype))

    def _payload(self, idx, values):
        """What ``_encode`` returns for the elements ``idx`` (sorted), sent as ``values``."""
        xp = array_module(values)
        stream = varint_encode(np.diff(to_host(idx), prepend=-1).astype(np.uint64) - np.uint64(1))
        nvalues = values.nbytes

        def fill(payload):
            payload[:nvalues].view(values.dtype)[...] = values
            payload[nvalues:] = xp.asarray(stream)
        params = (idx.size, stream.size, wire.DTYPE_CODES[values.dtype], bytes(7))
        return params, nvalues + stream.size, fill

    def _parse(self, header, payload):
        k, nstream, vcode, reserved = header.params
        if any(reserved):
            raise CodecError("reserved header bytes are not zero")
        if vcode not in wire.CODE_DTYPES:
            raise CodecError(f"unknown value dtype code {vcode}")
        if k > header.count:
            raise CodecError(f"sparse frame keeps {k} of {header.count} elements")
        vdtype = wire.CODE_DTYPES[vcode]
        nvalues = k * vdtype.itemsize
        if payload.size != nvalues + nstream:
            raise CodecError(f"sparse payload is {payload.size} bytes, the header says "
                             f"{nvalues} + {nstream}")
        idx = gap_indices(to_host(payload[nvalues:]), k, header.count)
        return payload[:nvalues].view(vdtype), array_module(payload).asarray(idx)

    def _decode_into(self, header, parsed, out):
        values, idx = parsed
        out[...] = 0
        out[idx] = values

    def _add_into(self, header, parsed, acc):
        values, idx = parsed
        acc[idx] += values  # indices are unique, so fancy-index += adds each once

    def _sum_into(self, parsed, out):
        """A chunk of ``out`` at a time, each frame's entries there written or added in order:
        the chunk stays in the cache for all of them (one pass over ``out``, where a frame at a
        time would miss the cache at nearly every entry of every frame). Narrower values (float16)
        are widened to ``out``'s dtype once, exactly, where each += would widen its slice again."""
        if array_module(out) is not np:
            return super()._sum_into(parsed, out)
        frames = [(values.astype(out.dtype) if values.itemsize < out.itemsize else values, idx)
                  for _, (values, idx) in parsed]
        edges = np.arange(0, out.size + _CHUNK, _CHUNK)
        cuts = [np.searchsorted(idx, edges).tolist() for _, idx in frames]
        for j, start in enumerate(edges[:-1].tolist()):
            out[start:start + _CHUNK] = 0
            for r, ((values, idx), cut) in enumerate(zip(frames, cuts)):
                a, b = cut[j], cut[j + 1]
                if r:
                    out[idx[a:b]] += values[a:b]
                else:
                    out[idx[a:b]] = values[a:b]

    def _sub_from(self, header, parsed, acc):
        values, idx = parsed
        acc[idx] -= values  # elsewhere it sent 0: acc - 0 is acc

    def _max_payload_nbytes(self, count, dtype):
        itemsize = np.dtype(self.value_dtype or dtype).itemsize
        return self._max_kept(count) * (itemsize + _varint_nbytes(max(count - 1, 0)))


def above(flat, t, inclusive: bool, plus=None):
    """``(indices, magnitudes)`` of the elements whose magnitude is above ``t`` (or at it, if
    ``inclusive``), NaN included, in order: the pass over every element that topk and threshold
    make. On the host it goes a chunk at a time, so that the chunk's magnitudes and mask stay in
    the cache and the kept magnitudes are read from there (the whole array's magnitudes and mask
    would be two more trips to memory, and gathering the kept ones afterwards a cache miss each).
    ``plus``: ``flat += plus`` first, in the same pass (a chunk at a time)."""
    xp = array_module(flat)
    below = xp.less if inclusive else xp.less_equal
    if xp is not np:
        if plus is not None:
            flat += plus
        magnitude = xp.abs(flat)
        idx = xp.flatnonzero(~below(magnitude, t))
        return idx, magnitude[idx]
    chunk = max(1, min(flat.size, _CHUNK))
    magnitude, mask = np.empty(chunk, flat.dtype), np.empty(chunk, bool)
    indices, magnitudes = [np.zeros(0, np.intp)], [np.zeros(0, flat.dtype)]
    for start in range(0, flat.size, chunk):
        m, k = magnitude[:flat.size - start], mask[:flat.size - start]
        part = flat[start:start + chunk]
        if plus is not None:
            np.add(part, plus[start:start + chunk], out=part)
        np.abs(part, out=m)
        below(m, t, out=k)
        idx = np.flatnonzero(np.logical_not(k, out=k))
        if idx.size:
            indices.append(idx + start)
            magnitudes.append(m[idx])
    return np.concatenate(indices), np.concatenate(magnitudes)


def kept_count(fraction: float, count: int) -> int:
    """``ceil(fraction · count)``, at least 1 when count > 0, exact for decimal fractions."""
    if count == 0:
        return 0
    return min(count, max(1, math.ceil(Fraction(repr(float(fraction))) * count)))
