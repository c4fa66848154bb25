"""Reduction operations as values: name <-> MPI.Op, the local kernel, and what each dtype allows."""

from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType
from typing import Callable

import numpy as np
from mpi4py import MPI

from ._array import Array

__all__ = ["Op", "resolve", "check_dtype"]


@dataclass(frozen=True)
class Op:
    """A reduction: its name, the matching MPI.Op and the NumPy ufunc that applies it locally
    (``kernel_in(cupy)`` for device arrays)."""

    name: str
    mpi: MPI.Op
    kernel: Callable[..., np.ndarray]
    commutative: bool = True
    orders_values: bool = False  # min/max compare values, so complex numbers have no meaning here
    average: bool = False        # a sum of inputs divided by p first (floating dtypes only)

    def kernel_in(self, xp: ModuleType) -> Callable[..., Array]:
        """The kernel in array module ``xp`` (CuPy has NumPy's ufuncs under the same names)."""
        return self.kernel if xp is np else getattr(xp, self.kernel.__name__)


_OPS = {
    op.name: op
    for op in (
        Op("sum", MPI.SUM, np.add),
        Op("prod", MPI.PROD, np.multiply),
        Op("min", MPI.MIN, np.minimum, orders_values=True),
        Op("max", MPI.MAX, np.maximum, orders_values=True),
        Op("avg", MPI.SUM, np.add, average=True),
    )
}


def resolve(op: str | MPI.Op | Op) -> Op:
    """Return the Op for a name ("sum", "prod", "min", "max", "avg") or a predefined MPI.Op.

    MPI has no average: MPI.SUM always means "sum".
    """
    if isinstance(op, Op):
        return op
    if isinstance(op, str):
        try:
            return _OPS[op.lower()]
        except KeyError:
            raise ValueError(f"unknown op {op!r}; choose one of {sorted(_OPS)}") from None
    if isinstance(op, MPI.Op):
        for known in _OPS.values():
            if op == known.mpi and not known.average:
                return known
        raise ValueError(f"unsupported MPI.Op {op!r}; supported: MPI.SUM, MPI.PROD, MPI.MIN, MPI.MAX")
    raise TypeError(f"op must be a name or an mpi4py.MPI.Op, not {type(op).__name__}")


def check_dtype(dtype: np.dtype, op: Op) -> None:
    """Raise TypeError unless `op` can reduce elements of `dtype` (integer, float or complex)."""
    if dtype.kind not in "iufc" or dtype.fields is not None:
        raise TypeError(f"cannot reduce dtype {dtype}: only integer, floating and complex dtypes")
    if dtype.kind == "c" and op.orders_values:
        raise TypeError(f"op {op.name!r} is undefined for complex dtype {dtype}")
    if op.average and dtype.kind not in "fc":
        raise TypeError(f"op 'avg' needs a floating or complex dtype, not {dtype}")
