"""Every algorithm's schedules, run together in one process for 1..24 ranks (no MPI needed),
and rd and rabenseifner up to 64.

Checks the result against a NumPy reduction, that nothing deadlocks or races, that ranks agree
bit for bit, that algorithms that claim to keep operand order do, and that the message and byte
counts are those of the cost formulas.
"""

import dataclasses
import functools
import math

import numpy as np
import pytest

from mpicoll import ops
from mpicoll.algorithm import Layout, Options, build_schedule, get, hybrid, names, select, shm, tree
from mpicoll.schedule import Builder, Copy, Reduce, Region, Send, split
from mpicoll.simulate import ScheduleError, simulate

pytestmark = pytest.mark.mpi_free  # no MPI job: run under one MPI only (setup.cfg)

SUM = ops.resolve("sum")


def layouts(p):
    """One node; one rank per node; equal nodes of 2 and 3; unequal nodes."""
    yield (tuple(range(p)),)
    yield tuple((r,) for r in range(p))
    for k in (2, 3):
        yield tuple(tuple(range(lo, min(lo + k, p))) for lo in range(0, p, k))


def run(name, nodes, count, segment_bytes=1 << 18, dtype="f8", inplace=False):
    p = sum(len(n) for n in nodes)
    options = Options(segment_bytes, np.dtype(dtype).str)
    schedules = [build_schedule(name, Layout(r, p, nodes), count, options) for r in range(p)]
    rng = np.random.default_rng(count)
    inputs = [rng.integers(-5, 6, count).astype(dtype) for _ in range(p)]
    outs = simulate(schedules, inputs, SUM, inplace=inplace)
    return schedules, inputs, outs


@pytest.mark.parametrize("name", names(plain=True, planned=True))
@pytest.mark.parametrize("p", [1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 16, 17, 24])
def test_every_layout_and_count(name, p):
    for nodes in dict.fromkeys(layouts(p)):
        if get(name).one_node and len(nodes) > 1:
            continue
        for count in sorted({0, 1, p - 1, p, p + 1, 3 * p + 2, 101}):
            for inplace in (False, True):
                _, inputs, outs = run(name, nodes, count, segment_bytes=24, inplace=inplace)
                expected = np.sum(inputs, axis=0)
                for out in outs:
                    assert out.tobytes() == outs[0].tobytes()
                    np.testing.assert_array_equal(out, expected, err_msg=f"{nodes} count={count}")


@pytest.mark.parametrize("p", [2, 3, 4, 5, 8, 13])
def test_ring_moves_2_p_minus_1_over_p_of_the_data(p):
    count = 1000 * p
    schedules, _, _ = run("ring", (tuple(range(p)),), count)
    for s in schedules:
        assert s.messages == 2 * (p - 1)
        assert s.elements_sent == 2 * (p - 1) * count // p


@pytest.mark.parametrize("p", [2, 3, 4, 5, 8, 13, 16])
def test_tree_depth_is_logarithmic_and_root_carries_most(p):
    depth = 0
    for r in range(p):
        d, node = 0, r
        while (parent := tree.links(p, node)[0]) is not None:
            d, node = d + 1, parent
        depth = max(depth, d)
        assert len(tree.links(p, r)[1]) <= 2
    assert depth <= math.ceil(math.log2(p))
    count = 64
    schedules, _, _ = run("tree", (tuple(range(p)),), count)
    assert schedules[0].elements_sent == len(tree.links(p, 0)[1]) * count


def test_tree_pipelines_in_segments():
    count, segment_bytes = 1000, 800  # 100 float64 per segment -> 10 segments
    schedules, _, _ = run("tree", (tuple(range(4)),), count, segment_bytes=segment_bytes)
    leaf = next(s for r, s in enumerate(schedules) if not tree.links(4, r)[1])
    assert leaf.messages == 10


def test_hybrid_sends_less_between_nodes_than_ring(monkeypatch):
    """2 nodes x 4 ranks: rank j sends only its chunk (n/4) across, ring-allreduced: 2(N-1)/N · n/4,
    with its node stages under the messages of the inter-node ring (8 KiB chunks: 8 of them)."""
    monkeypatch.setattr(hybrid, "PIPELINE_BYTES", 8 << 10)
    nodes = (tuple(range(4)), tuple(range(4, 8)))
    count = 8000
    schedules, _, _ = run("hybrid", nodes, count)
    def node_of(r):
        return 0 if r < 4 else 1
    for r, s in enumerate(schedules):
        inter = sum(len(t.region) for rnd in s.rounds for t in rnd.transfers
                    if type(t).__name__ == "Send" and node_of(t.peer) != node_of(r))
        assert inter == 2 * (2 - 1) * (count // 4) // 2
        assert s.elements_sent == inter  # inside a node: the shared window, no messages
    # One pipeline: the node stages run under the ring's messages, never between them.
    assert schedules[0].phases == ("pipelined",)
    for s in schedules:
        node_reductions = [(step in rnd.overlap, bool(rnd.transfers)) for rnd in s.rounds
                           for step in rnd.overlap + rnd.local
                           if isinstance(step, Reduce) and step.left.buf == "node"]
        assert node_reductions and all(under for under, sending in node_reductions if sending)
        assert sum(under for under, _ in node_reductions) >= len(node_reductions) // 2


HALVING_DOUBLING = ["rd", "rabenseifner"]
FOLDED_SIZES = [1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 31, 33, 64]  # powers of two, and folds of 1 to 15 pairs


def one_node(name, p, count, inputs, op=SUM, inplace=False):
    options = Options(1 << 18, inputs[0].dtype.str)
    schedules = [build_schedule(name, Layout(r, p, (tuple(range(p)),)), count, options) for r in range(p)]
    return schedules, simulate(schedules, inputs, op, inplace=inplace)


def in_rank_order(values, op):
    """The expression rd and Rabenseifner evaluate: the first 2·rem ranks folded in pairs, then
    neighbouring blocks combined level by level, the lower block on the left."""
    rem = len(values) - (1 << (len(values).bit_length() - 1))
    level = [op(values[i], values[i + 1]) for i in range(0, 2 * rem, 2)] + list(values[2 * rem:])
    while len(level) > 1:
        level = [op(level[i], level[i + 1]) for i in range(0, len(level), 2)]
    return level[0]


@pytest.mark.parametrize("name", HALVING_DOUBLING)
@pytest.mark.parametrize("p", FOLDED_SIZES)
def test_halving_doubling_up_to_64_ranks(name, p):
    """Integers sum exactly whatever the order; random float32 sums do not, so every rank's bits
    must be those of the one expression in rank order."""
    for count in sorted({0, 1, p // 2, p - 1, p, p + 1, 3 * p + 2, 101}):
        for inplace in (False, True):
            rng = np.random.default_rng([p, count])
            exact = [rng.integers(-5, 6, count).astype("f4") for _ in range(p)]
            _, outs = one_node(name, p, count, exact, inplace=inplace)
            for out in outs:
                np.testing.assert_array_equal(out, np.sum(exact, axis=0), err_msg=f"count={count}")
            rounded = [rng.standard_normal(count).astype("f4") for _ in range(p)]
            _, outs = one_node(name, p, count, rounded, inplace=inplace)
            expected = in_rank_order(rounded, np.add).tobytes()
            assert all(out.tobytes() == expected for out in outs), f"count={count}"


MODULUS = 2**25 - 39  # a prime: products of two residues stay exact in float64


def compose(left, right, out):
    """Affine maps x -> m·x + v modulo a prime, stored as m + v·i: left's map, then right's.
    Associative, not commutative, and any two orders of random maps differ."""
    factor = np.mod(left.real * right.real, MODULUS)
    offset = np.mod(left.imag * right.real + right.imag, MODULUS)
    out.real, out.imag = factor, offset
    return out


COMPOSE = ops.Op("compose", SUM.mpi, compose, commutative=False)


@pytest.mark.parametrize("name", [n for n in names(plain=True, planned=True)
                                  if not get(n).needs_commutative])
@pytest.mark.parametrize("p", FOLDED_SIZES)
def test_order_keeping_algorithms_keep_rank_order(name, p):
    """An algorithm that does not need a commutative op must reduce as x0 op x1 op ... op x(p-1)."""
    for count in sorted({1, p - 1, p + 1, 50}):
        rng = np.random.default_rng([p, count])
        inputs = [rng.integers(2, MODULUS, count) + 1j * rng.integers(0, MODULUS, count) for _ in range(p)]
        _, outs = one_node(name, p, count, inputs, op=COMPOSE)
        expected = functools.reduce(lambda a, b: compose(a, b, np.empty_like(a)), inputs)
        for out in outs:
            np.testing.assert_array_equal(out, expected, err_msg=f"count={count}")


@pytest.mark.parametrize("p", FOLDED_SIZES[1:])
def test_rd_sends_everything_lg_p_times(p):
    """lg p′ messages of n; a rank that hands its data over sends one, its partner one more."""
    count, pof2 = 1000, 1 << (p.bit_length() - 1)
    rem, lg = p - pof2, pof2.bit_length() - 1
    schedules, _ = one_node("rd", p, count, [np.ones(count) for _ in range(p)])
    for r, s in enumerate(schedules):
        paired, hands_over = r < 2 * rem, r < 2 * rem and r % 2 == 0
        messages = 1 if hands_over else lg + paired
        assert (s.messages, s.elements_sent) == (messages, messages * count), r
        assert s.phases == (("fold", "unfold") if hands_over else ("fold", "exchange", "unfold")
                            if paired else ("exchange",))


@pytest.mark.parametrize("p", FOLDED_SIZES[1:])
def test_rabenseifner_moves_2_p_minus_1_over_p_in_2_lg_p_messages(p):
    pof2 = 1 << (p.bit_length() - 1)
    rem, lg, count = p - pof2, pof2.bit_length() - 1, 1000 * pof2
    schedules, _ = one_node("rabenseifner", p, count, [np.ones(count) for _ in range(p)])
    for r, s in enumerate(schedules):
        if r < 2 * rem and r % 2 == 0:  # hands its data over, gets the result back
            assert (s.messages, s.elements_sent) == (1, count)
            continue
        paired = r < 2 * rem  # sends the result back too
        assert s.messages == 2 * lg + paired
        assert s.elements_sent == 2 * (pof2 - 1) * count // pof2 + paired * count
        assert "reduce-scatter" in s.phases and "allgather" in s.phases


@pytest.mark.parametrize("name, per_node, p", [
    (name, per_node, p) for name, per_node in [("shm", None), ("hybrid", 2), ("hybrid", 3),
                                               ("hybrid", None)]
    for p in [2, 3, 4, 5, 6, 9] if not per_node or p % per_node == 0])
def test_shared_memory_pipelines_without_races_two_calls_in_a_row(monkeypatch, name, per_node, p):
    """Small chunks make many pipelined rounds; the simulator shares each node's window and
    fails on two ranks touching the same elements between the same barriers. Run twice in a
    row, it checks that one call's last rounds cannot race with the next call's first.
    (Nodes of unequal size go through node leaders, with messages.)"""
    monkeypatch.setattr(shm, "CHUNK_BYTES", 256)  # 32 float64 per input area
    monkeypatch.setattr(hybrid, "PIPELINE_BYTES", 128)  # hybrid's pipeline: finer than the areas
    k = per_node or p
    nodes = tuple(tuple(range(lo, lo + k)) for lo in range(0, p, k))
    for count in sorted({1, p + 1, 31, 32, 33, 500}):
        schedules = [build_schedule(name, Layout(r, p, nodes), count, Options(1, "<f8"))
                     for r in range(p)]
        assert all(s.messages == 0 for s in schedules) or len(nodes) > 1  # no messages in a node
        twice = [dataclasses.replace(s, rounds=s.rounds * 2) for s in schedules]
        rng = np.random.default_rng(count)
        inputs = [rng.integers(-5, 6, count).astype("f8") for _ in range(p)]
        for outs in (simulate(schedules, inputs, SUM), simulate(twice, inputs, SUM)):
            for out in outs:
                assert out.tobytes() == outs[0].tobytes()
                np.testing.assert_array_equal(out, np.sum(inputs, axis=0))
        window = schedules[0].node_count * 8 // k  # bytes per rank: bounded, whatever the count
        assert window <= (2 + 4 / k) * shm.CHUNK_BYTES + 6 * 64


def test_spans_fill_window_areas_without_overflow():
    """shm.Spans: every chunk of the spans holds at most an area's elements, with the fewest
    chunks that do; more non-empty spans than an area holds is a clear error."""
    rng = np.random.default_rng(0)
    for _ in range(300):
        starts = np.cumsum(rng.integers(0, 50, int(rng.integers(1, 9))))
        spans = [(int(lo), int(lo + n)) for lo, n in zip(starts, rng.integers(0, 80, starts.size))]
        room = int(rng.integers(sum(hi > lo for lo, hi in spans) or 1, 100))
        chunks = shm.Spans.chunks(spans, room)
        def fullest(k):
            cut = shm.Spans(spans, k)
            return max(sum(r.stop - r.start for r, _ in cut.chunk(j)) for j in range(k))
        assert fullest(chunks) <= room
        assert chunks == 1 or fullest(chunks - 1) > room
        cut = shm.Spans(spans, chunks)
        assert sorted(x for j in range(chunks) for _, (lo, hi) in cut.chunk(j)
                      for x in range(lo, hi)) == sorted(x for lo, hi in spans for x in range(lo, hi))
    with pytest.raises(ValueError, match="3 spans do not fit a window area of 2 elements"):
        shm.Spans.chunks([(0, 1), (1, 2), (5, 9)], 2)


@pytest.mark.parametrize("p", [2, 3, 4, 5, 6])
def test_shared_memory_other_collectives_twice_in_a_row(monkeypatch, p):
    """shm's allgather and reduce_scatter (equal and uneven blocks, an empty one among them),
    bcast and reduce (every root, in place at the root too), in many pipelined rounds: exact,
    and no race between one call's last rounds and the next call's first."""
    monkeypatch.setattr(shm, "CHUNK_BYTES", 256)
    nodes = (tuple(range(p)),)
    rng = np.random.default_rng(p)

    def schedules(count, options, counts=None):
        once = [build_schedule("shm", Layout(r, p, nodes), count if counts is None else counts[r],
                               options) for r in range(p)]
        assert all(s.messages == 0 for s in once)
        return once, [dataclasses.replace(s, rounds=s.rounds * 2) for s in once]

    for count in sorted({0, 1, p + 1, 31, 32, 33, 500}):
        for sizes in ((count,) * p, tuple(int(n) for n in rng.integers(0, 40, p - 1)) + (0,)):
            inputs = [rng.integers(-5, 6, sum(sizes)).astype("f8") for _ in range(p)]
            for run_ in schedules(sum(sizes), Options(1, "<f8", "reduce_scatter", sizes)):
                outs = simulate(run_, inputs, SUM, recv_sizes=list(sizes))
                np.testing.assert_array_equal(np.concatenate(outs), np.sum(inputs, axis=0),
                                              err_msg=f"reduce_scatter {sizes}")
            blocks = [rng.integers(-5, 6, n).astype("f8") for n in sizes]
            for run_ in schedules(None, Options(1, "<f8", "allgather", sizes), sizes):
                for out in simulate(run_, blocks, SUM, recv_sizes=[sum(sizes)] * p):
                    np.testing.assert_array_equal(out, np.concatenate(blocks),
                                                  err_msg=f"allgather {sizes}")
        for root in range(p):
            inputs = [rng.integers(-5, 6, count).astype("f8") for _ in range(p)]
            for run_ in schedules(count, Options(1, "<f8", "bcast", root=root)):
                for out in simulate(run_, inputs, SUM, inplace=True):
                    np.testing.assert_array_equal(out, inputs[root], err_msg=f"bcast {root}")
            once, twice = schedules(count, Options(1, "<f8", "reduce", root=root))
            for run_, inplace in ((once, False), (twice, False), (once, True)):
                out = simulate(run_, inputs, SUM, inplace=inplace)[root]
                np.testing.assert_array_equal(out, np.sum(inputs, axis=0),
                                              err_msg=f"reduce {root} {inplace}")


@pytest.mark.parametrize("p", [2, 3, 4, 5, 6, 7, 9])
def test_hybrid_bcast_and_reduce_on_every_layout(monkeypatch, p):
    """hybrid's bcast and reduce (a binomial tree of node leaders, shared memory in each node),
    every root, on every layout, twice in a row: exact, no race; only the leaders send, a
    bcast's other leaders each receive the message once."""
    monkeypatch.setattr(shm, "CHUNK_BYTES", 256)
    rng = np.random.default_rng(p)
    for nodes in dict.fromkeys(layouts(p)):
        for count in sorted({0, 1, p + 1, 33, 500}):
            for root in range(p):
                inputs = [rng.integers(-5, 6, count).astype("f8") for _ in range(p)]
                leaders = {root if root in n else n[0] for n in nodes}
                for which in ("bcast", "reduce"):
                    once = [build_schedule("hybrid", Layout(r, p, nodes), count,
                                           Options(1, "<f8", which, root=root)) for r in range(p)]
                    twice = [dataclasses.replace(s, rounds=s.rounds * 2) for s in once]
                    for r, s in enumerate(once):
                        received = [t for rnd in s.rounds for t in rnd.transfers
                                    if type(t).__name__ == "Recv"]
                        assert r in leaders or not received
                        if which == "bcast" and count and len(nodes) > 1:
                            assert len(received) == (r in leaders and r != root)
                    if which == "bcast":
                        for out in simulate(twice, inputs, SUM, inplace=True):
                            np.testing.assert_array_equal(out, inputs[root], err_msg=f"{nodes}")
                        continue
                    for schedules, inplace in ((once, True), (twice, False)):
                        out = simulate(schedules, inputs, SUM, inplace=inplace)[root]
                        np.testing.assert_array_equal(out, np.sum(inputs, axis=0),
                                                      err_msg=f"reduce {nodes} {root}")


def test_a_missing_barrier_is_a_race():
    """The simulator's race check can fail: shm without the barrier before its copy-out."""
    p, nodes = 3, ((0, 1, 2),)
    schedules = [build_schedule("shm", Layout(r, p, nodes), 100, Options(1, "<f8")) for r in range(p)]
    last = schedules[0].rounds[-1]
    assert last.sync and not schedules[0].rounds[0].sync
    broken = [dataclasses.replace(s, rounds=s.rounds[:-1] + (dataclasses.replace(s.rounds[-1], sync=False),))
              for s in schedules]
    with pytest.raises(ScheduleError, match="race on the node window"):
        simulate(broken, [np.ones(100) for _ in range(p)], SUM)


def test_overlap_steps_touching_messages_in_flight_are_caught(monkeypatch):
    """The simulator's hazard check can fail: hybrid's pipeline with the ring's reductions
    (which read what the round receives) moved under the messages, and the compressed ring's
    decodes (which run under the other stream's messages) moved under their own."""
    monkeypatch.setattr(hybrid, "PIPELINE_BYTES", 64)
    p, nodes, count = 4, ((0, 1), (2, 3)), 100
    schedules = [build_schedule("hybrid", Layout(r, p, nodes), count, Options(1, "<f8"))
                 for r in range(p)]
    simulate(schedules, [np.ones(count) for _ in range(p)], SUM)
    broken = [dataclasses.replace(s, rounds=tuple(
        dataclasses.replace(rnd, overlap=rnd.overlap + rnd.local, local=()) if rnd.transfers
        else rnd for rnd in s.rounds)) for s in schedules]
    with pytest.raises(ScheduleError, match="while a message of"):
        simulate(broken, [np.ones(count) for _ in range(p)], SUM)
    from mpicoll import codecs
    from mpicoll.algorithm import Frames, compressed_ring
    monkeypatch.setattr(compressed_ring, "PIECE_BYTES", 8)  # (several streams, small sizes)
    int8 = codecs.get("int8")
    sizes = (30, 20, 0, 25)
    for collective, count_in, out in (("reduce_scatter", sum(sizes), list(sizes)),
                                      ("allgather", None, [sum(sizes)] * p)):
        options = Options(1 << 18, np.dtype("f8").str, collective, sizes)
        schedules = [build_schedule("ring", Layout(r, p, ((*range(p),),)),
                                    count_in or sizes[r], options, Frames(int8, np.dtype("f8")))
                     for r in range(p)]
        assert all(any(rnd.overlap for rnd in s.rounds) for s in schedules), collective
        inputs = [np.ones(count_in or sizes[r]) for r in range(p)]
        simulate(schedules, inputs, SUM, codec=int8, recv_sizes=out)
        def early(s):  # the steps of a step's message moved under that message
            rounds = list(s.rounds)
            i = next(i for i in range(len(rounds) - 1)
                     if rounds[i].transfers and rounds[i + 1].overlap)
            rounds[i] = dataclasses.replace(rounds[i],
                                            overlap=rounds[i].overlap + rounds[i + 1].overlap)
            rounds[i + 1] = dataclasses.replace(rounds[i + 1], overlap=())
            return dataclasses.replace(s, rounds=tuple(rounds))
        with pytest.raises(ScheduleError, match="while a message of"):
            simulate([early(s) for s in schedules], inputs, SUM, codec=int8, recv_sizes=out)


def test_split_spreads_remainders():
    assert split(0, 10, 4) == [(0, 3), (3, 6), (6, 8), (8, 10)]
    assert split(5, 7, 4) == [(5, 6), (6, 7), (7, 7), (7, 7)]
    sizes = [b - a for a, b in split(0, 1001, 7)]
    assert max(sizes) - min(sizes) <= 1


def test_auto_picks_the_fastest_prediction():
    """auto is the argmin of the cost model's predictions, MPI's own included; a lone rank
    copies (ring's schedule)."""
    assert select.choose(8, Layout(0, 1, ((0,),))) == "ring"
    for layout in (Layout(0, 4, ((0, 1, 2, 3),)), Layout(0, 4, ((0, 1), (2, 3))),
                   Layout(0, 6, ((0, 1, 2), (3, 4, 5)))):
        among = ("ring", "tree", "rd", "rabenseifner", "native")
        for nbytes in (8, 4096, 1 << 20, 64 << 20):
            times = select.predictions(nbytes, layout, among)
            assert select.choose(nbytes, layout, among) == min(among, key=times.__getitem__)


@pytest.mark.parametrize("piece", [None, 8, 24])
@pytest.mark.parametrize("name", names(compresses="dense"))
@pytest.mark.parametrize("codec", ["fp16", "int8", "sign"])
@pytest.mark.parametrize("p", [2, 3, 5, 8, 12])
def test_compressed_schedules_agree_and_lose_nothing_with_feedback(name, codec, p, piece,
                                                                   monkeypatch):
    """Dense-codec plans at many world sizes, in one stream and several: same bits everywhere, and
    with error feedback result + Σ residuals == Σ inputs (every lost bit is owed by the rank
    that lost it)."""
    from mpicoll import codecs
    from mpicoll.algorithm import Frames, compressed_ring
    if piece is not None:  # (pieces of 1 or 3 float64, up to MAX_STREAMS streams)
        monkeypatch.setattr(compressed_ring, "PIECE_BYTES", piece)
    c = codecs.get(codec)
    for nodes in dict.fromkeys(layouts(p)):
        for count in sorted({1, p - 1, p + 1, 1000}):
            options = Options(1 << 18, np.dtype("f8").str)
            schedules = [build_schedule(name, Layout(r, p, nodes), count, options, Frames(c, np.dtype("f8")),
                              feedback=True) for r in range(p)]
            rng = np.random.default_rng(count)
            inputs = [rng.standard_normal(count) for _ in range(p)]
            residuals = [np.zeros(count) for _ in range(p)]
            outs = simulate(schedules, inputs, SUM, codec=c, residuals=residuals)
            for out in outs:
                assert out.tobytes() == outs[0].tobytes()
            np.testing.assert_allclose(outs[0] + np.sum(residuals, axis=0), np.sum(inputs, axis=0),
                                       rtol=0, atol=1e-9)


@pytest.mark.parametrize("piece", [None, 8, 24])
@pytest.mark.parametrize("codec", ["fp16", "bf16", "int8"])
@pytest.mark.parametrize("p", [2, 3, 5, 8])
def test_compressed_reduce_scatter_and_allgather_lose_nothing_with_feedback(codec, p, piece,
                                                                            monkeypatch):
    """ring's compressed reduce_scatter and allgather (even and uneven blocks, an empty one
    among them; one stream and several): with error feedback, block c of the result on rank c plus
    every rank's residual there is the exact sum; an allgather's result is the same bits on
    every rank, each block its owner's input less what its owner now owes. Run twice: the
    second call delivers what the first owed."""
    from mpicoll import codecs
    from mpicoll.algorithm import Frames, compressed_ring
    if piece is not None:  # (pieces of 1 or 3 float64, up to MAX_STREAMS streams)
        monkeypatch.setattr(compressed_ring, "PIECE_BYTES", piece)
    c = codecs.get(codec)
    frames = Frames(c, np.dtype("f8"))
    rng = np.random.default_rng(p)
    for sizes in ((7,) * p, tuple(int(n) for n in rng.integers(0, 9, p)) + (0,) * 0):
        blocks = [(sum(sizes[:r]), sum(sizes[:r + 1])) for r in range(p)]
        total = sum(sizes)
        scatter = Options(1 << 18, np.dtype("f8").str, "reduce_scatter", sizes)
        schedules = [build_schedule("ring", Layout(r, p, ((*range(p),),)), total, scatter,
                                    frames, feedback=True) for r in range(p)]
        residuals = [np.zeros(total) for _ in range(p)]
        owed = np.zeros(total)
        for _ in range(2):
            inputs = [rng.standard_normal(total) for _ in range(p)]
            outs = simulate(schedules, inputs, SUM, codec=c, residuals=residuals,
                            recv_sizes=list(sizes))
            result = np.concatenate(outs)
            np.testing.assert_allclose(result + np.sum(residuals, axis=0),
                                       np.sum(inputs, axis=0) + owed, rtol=0, atol=1e-9)
            owed = np.sum(residuals, axis=0)
        gather = Options(1 << 18, np.dtype("f8").str, "allgather", sizes)
        schedules = [build_schedule("ring", Layout(r, p, ((*range(p),),)), sizes[r], gather,
                                    frames, feedback=True) for r in range(p)]
        residuals = [np.zeros(n) for n in sizes]
        owed = [np.zeros(n) for n in sizes]
        for _ in range(2):
            inputs = [rng.standard_normal(n) for n in sizes]
            outs = simulate(schedules, inputs, SUM, codec=c, residuals=residuals,
                            recv_sizes=[total] * p)
            assert all(out.tobytes() == outs[0].tobytes() for out in outs)
            for r, (lo, hi) in enumerate(blocks):
                np.testing.assert_allclose(outs[0][lo:hi] + residuals[r], inputs[r] + owed[r],
                                           rtol=0, atol=1e-9)
            owed = [residual.copy() for residual in residuals]


@pytest.mark.parametrize("p", [2, 3, 4, 5, 6, 8, 9, 12])
def test_hybrid_allgather_and_reduce_scatter_on_every_layout(monkeypatch, p):
    """hybrid's allgather and reduce_scatter (rings of same-local-rank peers between nodes,
    shared memory inside each node; ring's plan elsewhere), equal and uneven blocks, an empty
    one among them, blocks that take several chunks of the window, on every layout, twice in
    a row: every block where it belongs, exact, no race on the window."""
    monkeypatch.setattr(shm, "CHUNK_BYTES", 256)  # 32 float64 per input area
    rng = np.random.default_rng(p)

    def twice(schedules):
        return [dataclasses.replace(s, rounds=s.rounds * 2) for s in schedules]

    for nodes in dict.fromkeys(layouts(p)):
        for sizes in ((5,) * p, (23,) * p, tuple(int(n) for n in rng.integers(0, 40, p - 1)) + (0,)):
            total = sum(sizes)
            scatter = Options(1 << 18, np.dtype("f8").str, "reduce_scatter", sizes)
            scattering = [build_schedule("hybrid", Layout(r, p, nodes), total, scatter)
                          for r in range(p)]
            inputs = [rng.integers(-5, 6, total).astype("f8") for _ in range(p)]
            for run_ in (scattering, twice(scattering)):
                outs = simulate(run_, inputs, SUM, recv_sizes=list(sizes))
                np.testing.assert_array_equal(np.concatenate(outs), np.sum(inputs, axis=0),
                                              err_msg=f"reduce_scatter {nodes} {sizes}")
            gather = Options(1 << 18, np.dtype("f8").str, "allgather", sizes)
            schedules = [build_schedule("hybrid", Layout(r, p, nodes), sizes[r], gather)
                         for r in range(p)]
            inputs = [rng.integers(-5, 6, n).astype("f8") for n in sizes]
            for run_ in (schedules, twice(schedules)):
                for out in simulate(run_, inputs, SUM, recv_sizes=[total] * p):
                    np.testing.assert_array_equal(out, np.concatenate(inputs),
                                                  err_msg=f"allgather {nodes} {sizes}")
            if len(nodes) > 1 and len({len(n) for n in nodes}) == 1 and len(nodes[0]) > 1:
                node_of = {r: k for k, n in enumerate(nodes) for r in n}
                for plans in (scattering, schedules):
                    assert "node" in plans[0].phases  # (its own plan, not ring's)
                    assert all(node_of[t.peer] != node_of[r] for r, s in enumerate(plans)
                               for rnd in s.rounds for t in rnd.transfers)  # none in a node


@pytest.mark.parametrize("collective", ["allgather", "reduce_scatter"])
@pytest.mark.parametrize("nodes", [((0, 1), (2, 3)), ((0, 1), (2, 3), (4, 5)), ((0, 1, 2), (3, 4, 5))])
def test_hybrid_blocks_cross_nodes_less_than_a_flat_ring(collective, nodes):
    """Elements each node sends to the others: L(N-1) blocks for hybrid, NL-1 for ring (whose
    ranks are numbered node by node, so each node has one ring edge out)."""
    p, block = sum(map(len, nodes)), 10
    home = {r: k for k, n in enumerate(nodes) for r in n}

    def sent_out(name):
        count = block if collective == "allgather" else block * p
        options = Options(1 << 18, np.dtype("f8").str, collective)
        out = [0] * len(nodes)
        for r in range(p):
            for round_ in build_schedule(name, Layout(r, p, nodes), count, options).rounds:
                for t in round_.transfers:
                    if isinstance(t, Send) and home[t.peer] != home[r]:
                        out[home[r]] += t.region.stop - t.region.start
        return out

    L, N = len(nodes[0]), len(nodes)
    assert sent_out("hybrid") == [L * (N - 1) * block] * N
    assert sent_out("ring") == [(N * L - 1) * block] * N
