"""Reduction operations as values: name <-> MPI.Op, the local kernel, and what each dtype allows."""

from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType
from typing import Callable

import numpy as np
from mpi4py import MPI

from ._array import Array, address

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


def resolve(op: str | MPI.Op | Op, ordered: bool = False) -> Op:
    """Return the Op for a name ("sum", "prod", "min", "max", "avg"), a predefined MPI.Op or a
    commutative user-defined one (``MPI.Op.Create(fn, commute=True)``, applied on host arrays
    by ``MPI_Reduce_local``); ``ordered``: the caller's algorithms reduce in rank order
    (``reduce``'s), so a non-commutative one is taken too.

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
        if not op.is_predefined and op != MPI.OP_NULL:
            return _user(op, ordered)
        raise ValueError(f"unsupported MPI.Op {op!r}; supported: MPI.SUM, MPI.PROD, MPI.MIN, "
                         "MPI.MAX and commutative user-defined ops")
    raise TypeError(f"op must be a name or an mpi4py.MPI.Op, not {type(op).__name__}")


def _user(op: MPI.Op, ordered: bool) -> Op:
    """A user-defined MPI.Op as an Op: its kernel is ``MPI_Reduce_local`` (``inout = in op
    inout``), so ``out = left op right`` needs ``out`` to hold ``right`` first, or, if the
    op commutes, to be ``left``. Non-commutative ones are refused unless ``ordered``: the
    algorithms of the other collectives reorder."""
    commutes = op.Is_commutative()
    if not commutes and not ordered:
        raise ValueError("a non-commutative user-defined MPI.Op: mpicoll's algorithms reorder "
                         "operands (reduce's keep rank order); run it with MPI's own call")

    def user(left: np.ndarray, right: np.ndarray, out: np.ndarray) -> np.ndarray:
        if address(out) == address(right):
            op.Reduce_local(left, out)
        elif address(out) == address(left) and commutes:
            op.Reduce_local(right, out)  # right op left: the same, it commutes
        elif address(out) == address(left):
            result = right.copy()
            op.Reduce_local(left, result)
            np.copyto(out, result)
        else:
            np.copyto(out, right)
            op.Reduce_local(left, out)
        return out

    return Op("user", op, user, commutative=commutes)


def check_dtype(dtype: np.dtype, op: Op) -> None:
    """Raise TypeError unless `op` can reduce elements of `dtype` (integer, float or complex;
    for a user-defined op, one MPI has a datatype for)."""
    if dtype.kind not in "iufc" or dtype.fields is not None:
        raise TypeError(f"cannot reduce dtype {dtype}: only integer, floating and complex dtypes")
    if op.name == "user":
        try:
            MPI.Datatype.fromcode(dtype.char)
        except (KeyError, ValueError, TypeError):
            raise TypeError(f"a user-defined MPI.Op needs an MPI datatype: {dtype} has none "
                            "in this MPI") from None
    if dtype.kind == "c" and op.orders_values:
        raise TypeError(f"op {op.name!r} is undefined for complex dtype {dtype}")
    if op.average and dtype.kind not in "fc":
        raise TypeError(f"op 'avg' needs a floating or complex dtype, not {dtype}")
