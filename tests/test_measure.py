"""The bench CLI, its HDF5 output, plots and `info`, run as a user would under mpiexec."""

import json

import h5py
import numpy as np
import pytest
from mpi4py import MPI

from mpicoll import bench, blockwise, collective
from mpicoll.algorithm import get, names, select

LIBRARY = MPI.get_vendor()[0]  # "MPICH" or "Open MPI": the library the ranks load too
PLAIN = {name.encode() for name in names(plain=True)}  # what bench runs by default, with auto

SMALL = ["-m", "8:4K", "-f", "8", "-i", "3", "-x", "1", "--no-progress"]


def test_bench_appends_runs_to_hdf5(mpirun, tmp_path):
    path = tmp_path / "b.h5"
    out = mpirun(3, "-m", "mpicoll", "bench", *SMALL, "--output", str(path))
    assert "# mpicoll bench: 3 ranks" in out and "#wrong" in out
    mpirun(2, "-m", "mpicoll", "bench", *SMALL, "-a", "tree", "--output", str(path))
    with h5py.File(path) as f:
        assert f.attrs["mpicoll_layout_version"] == 5
        assert sorted(f["runs"]) == ["1", "2"]
        first = dict(f["runs/1"].attrs)
        assert first["jobsize"] == 3 and first["mpi_library"] == LIBRARY
        for key in ("launchdate", "hostlist", "mpi_library_version", "mpicoll_version",
                    "numpy_version", "git_commit", "slurm_job_id", "tuning", "mpi_wtick", "cmdline"):
            assert key in first
        rows = f["bench"][:]
        records, phases = f["records"][:], f["phases"][:]
    run1, run2 = rows[rows["run"] == 1], rows[rows["run"] == 2]
    every = {b"allreduce": PLAIN, **{which.encode(): {n.encode() for n in names(collective=which)}
                                     for which in ("allgather", "reduce_scatter", "bcast",
                                                   "reduce")}}
    tree_runs = {b"allreduce", b"bcast", b"reduce"}
    assert set(run1["collective"]) == set(every) and set(run2["collective"]) == tree_runs
    for which, algorithms in every.items():  # sizes 8, 64, 512, 4096 x algorithms, and auto
        mine = run1[run1["collective"] == which]
        assert len(mine) == 4 * (len(algorithms) + 1)
        assert set(mine["algorithm"]) == algorithms | {b"auto"}
        assert set(mine[mine["algorithm"] == b"auto"]["ran"]) <= algorithms
        factor = 2 * 2 / 3 if which == b"allreduce" else 1 if which in (b"bcast", b"reduce") \
            else 2 / 3
        np.testing.assert_allclose(mine["busbw"], mine["algbw"] * factor)
    blocks = run1[run1["collective"] == b"allgather"]  # a block per rank: 3 ranks
    assert set(blocks["size"]) == {12, 60, 504, 4092} and set(blocks["op"]) == {b""}
    assert len(run2) == 4 * len(tree_runs)  # tree: allreduce, bcast and reduce
    assert (rows["wrong"] == 0).all() and (rows["time_us"] > 0).all()
    # one recorded call per (collective, size, algorithm) per rank, with phases
    assert len(records[records["run"] == 1]) == 3 * len(run1)
    assert set(records["transport"]) == {b"host"}  # NumPy arrays: MPI takes them as they are
    assert set(records[records["run"] == 1]["collective"]) == set(every)
    assert set(phases[phases["run"] == 1]["phase"]) >= {b"reduce-scatter", b"allgather", b"reduce", b"bcast"}


def test_bench_compresses_allgather_and_reduce_scatter(mpirun, tmp_path):
    """bench -c on the other collectives: each dense codec asked for runs allgather and
    reduce_scatter where an algorithm compresses them (ring; auto runs ring), beside MPI's own
    uncompressed call, its error against MPI's result reported; bcast runs plain only."""
    path = tmp_path / "c.h5"
    mpirun(3, "-m", "mpicoll", "bench", "-C", "allgather,reduce_scatter,bcast", "-c", "none,fp16",
           "-a", "ring,native,auto", "-m", "4K", "-i", "2", "--no-progress", "--output", str(path))
    with h5py.File(path) as f:
        rows = f["bench"][:]
    for which in (b"allgather", b"reduce_scatter"):
        mine = rows[rows["collective"] == which]
        assert sorted(zip(mine["algorithm"], mine["codec"])) == [
            (b"auto", b""), (b"auto", b"fp16"), (b"native", b""), (b"ring", b""),
            (b"ring", b"fp16")], which
        packed = mine[mine["codec"] == b"fp16"]
        assert set(packed["ran"]) == {b"ring"} and (packed["wrong"] == -1).all()
        assert (0 < packed["error"]).all() and (packed["error"] < 1e-3).all(), packed["error"]
        assert (mine[mine["codec"] == b""]["wrong"] == 0).all()
    assert set(rows[rows["collective"] == b"bcast"]["codec"]) == {b""}


def test_plot_draws_png(mpirun, tmp_path):
    path = tmp_path / "b.h5"
    mpirun(2, "-m", "mpicoll", "bench", *SMALL, "--output", str(path))
    out = mpirun(1, "-m", "mpicoll", "plot", str(path), "-o", str(tmp_path / "p.png"))
    assert "wrote" in out
    assert (tmp_path / "p.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def auto_rows(out, table="auto picks"):
    """info's table: {size: (picked, {candidate: predicted us})}; table="measured": the
    times auto's trials measured (only the candidates it tried)."""
    lines = out.splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith(table))
    names = lines[head + 1].split()[2:]
    rows = {}
    for line in lines[head + 2:]:
        if "->" not in line:
            break
        size, _, picked, *times = line.split()
        rows[size] = (picked, {n: float(t) for n, t in zip(names, times) if t != "-"})
    return rows


def test_info_names_library_layout_and_choices(mpirun):
    out = mpirun(4, "-m", "mpicoll", "info", "-m", "8:1M", env={"MPICOLL_RANKS_PER_NODE": "2"})
    assert f"MPI library: {LIBRARY}" in out and "thread level:" in out and "CUDA-aware MPI: no" in out
    assert "nodes: 2 [0,1] [2,3]" in out and "model: built in" in out
    rows, measured = auto_rows(out), auto_rows(out, "measured")
    assert list(rows) == list(measured) == [
        "8B", "16B", "32B", "64B", "128B", "256B", "512B", "1KB", "2KB", "4KB", "8KB", "16KB",
        "32KB", "64KB", "128KB", "256KB", "512KB", "1MB"]
    for size, (picked, times) in rows.items():
        assert "native" in times and measured[size][0] == picked
        tried = measured[size][1]
        # what the trials of MPI's own (both calls) and the shortlist measured fastest; up to
        # select.OWN_UP_TO MPI's own only
        assert {"native", "native-blocking"} <= set(tried), (size, tried)
        if bench.parse_size(size) <= select.OWN_UP_TO:
            assert set(tried) == {"native", "native-blocking"}, (size, tried)
        assert len(tried) <= 2 + select.SHORTLIST[0], (size, tried)
        assert tried[picked] == min(tried.values()), (size, picked, tried)
    for which in ("allgather", "reduce_scatter", "bcast", "reduce"):  # (the larger buffer)
        blocks = auto_rows(out, f"{which}:")
        assert list(blocks) == list(rows), which
        candidates = {a for a in names(collective=which)  # (two nodes: no one-node one)
                      if not get(a, which).one_node}
        own_up_to = blockwise.own_up_to(collective.get(which))
        for size, (picked, tried) in blocks.items():
            larger = 4 * 4 * max(1, bench.parse_size(size) // 16)  # bytes: 4 blocks of float32
            own = {"native", "native-blocking"}  # MPI's own two calls, up to own_up_to alone
            assert set(tried) == (own if larger <= own_up_to else candidates) \
                and tried[picked] == min(tried.values()), (which, size, picked, tried)


def test_bad_bench_arguments_fail_on_every_rank_without_hanging(mpirun):
    with pytest.raises(pytest.fail.Exception, match="unknown algorithm 'butterfly'"):
        mpirun(3, "-m", "mpicoll", "bench", "-a", "butterfly", timeout=60)
    with pytest.raises(pytest.fail.Exception, match="not a size"):
        mpirun(2, "-m", "mpicoll", "bench", "-m", "8:lots", timeout=60)
    with pytest.raises(pytest.fail.Exception, match="--sample-ms > 0"):
        mpirun(2, "-m", "mpicoll", "bench", "-m", "8", "--sample-ms", "0", timeout=60)


def test_a_sample_repeats_small_calls_for_the_time_asked():
    """bench --sample-ms: after one probe call, a call of at least 5 ms repeats 2 to 10 times in
    a 50 ms sample, and once in a sample shorter than itself."""
    import time
    calls = []

    def call():
        calls.append(1)
        time.sleep(0.005)
    for seconds, fewest, most in ((0.05, 2, 10), (1e-6, 1, 1)):
        calls.clear()
        settings = bench.Settings(sizes=[8], algorithms=[], iters=1, warmup=0,
                                  sample_seconds=seconds)
        bench.measure(MPI.COMM_SELF, {bench.NATIVE: call}, settings)
        assert fewest <= len(calls) - 1 <= most, (seconds, len(calls))


def test_sizes_parse_like_osu():
    assert bench.parse_size("64K") == 65536 and bench.parse_size("16MiB") == 16 << 20
    assert bench.size_range("8:64") == [8, 16, 32, 64]
    assert bench.size_range("1K:16K", 4) == [1024, 4096, 16384]
    assert bench.size_range("8", 1) == [8]  # one size: any factor
    with pytest.raises(ValueError):
        bench.size_range("64:8")


def test_tune_fits_a_model_that_auto_follows(mpirun, tmp_path):
    path = tmp_path / "model.json"
    out = mpirun(3, "-m", "mpicoll", "tune", "-m", "8:32K", "-f", "2", "-i", "3", "-x", "1",
                 "--no-progress", "--model", str(path))
    assert "# links: alpha local" in out and "us per round" in out
    data = json.loads(path.read_text())
    assert (data["ranks"], data["nodes"]) == (3, 1)
    assert {name.encode() for name in data["algorithms"]} == PLAIN
    assert all(len(figures) == 3 and min(figures) >= 0 for figures in data["algorithms"].values())
    every = bench.size_range("8:32K")
    assert [size for size, _ in data["fastest_measured"]] == every
    others = data["fastest_measured_by_collective"]  # (every collective: -C all)
    assert sorted(others) == ["allgather", "bcast", "reduce", "reduce_scatter"]
    for which, measured in others.items():
        sizes = [size for size, _ in measured]  # (bench's size: a multiple of the blocks)
        assert all(any(want / 2 <= size <= 2 * want for size in sizes) for want in every) \
            and all(any(want / 2 <= size <= 2 * want for want in every) for size in sizes), \
            (which, sizes)
        assert all(name in names(collective=which) for _, name in measured), which
    # hand-written: native costs a second a call, and the tree was measured fastest everywhere
    # (bruck for allgather, rabenseifner for reduce_scatter)
    data["algorithms"]["native"] = [1.0, 1.0, 1.0]
    data["fastest_measured"] = [[size, "tree"] for size, _ in data["fastest_measured"]]
    picks = {"allgather": "bruck", "reduce_scatter": "rabenseifner", "bcast": "tree",
             "reduce": "tree"}
    for which, measured in others.items():
        others[which] = [[size, picks[which]] for size, _ in measured]
    path.write_text(json.dumps(data))
    out = mpirun(3, "-m", "mpicoll", "info", "-m", "8:32K", env={"MPICOLL_TUNING": str(path)})
    assert f"model: {path}" in out  # the layout it measured: its measurements decide
    assert all(picked == "tree" for picked, _ in auto_rows(out).values())
    for which, pick in picks.items():  # and no trials
        rows = auto_rows(out, f"{which}:")
        assert len(rows) == 13 and all(row == (pick, {}) for row in rows.values()), (which, rows)
    out = mpirun(2, "-m", "mpicoll", "info", "-m", "8:64K", env={"MPICOLL_TUNING": str(path)})
    assert auto_rows(out, "allgather:")["32KB"][1], "another layout: its trials"
    # Another layout: the predictions decide where nothing is tried (native, a second a call,
    # is never picked; MPI's blocking call, fitted apart, alone within the shortlist's factor
    # up to select.OWN_UP_TO), the trials elsewhere (MPI's own measured, whatever predicted).
    rows, measured = auto_rows(out), auto_rows(out, "measured")
    for size, (picked, times) in rows.items():
        tried, fastest = measured[size][1], min(times.values())
        assert tried[picked] == min(tried.values()) if tried else picked != "native" and (
            times[picked] == fastest or picked == "native-blocking"
            and times[picked] <= select.SHORTLIST[1] * fastest), (size, picked, tried)


def test_train_demo_learns_and_keeps_replicas_identical(mpirun, tmp_path):
    out = mpirun(3, "-m", "mpicoll", "train", "--steps", "60", "-a", "ring",
                 "--output", str(tmp_path / "t.h5"))
    losses = [float(line.split()[-1]) for line in out.splitlines() if line.startswith("step")]
    assert len(losses) == 10 and losses[-1] < 0.7 * losses[0]
    with h5py.File(tmp_path / "t.h5") as f:
        records = f["records"][:]
    steps = records[records["collective"] == b"allreduce"]  # (and each rank's initial bcast)
    assert len(steps) == 3 * 60 and set(steps["algorithm"]) == {b"ring"}
    assert len(records[records["collective"] == b"bcast"]) == 3 == len(records) - len(steps)


def test_train_demo_with_compressed_gradients(mpirun):
    out = mpirun(2, "-m", "mpicoll", "train", "--steps", "20", "-c", "topk+ef")
    assert "parameters on 2 ranks" in out  # and the replicas stayed identical (else exit 1)


def test_phases_prints_every_ranks_phases(mpirun):
    """benchmarks/phases.py (where an algorithm's time goes, from its timing records)."""
    out = mpirun(2, "benchmarks/phases.py", "--algorithm", "ring", "--bytes", "64K", "--reps", "2",
                 timeout=60)
    assert "rank 1: total" in out and "reduce-scatter" in out and "allgather" in out, out


def test_auto_guard_benchmark_reports_both_phases(mpirun):
    """benchmarks/auto_guard.py (auto kept on a quiet node, then beside a load it starts and
    stops): a row per phase naming what auto ran, which gave MPI's result (else exit 1)."""
    out = mpirun(2, "benchmarks/auto_guard.py", "-m", "64K", "-n", "32", "--header",
                 timeout=120)
    rows = [line.split() for line in out.splitlines() if line.strip().startswith("64KB")]
    assert [row[1:3] for row in rows] == [["measure", "quiet"], ["measure", "busy"]], out
    assert all(row[6].encode() in PLAIN for row in rows), out
