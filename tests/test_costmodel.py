"""The cost model auto follows: every rank's schedule run on clocks (mpicoll.costmodel), the fit
of tune's measurements, and the tuning file."""

import dataclasses
import json

import numpy as np
import pytest

import mpicoll
import mpicoll.cli
from mpicoll import bench, costmodel, tune
from mpicoll.algorithm import Layout, select
from mpicoll.costmodel import Model, components, fit_algorithm, predict

ALPHA, BETA, GAMMA = 2e-6, 1e-9, 3e-10
MODEL = Model({"local": ALPHA, "remote": 50 * ALPHA}, {"local": BETA, "remote": 10 * BETA}, GAMMA)


def one_node(p):
    return (tuple(range(p)),)


@pytest.mark.parametrize("p", [2, 4, 8])
def test_the_textbook_costs_come_out_of_the_schedules(p):
    """Ring: 2(p-1) rounds of n/p; recursive doubling: lg p rounds of n (p a power of two)."""
    n = 1 << 20
    latency, memory, wire, rounds = components("ring", n, one_node(p), MODEL)
    assert rounds == 2 * (p - 1) and latency == pytest.approx(2 * (p - 1) * ALPHA)
    assert memory == pytest.approx(2 * (p - 1) / p * n * BETA + (p - 1) / p * n * GAMMA, rel=1e-6)
    assert wire == 0  # one node
    lg = p.bit_length() - 1
    latency, memory, wire, rounds = components("rd", n, one_node(p), MODEL)
    assert rounds == lg and latency == pytest.approx(lg * ALPHA)
    assert memory == pytest.approx(lg * n * (BETA + GAMMA), rel=1e-6)


def test_wire_bytes_are_not_scaled_and_cache_bytes_have_their_own_factor():
    """Ring over 4 nodes of one rank: each rank sends 2(p-1)/p n across; the algorithm's
    factors leave those alone. Its memory bytes take the in-cache factor while the working set
    (3 n per rank) fits, the other from twice the cache on, and a blend between."""
    p, n = 4, 1 << 20
    nodes = tuple((r,) for r in range(p))
    latency, memory, wire, rounds = components("ring", n, nodes, MODEL)
    assert wire == pytest.approx(2 * (p - 1) / p * n * 10 * BETA, rel=1e-6)
    assert memory == pytest.approx((p - 1) / p * n * GAMMA, rel=1e-6)
    beyond = dataclasses.replace(MODEL, algorithms={"ring": (0.0, 3.0, 0.5)})
    assert predict("ring", n, nodes, beyond) == pytest.approx(latency + 3 * memory + wire)
    inside = dataclasses.replace(beyond, cache_bytes=3 * n)
    assert predict("ring", n, nodes, inside) == pytest.approx(latency + 0.5 * memory + wire)
    half = dataclasses.replace(beyond, cache_bytes=2 * n)  # 1.5 times the cache: half in it
    assert predict("ring", n, nodes, half) == pytest.approx(latency + 1.75 * memory + wire)
    twice = dataclasses.replace(beyond, cache_bytes=3 * n // 2)
    assert predict("ring", n, nodes, twice) == pytest.approx(latency + 3 * memory + wire)


def test_native_is_the_better_of_mpis_usual_two_plus_its_overhead():
    model = Model(MODEL.alpha, MODEL.beta, GAMMA, {"native": (1e-6, 2.0, 2.0)})
    for n in (8, 1 << 24):
        shapes = [components(s, n, one_node(4), model) for s in costmodel.NATIVE_SHAPES]
        latency, memory, wire, _ = min(shapes, key=lambda c: c[0] + c[1] + c[2])
        assert predict("native", n, one_node(4), model) == pytest.approx(
            latency + 2 * memory + wire + 1e-6)


def test_slow_links_make_hierarchy_pay():
    """Predicted for a layout nobody measured: 8 nodes of 8 ranks behind slow links, 4 MiB (64
    MiB says the same, but hybrid's pipeline takes 7 s to simulate there)."""
    nodes = tuple(tuple(range(8 * k, 8 * k + 8)) for k in range(8))
    assert predict("hybrid", 4 << 20, nodes, MODEL) < predict("ring", 4 << 20, nodes, MODEL)
    assert predict("rd", 8, nodes, MODEL) < predict("ring", 8, nodes, MODEL)


def test_fit_recovers_an_overhead_and_both_factors():
    overhead, factor, cached = 3e-6, 1.7, 0.9
    model = dataclasses.replace(MODEL, cache_bytes=8 << 20)
    points = []
    for n in (8, 1024, 1 << 16, 1 << 20, 1 << 22, 1 << 24, 1 << 26):
        c = components("ring", n, one_node(4), model)
        inside = model.in_cache(n, 4)
        points.append((c[0] + (factor * (1 - inside) + cached * inside) * c[1] + c[2]
                       + overhead * c[3], inside, c))
    assert fit_algorithm(points) == pytest.approx((overhead, factor, cached, 0.0), rel=1e-6)
    # without a cache, one factor for both
    plain = [(t, 0.0, c) for t, _, c in points]
    assert fit_algorithm(plain)[1] == fit_algorithm(plain)[2]


def test_mpis_own_pays_for_fresh_scratch_and_the_fit_finds_what():
    """MPICH maps a scratch buffer the message's size afresh on every call once glibc's heap
    cannot hold it: MPI's own allreduce pays ``fresh`` per byte from 64 MiB on, mpicoll's
    algorithms (which keep their scratch) nothing. ``tune``'s fit finds the term in native's
    times, and the figures of the calls that pay it come out as without it."""
    fresh = 2e-10  # 0.2 ms per MiB
    figures = {"native": (1e-6, 2.0, 1.5), "native-blocking": (2e-6, 2.5, 1.0),
               "ring": (1e-6, 2.0, 1.5)}
    plain = Model(MODEL.alpha, MODEL.beta, GAMMA, figures, cache_bytes=8 << 20)
    paged = dataclasses.replace(plain, fresh=fresh)
    below, beyond = costmodel.ALWAYS_MAPPED // 2, costmodel.ALWAYS_MAPPED
    for name in ("native", "native-blocking", "ring"):
        assert predict(name, below, one_node(2), paged) == predict(name, below, one_node(2), plain)
        assert predict(name, beyond, one_node(2), paged) == pytest.approx(
            predict(name, beyond, one_node(2), plain) + (fresh * beyond if name != "ring" else 0))
    sizes = (1 << 16, 1 << 20, 1 << 22, 1 << 24, 1 << 25, 1 << 26, 1 << 27)
    table = np.zeros(len(sizes) * len(figures), bench.ROW_DTYPE)
    for row, (n, name) in zip(table, [(n, name) for n in sizes for name in figures]):
        row["algorithm"], row["size"], row["dtype"], row["ranks"] = name, n, "float32", 2
        row["time_us"] = predict(name, n, one_node(2), paged) * 1e6
    model = tune.fit(table, one_node(2), MODEL.alpha, MODEL.beta, GAMMA, "test",
                     emit=lambda line: None, cache_bytes=8 << 20)
    assert model.fresh == pytest.approx(fresh, rel=1e-6) and model.cache_bytes == 8 << 20
    for name, expected in figures.items():
        assert model.algorithms[name] == pytest.approx(expected, rel=1e-6)


def test_a_tuning_file_round_trips_and_auto_follows_it(tmp_path, monkeypatch):
    path = tmp_path / "tuning.json"
    slow_native = Model(MODEL.alpha, MODEL.beta, GAMMA,
                        {"native": (1.0, 1.0, 1.0), "rd": (0.0, 1.0, 1.0)}, fresh=3e-10)
    tune.save(str(path), slow_native, 4, 1, "test")
    monkeypatch.setenv("MPICOLL_TUNING", str(path))
    mpicoll.reload_environment()
    try:
        assert tune.model_in_force().algorithms == slow_native.algorithms
        assert tune.model_in_force().fresh == 3e-10
        assert select.choose(8, Layout(0, 4, one_node(4))) != "native"  # a second per call
        path.write_text(json.dumps({"mpicoll_tuning": 1, "rules": []}))
        with pytest.raises(ValueError, match="run `python -m mpicoll tune` again"):
            tune.model_in_force()
    finally:
        monkeypatch.delenv("MPICOLL_TUNING")
        mpicoll.reload_environment()


def test_mpis_blocking_call_is_predicted_as_native_until_tune_fits_it():
    """native-blocking has native's shapes; without figures of its own it takes native's, so
    the built-in model never prefers it (native comes first); fitted ones apply."""
    for n in (8, 8192, 1 << 22):
        assert predict("native-blocking", n, one_node(4), costmodel.BUILTIN) == \
            predict("native", n, one_node(4), costmodel.BUILTIN)
        assert select.choose(n, Layout(0, 2, one_node(2)),
                             ("native", "native-blocking")) == "native"
    fitted = dataclasses.replace(costmodel.BUILTIN, algorithms={
        **costmodel.BUILTIN.algorithms, "native-blocking": (0.0, 1.0, 1.0)})
    assert predict("native-blocking", 8, one_node(4), fitted) < \
        predict("native", 8, one_node(4), fitted)
    assert costmodel.mpi_own("native-blocking") and not costmodel.mpi_own("rd")


def test_on_the_layout_tune_measured_its_measurements_decide():
    """What tune measured fastest near a size wins there; elsewhere, and on other layouts, the
    predictions decide."""
    model = Model(MODEL.alpha, MODEL.beta, GAMMA, {}, "test", ((1024, "tree"), (1 << 20, "ring")),
                  (4, 1))
    among = ("ring", "tree", "rd", "native")
    assert model.measured_pick(1024, 4, 1, among) == "tree"
    assert model.measured_pick(1500, 4, 1, among) == "tree"       # within a factor of 2
    assert model.measured_pick(1 << 16, 4, 1, among) is None       # nothing measured near
    assert model.measured_pick(1024, 3, 1, among) is None          # another layout
    assert model.measured_pick(1024, 4, 1, ("rd", "native")) is None  # tree may not run here


# ---- the cost mode of the simulator: shared links, lockstep for many ranks, presets, the CLI

def test_ranks_of_a_node_share_its_links():
    """Ranks 0 and 1 (node 0) each send b bytes to ranks 2 and 3 (node 1) at once: through one
    link the second message leaves when the first has gone, 2bβ + α; through two, bβ + α."""
    from mpicoll.schedule import Recv, Region, Round, Schedule, Send

    b = 1000
    def sends(peer):
        return Schedule("t", b, (Round((Send(peer, Region("send", 0, b)),), ()),), 0)

    def receives(peer):
        return Schedule("t", b, (Round((Recv(peer, Region("recv", 0, b)),), ()),), 0)

    schedules = [sends(2), sends(3), receives(0), receives(1)]
    node_of = [0, 0, 1, 1]
    beta = {"local": BETA, "remote": 10 * BETA}
    alpha = {"local": 0.0, "remote": 50 * ALPHA}
    times = {nics: costmodel.schedule_time(schedules, 1, node_of, alpha, beta, 0.0, 0.0, nics)
             for nics in (0, 1, 2)}
    assert times[1] == pytest.approx(2 * b * 10 * BETA + 50 * ALPHA)
    assert times[2] == times[0] == pytest.approx(b * 10 * BETA + 50 * ALPHA)


def test_a_rank_takes_its_incoming_messages_one_after_another():
    """Ranks 1 and 2 each send b bytes to rank 0 at once (a tree's parent): rank 0's link takes
    them in turn, 2bβ + α; one sender alone, bβ + α."""
    from mpicoll.schedule import Recv, Region, Round, Schedule, Send

    b = 1000

    def rounds(*transfers):
        return Schedule("t", b, (Round(tuple(transfers), ()),), 0)

    both = [rounds(Recv(1, Region("recv", 0, b)), Recv(2, Region("tmp", 0, b))),
            rounds(Send(0, Region("send", 0, b))), rounds(Send(0, Region("send", 0, b)))]
    alpha, beta = {"local": ALPHA, "remote": 0.0}, {"local": BETA, "remote": 0.0}
    assert costmodel.schedule_time(both, 1, [0, 0, 0], alpha, beta, 0.0, 0.0) == \
        pytest.approx(2 * b * BETA + ALPHA)
    one = [rounds(Recv(1, Region("recv", 0, b))), rounds(Send(0, Region("send", 0, b)))]
    assert costmodel.schedule_time(one, 1, [0, 0], alpha, beta, 0.0, 0.0) == \
        pytest.approx(b * BETA + ALPHA)


def test_a_token_bucket_link_passes_its_burst_at_once_and_its_rate_on_average():
    """A 2-rank ring across two nodes puts n bytes on each link each way (two rounds of n/2).
    With a burst, that share of the wire time goes; the link's rate on average stays: n·β."""
    n = 1 << 20
    nodes = ((0,), (1,))
    slow = Model({"local": ALPHA, "remote": 5e-3}, MODEL.beta, GAMMA, nics=1)  # latency-heavy
    latency, memory, wire, _ = components("ring", n, nodes, slow)
    assert wire == pytest.approx(n * 10 * BETA) and latency == pytest.approx(2 * 5e-3)
    plain = predict("ring", n, nodes, slow)
    assert plain == pytest.approx(latency + memory + wire)
    quarter = dataclasses.replace(slow, burst=n // 4)
    assert costmodel.busiest_link("ring", n, nodes, quarter) == n
    assert predict("ring", n, nodes, quarter) == pytest.approx(plain - wire / 4)
    whole = dataclasses.replace(slow, burst=n)  # all at once, but not faster than the rate
    assert predict("ring", n, nodes, whole) == pytest.approx(max(latency + memory, n * 10 * BETA))
    fast = dataclasses.replace(whole, alpha={"local": ALPHA, "remote": ALPHA})
    assert predict("ring", n, nodes, fast) == pytest.approx(n * 10 * BETA)


def test_the_busiest_link_counts_what_a_node_sends_and_receives_across():
    """Ring on 2 nodes of 2: the node's one link carries rank 1's 2·3·n/4 out and rank 3's in.
    A binary tree on 4 nodes of 1: an inner rank takes its child's part and its parent's
    result, 2n; the root sends the result to two children, 2n."""
    n = 1 << 16
    two = ((0, 1), (2, 3))
    model = dataclasses.replace(costmodel.EMULATED_1G)
    assert costmodel.busiest_link("ring", n, two, model) == 3 * n // 2
    assert costmodel.busiest_link("ring", n, one_node(4), model) == 0
    assert costmodel.busiest_link("tree", n, tuple((r,) for r in range(4)), model) == 2 * n


@pytest.mark.parametrize("name", ["ring", "rd", "rabenseifner", "hybrid"])
def test_lockstep_agrees_with_events_where_ranks_do_alike(monkeypatch, name):
    """For algorithms whose ranks all do the same round by round, the lockstep estimate (what
    thousands of ranks get) must match the event simulation, contention included (within 1%:
    the events let a message that waits for its receiver start its bytes later)."""
    nodes = tuple(tuple(range(lo, lo + 4)) for lo in range(0, 16, 4))
    model = dataclasses.replace(costmodel.EMULATED_1G)
    for n in (1 << 10, 1 << 22):
        events = components(name, n, nodes, model)
        monkeypatch.setattr(costmodel, "EVENTS", 0)
        components.cache_clear()
        lockstep = components(name, n, nodes, model)
        monkeypatch.undo()
        components.cache_clear()
        if name != "hybrid":
            assert lockstep == pytest.approx(events, rel=0.01)
            continue
        # hybrid's pipeline runs its node steps under the link: the events hide them (and a
        # rank's reductions) under the link's whole queue, lockstep under a round's own share
        # only; what memory adds to the wire's time is small either way.
        assert (lockstep[0], lockstep[2], lockstep[3]) == \
            pytest.approx((events[0], events[2], events[3]), rel=0.01)
        assert sum(lockstep[:3]) == pytest.approx(sum(events[:3]), rel=0.01)
        assert lockstep[1] >= events[1]  # lockstep hides less


def test_auto_runs_every_ranks_schedule_only_within_its_budget():
    """auto predicts on every rank at the first call of each size class: a hybrid of 64 MiB on
    8 x 8 ranks has 144 rounds but 3,584 messages per rank, and with all 64 schedules run auto
    took 22.7 s to choose (docs/design/cost-model.md), so auto estimates it in
    lockstep, where the simulator runs them all. On layouts within its budget auto predicts
    exactly what the simulator does."""
    nodes = tuple(tuple(range(8 * k, 8 * k + 8)) for k in range(8))
    assert costmodel.exact("hybrid", 64 << 20, nodes)
    assert not costmodel.exact("hybrid", 64 << 20, nodes, events=costmodel.AUTO_EVENTS)
    small = ((0, 1), (2, 3))
    for name in ("ring", "tree", "hybrid", "native"):
        assert costmodel.exact(name, 1 << 20, small, events=costmodel.AUTO_EVENTS)
        assert predict(name, 1 << 20, small, MODEL, 4, costmodel.AUTO_EVENTS) == \
            predict(name, 1 << 20, small, MODEL)


def test_presets_name_their_sources():
    for name, model in costmodel.PRESETS.items():
        assert model.source and model.alpha["remote"] >= model.alpha["local"] > 0, name
    assert costmodel.EMULATED_1G.nics == 1 and costmodel.GPU_CLUSTER.nics == 8


def test_the_simulate_command_prints_benchs_table_and_a_plot(tmp_path, capsys):
    out = tmp_path / "sim.png"
    assert mpicoll.cli.main(["simulate", "--ranks", "12", "--ranks-per-node", "4", "--preset",
                             "emulated-1g", "-m", "1K:1M", "-f", "32", "-a", "ring,tree,hybrid",
                             "--plot", str(out)]) == 0
    lines = [line.split() for line in capsys.readouterr().out.splitlines()
             if not line.startswith("#")]
    assert [(int(w[0]), w[4]) for w in lines] == [(n, a) for n in (1024, 32768, 1 << 20)
                                                  for a in ("ring", "tree", "hybrid")]
    ring, hybrid = (float(w[7]) for w in lines[-3::2])
    assert hybrid < ring  # behind shared 1 Gbit/s links, hierarchy pays
    assert out.stat().st_size > 10_000
    assert mpicoll.cli.main(["simulate", "--ranks", "8", "--ranks-per-node", "4", "-a", "shm"]) == 2


def test_a_tuning_file_written_before_the_cache_factor_still_loads(tmp_path):
    path = tmp_path / "old.json"
    path.write_text(json.dumps({"mpicoll_tuning": 2, "ranks": 2, "nodes": 1, "mpi_library": "x",
                                "alpha": MODEL.alpha, "beta": MODEL.beta, "gamma": GAMMA,
                                "algorithms": {"ring": [1e-6, 1.5]}}))
    model = tune.load(str(path))
    assert model.algorithms == {"ring": (1e-6, 1.5, 1.5)} and model.cache_bytes == 0
    assert model.fresh == 0


@pytest.mark.parametrize("p", [2, 5, 6, 8])
def test_a_collectives_prediction_reads_its_schedule(p):
    """allgather and reduce_scatter are predicted from their own schedules: on ranks with a
    link each, ring's and Bruck's allgather and ring's reduce_scatter put (p-1)/p of the size
    on the wire, in p-1 rounds (ring, plus its copy for allgather) or ceil(lg p) (Bruck, plus
    its copy); MPI's own is predicted as the fastest of its usual algorithms."""
    model, nodes, size = costmodel.EMULATED_1G, tuple((r,) for r in range(p)), p * 4096 * 4
    share = (p - 1) / p * size * model.beta["remote"]
    for collective, name, rounds in (("allgather", "ring", p), ("reduce_scatter", "ring", p - 1),
                                     ("allgather", "bruck", 1 + (p - 1).bit_length())):
        _, _, wire, counted = costmodel.components(name, size, nodes, model, 4,
                                                   collective=collective)
        assert wire == pytest.approx(share) and counted == rounds, (collective, name)
    for collective, shapes in costmodel.NATIVE_SHAPES_OF.items():
        native = costmodel.components("native", size, nodes, model, 4, collective=collective)
        best = min((costmodel.components(s, size, nodes, model, 4, collective=collective)[:3]
                    for s in shapes), key=sum)
        assert native == (*best, 1.0), collective  # (one call: one round of overhead)


def test_simulate_predicts_each_collective(capsys):
    """simulate -C: a section per collective, each algorithm that plans it, sizes as bench's."""
    assert mpicoll.cli.main(["simulate", "--ranks", "3", "-m", "1K:1K", "-a", "ring,bruck,tree",
                             "-C", "allreduce,allgather,reduce_scatter"]) == 0
    out = capsys.readouterr().out.splitlines()
    sections = {which: [(int(r[0]), r[4]) for r in bench.table(out, which)]
                for which in ("allreduce", "allgather", "reduce_scatter")}
    assert sections == {"allreduce": [(1024, "ring"), (1024, "tree")],
                        "allgather": [(1020, "ring"), (1020, "bruck")],
                        "reduce_scatter": [(1020, "ring")]}
