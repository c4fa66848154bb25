"""Compressed allreduce cases, run on every rank under mpiexec (see tests/test_compressed.py).

Lossy results cannot equal MPI's bit for bit; they must be the same bits on every rank, within
each codec's error bound of MPI's exact sum, and with error feedback nothing may be lost:
result + sum of residuals == sum of what was given.
"""

import dataclasses
import os
import time

import numpy as np
import pytest
from helpers import WORLD, assert_everywhere, environment, native, same_on_all_ranks

import mpicoll
from mpicoll import codecs, costmodel, timing, tune
from mpicoll.algorithm import names

DENSE_ALGORITHMS = list(names(compresses="dense"))  # every algorithm that runs dense codecs
ALGORITHMS = DENSE_ALGORITHMS + ["auto"]
# a sparse codec runs a sparse algorithm whatever compressing algorithm is asked for;
# sparse-regions encodes region sums again, so it has cases of its own
REGIONS = "sparse-regions"
SPARSE_ALGORITHMS = DENSE_ALGORITHMS + [a for a in names(compresses="sparse") if a != REGIONS] \
    + ["auto"]
DENSE = {"fp16": 2e-3, "bf16": 2e-2, "int8": 3e-2}  # relative L2 error bounds on normal data
SPARSE = ["topk", "threshold"]


def normal(count, seed=0, dtype="f4"):
    return np.random.default_rng([WORLD.Get_rank(), count, seed]).standard_normal(count).astype(dtype)


def rel_error(out, ref):
    return float(np.linalg.norm(out - ref) / max(np.linalg.norm(ref), 1e-30))


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize("name", list(DENSE))
@pytest.mark.parametrize("dtype", ["f4", "f8"])
def test_dense_codecs_agree_and_stay_close(algorithm, name, dtype):
    p = WORLD.Get_size()
    for count in (0, 1, p - 1, p + 1, 1000, 100_003):
        for inplace in (False, True):
            x = normal(count, dtype=dtype)
            ref = native(WORLD, x, "sum")
            out = mpicoll.allreduce(x, x if inplace else None, codec=name, algorithm=algorithm)
            agree = same_on_all_ranks(WORLD, out)
            assert agree, f"ranks differ ({name}, {algorithm}, count={count})"
            err = rel_error(out, ref) if count else 0.0
            assert_everywhere(WORLD, err <= DENSE[name] or p == 1 and err == 0,
                              f"{name} error {err:.2e} > {DENSE[name]} at count {count}")


@pytest.mark.parametrize("algorithm", SPARSE_ALGORITHMS)
@pytest.mark.parametrize("name", SPARSE)
def test_sparse_codecs_keep_the_largest_values(algorithm, name):
    """Top-10% of each rank: the result equals the exact sum of every rank's kept values."""
    x = normal(20_000)
    codec = codecs.get(name, **({"ratio": 0.1} if name == "topk" else {"density": 0.1}))
    kept = codec.decode(codec.encode(x)) if name == "topk" else None  # threshold is stateful
    with timing.recording() as rec:
        out = mpicoll.allreduce(x, codec=codec, algorithm=algorithm)
    assert same_on_all_ranks(WORLD, out)
    if WORLD.Get_size() == 1:  # nothing travels, so nothing is compressed
        assert np.array_equal(out, x)
    elif kept is not None:
        ref = native(WORLD, kept.astype("f4"), "sum")
        assert_everywhere(WORLD, np.allclose(out, ref, rtol=1e-6, atol=1e-6), "not the kept values' sum")
    assert rec.records[0].codec == name


def test_sparse_falls_back_to_dense_when_frames_outweigh_it():
    """Frames of every value (4-byte values + index bytes) outweigh a dense ring's 2·n bytes at
    any p >= 2: the exact ring runs instead, and says so."""
    x = normal(5000)
    with timing.recording() as rec:
        out = mpicoll.allreduce(x, codec=codecs.get("topk", ratio=1.0, value_dtype=None))
    ref = native(WORLD, x, "sum")
    if WORLD.Get_size() > 1:
        assert rec.records[0].codec == "topk:dense-fallback"
        assert_everywhere(WORLD, np.allclose(out, ref, rtol=1e-5, atol=1e-5), "fallback not exact")


@pytest.mark.parametrize("name", SPARSE)
def test_sparse_regions_sends_and_owes_the_sum(name):
    """Every rank the same bits; with error feedback, result + Σ residuals == Σ (x + old
    residual), step after step: what the second encode drops, the region's owner owes."""
    ef = codecs.ErrorFeedback(codecs.get(name))
    owed = np.zeros(30_001, "f8")
    for step in range(3):
        x = normal(30_001, seed=step, dtype="f8")
        given = native(WORLD, x + owed, "sum")
        with timing.recording() as rec:
            out = mpicoll.allreduce(x, codec=ef, algorithm=REGIONS)
        assert_everywhere(WORLD, same_on_all_ranks(WORLD, out), "ranks differ")
        owed = ef.residual.copy()
        total = native(WORLD, owed, "sum")
        assert_everywhere(WORLD, np.allclose(out + total, given, rtol=0, atol=1e-9),
                          f"step {step}: lost {np.abs(out + total - given).max()}")
        assert rec.records[0].algorithm == REGIONS and rec.records[0].codec == f"{name}+ef"


def test_sparse_regions_is_exact_when_every_rank_keeps_the_same_elements():
    """Values on every 8th element of every rank and top-1/8 kept: each region's sum has the
    same support, so the second encode drops nothing: the exact sum (small integers in
    float32, sent as float32), on every rank."""
    n = 8 * 1234 + 5
    x = np.zeros(n, "f4")
    x[::8] = np.arange(x[::8].size) % 7 + 1 + WORLD.Get_rank()
    for inplace in (False, True):
        given = x.copy()
        out = mpicoll.allreduce(given, given if inplace else None, algorithm=REGIONS,
                                codec=codecs.get("topk", ratio=0.125, value_dtype=None))
        assert_everywhere(WORLD, np.array_equal(out, native(WORLD, x, "sum")),
                          f"not the exact sum (in place: {inplace})")


def test_a_region_that_filled_in_goes_dense_and_owes_the_rest():
    """Top 40% of float64, sent as float64: each region's sum keeps 40% of its elements at about
    9 bytes each, more than fp16's 2 a value: its owner sends the region as fp16, every rank
    decodes each frame with its own codec and the record says so; with error feedback what fp16
    lost is owed. (From 5 ranks the first frames already outweigh the dense ring's 2·n: the
    fallback.)"""
    codec = codecs.get("topk", ratio=0.4, value_dtype=None)
    ef = codecs.ErrorFeedback(codecs.get("topk", ratio=0.4, value_dtype=None))
    x = normal(20_000, dtype="f8")
    given = native(WORLD, x, "sum")
    for c, spec in ((codec, "topk"), (ef, "topk+ef")):
        with timing.recording() as rec:
            out = mpicoll.allreduce(x, codec=c, algorithm=REGIONS)
        assert_everywhere(WORLD, same_on_all_ranks(WORLD, out), "ranks differ")
        p = WORLD.Get_size()
        path = spec if p == 1 else f"{spec}:dense-regions" if p <= 4 else f"{spec}:dense-fallback"
        assert rec.records[0].codec == path, rec.records[0].codec
    total = native(WORLD, ef.residual, "sum")
    assert_everywhere(WORLD, np.allclose(out + total, given, rtol=0, atol=1e-9),
                      f"lost {np.abs(out + total - given).max()}")


def links_model(tmp, name, alpha, beta):
    """A tuning file like the built-in model but with links of ``alpha`` s and ``beta`` s/B."""
    path = os.path.join(tmp, name)
    model = dataclasses.replace(costmodel.BUILTIN, alpha={"local": alpha, "remote": alpha},
                                beta={"local": beta, "remote": beta})
    tune.save(path, model, WORLD.Get_size(), 1, "test")
    return path


@pytest.mark.parametrize("links, expected", [((1.0, 1e-10), "sparse-allgather"),
                                             ((1e-6, 1e-3), "sparse-regions")])
def test_sparse_auto_takes_the_path_rank_0s_model_predicts(links, expected, tmp_path_factory):
    """Only rank 0 reads the tuning file: with slow latency (allgather posts fewest messages)
    or slow bytes (from 3 ranks regions move fewest), every rank takes the same path, says so,
    and ends with
    the same bits; what was sent plus what all owe is what was given. The allgather of region
    frames gives sparse-allgather's own bits, result and residual."""
    path = WORLD.bcast(links_model(str(tmp_path_factory.mktemp("m")), "links.json", *links)
                       if WORLD.Get_rank() == 0 else None)
    ef, alone = (codecs.ErrorFeedback(codecs.get("topk", ratio=0.05)) for _ in range(2))
    tuning = {"MPICOLL_TUNING": path} if WORLD.Get_rank() == 0 else {}
    for step in range(2):
        x = normal(30_001, seed=step)
        given = native(WORLD, x.astype("f8") + ef.owed(x), "sum")
        with environment(**tuning), timing.recording() as rec:
            out = mpicoll.allreduce(x, codec=ef, algorithm="auto")
        p, ran = WORLD.Get_size(), rec.records[0].algorithm
        if p == 1:
            assert ran == "ring"  # a lone rank copies
        elif p == 2 and expected == "sparse-regions":  # two ranks: both move one frame's bytes
            assert ran in ("sparse-allgather", "sparse-regions")
        else:
            assert ran == expected, ran
        assert_everywhere(WORLD, same_on_all_ranks(WORLD, out), "ranks differ")
        total = native(WORLD, ef.residual.astype("f8"), "sum")
        assert_everywhere(WORLD, np.allclose(out + total, given, rtol=0, atol=1e-4),
                          f"step {step}: lost {np.abs(out + total - given).max()}")
        if expected == "sparse-allgather":
            ref = mpicoll.allreduce(x, codec=alone, algorithm="sparse-allgather")
            assert_everywhere(WORLD, np.array_equal(out, ref)
                              and np.array_equal(ef.residual, alone.residual),
                              "not sparse-allgather's bits")


def test_sparse_auto_without_error_feedback_is_the_allgather():
    """Regions would drop what their second encode loses: without error feedback to owe it,
    auto runs sparse-allgather, the exact sum of every rank's kept values."""
    x = normal(30_001)
    codec = codecs.get("topk", ratio=0.05)
    with timing.recording() as rec:
        out = mpicoll.allreduce(x, codec=codec, algorithm="sparse-auto")
    ref = mpicoll.allreduce(x, codec=codec, algorithm="sparse-allgather")
    if WORLD.Get_size() > 1:
        assert rec.records[0].algorithm == "sparse-allgather"
    assert_everywhere(WORLD, np.array_equal(out, ref), "not sparse-allgather's bits")


def test_sparse_regions_fall_back_to_dense_for_tiny_arrays():
    """Three elements on up to five ranks (empty regions): the frames outweigh a dense ring."""
    x = normal(3)
    with timing.recording() as rec:
        out = mpicoll.allreduce(x, codec="topk", algorithm=REGIONS)
    if WORLD.Get_size() > 1:
        assert rec.records[0].codec == "topk:dense-fallback"
    assert_everywhere(WORLD, np.allclose(out, native(WORLD, x, "sum"), rtol=1e-5, atol=1e-6),
                      "fallback not exact")


def test_error_feedback_with_a_tiny_frame_of_a_large_array():
    """A frame far smaller than its array (5 values of 4 Mi + 1 elements): charging what it did
    not send to the residual must not decode it as an untrusted frame (decode without out=
    refuses frames that claim that many elements; top-k + error feedback raised there)."""
    n = (1 << 22) + 1
    ef = codecs.ErrorFeedback(codecs.get("topk", ratio=1e-6))
    x = normal(n)
    out = mpicoll.allreduce(x, codec=ef)
    total = native(WORLD, ef.residual.astype("f8"), "sum")
    given = native(WORLD, x.astype("f8"), "sum")
    assert_everywhere(WORLD, np.allclose(out + total, given, rtol=0, atol=1e-4),
                      "what was sent and what is owed do not add up")


def test_error_feedback_owes_nothing_after_the_dense_fallback():
    """The exact ring carried everything owed: the residual is zero after it, every step."""
    ef = codecs.ErrorFeedback(codecs.get("topk", ratio=1.0, value_dtype=None))
    for step in range(2):
        x = normal(5000, seed=step)
        with timing.recording() as rec:
            out = mpicoll.allreduce(x, codec=ef)
        if WORLD.Get_size() > 1:
            assert rec.records[0].codec == "topk+ef:dense-fallback", rec.records[0].codec
            assert_everywhere(WORLD, not ef.residual.any(), f"step {step}: still owed")
        assert_everywhere(WORLD, np.allclose(out, native(WORLD, x, "sum"), rtol=1e-5,
                                             atol=1e-5), f"step {step}: not the exact sum")


@pytest.mark.parametrize("name", ["int8", "fp16", "sign", "topk"])
@pytest.mark.parametrize("algorithm", DENSE_ALGORITHMS)
def test_error_feedback_loses_nothing(name, algorithm):
    """result + Σ residuals == Σ (x + old residual), step after step."""
    ef = codecs.ErrorFeedback(codecs.get(name))
    owed = np.zeros(3001, "f8")
    for step in range(4):
        x = normal(3001, seed=step, dtype="f8")
        given = native(WORLD, x + owed, "sum")
        out = mpicoll.allreduce(x, codec=ef, algorithm=algorithm)
        owed = ef.residual.copy()
        total = native(WORLD, owed, "sum")
        assert_everywhere(WORLD, np.allclose(out + total, given, rtol=0, atol=1e-9),
                          f"step {step}: lost {np.abs(out + total - given).max()}")


def test_average_predivides():
    """fp16 sums of values near its maximum overflow; dividing first keeps them finite."""
    x = np.full(1000, 60000.0, "f4")
    out = mpicoll.allreduce(x, op="avg", codec="fp16")
    assert_everywhere(WORLD, np.isfinite(out).all() and np.allclose(out, 60000, rtol=1e-3),
                      "average overflowed")
    plain = mpicoll.allreduce(normal(77), op="avg")
    assert_everywhere(WORLD, np.allclose(plain, native(WORLD, normal(77), "sum") / WORLD.Get_size(),
                                         rtol=1e-5, atol=1e-6), "avg != sum / p")


def test_requests_with_codecs_in_flight_together():
    """A sparse request has two stages; its second must not take a tag another request took.
    Ranks start at skewed times, so that some finish a first stage before others start."""
    for trial in range(10):
        time.sleep(1e-4 * ((WORLD.Get_rank() * 7 + trial) % 5))
        xs = [normal(n, seed=n) for n in (10_000, 7, 4096, 300)]
        reqs = [mpicoll.iallreduce(x, codec=c) for x, c in zip(xs, ["int8", "topk", "fp16", "topk"])]
        while not all([r.test() for r in reqs]):
            pass
        outs = [r.wait() for r in reqs]
        assert all(same_on_all_ranks(WORLD, o) for o in outs)
        assert [r.codec.split(":")[0] for r in reqs] == ["int8", "topk", "fp16", "topk"]  # 7 values: fallback


def test_codec_from_the_environment():
    x = normal(1000)
    with environment(MPICOLL_CODEC="fp16"), timing.recording() as rec:
        mpicoll.allreduce(x)                      # float sum: compressed
        mpicoll.allreduce(np.arange(5))           # integers: a codec cannot apply, so none does
    assert [r.codec for r in rec.records] == ["fp16", ""]


BAD = [
    ("integers", dict(sendbuf=np.arange(10), codec="fp16"), TypeError),
    ("complex", dict(sendbuf=np.ones(10, "c8"), codec="fp16"), TypeError),
    ("max", dict(sendbuf=np.ones(10, "f4"), op="max", codec="int8"), ValueError),
    ("tree", dict(sendbuf=np.ones(10, "f4"), algorithm="tree", codec="int8"), ValueError),
    ("unknown", dict(sendbuf=np.ones(10, "f4"), codec="zip"), ValueError),
    ("object", dict(sendbuf=np.ones(10, "f4"), codec=3), TypeError),
]


@pytest.mark.parametrize("case, kwargs, error", BAD, ids=[c[0] for c in BAD])
def test_bad_codec_use_raises_before_sending(case, kwargs, error):
    with pytest.raises(error):
        mpicoll.allreduce(**kwargs)
    x = np.ones(4, "f4")
    assert np.array_equal(mpicoll.allreduce(x), native(WORLD, x, "sum"))
