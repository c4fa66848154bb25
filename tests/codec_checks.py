"""What every codec must do, as checks on a codec instance.

tests/test_codecs.py runs them over every registered codec, so a new codec is checked as soon as
it is registered; its own tests can run them again with other parameters.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

import mpicoll.codecs as codecs
from mpicoll.codecs import Codec, CodecError, ErrorFeedback

DTYPES = (np.float16, np.float32, np.float64)


def rand(shape, dtype=np.float32, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def round_trip(codec: Codec, x: np.ndarray) -> None:
    """Frames are flat uint8 arrays of the promised size that decode to ``x``'s shape and dtype,
    from any bytes-like object, by the module and by a default instance."""
    frame = codec.encode(x)
    assert isinstance(frame, np.ndarray) and frame.dtype == np.uint8 and frame.ndim == 1
    y = codec.decode(frame)
    assert y.shape == x.shape and y.dtype == x.dtype
    for other in (bytes(frame), bytearray(frame), memoryview(frame)):
        np.testing.assert_array_equal(codecs.decode(other), y)
        np.testing.assert_array_equal(codecs.get(codec.name).decode(other), y)
    bound = codec.max_frame_nbytes(x.size, x.dtype, x.ndim)
    assert frame.size == bound if codec.dense else frame.size <= bound


def encode_into_out_and_decode_into_out(codec: Codec) -> None:
    x = rand((4, 300))
    out = np.full(codec.max_frame_nbytes(x.size, x.dtype, x.ndim) + 10, 0xAB, np.uint8)
    frame = codec.encode(x, out=out)
    assert np.shares_memory(frame, out) and frame.ctypes.data == out.ctypes.data
    target = np.empty_like(x)
    assert codec.decode(frame, out=target) is target
    np.testing.assert_array_equal(target, codec.decode(frame))
    with pytest.raises(ValueError):
        codec.encode(x, out=np.empty(10, np.uint8))
    with pytest.raises(TypeError):
        codec.encode(x, out=np.empty(10000, np.float32))
    with pytest.raises(CodecError):
        codec.decode(frame, out=np.empty((300, 4), np.float32))
    with pytest.raises(CodecError):
        codec.decode(frame, out=np.empty((4, 300), np.float64))


def bad_inputs(codec: Codec) -> None:
    """What is not a contiguous float array, or not a frame, is refused with the right error."""
    for bad in (np.arange(10), np.arange(10, dtype=np.int8), np.ones(3, np.complex64),
                np.ones(3, bool), np.ones(3, ">f4")):
        with pytest.raises(TypeError):
            codec.encode(bad)
    with pytest.raises(TypeError):
        codec.encode([1.0, 2.0])
    with pytest.raises(ValueError):
        codec.encode(np.ones((10, 10), np.float32)[:, ::2])
    with pytest.raises(TypeError):
        codec.decode("not a frame")
    frame = codec.encode(np.ones(10, np.float32))
    with pytest.raises(TypeError):
        codec.decode_add(frame, np.zeros(10, np.int32))
    with pytest.raises(ValueError):
        codec.decode_add(frame, np.zeros(20, np.float32)[::2])


def config_round_trip(codec: Codec) -> None:
    """The config survives JSON and rebuilds an equal codec."""
    config = json.loads(json.dumps(codec.get_config()))
    assert config["name"] == codec.name
    again = codecs.from_config(config)
    assert type(again) is type(codec) and again.get_config() == codec.get_config()
    assert isinstance(codec.dense, bool)


def frame_describes_itself(codec: Codec) -> None:
    """A default instance, or the module, decodes a frame of ``codec`` (built with other
    parameters) alone."""
    frame = codec.encode(rand(1000, np.float64))
    np.testing.assert_array_equal(codecs.get(codec.name).decode(frame), codecs.decode(frame))


def decode_add(codec: Codec, acc_dtype) -> None:
    """``decode_add`` adds what ``decode`` gives, in the accumulator's dtype, in place."""
    x = rand((30, 41), np.float32)
    frame = codec.encode(x)
    acc = rand((30, 41), acc_dtype, seed=1)
    expected = acc.astype(np.float64) + codec.decode(frame).astype(np.float64)
    assert codec.decode_add(frame, acc) is acc
    tolerance = {np.float16: 2e-3, np.float32: 1e-6, np.float64: 1e-12}[acc_dtype]
    np.testing.assert_allclose(acc, expected, rtol=tolerance, atol=tolerance)
    codecs.decode_add(frame, acc)
    with pytest.raises(CodecError):
        codec.decode_add(frame, np.zeros((41, 30), np.float32))


def decode_sub(codec: Codec, acc_dtype) -> None:
    """``decode_sub`` is ``acc - decode(frame)`` to the bit (a sparse codec touches only what
    it sent), in place: error feedback's ``owed -= sent``, for a frame of ``acc``'s dtype."""
    x = rand((30, 41), acc_dtype)
    frame = codec.encode(x)
    acc = rand((30, 41), acc_dtype, seed=1)
    acc[0, :3] = (np.nan, np.inf, -0.0)  # kept as they are where nothing was sent
    with np.errstate(over="ignore", invalid="ignore"):
        expected = acc - codec.decode(frame)
    assert codec.decode_sub(frame, acc) is acc
    np.testing.assert_array_equal(acc.view(f"u{acc.itemsize}"),
                                  expected.view(f"u{acc.itemsize}"))
    with pytest.raises(CodecError):
        codec.decode_sub(frame, np.zeros((41, 30), np.float32))


def error_feedback_sent_plus_residual_is_given(codec: Codec, dtype) -> None:
    """Inside ErrorFeedback, what was sent plus the residual is what was given, every call."""
    ef = ErrorFeedback(codec)
    assert ef.residual is None and ef.name == codec.name
    rng = np.random.default_rng(9)
    for _ in range(5):
        x = rng.standard_normal(3000).astype(dtype)
        old = np.zeros_like(x) if ef.residual is None else ef.residual.copy()
        frame = ef.encode(x)
        sent = ef.decode(frame)
        given = x.astype(np.float64) + old  # old + x is computed in dtype: one rounding
        total = sent.astype(np.float64) + ef.residual.astype(np.float64)
        eps = np.finfo(dtype).eps
        assert np.all(np.abs(total - given) <= 2 * eps * (np.abs(given) + np.abs(sent)))
    with pytest.raises(ValueError):
        ef.residual[0] = 1.0


def every_truncation_and_extension_raises_codec_error(codec: Codec) -> None:
    frame = bytes(codec.encode(rand(37)))
    for end in range(len(frame)):
        with pytest.raises(CodecError):
            codecs.decode(frame[:end])
    with pytest.raises(CodecError):
        codecs.decode(frame + b"\0")


def frame_of_another_codec_raises_codec_error(codec: Codec) -> None:
    other = next(name for name in codecs.available() if name != codec.name)
    with pytest.raises(CodecError):
        codec.decode(codecs.get(other).encode(rand(10)))
