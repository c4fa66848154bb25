"""Fuzz the decoders: mutated, truncated and random frames raise CodecError and nothing else.

Hypothesis mutates valid frames of every codec (byte flips, truncation, insertion, deletion, header
fields set to edge values) and generates random frames behind a valid magic; a seeded mutator adds
thousands more cheaply. Each input goes through ``codecs.decode``, the codec's ``decode`` with and
without ``out``, and ``decode_add``. Valid frames of arbitrary arrays always decode.
"""

from __future__ import annotations

import struct

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import mpicoll.codecs as codecs
from mpicoll.codecs import CodecError

pytestmark = pytest.mark.mpi_free  # no MPI job: run under one MPI only (setup.cfg)

NAMES = codecs.available()
HYPOTHESIS_EXAMPLES = 600
SEEDED_MUTATIONS = 6000
FUZZ = settings(max_examples=HYPOTHESIS_EXAMPLES, deadline=None, database=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow])

U64_FIELDS = (8, 16, 24, 32, 40)  # count, shape[0], then codec parameters of a 1-D frame
U64_EDGES = (0, 1, 2, 7, 8, 255, 256, 2**31, 2**32 - 1, 2**32, 2**62, 2**63 - 1, 2**63, 2**64 - 1)


def seed_inputs(name):
    """(frame, shape, dtype) triples: several shapes and dtypes, with specials, per codec."""
    rng = np.random.default_rng(0)
    small = {"int8": {"block_size": 8}, "sign": {"block_size": 8}, "topk": {"ratio": 0.2},
             "threshold": {"density": 0.2}}.get(name, {})
    arrays = [rng.standard_normal(40).astype(np.float32),
              rng.standard_normal((3, 7)).astype(np.float64),
              np.array([0.0, -1.0, np.inf, 3.0, 1e-30, -2.5, 7.0, 0.5, 1.0], np.float16),
              np.zeros(0, np.float32), np.zeros((2, 0, 3), np.float64), np.array(2.0, np.float32)]
    return [(bytes(codecs.get(name, **small).encode(a)), a.shape, a.dtype) for a in arrays]


SEEDS = {name: seed_inputs(name) for name in NAMES}


def only_codec_errors(name, frame, shape, dtype):
    """Run every decoding entry point on ``frame``: each returns or raises CodecError."""
    codec = codecs.get(name)
    attempts = (lambda: codecs.decode(frame),
                lambda: codec.decode(frame),
                lambda: codec.decode(frame, out=np.empty(shape, dtype)),
                lambda: codec.decode_add(frame, np.zeros(shape, np.float32)),
                lambda: codecs.decode_add(frame, np.zeros(shape, np.float64)))
    for attempt in attempts:
        try:
            with np.errstate(all="ignore"):
                result = attempt()
        except CodecError:
            continue
        assert isinstance(result, np.ndarray)


def mutate(frame: bytes, ops) -> bytes:
    data = bytearray(frame)
    for op, *args in ops:
        at = args[0] % (len(data) + 1)
        if op == "flip" and at < len(data):
            data[at] ^= 1 << args[1]
        elif op == "set" and at < len(data):
            data[at] = args[1]
        elif op == "truncate":
            del data[at:]
        elif op == "insert":
            data[at:at] = args[1]
        elif op == "delete":
            del data[at:at + args[1]]
        elif op == "field":
            data[args[0]:args[0] + 8] = struct.pack("<Q", args[1])[:max(0, len(data) - args[0])]
    return bytes(data)


positions = st.integers(0, 2**16)
mutation = st.one_of(
    st.tuples(st.just("flip"), positions, st.integers(0, 7)),
    st.tuples(st.just("set"), positions, st.integers(0, 255)),
    st.tuples(st.just("truncate"), positions),
    st.tuples(st.just("insert"), positions, st.binary(min_size=1, max_size=9)),
    st.tuples(st.just("delete"), positions, st.integers(1, 9)),
    st.tuples(st.just("field"), st.sampled_from(U64_FIELDS), st.sampled_from(U64_EDGES)),
)


@pytest.mark.parametrize("name", NAMES)
def test_hypothesis_mutated_frames_raise_only_codec_error(name):
    @FUZZ
    @given(seed=st.sampled_from(SEEDS[name]), ops=st.lists(mutation, min_size=1, max_size=4))
    def check(seed, ops):
        frame, shape, dtype = seed
        only_codec_errors(name, mutate(frame, ops), shape, dtype)
    check()


@pytest.mark.parametrize("name", NAMES)
def test_hypothesis_random_frames_raise_only_codec_error(name):
    codec = codecs.get(name)
    prefix = b"MPCC\x01" + bytes([codec.codec_id])

    @settings(FUZZ, max_examples=400)
    @given(body=st.binary(max_size=120), dtype=st.integers(0, 4), ndim=st.integers(0, 3))
    def check(body, dtype, ndim):
        only_codec_errors(name, prefix + bytes([dtype, ndim]) + body, (4,), np.float32)
    check()


@pytest.mark.parametrize("name", NAMES)
def test_seeded_mutations_raise_only_codec_error(name):
    rng = np.random.default_rng(12345)
    for _ in range(SEEDED_MUTATIONS):
        frame, shape, dtype = SEEDS[name][rng.integers(len(SEEDS[name]))]
        data = np.frombuffer(frame, np.uint8).copy()
        kind = rng.integers(4)
        if kind == 0 and data.size:  # scribble over a few bytes
            at = rng.integers(0, data.size, rng.integers(1, 4))
            data[at] = rng.integers(0, 256, at.size)
        elif kind == 1:
            data = data[:rng.integers(0, data.size + 1)]
        elif kind == 2 and data.size:  # a random tail after a valid prefix
            cut = rng.integers(0, data.size)
            data = np.concatenate([data[:cut], rng.integers(0, 256, rng.integers(0, 64), np.uint8)])
        else:  # set a header field to an edge value
            at = U64_FIELDS[rng.integers(len(U64_FIELDS))]
            value = struct.pack("<Q", U64_EDGES[rng.integers(len(U64_EDGES))])
            data = bytearray(data.tobytes())
            data[at:at + 8] = value[:max(0, len(data) - at)]
        only_codec_errors(name, bytes(data), shape, dtype)


floats = hnp.arrays(st.sampled_from([np.float16, np.float32, np.float64]),
                    hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=20),
                    elements={"allow_nan": True, "allow_infinity": True, "allow_subnormal": True})


@pytest.mark.parametrize("name", NAMES)
def test_valid_frames_always_decode(name):
    codec = codecs.get(name, **({"int8": {"block_size": 5}, "sign": {"block_size": 5}}
                                .get(name, {})))

    @settings(FUZZ, max_examples=150)
    @given(x=floats)
    def check(x):
        with np.errstate(all="ignore"):
            frame = codec.encode(x)
            y = codecs.decode(frame)
            assert y.shape == x.shape and y.dtype == x.dtype
            codec.decode_add(frame, np.zeros(x.shape, np.float64))
    check()
