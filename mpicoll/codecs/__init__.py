"""Compression codecs: self-describing frames for what travels in a compressed allreduce.

``get(name, **params)`` builds a codec, ``available()`` lists them, ``decode(frame)`` decodes any
codec's frame, ``ErrorFeedback(codec)`` keeps what a lossy codec did not send, ``parse(spec)``
and ``spec(codec)`` turn a spec string such as ``"int8+ef"`` into a codec and back, and
``register(cls)`` adds a codec. The interface is specified in :mod:`mpicoll.codecs.abc`, the
header in :mod:`mpicoll.codecs.wire`.
"""

from __future__ import annotations

from functools import cache

import numpy as np

from . import wire
from .abc import Codec
from .feedback import ErrorFeedback
from .registry import (UnknownCodecError, available, class_for_id, from_config, get, parse,
                       register, spec)
from .wire import CodecError

__all__ = ["Codec", "CodecError", "ErrorFeedback", "UnknownCodecError", "available", "decode",
           "decode_add", "decode_sub", "decode_sum", "from_config", "get", "parse", "register",
           "spec"]


@cache
def _decoder(codec_id: int) -> Codec:
    """One default instance per codec: decoding needs no parameters and touches no state."""
    return class_for_id(codec_id)()


def _codec_for(frame) -> Codec:
    return _decoder(wire.peek_codec_id(wire.frame_bytes(frame)))


def decode(frame, out=None) -> np.ndarray:
    """Decode a frame of any registered codec."""
    return _codec_for(frame).decode(frame, out)


def decode_add(frame, acc: np.ndarray) -> np.ndarray:
    """Add the values of a frame of any registered codec into ``acc``."""
    return _codec_for(frame).decode_add(frame, acc)


def decode_sum(frames, out: np.ndarray) -> np.ndarray:
    """Decode the sum of frames of any registered codecs into ``out``, in order: in one call of
    their codec's ``decode_sum`` when they share one, else frame by frame."""
    if not frames:
        raise ValueError("decode_sum needs at least one frame")
    ids = {wire.peek_codec_id(wire.frame_bytes(frame)) for frame in frames}
    if len(ids) == 1:
        return _decoder(ids.pop()).decode_sum(frames, out)
    decode(frames[0], out)
    for frame in frames[1:]:
        decode_add(frame, out)
    return out


def decode_sub(frame, acc: np.ndarray) -> np.ndarray:
    """Subtract the values of a frame of any registered codec from ``acc``."""
    return _codec_for(frame).decode_sub(frame, acc)
