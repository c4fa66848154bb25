"""The algorithm contract and registry, in one process: capabilities decide, not names."""

from __future__ import annotations

import numpy as np
import pytest

import mpicoll
from mpicoll import api, codecs, ops
from mpicoll.algorithm import Algorithm, Layout, UnknownAlgorithmError, get, names, register, registry, select
from mpicoll.local import Buffers, run_local
from mpicoll.schedule import Region

ONE_NODE = Layout(0, 4, ((0, 1, 2, 3),))
TWO_NODES = Layout(0, 4, ((0, 1), (2, 3)))


def noop_plan(b, layout, count, options, src, frames):
    pass


def test_public_names_come_from_the_registry():
    assert mpicoll.algorithms() == names() + ("auto",)
    assert {"ring", "tree", "hybrid"} <= set(names(plain=True))
    assert "sparse-allgather" in names(compresses="sparse")
    assert "sparse-allgather" not in names(plain=True)
    assert "tree" not in names(compresses="dense")


def test_duplicate_and_reserved_names_are_refused():
    before = registry.registered()
    with pytest.raises(ValueError, match="already registered"):
        register(Algorithm("ring", "a second ring", plan=noop_plan))
    with pytest.raises(ValueError, match="already registered"):
        register(Algorithm("auto", "not a name", plan=noop_plan))
    with pytest.raises(TypeError):
        register("ring")  # type: ignore[arg-type]
    assert registry.registered() == before


def test_unknown_algorithm_is_a_value_error_naming_the_choices():
    with pytest.raises(UnknownAlgorithmError, match="choose one of") as error:
        get("butterfly")
    assert isinstance(error.value, ValueError) and "ring" in str(error.value)
    with pytest.raises(ValueError, match="butterfly"):
        mpicoll.allreduce(np.ones(3), algorithm="butterfly")


def test_an_algorithm_has_a_plan_or_a_run_and_known_codec_kinds():
    with pytest.raises(ValueError, match="exactly one"):
        Algorithm("x", "neither")
    with pytest.raises(ValueError, match="compresses"):
        Algorithm("x", "bad kind", plan=noop_plan, compresses=frozenset({"lossless"}))


def test_run_local_refuses_an_unknown_step():
    x = np.ones(4)
    bufs = Buffers(x, x.copy(), x[:0])
    with pytest.raises(TypeError, match="unknown schedule step"):
        run_local([Region("recv", 0, 4)], bufs, ops.resolve("sum"))


def test_auto_follows_capabilities():
    int8, topk = "dense", "sparse"
    for nbytes in (8, 1 << 20):
        for layout in (ONE_NODE, TWO_NODES):
            assert select.resolve("auto", nbytes, layout, int8).compresses >= {"dense"}
            assert not select.resolve("auto", nbytes, layout, None, native=False).name == "native"
            # an op that is not commutative cannot go round a ring: auto keeps rank order
            assert not select.resolve("auto", nbytes, layout, None, commutative=False).needs_commutative
    assert select.resolve("auto", 1 << 20, ONE_NODE, topk).name == "sparse-auto"
    assert select.resolve("ring", 1 << 20, ONE_NODE, topk).name == "sparse-auto"
    assert select.resolve("ring", 8, Layout(0, 1, ((0,),)), topk).name == "ring"  # nothing travels


def test_what_cannot_run_is_refused_before_anything_is_sent():
    f4, total = np.dtype("f4"), ops.resolve("sum")
    with pytest.raises(ValueError, match="tree does not compress dense codecs"):
        api.check_codec("int8", f4, total, "tree")
    with pytest.raises(ValueError, match="tree does not compress sparse codecs"):
        api.check_codec(codecs.get("topk"), f4, total, "tree")
    with pytest.raises(ValueError, match="sparse-allgather does not compress dense codecs"):
        api.check_codec("fp16", f4, total, "sparse-allgather")
    with pytest.raises(ValueError, match="runs only with a codec"):
        mpicoll.allreduce(np.ones(3, "f4"), algorithm="sparse-allgather")
    first = ops.Op("first", ops.resolve("sum").mpi, np.add, commutative=False)
    with pytest.raises(ValueError, match="not commutative"):
        mpicoll.allreduce(np.ones(3), op=first, algorithm="ring")


def test_tune_candidates_are_the_plain_algorithms():
    from mpicoll import tune
    assert tune.candidates() == names(plain=True)


def test_sparse_auto_predicts_by_hand():
    """Two ranks' frames of 1000 bytes (500 per region), 10**6 elements, links of 1 ms and 1 µs
    a byte: the allgather moves one frame (1 ms + 1 ms) and parses both; regions move half a
    frame each way, exchange lengths (two 1 ms latencies), gather the regions' sums made sparse
    again (taken as all first frames / p: 1000 bytes, 500 from the other rank), parse a region's
    frames and the reduced ones, and encode half the elements again."""
    from mpicoll.algorithm import sparse_auto as s
    wholes, lengths = np.array([1000, 1000]), np.array([[500, 500], [500, 500]])
    times = s.predict(wholes, lengths, 10**6, 1e-3, 1e-6)
    assert times["sparse-allgather"] == pytest.approx(1e-3 + 1e-3 + s.PARSE * 2000 + s.FRAME * 2)
    regions = (1e-3 + 500e-6) + 2e-3 + (1e-3 + 500e-6) \
        + s.PARSE * (1000 + 1000) + s.FRAME * 4 + s.SELECT * 500_000
    assert times["sparse-regions"] == pytest.approx(regions)
