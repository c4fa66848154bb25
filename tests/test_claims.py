"""benchmarks/claim_ring_tree.py (issue 14, claim 1): the figures it reads off the schedules
against values worked out by hand, so that the tool cannot drift from what ring and tree do.

Ring: 2(N-1) rounds, every rank sends and receives 2(N-1)/N of the message (count divisible by N).
Tree (tree.py): in-order binary tree, a node covering ranks [a, c) has children a+1 and the start
of the upper half, so N=4 is 0 -> {1, 3}, 1 -> {2}; N=5 is 0 -> {1, 3}, 1 -> {2}, 3 -> {4};
N=8 is 0 -> {1, 5}, 1 -> {2, 4}, 2 -> {3}, 5 -> {6, 7}. Every edge carries the message once up
(reduce) and once down (bcast): a rank sends and receives n per edge it has, so the root moves
2n each way and a rank with a parent and two children 3n. With S segments the root and leaves
have 2S rounds (receive S / send S), ranks with a parent and children 2S + 2 (one more round
each phase to forward the last segment).
"""

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

from mpicoll.algorithm import Layout, build_schedule, get
from mpicoll.topology import blocks

pytestmark = pytest.mark.mpi_free  # no MPI job: run under one MPI only (setup.cfg)

REPO = Path(__file__).resolve().parent.parent


def load_tool():
    """benchmarks/ is not a package; load the tool from its file."""
    spec = importlib.util.spec_from_file_location("claim_ring_tree",
                                                  REPO / "benchmarks" / "claim_ring_tree.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up here
    spec.loader.exec_module(module)
    return module


claims = load_tool()

COUNT = 840  # divisible by 2, 3, 4, 5 and 8
DTYPE = np.dtype(np.float32)
SEGMENT_BYTES = 210 * DTYPE.itemsize  # S = 4 segments of 210 elements
S = 4

# Per rank (sent, received in messages, rounds), worked out from tree.links by hand.
TREE = {
    2: [(1, 1, 2 * S), (1, 1, 2 * S)],
    3: [(2, 2, 2 * S), (1, 1, 2 * S), (1, 1, 2 * S)],
    4: [(2, 2, 2 * S), (2, 2, 2 * S + 2), (1, 1, 2 * S), (1, 1, 2 * S)],
    5: [(2, 2, 2 * S), (2, 2, 2 * S + 2), (1, 1, 2 * S), (2, 2, 2 * S + 2), (1, 1, 2 * S)],
    8: [(2, 2, 2 * S), (3, 3, 2 * S + 2), (2, 2, 2 * S + 2), (1, 1, 2 * S), (1, 1, 2 * S),
        (3, 3, 2 * S + 2), (1, 1, 2 * S), (1, 1, 2 * S)],
}


def nodes_of(size):
    return blocks(size, 1)


def figures(label, size, every_rank=False):
    return claims.figures(claims.VARIANTS[label], size, nodes_of(size), COUNT, DTYPE,
                          SEGMENT_BYTES, every_rank)


@pytest.mark.parametrize("size", [2, 3, 4, 5, 8])
def test_ring_figures_are_the_textbooks(size):
    share = 2 * (size - 1) * COUNT // size
    for rank in range(size):
        schedule = build_schedule(get("ring"), Layout(rank, size, nodes_of(size)), COUNT,
                                  claims.VARIANTS["ring"].options(COUNT, DTYPE, SEGMENT_BYTES))
        assert claims.traffic(schedule) == claims.Traffic(2 * (size - 1), share, share)
    for every_rank in (False, True):
        f = figures("ring", size, every_rank)
        assert (f.rounds, f.sent_max, f.recv_max) == (2 * (size - 1), share, share)
        assert f.sent_mean == f.recv_mean == share
        assert f.busiest == f.rank0 == 2 * share
    assert claims.chain(claims.VARIANTS["ring"], size, nodes_of(size), COUNT, DTYPE,
                        SEGMENT_BYTES, 10**6, 10**6) == 2 * (size - 1)


@pytest.mark.parametrize("size", sorted(TREE))
def test_tree_figures_follow_its_structure(size):
    expected = TREE[size]
    options = claims.VARIANTS["tree"].options(COUNT, DTYPE, SEGMENT_BYTES)
    for rank, (sent, received, rounds) in enumerate(expected):
        schedule = build_schedule(get("tree"), Layout(rank, size, nodes_of(size)), COUNT, options)
        assert claims.traffic(schedule) == claims.Traffic(rounds, sent * COUNT, received * COUNT)
    total = sum(s for s, _, _ in expected)
    assert total == 2 * (size - 1)  # each edge once up, once down: the ring's total
    busiest = max(range(size), key=lambda r: expected[r][0] + expected[r][1])
    for every_rank in (False, True):  # the sampled classes stand for every rank exactly
        f = figures("tree", size, every_rank)
        assert f.rounds == max(r for _, _, r in expected)
        assert f.sent_max == f.recv_max == max(s for s, _, _ in expected) * COUNT
        assert f.sent_mean == f.recv_mean == pytest.approx(total * COUNT / size)
        assert f.busiest == 2 * expected[busiest][0] * COUNT
        assert f.rank0 == (4 if size > 2 else 2) * COUNT  # the root: 2n in and out (N=2: n)


def test_tree_chain_by_hand():
    """Critical path in rounds, worked out by hand: unsegmented, N=2 is 2 (send up, send down)
    and N=4 is 4 (2 -> 1 -> 0 -> 1 -> 2): 2·log2 N; with S segments N=2 takes 2S."""
    def chain(label, size):
        return claims.chain(claims.VARIANTS[label], size, nodes_of(size), COUNT, DTYPE,
                            SEGMENT_BYTES, 10**6, 10**6)
    assert chain("tree-1seg", 2) == 2
    assert chain("tree-1seg", 4) == 4
    assert chain("tree", 2) == 2 * S
    assert claims.chain(claims.VARIANTS["tree"], 8, nodes_of(8), COUNT, DTYPE, SEGMENT_BYTES,
                        10**6, 4) is None  # over the ranks allowed: not run


def test_samples_agree_with_every_rank_for_other_algorithms():
    for label in ("rd", "rabenseifner", "hybrid", "tree"):
        for size in (3, 6, 7, 12):
            some, every = figures(label, size), figures(label, size, every_rank=True)
            assert (some.rounds, some.sent_max, some.recv_max, some.busiest, some.rank0) == \
                (every.rounds, every.sent_max, every.recv_max, every.busiest, every.rank0), label
            assert some.sent_mean == pytest.approx(every.sent_mean)
