"""Error feedback: remember what a lossy codec did not send and send it next time.

1-bit SGD, EF-SGD and DGC all rest on this. Without it a biased codec loses small values for good:
int8 with a 1.0 in the block rounds a 1e-4 gradient to 0 on every step, and training stalls
(the seed's INT8 story). With it, the 1e-4 accumulates in the residual until it is large enough to
be sent, so the sum of what was sent tracks the true sum, off by at most the last residual.

Kept apart from the codecs (GRACE's Compressor/Memory split): any codec works inside it.
"""

from __future__ import annotations

import warnings

import numpy as np

from .._array import Array, array_module, is_device
from .abc import Codec, checked_input

__all__ = ["ErrorFeedback"]


class ErrorFeedback:
    """Wrap ``codec``: ``encode(x)`` encodes ``x + residual`` and keeps what was not sent.

    After each encode, ``sent + residual == x + old residual`` up to one rounding of the
    subtraction, where ``sent = codec.decode(frame)``. One residual array is kept, in the input's
    dtype and memory (host or device); it restarts at zero when the shape, dtype or memory of
    the input changes, so use one
    ErrorFeedback per tensor (or per bucket). The residual never keeps a NaN or an inf: an
    input that is not finite where it is not is sent as it is (the sum is not finite either) and
    owes nothing there, so the next finite call is unaffected — mixed-precision training skips
    such a step and goes on. Each entry dropped that way is counted in :attr:`dropped`, with a
    ``RuntimeWarning``. Frames are ordinary frames of ``codec``: receivers decode them with the
    codec alone.
    """

    def __init__(self, codec: Codec):
        if not isinstance(codec, Codec):
            raise TypeError(f"ErrorFeedback wraps a codec, not {type(codec).__name__}")
        self.codec = codec
        self._residual: np.ndarray | None = None
        self.dropped = 0  # non-finite residual entries dropped so far

    @property
    def name(self) -> str:
        return self.codec.name

    @property
    def dense(self) -> bool:
        return self.codec.dense

    @property
    def residual(self) -> np.ndarray | None:
        """What is still owed (a read-only view; a copy on a device, where arrays cannot be
        read-only), or None before the first encode."""
        if self._residual is None:
            return None
        if is_device(self._residual):
            return self._residual.copy()
        view = self._residual.view()
        view.flags.writeable = False
        return view

    def reset(self) -> None:
        """Forget the residual."""
        self._residual = None

    def owed(self, like: np.ndarray) -> np.ndarray:
        """The residual for arrays like ``like``, writable: for a collective that charges its own
        encodes to it (``mpicoll.allreduce``). Zeros when new or when shape, dtype or memory
        changed."""
        xp = array_module(like)
        if self._residual is None or self._residual.shape != like.shape \
                or self._residual.dtype != like.dtype or array_module(self._residual) is not xp:
            self._residual = xp.zeros(like.shape, like.dtype)
        return self._residual

    def encode(self, array, out=None) -> np.ndarray:
        x = checked_input(array)
        given = self.owed(x)
        given += x  # the residual buffer becomes what we owe in total
        frame = self.codec.encode(given, out)
        self.codec.decode_sub(frame, given)  # ... and then what is still owed
        self.keep_finite(given)
        return frame

    def keep_finite(self, owed: Array, kept: Array | None = None) -> None:
        """Zero the entries of ``owed`` (part of the residual) that are not finite; count them.

        One reduction when all is finite (a sum is finite then, unless it overflows, which only
        costs the exact look that follows). ``kept``: the indices a sparse frame just sent and
        charged to ``owed``. A sparse codec keeps every entry that is not finite before any that
        is (:class:`~mpicoll.codecs.sparse.SparseCodec`), and an entry it kept stays finite only
        if it was: so when the kept entries are finite now, all are, and the look is at those
        k entries (1% at top-1%) instead of all.
        """
        xp = array_module(owed)
        with np.errstate(over="ignore", invalid="ignore"):
            if owed.size == 0 or (kept is not None and kept.size
                                  and bool(xp.isfinite(owed[kept].sum()))) \
                    or bool(xp.isfinite(owed.sum())):
                return
        bad = ~xp.isfinite(owed)
        count = int(bad.sum())
        if count:
            owed[bad] = 0
            self.dropped += count
            warnings.warn(f"{self!r}: dropped {count} non-finite residual entries (NaN or inf in "
                          f"the input; {self.dropped} so far): they are not owed to later calls",
                          RuntimeWarning, stacklevel=2)

    def decode(self, frame, out=None) -> np.ndarray:
        return self.codec.decode(frame, out)

    def decode_add(self, frame, acc: np.ndarray) -> np.ndarray:
        return self.codec.decode_add(frame, acc)

    def decode_sum(self, frames, out: np.ndarray) -> np.ndarray:
        return self.codec.decode_sum(frames, out)

    def max_frame_nbytes(self, count: int, dtype, ndim: int = 1) -> int:
        return self.codec.max_frame_nbytes(count, dtype, ndim)

    def __repr__(self) -> str:
        return f"ErrorFeedback({self.codec!r})"
