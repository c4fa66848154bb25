"""A schedule's local steps on bound arrays: what the engine runs between messages and the
simulator runs instead of them."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterable

import numpy as np

from ._array import Array, array_module
from .ops import Op
from .schedule import Copy, Decode, DecodeSum, Encode, Local, Reduce, Region, Scale, Zero

if TYPE_CHECKING:
    from .codecs import Codec, ErrorFeedback

__all__ = ["Buffers", "run_local"]


class Buffers:
    """The arrays a schedule's regions name, bound for one execution, all in one array module
    (``xp``: NumPy, or CuPy for device arrays).

    ``wire`` regions count bytes, all others elements of the user's dtype.
    """

    def __init__(self, send: np.ndarray, recv: np.ndarray, tmp: np.ndarray,
                 wire: np.ndarray | None = None, residual: np.ndarray | None = None,
                 feedback: ErrorFeedback | None = None, node: np.ndarray | None = None,
                 window: Any = None):
        self.xp = array_module(send)
        self.feedback = feedback  # whose residual ``residual`` is: it drops what is not finite
        self.window = window  # whose memory ``node`` is, and whose barriers ``sync`` rounds pass
        self.arrays: dict[str, Array] = {"send": send, "recv": recv, "tmp": tmp, "wire": wire,
                                         "residual": residual, "node": node}
        self._bytes = {name: a.view(np.uint8) for name, a in self.arrays.items() if a is not None}
        self._itemsize = {name: a.itemsize for name, a in self.arrays.items() if a is not None}

    def view(self, r: Region) -> np.ndarray:
        return self.arrays[r.buf][r.start:r.stop]

    def raw(self, r: Region) -> np.ndarray:
        """Bytes of a region: MPI moves bytes, so every NumPy dtype travels the same way."""
        n = self._itemsize[r.buf]
        return self._bytes[r.buf][r.start * n:r.stop * n]

    def nbytes(self, r: Region) -> int:
        return len(r) * self._itemsize[r.buf]


def run_local(steps: Iterable[Local], bufs: Buffers, op: Op, codec: Codec | None = None) -> None:
    """Apply a round's local steps in order (shared by the engine and the simulator)."""
    view, xp = bufs.view, bufs.xp
    kernel = op.kernel_in(xp)
    with np.errstate(all="ignore"):  # overflow to inf / wrap-around is the MPI result too
        for step in steps:
            if isinstance(step, Reduce):  # in the node window (host memory) NumPy's kernel
                (op.kernel if step.dst.buf == "node" else kernel)(
                    view(step.left), view(step.right), out=view(step.dst))
            elif isinstance(step, Decode):
                _codec(codec).decode(view(step.src), out=view(step.dst))
            elif isinstance(step, DecodeSum):
                _codec(codec).decode_sum([view(src) for src in step.srcs], view(step.dst))
            elif isinstance(step, Encode):
                _encode(step, bufs, _codec(codec))
            elif isinstance(step, Copy):
                _copy(view(step.dst), view(step.src))
            elif isinstance(step, Scale):
                xp.multiply(view(step.src), step.factor, out=view(step.dst), casting="unsafe")
            elif isinstance(step, Zero):
                view(step.dst)[...] = 0
            else:
                raise TypeError(f"unknown schedule step {step!r}")


def _copy(dst: Array, src: Array) -> None:
    """``dst[...] = src``, also between device arrays and the node window (host memory)."""
    if type(dst) is type(src):
        array_module(dst).copyto(dst, src)
    elif isinstance(dst, np.ndarray):
        src.get(out=dst)  # device to host
    else:
        dst.set(src)  # host to device


def _codec(codec: Codec | None) -> Codec:
    if codec is None:
        raise ValueError("a compressed schedule runs only with its codec")
    return codec


def _encode(step: Encode, bufs: Buffers, codec: Codec) -> None:
    values, slot = bufs.view(step.src), bufs.view(step.dst)
    frame = codec.encode(values, out=slot)
    if frame.size != slot.size:  # dense frames have exactly the size the plan gave their slot
        raise RuntimeError(f"{codec!r} wrote {frame.size} bytes into a {slot.size}-byte slot")
    residual = bufs.arrays["residual"]
    if residual is not None:  # error feedback: this rank owes what its frame did not carry
        owed = residual[step.src.start:step.src.stop]
        owed += values - codec.decode(frame)
        if bufs.feedback is not None:
            bufs.feedback.keep_finite(owed)
