"""Codecs, single process: round trips, error bounds, wire sizes, golden frames, error feedback,
the registry and spec strings.

The checks every codec must pass (tests/codec_checks.py) run over ``codecs.available()``, so a
newly registered codec is checked without editing this file.
"""

from __future__ import annotations

import math
import struct
import warnings
from pathlib import Path

import codec_checks as checks
import numpy as np
import pytest
from codec_checks import DTYPES, rand

import mpicoll.codecs as codecs
from mpicoll.codecs import CodecError, ErrorFeedback, UnknownCodecError, registry, sparse
from mpicoll.codecs.fp16 import FP16

pytestmark = pytest.mark.mpi_free  # no MPI job: run under one MPI only (setup.cfg)

NAMES = codecs.available()
SHAPES = ((0,), (1,), (7,), (1000,), (3, 5, 7), (), (2, 0, 3), (1, 1, 1, 1, 1, 1, 1, 2))
GOLDEN = Path(__file__).parent / "data" / "codecs"


# ---------------------------------------------------------------- interface


def test_available_names():
    """Pinned, so that a lost registration fails here rather than shrinking every other test."""
    assert set(NAMES) == {"fp16", "bf16", "int8", "topk", "threshold", "sign"}


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
def test_round_trip_keeps_shape_and_dtype(name, dtype, shape):
    checks.round_trip(codecs.get(name), rand(shape, dtype))


@pytest.mark.parametrize("check", (
    checks.encode_into_out_and_decode_into_out, checks.bad_inputs, checks.config_round_trip,
    checks.every_truncation_and_extension_raises_codec_error,
    checks.frame_of_another_codec_raises_codec_error), ids=lambda check: check.__name__)
@pytest.mark.parametrize("name", NAMES)
def test_every_codec(name, check):
    check(codecs.get(name))


def test_unknown_codec_and_parameters():
    with pytest.raises(ValueError, match="unknown codec"):
        codecs.get("zstd")
    with pytest.raises(TypeError):
        codecs.get("fp16", block_size=3)
    for name, params in (("int8", {"block_size": 0}), ("topk", {"ratio": 0}),
                         ("topk", {"method": "fast"}), ("threshold", {"density": 1.5}),
                         ("topk", {"value_dtype": "int8"}), ("sign", {"block_size": -1})):
        with pytest.raises(ValueError):
            codecs.get(name, **params)


def test_config_keeps_parameters():
    codec = codecs.get("int8", block_size=128, stochastic=True, seed=3)
    assert codecs.from_config(codec.get_config()).get_config() == {
        "name": "int8", "block_size": 128, "stochastic": True, "seed": 3}


@pytest.mark.parametrize("name", NAMES)
def test_frames_describe_themselves(name):
    """A codec built with other parameters, or the module, decodes a frame alone."""
    params = {"int8": {"block_size": 32}, "sign": {"block_size": 32}, "topk": {"ratio": 0.2},
              "threshold": {"density": 0.2}}.get(name, {})
    checks.frame_describes_itself(codecs.get(name, **params))


# ---------------------------------------------------------------- registry and spec strings


@pytest.fixture
def scratch_registry(monkeypatch):
    """Registrations a test makes are undone after it, and no decoder it cached survives."""
    monkeypatch.setattr(registry, "_BY_NAME", dict(registry._BY_NAME))
    monkeypatch.setattr(registry, "_BY_ID", dict(registry._BY_ID))
    yield
    codecs._decoder.cache_clear()


def throwaway(name, codec_id):
    """A codec class to register: fp16's arithmetic under another name and id."""
    return type("Throwaway", (FP16,), {"name": name, "codec_id": codec_id})


@pytest.mark.parametrize("name, codec_id", (
    ("fp16", 250),      # the name is taken
    ("int9", 3),        # the id is taken (int8's): its frames would decode as int8
    ("int9", 0), ("int9", 256),  # ids are one byte, 0 is not one
    ("none", 250), ("", 250), ("int8+ef", 250),  # names a spec string could not give back
))
def test_register_refuses_and_changes_nothing(name, codec_id, scratch_registry):
    before = (dict(registry._BY_NAME), dict(registry._BY_ID))
    with pytest.raises(ValueError):
        codecs.register(throwaway(name, codec_id))
    assert (registry._BY_NAME, registry._BY_ID) == before


def test_register_takes_codec_classes_only():
    with pytest.raises(TypeError):
        codecs.register(dict)


def test_register_is_all_a_new_codec_needs(scratch_registry):
    @codecs.register
    class Half(FP16):
        name = "half"
        codec_id = 250

    assert codecs.available()[-1] == "half" and type(codecs.get("half")) is Half
    checks.round_trip(codecs.get("half"), rand(7))  # codecs.decode finds it by its id
    checks.config_round_trip(codecs.get("half"))
    assert codecs.spec(codecs.parse("half+ef")) == "half+ef"


def test_unknown_codec_error():
    assert issubclass(UnknownCodecError, ValueError)
    assert not issubclass(UnknownCodecError, CodecError)  # a frame's unknown id is a CodecError
    for unknown in (lambda: codecs.get("zstd"), lambda: codecs.parse("zstd"),
                    lambda: codecs.parse("zstd+ef"), lambda: codecs.from_config({"name": "zstd"}),
                    lambda: registry.codec_class(["int8"])):
        with pytest.raises(UnknownCodecError, match="available: " + ", ".join(NAMES)):
            unknown()


@pytest.mark.parametrize("name", NAMES)
def test_parse_and_spec_round_trip(name):
    plain, wrapped = codecs.parse(name), codecs.parse(name + "+ef")
    assert type(plain) is type(codecs.get(name)) and codecs.spec(plain) == name
    assert isinstance(wrapped, ErrorFeedback) and type(wrapped.codec) is type(plain)
    assert codecs.spec(wrapped) == name + "+ef"
    assert codecs.spec(codecs.parse(codecs.spec(wrapped))) == name + "+ef"


def test_parse_no_codec_and_bad_suffixes():
    assert codecs.parse("") is None and codecs.parse("none") is None and codecs.spec(None) == ""
    for spec in ("int8+xx", "int8+", "int8+ef+ef", "int8+EF"):
        with pytest.raises(ValueError, match=r"the only suffix is '\+ef'"):
            codecs.parse(spec)
    with pytest.raises(TypeError):
        codecs.spec("int8")


# ---------------------------------------------------------------- codec accuracy


def test_fp16_relative_error_and_range():
    x = rand(10000) * 100
    y = codecs.get("fp16").decode(codecs.get("fp16").encode(x))
    assert np.all(np.abs(y - x) <= 2.0**-11 * np.abs(x) + 2.0**-25)
    special = np.array([70000.0, -1e6, np.inf, np.nan, 65504.0, -0.0], np.float32)
    y = codecs.get("fp16").decode(codecs.get("fp16").encode(special))
    np.testing.assert_array_equal(y, [np.inf, -np.inf, np.inf, np.nan, 65504.0, -0.0])


def test_fp16_has_numpys_bits_for_every_half_and_every_rounding_boundary():
    """The fp16 codec converts in chunks of integer and float ufuncs (codecs/half.py), not with
    NumPy's cast: it must give the cast's bits. Every half decodes (and adds into float32) as the
    cast does; every float32 at and next to each half, and at and next to each midpoint between
    two halves (the ties, from the subnormals to the overflow to inf), NaN payloads and random
    bit patterns encode as the cast does. (All 2**32 float32 inputs were checked once by hand.)"""
    fp16 = codecs.get("fp16")
    every = np.arange(2**16, dtype=np.uint32).astype(np.uint16).view(np.float16)
    widened = every.astype(np.float32)  # (and back to the same half: NaN payloads too)
    decoded = fp16.decode(fp16.encode(widened))
    np.testing.assert_array_equal(decoded.view(np.uint32), widened.view(np.uint32))
    acc = rand(2**16) * 1000
    want = acc.copy()
    with np.errstate(invalid="ignore", over="ignore"):
        want += every
        fp16.decode_add(fp16.encode(every), acc)
    np.testing.assert_array_equal(acc, want)
    finite = every[np.isfinite(every) & (every.view(np.uint16) < 0x8000)].astype(np.float32)
    finite = np.sort(np.append(finite, 65536.0))  # (the next half after 65504: inf, its tie 65520)
    middles = (finite[:-1] / 2 + finite[1:] / 2).view(np.uint32).astype(np.int64)  # exact
    near = np.concatenate([bits + d for bits in (middles, finite.view(np.uint32).astype(np.int64))
                           for d in (-1, 0, 1)])
    near = near[(near >= 0) & (near < 0x7F800000)]
    rng = np.random.default_rng(3)
    x = np.concatenate([near, near | 0x80000000, 0x7F800000 + np.arange(1, 2**23, 4099),
                        0xFF800000 + np.arange(1, 2**23, 4099), [0x7F800000, 0xFF800000],
                        rng.integers(0, 2**32, 2**18, dtype=np.uint64)]).astype(np.uint32).view(np.float32)
    got = fp16.encode(x)[-2 * x.size:].view("<u2")
    with np.errstate(over="ignore", invalid="ignore"):
        np.testing.assert_array_equal(got, x.astype(np.float16).view(np.uint16))


def bf16_reference(value: float) -> int:
    """Round a float32 to bfloat16 bits, written out the textbook way (one element at a time)."""
    bits = struct.unpack("<I", struct.pack("<f", value))[0]
    if (bits & 0x7FFFFFFF) > 0x7F800000:
        return (bits >> 16) | 0x0040
    upper, lower = bits >> 16, bits & 0xFFFF
    if lower > 0x8000 or (lower == 0x8000 and upper & 1):
        upper += 1
    return upper


def bits32(*patterns):
    return np.array(patterns, np.uint32).view(np.float32)


def test_bf16_bit_exact_against_reference():
    specials = bits32(
        0x00000000, 0x80000000, 0x3F800000, 0x3F808000, 0x3F818000, 0x3F808001, 0x3F80FFFF,
        0x7F7FFFFF, 0x7F7F7FFF, 0x7F7F8000, 0xFF7F8000, 0x7F800000, 0xFF800000,
        0x7FC00000, 0xFFC00000, 0x7F800001, 0xFF800001, 0x7FBFFFFF, 0x7F808000, 0xFFFFFFFF,
        0x00000001, 0x00008000, 0x00018000, 0x007FFFFF, 0x80008001)
    rng = np.random.default_rng(1)
    x = np.concatenate([specials, rng.integers(0, 2**32, 20000, dtype=np.uint64)
                        .astype(np.uint32).view(np.float32)])
    frame = codecs.get("bf16").encode(x)
    got = frame[-2 * x.size:].view("<u2")
    expected = np.array([bf16_reference(v) for v in x.tolist()], np.uint16)
    np.testing.assert_array_equal(got, expected)
    y = codecs.get("bf16").decode(frame)
    nan = np.isnan(x)
    assert np.all(np.isnan(y[nan])) and not np.any(np.isnan(y[~nan]))
    assert np.all(np.isinf(y[np.isinf(x)]))


def test_bf16_from_float64_and_float16_goes_through_float32():
    x = rand(1000, np.float64) * 1000
    y = codecs.get("bf16").decode(codecs.get("bf16").encode(x))
    z = codecs.get("bf16").decode(codecs.get("bf16").encode(x.astype(np.float32)))
    assert y.dtype == np.float64
    np.testing.assert_array_equal(y, z.astype(np.float64))
    h = rand(1000, np.float16)
    bf16 = codecs.get("bf16")
    np.testing.assert_array_equal(bf16.decode(bf16.encode(h)),
                                  bf16.decode(bf16.encode(h.astype(np.float32))).astype(np.float16))


def block_scales(x, block):
    flat = x.reshape(-1).astype(np.float64)
    return np.array([np.abs(flat[i:i + block]).max() / 127 for i in range(0, flat.size, block)])


@pytest.mark.parametrize("block", (1, 7, 64, 256, 1000))
@pytest.mark.parametrize("dtype", DTYPES)
def test_int8_error_within_half_a_step(block, dtype):
    x = (rand(2000, dtype) * np.repeat([1.0, 1e-3, 50.0, 1.0], 500)).astype(dtype)
    codec = codecs.get("int8", block_size=block)
    y = codec.decode(codec.encode(x)).astype(np.float64)
    step = np.repeat(block_scales(x, block), block)[:x.size]
    slack = 1e-6 * step + (np.finfo(dtype).eps * np.abs(x) if dtype == np.float16 else 0)
    assert np.all(np.abs(y - x.astype(np.float64)) <= step / 2 + slack)


def test_int8_zero_and_non_finite_blocks():
    x = np.zeros(40, np.float32)
    x[10:20] = rand(10)
    x[25] = np.nan
    x[33] = np.inf
    y = codecs.get("int8", block_size=10).decode(codecs.get("int8", block_size=10).encode(x))
    np.testing.assert_array_equal(y[:10], 0)
    assert np.all(np.abs(y[10:20] - x[10:20]) <= np.abs(x[10:20]).max() / 254 * 1.0001)
    assert np.all(np.isnan(y[20:40]))  # the blocks holding NaN and inf: never silently finite


def test_int8_stochastic_rounding_is_unbiased_bounded_and_reproducible():
    x = np.full(256, 0.3, np.float32)
    x[0] = 1.0
    step = 1 / 127
    codec = codecs.get("int8", stochastic=True, seed=5)
    ys = np.array([codec.decode(codec.encode(x)) for _ in range(400)])
    assert np.all(np.abs(ys - x) < step * 1.0001)
    assert abs(ys[:, 1:].mean() - 0.3) < 1e-3  # round to nearest would be off by 0.0015 forever
    again = codecs.get("int8", stochastic=True, seed=5)
    np.testing.assert_array_equal(again.decode(again.encode(x)), ys[0])


@pytest.mark.parametrize("dtype", DTYPES)
def test_topk_keeps_the_largest_magnitudes(dtype):
    x = rand(5000, dtype, seed=3)
    for method in ("exact", "sampled"):
        codec = codecs.get("topk", ratio=0.013, method=method, value_dtype=None)
        y = codec.decode(codec.encode(x))
        kept = np.flatnonzero(y)
        assert kept.size == math.ceil(0.013 * 5000)
        assert np.abs(x[kept]).min() >= np.sort(np.abs(x))[-kept.size]
        np.testing.assert_array_equal(y[kept], x[kept])


def test_topk_k_is_ceil_of_ratio_times_count_and_at_least_one():
    for ratio, n, k in ((0.07, 100, 7), (0.01, 1, 1), (0.5, 3, 2), (1.0, 9, 9), (1e-9, 10, 1)):
        y = codecs.get("topk", ratio=ratio).decode(codecs.get("topk", ratio=ratio).encode(
            np.arange(1, n + 1, dtype=np.float32)))
        np.testing.assert_array_equal(np.flatnonzero(y), np.arange(n - k, n))


def test_topk_sampled_picks_what_exact_picks_ties_included():
    """The sampled method's candidates hold every element at or above the k-th largest magnitude,
    and both methods trim by the same rule (those above it, then the first ones equal to it):
    the same indices, ties too; with ``sample_ratio`` as without."""
    rng = np.random.default_rng(4)
    ties = rng.integers(-40, 40, 200_000).astype(np.float32)  # ~2500 of magnitude 40: k is 2000
    for x in (rng.standard_normal(200_000), rng.standard_t(2, 200_000), rng.random(200_000), ties):
        exact, _ = codecs.get("topk", method="exact").select_kept(x)
        assert exact.size == 2000 and np.all(np.diff(exact) > 0)
        for sampled in (codecs.get("topk", seed=0), codecs.get("topk", sample_ratio=0.05, seed=1)):
            np.testing.assert_array_equal(sampled.select_kept(x)[0], exact)
    np.testing.assert_array_equal(exact, np.flatnonzero(ties == -40)[:2000])


def test_topk_sample_holds_about_100_of_the_top_k_but_at_most_1_percent():
    topk = codecs.get("topk")
    assert topk.sample_size(4 << 20) == 10_000  # 100 / 0.01
    assert topk.sample_size(100_000) == 4096  # at least
    assert topk.sample_size(1000) == 1000  # at most everything
    assert codecs.get("topk", ratio=1e-4).sample_size(4 << 20) == 41_944  # 1% of n
    assert codecs.get("topk", sample_ratio=0.05).sample_size(1 << 20) == 52_429


@pytest.mark.parametrize("dtype", DTYPES)
def test_above_keeps_what_is_not_below_the_threshold(dtype):
    """``sparse.above``, a chunk at a time: the elements where ``|x| < t`` (or ``|x| <= t``) is
    false, in order, with their magnitudes: every NaN, and everything for a NaN threshold."""
    specials = [0.0, -0.0, np.nan, -np.nan, np.inf, -np.inf, 1.5, -1.5, 65504.0, 1e-8]
    x = np.concatenate([np.array(specials, dtype), rand(sparse._CHUNK + 5, dtype)])
    magnitude = np.abs(x)
    for t in (0.0, -0.0, 1e-8, 0.1, 1.5, 2.5, 65504.0, 1e6, np.inf, np.nan):
        for inclusive in (True, False):
            with np.errstate(over="ignore"):
                below = (magnitude < t) if inclusive else (magnitude <= t)
                idx, kept = sparse.above(x, t, inclusive)
            np.testing.assert_array_equal(idx, np.flatnonzero(~below), err_msg=f"{t} {inclusive}")
            np.testing.assert_array_equal(kept, magnitude[idx])


@pytest.mark.parametrize("dtype", DTYPES)
def test_topk_sends_nan(dtype):
    """Every NaN counts as the largest magnitude: negative ones and ones with a payload too."""
    x = rand(1000, dtype)
    itype = np.dtype(f"<i{np.dtype(dtype).itemsize}")
    x[500] = np.nan
    x[600] = -np.abs(np.array(np.nan, dtype))
    x[700] = (np.array(np.nan, dtype).view(itype) | 1).view(dtype)
    x[800] = np.inf
    for method in ("exact", "sampled"):
        codec = codecs.get("topk", method=method, ratio=0.004, value_dtype=None)
        kept, values = codec.select_kept(x)
        np.testing.assert_array_equal(kept, [500, 600, 700, 800])
        assert np.isnan(values[:3]).all() and values[3] == np.inf


SPARSE_SPECS = ({"name": "topk", "method": "exact"}, {"name": "topk", "seed": 0},
                {"name": "threshold", "seed": 0})


def _with_non_finite(rng, n, bad):
    """Normal values, ``bad`` of them NaN or ±inf, some beyond float16's range."""
    x = rng.standard_normal(n).astype(np.float32)
    x[rng.integers(0, n, 20)] *= 1e5  # sent as ±inf in float16: the residual gets -+inf
    where = rng.choice(n, bad, replace=False)
    x[where] = rng.choice(np.array([np.nan, np.inf, -np.inf], np.float32), bad)
    return x


@pytest.mark.parametrize("spec", SPARSE_SPECS, ids=lambda s: "-".join(map(str, s.values())))
def test_sparse_codecs_keep_every_non_finite_entry_unless_they_keep_only_such(spec):
    """SparseCodec._select's contract, which error feedback's finiteness check relies on."""
    rng = np.random.default_rng(11)
    codec = codecs.get(**spec)
    for bad in (0, 1, 5, 99, 100, 101, 500, 9999, 10_000):
        x = _with_non_finite(rng, 10_000, bad)
        kept, _ = codec.select_kept(x)
        missed = np.setdiff1d(np.flatnonzero(~np.isfinite(x)), kept)
        assert missed.size == 0 or not np.isfinite(x[kept]).any(), (bad, missed[:5])


@pytest.mark.parametrize("spec", SPARSE_SPECS, ids=lambda s: "-".join(map(str, s.values())))
def test_error_feedback_checks_the_kept_entries_and_finds_what_a_full_look_finds(spec):
    """What sparse-allgather does with error feedback: select, charge what was sent, drop the
    non-finite entries. Looking at the kept entries first must end as the full look does."""
    from mpicoll.algorithm.sparse_allgather import charge
    rng = np.random.default_rng(12)
    quick, full = (codecs.ErrorFeedback(codecs.get(**spec)) for _ in range(2))
    for step, bad in enumerate((0, 3, 0, 150, 0, 10_000, 0, 1)):
        x = _with_non_finite(rng, 10_000, bad)
        for ef, shortcut in ((quick, True), (full, False)):
            owed = ef.owed(x)
            owed += x
            kept, sent = ef.codec.select_kept(owed)
            charge(owed, kept, sent)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                ef.keep_finite(owed, kept if shortcut else None)
        assert np.isfinite(quick.residual).all(), step
        assert quick.residual.tobytes() == full.residual.tobytes(), step
        assert quick.dropped == full.dropped, step
    assert quick.dropped >= 10_000  # the checks had something to find


@pytest.mark.parametrize("spec", SPARSE_SPECS + ({"name": "topk", "seed": 0, "ratio": 0.9},),
                         ids=lambda s: "-".join(map(str, s.values())))
@pytest.mark.parametrize("n", [0, 1, 5000, (1 << 18) * 2 + 9])
def test_selecting_with_plus_is_selecting_the_sum_left_in_the_array(spec, n):
    """``select_kept(owed, plus=x)`` (the pass adds x in, a chunk at a time) keeps and sends
    what ``select_kept(owed + x)`` does, call after call (threshold adapts, top-k draws its
    samples: the same), and leaves the sum's bits in ``owed``, NaN and inf included."""
    rng = np.random.default_rng(n)
    fused, apart = codecs.get(**spec), codecs.get(**spec)
    owed = rng.standard_normal(n).astype(np.float32)
    summed = owed.copy()
    for step in range(3):
        x = _with_non_finite(rng, n, 3 * step) if n > 100 else rng.standard_normal(n).astype(
            np.float32)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # inf - inf in the sum
            summed += x
            expected = apart.select_kept(summed)
            got = fused.select_kept(owed, plus=x)
        assert owed.tobytes() == summed.tobytes(), step
        assert np.array_equal(got[0], expected[0]), step
        assert got[1].tobytes() == expected[1].tobytes(), step


def test_selecting_with_plus_checks_plus():
    owed = np.zeros(10, np.float32)
    for plus in (np.zeros(9, np.float32), np.zeros(10, np.float64)):
        with pytest.raises(ValueError, match="plus must be"):
            codecs.get("topk").select_kept(owed, plus=plus)
    assert not owed.any()


@pytest.mark.parametrize("sample", ("normal", "laplace", "student"))
def test_threshold_holds_its_density(sample):
    rng = np.random.default_rng(6)
    draw = {"normal": lambda: rng.standard_normal(100_000),
            "laplace": lambda: rng.laplace(size=100_000),
            "student": lambda: rng.standard_t(3, 100_000)}[sample]
    codec = codecs.get("threshold", density=0.01, seed=0)
    sent = []
    for _ in range(8):
        sent.append(np.count_nonzero(codec.decode(codec.encode(draw().astype(np.float32)))))
    assert all(abs(s / 1000 - 1) < 0.15 for s in sent[3:]), sent
    assert (codec.kept, codec.offered) == (sum(sent), 8 * 100_000)  # the density it held
    assert codec.threshold > 0
    codec.reset()
    assert codec.threshold is None


def test_threshold_tracks_a_changing_scale():
    rng = np.random.default_rng(7)
    codec = codecs.get("threshold", density=0.02, seed=0)
    for scale in (1.0, 1.0, 1.0, 0.01, 0.01, 0.01, 0.01, 100.0, 100.0, 100.0, 100.0):
        y = codec.decode(codec.encode(rng.standard_normal(50_000) * scale))
    assert abs(np.count_nonzero(y) / 1000 - 1) < 0.2


def test_threshold_all_zero_then_data():
    codec = codecs.get("threshold", density=0.1, seed=0)
    assert np.count_nonzero(codec.decode(codec.encode(np.zeros(1000)))) == 0
    y = codec.decode(codec.encode(rand(1000, np.float64)))
    assert 50 <= np.count_nonzero(y) <= 200


@pytest.mark.parametrize("block", (1, 5, 8, 256, 1000))
def test_sign_decodes_to_signed_block_means(block):
    x = rand(1003, seed=8)
    x[17] = 0.0
    y = codecs.get("sign", block_size=block).decode(codecs.get("sign", block_size=block).encode(x))
    for start in range(0, x.size, block):
        part = x[start:start + block]
        mean = np.float32(np.abs(part).mean())
        np.testing.assert_allclose(y[start:start + block], np.where(part < 0, -mean, mean),
                                   rtol=1e-6)


# ---------------------------------------------------------------- wire sizes (must show)


def test_wire_sizes():
    n = 1_000_000
    x = rand(n)
    for name in ("fp16", "bf16"):
        assert codecs.get(name).encode(x).size <= 2 * n + 64
        assert codecs.get(name).max_frame_nbytes(n, np.float32) <= 2 * n + 64
    assert x.nbytes / codecs.get("int8").encode(x).size >= 3.85
    assert x.nbytes / codecs.get("topk", ratio=0.01).encode(x).size >= 100
    assert x.nbytes / codecs.get("topk", ratio=0.01, method="exact").encode(x).size >= 100
    assert x.nbytes / codecs.get("sign").encode(x).size >= 25


def test_header_is_small():
    codec = codecs.get("topk")
    assert codec.encode(np.zeros(0, np.float32)).size <= 48
    assert codecs.get("fp16").encode(np.zeros(0, np.float32)).size == 24


# ---------------------------------------------------------------- decode_add


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("acc_dtype", DTYPES)
def test_decode_add(name, acc_dtype):
    params = {"int8": {"block_size": 100}, "sign": {"block_size": 100}}.get(name, {})
    checks.decode_add(codecs.get(name, **params), acc_dtype)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("acc_dtype", DTYPES)
def test_decode_sub(name, acc_dtype):
    params = {"int8": {"block_size": 100}, "sign": {"block_size": 100}}.get(name, {})
    checks.decode_sub(codecs.get(name, **params), acc_dtype)


def test_decode_add_accumulates_fp16_frames_in_float32_without_overflow():
    x = np.full(100, 60000.0, np.float16)
    frame = codecs.get("fp16").encode(x)
    acc = np.zeros(100, np.float32)
    for _ in range(4):
        codecs.decode_add(frame, acc)
    np.testing.assert_array_equal(acc, 240000.0)


# ---------------------------------------------------------------- error feedback


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("dtype", (np.float32, np.float64))
def test_error_feedback_sent_plus_residual_is_given(name, dtype):
    params = {"topk": {"ratio": 0.05}}.get(name, {})
    checks.error_feedback_sent_plus_residual_is_given(codecs.get(name, **params), dtype)


def test_error_feedback_residual_restarts_on_new_shape_or_dtype():
    ef = ErrorFeedback(codecs.get("int8"))
    ef.encode(rand(100))
    ef.encode(rand(50))
    assert ef.residual.shape == (50,)
    ef.encode(rand(50, np.float64))
    assert ef.residual.dtype == np.float64
    ef.reset()
    assert ef.residual is None
    with pytest.raises(TypeError):
        ErrorFeedback("int8")


def test_error_feedback_on_a_large_sparse_frame():
    """A 48-byte frame of 2**23 zeros is past decode's allocation guard; feedback must cope."""
    ef = ErrorFeedback(codecs.get("threshold"))
    assert ef.encode(np.zeros(2**23, np.float32)).size == 48
    assert not ef.residual.any()


def test_seed_story_int8_small_gradients_need_error_feedback():
    """1e-4 next to a 1.0 in the same block: int8 alone sends 0 forever; with feedback the sum
    of what was sent tracks the true sum."""
    g = np.full(256, 1e-4, np.float32)
    g[0] = 1.0
    plain, ef = codecs.get("int8"), ErrorFeedback(codecs.get("int8"))
    sent_plain = np.zeros(256, np.float64)
    sent_ef = np.zeros(256, np.float64)
    steps = 1000
    for _ in range(steps):
        codecs.decode_add(plain.encode(g), sent_plain)
        codecs.decode_add(ef.encode(g), sent_ef)
    assert np.all(sent_plain[1:] == 0)  # lost for good: training would stall
    true_sum = steps * g.astype(np.float64)
    np.testing.assert_allclose(sent_ef[1:], true_sum[1:], rtol=0.1)  # 0.1 sent of 0.1 owed
    assert np.all(np.abs(sent_ef - true_sum) <= 1 / 127 + 1e-6)  # off by at most one step


@pytest.mark.parametrize("name, params", (("topk", {"ratio": 0.01}), ("sign", {}),
                                          ("threshold", {"density": 0.01})))
def test_error_feedback_makes_biased_codecs_track_the_sum(name, params):
    rng = np.random.default_rng(10)
    plain, ef = codecs.get(name, **params), ErrorFeedback(codecs.get(name, **params))
    true_sum, sent_plain, sent_ef = np.zeros(2000), np.zeros(2000), np.zeros(2000)
    for _ in range(300):
        g = (rng.standard_normal(2000) * 0.1 + 0.01).astype(np.float32)
        true_sum += g
        plain.decode_add(plain.encode(g), sent_plain)
        ef.decode_add(ef.encode(g), sent_ef)
    np.testing.assert_allclose(sent_ef + ef.residual, true_sum, atol=1e-3)
    error_plain = np.abs(sent_plain - true_sum).mean()
    error_ef = np.abs(sent_ef - true_sum).mean()
    assert error_ef < 0.25 * error_plain, (error_ef, error_plain)


# ---------------------------------------------------------------- golden frames


@pytest.mark.parametrize("name", NAMES)
def test_golden_frames_still_decode(name):
    path = GOLDEN / f"{name}-v1.bin"
    assert path.exists(), f"no golden frame for {name}: give it an input in make_golden.py, run it"
    frame = path.read_bytes()
    expected = np.load(GOLDEN / f"{name}-v1.npy")
    got = codecs.decode(frame)
    assert got.dtype == expected.dtype and got.shape == expected.shape
    np.testing.assert_array_equal(got, expected)
    np.testing.assert_array_equal(codecs.get(name).decode(frame), expected)
    acc = np.zeros(expected.shape, expected.dtype)
    with np.errstate(invalid="ignore"):
        np.testing.assert_array_equal(codecs.get(name).decode_add(frame, acc), expected)


# ---------------------------------------------------------------- malformed frames


def header(codec_id=1, dtype=2, ndim=1, count=4, shape=(4,), magic=b"MPCC", version=1):
    return struct.pack("<4sBBBBQ", magic, version, codec_id, dtype, ndim, count) \
        + struct.pack(f"<{len(shape)}Q", *shape)


@pytest.mark.parametrize("frame", [
    b"", b"MPC", b"MPCC\x01", header(magic=b"XPCC") + bytes(8), header(version=2) + bytes(8),
    header(codec_id=99) + bytes(8), header(dtype=9) + bytes(8),
    header(ndim=9, shape=(1,) * 9, count=1) + bytes(2), header(count=5) + bytes(8),
    header() + bytes(7), header() + bytes(9), header(count=0, shape=(0,)) + bytes(1),
    header(count=2**63, shape=(2**62, 2)) + bytes(8),
    header(count=2**60, shape=(2**60,)) + bytes(100),
    header(count=0, ndim=2, shape=(0, 2**64 - 1)), header(count=0, ndim=2, shape=(0, 2**61)),
    header(count=0, ndim=3, shape=(2**31, 0, 2**31)),
], ids=lambda f: f"{len(f)}B")
def test_malformed_headers_raise_codec_error(frame):
    with pytest.raises(CodecError):
        codecs.decode(frame)


@pytest.mark.parametrize("name", ["topk", "threshold", "int8"])
def test_encode_regions(name):
    """Frames of regions: a sparse codec's hold the array's selection, cut at the edges (top-k
    of the array, not of each region); another codec's are each region's own frame."""
    x = rand((1001,), np.float32)
    x[700:] *= 100  # the array's top 5% all lie in the last region
    edges = [0, 300, 700, 1001]
    params = {"topk": {"ratio": 0.05, "seed": 1}, "threshold": {"density": 0.05, "seed": 1}}
    frames = codecs.get(name, **params.get(name, {})).encode_regions(x, edges)
    whole = codecs.get(name, **params.get(name, {}))
    parts = np.concatenate([codecs.decode(f) for f in frames])
    if name == "int8":
        expected = np.concatenate([whole.decode(whole.encode(x[lo:hi]))
                                   for lo, hi in zip(edges, edges[1:])])
    else:
        expected = whole.decode(whole.encode(x))
        assert not parts[:700].any()  # nothing selected where the array's top k are not
    np.testing.assert_array_equal(parts, expected)


@pytest.mark.parametrize("name", ["topk", "threshold"])
def test_encode_kept_says_what_the_frame_sends(name):
    """The frame ``encode`` gives, and the indices and values it holds: what error feedback
    subtracts without reading the frame back."""
    x = rand((40, 25), np.float32)
    frame, kept, sent = codecs.get(name, seed=4).encode_kept(x)
    assert np.array_equal(frame, codecs.get(name, seed=4).encode(x))
    decoded = codecs.decode(frame).reshape(-1)
    assert np.array_equal(decoded[kept], sent.astype(np.float32))
    assert np.count_nonzero(decoded) == kept.size == sent.size


def test_varints_round_trip_at_every_length():
    """Every length from 1 to 9 bytes, its edges, and random values, in one stream."""
    from mpicoll.codecs.sparse import varint_decode, varint_encode
    edges = [0, 1, 127, 128, 16383, 16384] + [(1 << b) - 1 for b in range(14, 64, 7)] \
        + [1 << b for b in range(14, 63, 7)] + [(1 << 63) - 1]
    values = np.concatenate([np.array(edges, np.uint64),
                             np.random.default_rng(3).integers(0, 1 << 63, 1000, np.uint64)])
    stream = varint_encode(values)
    assert np.array_equal(varint_decode(stream, values.size), values)
    assert stream.size == sum(max(1, -(-int(v).bit_length() // 7)) for v in values)


@pytest.mark.parametrize("names", [("topk",) * 4, ("threshold",) * 3, ("fp16",) * 2,
                                   ("topk", "fp16", "topk")])
@pytest.mark.parametrize("n", [0, 1, 1000, (1 << 18) * 2 + 77])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_decode_sum_is_decode_then_decode_adds_bit_for_bit(names, n, dtype):
    """The sparse codecs' one pass over ``out`` (a chunk at a time, beyond one chunk here) gives
    the bits of decode + decode_add in order, -0.0 (of the dense frames) and entries that
    several frames keep included; mixed codecs (a region switched to dense) go frame by frame."""
    rng = np.random.default_rng(n)
    frames = []
    for r, name in enumerate(names):
        x = rng.standard_normal(n).astype(dtype)
        x[::7] = -0.0
        frames.append(codecs.get(name).encode(x if r else -x))
    expected = codecs.decode(frames[0]).reshape(-1).copy()
    for frame in frames[1:]:
        codecs.decode_add(frame, expected)
    out = np.full(n, np.nan, dtype)
    assert codecs.decode_sum(frames, out) is out
    assert out.tobytes() == expected.tobytes()
    if len(set(names)) == 1:
        again = np.full(n, 7.0, dtype)
        codecs.get(names[0]).decode_sum(frames, again)
        assert again.tobytes() == expected.tobytes()


def test_decode_sum_checks_every_frame_before_writing():
    x = rand(100)
    frames = [codecs.get("topk").encode(x), codecs.get("topk").encode(x[:99])]
    out = np.full(100, 3.0, np.float32)
    with pytest.raises(CodecError, match="shape"):
        codecs.get("topk").decode_sum(frames, out)
    assert np.all(out == 3.0)
    with pytest.raises(CodecError, match="float32"):
        codecs.get("topk").decode_sum(frames[:1], np.zeros(100))
    with pytest.raises(ValueError, match="at least one"):
        codecs.decode_sum([], out)


@pytest.mark.parametrize("top", [1, 128, 16384, 1 << 21])
def test_gap_indices_one_sum_over_bytes_equals_varints_summed(top):
    """Gaps below 16384 take the one-sum path, any larger gap the varint decode: both give the
    indices the gaps encode, edges of the one- and two-byte lengths included."""
    from mpicoll.codecs.sparse import gap_indices, varint_encode
    rng = np.random.default_rng(top)
    gaps = np.concatenate([[0, 127, 128, min(top, 16383)], rng.integers(0, top, 5000)])
    gaps = rng.permutation(gaps).astype(np.uint64)
    expected = np.cumsum(gaps.astype(np.int64) + 1) - 1
    stream = varint_encode(gaps)
    assert np.array_equal(gap_indices(stream, gaps.size, int(expected[-1]) + 1), expected)
    with pytest.raises(CodecError):
        gap_indices(stream, gaps.size, int(expected[-1]))  # the last index == count
    with pytest.raises(CodecError):
        gap_indices(stream, gaps.size - 1, 1 << 62)
    with pytest.raises(CodecError):
        gap_indices(stream[:-1], gaps.size, 1 << 62)


def sparse_frame(k, stream, count=100, values=None, vcode=2):
    values = bytes(4 * k) if values is None else values
    return (header(codec_id=4, count=count, shape=(count,))
            + struct.pack("<QQB7x", k, len(stream), vcode) + values + bytes(stream))


@pytest.mark.parametrize("frame", [
    sparse_frame(1, [100]),                  # index == count
    sparse_frame(2, [98, 1]),                # 98, 100
    sparse_frame(1, [0x80, 0x00]),           # non-minimal varint
    sparse_frame(1, [0x80]),                 # truncated varint
    sparse_frame(1, [5, 5]),                 # two varints for k = 1
    sparse_frame(2, [5]),                    # one varint for k = 2
    sparse_frame(1, [0xFF] * 9 + [0x01]),    # varint longer than 63 bits
    sparse_frame(1, [0xFF] * 8 + [0x7F]),    # 2**63 - 1
    sparse_frame(101, [0] * 101),            # k > count
    sparse_frame(1, [5], vcode=7),           # unknown value dtype
    sparse_frame(1, [5], values=bytes(3)),   # short values
    sparse_frame(0, [0]),                    # stream bytes for k = 0
    sparse_frame(1, [5], count=2**40),       # 2**40 elements from a 50-byte frame
    sparse_frame(3, [0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x7F] * 3, count=2**63 - 1),
])
def test_malformed_sparse_frames_raise_codec_error(frame):
    with pytest.raises(CodecError):
        codecs.decode(frame)
    with pytest.raises(CodecError):
        codecs.get("topk").decode(frame)


def test_sparse_frame_with_large_count_decodes_into_out():
    frame = sparse_frame(1, [0xFF, 0x7F], count=2**23, values=np.float32([2.5]).tobytes())
    with pytest.raises(CodecError):
        codecs.decode(frame)  # would allocate 2**23 elements from a 50-byte frame
    acc = np.zeros(2**23, np.float32)
    codecs.decode_add(frame, acc)
    assert acc[2**14 - 1] == 2.5 and np.count_nonzero(acc) == 1


def test_sign_rejects_padding_bits():
    frame = bytearray(codecs.get("sign").encode(rand(10)))
    frame[-1] |= 0x80
    with pytest.raises(CodecError):
        codecs.decode(frame)


def test_int8_rejects_zero_block():
    frame = bytearray(codecs.get("int8").encode(rand(10)))
    frame[24:28] = bytes(4)
    with pytest.raises(CodecError):
        codecs.decode(frame)


@pytest.mark.parametrize("name, offset", (("int8", 28), ("sign", 28), ("topk", 41),
                                          ("threshold", 47)))
def test_reserved_header_bytes_must_be_zero(name, offset):
    frame = bytearray(codecs.get(name).encode(rand(10)))
    codecs.decode(frame)
    frame[offset] = 1
    with pytest.raises(CodecError, match="reserved"):
        codecs.decode(frame)


@pytest.mark.parametrize("name", ["topk", "threshold"])
def test_kept_nbytes_sizes_the_frames_without_building_them(name):
    """The whole frame and the frames cut at the edges, sized from the kept indices alone, are
    the frames that get built (sparse-auto exchanges these sizes before building any), and the
    cut frames decode to what the whole one does."""
    rng = np.random.default_rng(7)
    for trial in range(60):
        n, p = int(rng.integers(1, 3000)), int(rng.integers(1, 7))
        value_dtype = ("float16", None)[trial % 2]
        codec = codecs.get(name, value_dtype=value_dtype,
                           **({"ratio": (0.001, 0.05, 1.0)[trial % 3]} if name == "topk"
                              else {"density": (0.01, 0.3)[trial % 2]}))
        x = (rng.standard_normal(n) * (1, 3e3)[trial % 2]).astype(("f2", "f4", "f8")[trial % 3])
        x[:n // 3 if trial % 5 == 0 else 0] = 0
        edges = [n * r // p for r in range(p + 1)]
        kept, sent = codec.select_kept(x)
        whole, regions = codec.kept_nbytes(x, kept, sent, edges)
        frame, cut = codec.frames_kept(x, kept, sent), codec.frames_kept(x, kept, sent, edges)
        assert (whole, regions) == (frame.size, [f.size for f in cut])
        parts = np.concatenate([codecs.decode(f) for f in cut])
        assert np.array_equal(codecs.decode(frame), parts, equal_nan=True)
