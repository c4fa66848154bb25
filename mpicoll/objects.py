"""The lowercase ``allreduce`` of Python objects, answered as mpi4py answers it.

mpi4py pickles what each rank passes and combines the objects with the op's Python function
(``x + y``, ``y if y < x else x``) along a binomial tree to rank 0, then broadcasts the result:
ranks may pass an ``int`` here and a ``numpy.int64`` or a ``float`` there, and the result has
the type that combining gives. mpicoll must give that answer, and must decide the same way on
every rank whether it or mpi4py runs the call (a rank in each waits forever).

So each rank first describes its object in a record of 32 bytes and every rank gathers every
record (one ``MPI_Allgather``: :class:`Records`). The records decide, the same on every
rank (:meth:`Records.decide`): numbers (Python ``bool``/``int``/``float``/``complex``, NumPy scalars,
0-d arrays) carry their value and are combined on every rank in mpi4py's order
(:func:`fold`), which gives mpi4py's type and bits; arrays of one dtype and shape on every rank
are reduced by mpicoll; anything else (an int beyond int64, lists, other objects, arrays that
differ) is mpi4py's, on every rank.
"""

from __future__ import annotations

import functools
import struct
from typing import Any, Callable

import numpy as np

__all__ = ["Records", "fold"]

OTHER, BOOL, INT, FLOAT, COMPLEX, SCALAR, ZERO_D, ARRAY = range(8)
_BYTES = 32
"""A record: the object's kind (byte 0) and NumPy dtype code (``dtype.str``, bytes 1-4), an
array's shape hashed (bytes 8-15), a number's bytes (16-31), in this machine's byte order."""
_VALUE, _WIDEST = 16, 16
_PYTHON = {float: (FLOAT, struct.Struct("=B15xd")), int: (INT, struct.Struct("=B15xq")),
           bool: (BOOL, struct.Struct("=B15x?")), complex: (COMPLEX, struct.Struct("=B15xdd"))}
_NUMPY = struct.Struct("=B4s11x")
_ARRAY = struct.Struct("=B4s3xq")
_OTHER = struct.Struct("=B15x")


class Records:
    """One communicator's records: this rank's (``mine``) and every rank's (``every``), as
    ``[buffer, MPI.BYTE]`` specs for ``MPI_Allgather`` (``gather``: False at one rank, where
    they are one buffer), and views that read every rank's kinds and values in one step."""

    def __init__(self, size: int, byte: Any):
        every = bytearray(_BYTES * size)
        self.every = [every, byte]
        self.mine = self.every if size == 1 else [bytearray(_BYTES), byte]
        self.gather = size > 1
        self._record = self.mine[0]
        words = memoryview(every).cast("Q")
        self._headers, self._shapes = words[0::4], words[1::4]
        self._kinds = memoryview(every)[0::_BYTES]
        self._floats = memoryview(every).cast("d")[2::4]
        self._ints = memoryview(every).cast("q")[2::4]
        self._scalars: dict[int, Any] = {}  # a header of NumPy scalars -> how to read them

    def describe(self, obj: Any) -> None:
        """Describe ``obj`` in this rank's record."""
        record = self._record
        python = _PYTHON.get(type(obj))
        if python is not None:
            kind, layout = python
            if kind == INT and not -2 ** 63 <= obj < 2 ** 63:  # exact at any size: mpi4py's
                _OTHER.pack_into(record, 0, OTHER)
            elif kind == COMPLEX:
                layout.pack_into(record, 0, kind, obj.real, obj.imag)
            else:
                layout.pack_into(record, 0, kind, obj)
            return
        if isinstance(obj, np.generic):
            scalar = _scalar(obj.dtype)
            if scalar is not None:  # a NumPy scalar struct packs, in one step
                scalar[1].pack_into(record, 0, SCALAR, scalar[0], obj)
                return
        if isinstance(obj, (np.generic, np.ndarray)):
            code = _code(obj.dtype)
            if code is not None:
                if isinstance(obj, np.generic) or obj.ndim == 0:
                    _NUMPY.pack_into(record, 0, SCALAR if isinstance(obj, np.generic) else ZERO_D,
                                     code)
                    record[_VALUE:_VALUE + obj.itemsize] = obj.tobytes()
                    return
                if type(obj) is np.ndarray:  # (a shape's hash is alike in every process)
                    _ARRAY.pack_into(record, 0, ARRAY, code, hash(obj.shape))
                    return
        _OTHER.pack_into(record, 0, OTHER)

    def decide(self, arrays_ok: Callable[[np.dtype], bool]) -> str:
        """What runs the call, from every rank's record (the same on every rank): ``"fold"``
        (numbers: :meth:`numbers`, then :func:`fold`), ``"array"`` (an array of one dtype and
        shape everywhere, ``arrays_ok`` of its dtype: mpicoll's allreduce) or ``"mpi4py"``."""
        headers = self._headers.tolist()
        first = headers[0]
        if headers.count(first) == len(headers):  # one kind (and dtype) of object everywhere
            kind = first & 0xFF
            if kind == ARRAY:
                shapes = self._shapes.tolist()
                return "array" if shapes.count(shapes[0]) == len(shapes) \
                    and arrays_ok(_dtype(bytes(self.every[0][1:5]))) else "mpi4py"
            return "mpi4py" if kind == OTHER else "fold"
        kinds = self._kinds.tolist()
        return "mpi4py" if OTHER in kinds or ARRAY in kinds else "fold"

    def arrays(self) -> bool:
        """Whether every rank passed an array."""
        kinds = self._kinds.tolist()
        return kinds.count(ARRAY) == len(kinds)

    def numbers(self) -> list:
        """The numbers every rank described, as the objects each passed (fresh copies, as
        mpi4py's pickles make), in rank order."""
        kinds = self._kinds.tolist()
        if kinds.count(FLOAT) == len(kinds):  # the common cases, in one step
            return self._floats.tolist()
        if kinds.count(INT) == len(kinds):
            return self._ints.tolist()
        every = self.every[0]
        if kinds.count(SCALAR) == len(kinds):
            headers = self._headers.tolist()
            if headers.count(headers[0]) == len(headers):  # NumPy scalars of one type
                scalar = self._scalars.get(headers[0])
                if scalar is None:
                    scalar = self._scalars[headers[0]] = _scalar(_dtype(bytes(every[1:5])))
                if scalar is not None:
                    kind, unpack = scalar[2], scalar[1].unpack_from
                    return [kind(unpack(every, offset)[2])
                            for offset in range(0, len(every), _BYTES)]
        return [_number(every, offset) for offset in range(0, len(every), _BYTES)]


_STRUCT = {("b", 1): "?", ("i", 1): "b", ("u", 1): "B", ("i", 2): "h", ("u", 2): "H",
           ("i", 4): "i", ("u", 4): "I", ("i", 8): "q", ("u", 8): "Q", ("f", 2): "e",
           ("f", 4): "f", ("f", 8): "d"}


@functools.lru_cache(maxsize=64)
def _scalar(dtype: np.dtype) -> tuple[bytes, struct.Struct, type] | None:
    """A NumPy scalar's dtype code, the record's layout for it and its type, where the struct
    module packs its values (it does not pack complex or long double: None)."""
    char = _STRUCT.get((dtype.kind, dtype.itemsize))
    code = _code(dtype)
    if char is None or code is None:
        return None
    return code, struct.Struct(f"=B4s11x{char}{_WIDEST - dtype.itemsize}x"), dtype.type


@functools.lru_cache(maxsize=64)
def _code(dtype: np.dtype) -> bytes | None:
    """A NumPy number's dtype as a record carries it, or None: not a number a record holds."""
    if dtype.kind not in "biufc" or dtype.itemsize > _WIDEST or len(dtype.str) > 4:
        return None
    return dtype.str.encode()


@functools.lru_cache(maxsize=64)
def _dtype(code: bytes) -> np.dtype:
    return np.dtype(code.rstrip(b"\0").decode())


def _number(every: bytearray, offset: int) -> Any:
    kind = every[offset]
    if kind in (SCALAR, ZERO_D):
        dtype = _dtype(bytes(every[offset + 1:offset + 5]))
        array = np.frombuffer(every, dtype, 1, offset + _VALUE)
        return array[0] if kind == SCALAR else array.reshape(()).copy()
    for layout_kind, layout in _PYTHON.values():
        if layout_kind == kind:
            values = layout.unpack_from(every, offset)
            return complex(values[1], values[2]) if kind == COMPLEX else values[1]
    raise ValueError(f"not a number's record: kind {kind}")


def fold(items: list, op: Callable[[Any, Any], Any]) -> Any:
    """``items`` (one per rank, in rank order) combined as mpi4py's allreduce combines them on
    its way to rank 0: at each distance 1, 2, 4, ... a rank that is a multiple of twice the
    distance takes ``op(its own, the one at that distance)``."""
    items = list(items)
    distance = 1
    while distance < len(items):
        for rank in range(0, len(items) - distance, 2 * distance):
            items[rank] = op(items[rank], items[rank + distance])
        distance *= 2
    return items[0]
