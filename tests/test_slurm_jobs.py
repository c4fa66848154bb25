"""The batch jobs users copy from jobs/ must run, write their HDF5 file, and fail loudly.

The sbatch tests run under a private single-node Slurm (see slurm_cluster.py). They skip where Slurm
is not installed, except in CI (CI=true), which installs it, so there a missing Slurm fails.
"""
import os
import re
import subprocess
import sys
from pathlib import Path

import h5py
import pytest

import slurm_cluster

REPO = Path(__file__).resolve().parents[1]
SMALL_BENCH = "-m 8:1K -i 3 -x 1"
TIMEOUT = 180  # seconds for any one job; nothing may hang CI


def job_env(**extra):
    """What a user sets: the running python (a venv's) and this checkout importable."""
    pythonpath = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    return dict(PYTHON=sys.executable, PYTHONPATH=pythonpath, **extra)


def assert_bench_file(path):
    with h5py.File(path, "r") as f:
        assert "bench" in f, f"{path} has no root dataset 'bench': {list(f)}"
        assert len(f["bench"]) >= 1, f"{path}: dataset 'bench' is empty"


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    missing = slurm_cluster.missing_binaries()
    if missing:
        reason = (f"Slurm not installed ({', '.join(missing)} not found); "
                  "the apt command is in tests/slurm_cluster.py")
        if os.environ.get("CI") == "true":
            pytest.fail(reason)
        pytest.skip(reason)
    cluster = slurm_cluster.SlurmCluster(tmp_path_factory.mktemp("slurm"))
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


def sbatch_bench(slurm, submit_dir, bench_args):
    """sbatch --wait jobs/bench.sbatch with 2 tasks; returns (exit code, job id, job log)."""
    proc = subprocess.run(
        ["sbatch", "--wait", "--ntasks=2", "--time=5", str(REPO / "jobs" / "bench.sbatch")],
        cwd=submit_dir, env=slurm.env(**job_env(MPICOLL_BENCH_ARGS=bench_args)),
        capture_output=True, text=True, timeout=TIMEOUT)
    match = re.search(r"Submitted batch job (\d+)", proc.stdout)
    assert match, f"sbatch did not submit: {proc.stdout}{proc.stderr}"
    job_id = match.group(1)
    log = (submit_dir / f"mpicoll-bench-{job_id}.out").read_text()
    return proc.returncode, job_id, log


def test_sbatch_bench_writes_hdf5(slurm, tmp_path):
    rc, job_id, log = sbatch_bench(slurm, tmp_path, SMALL_BENCH)
    assert rc == 0, log
    out = tmp_path / f"mpicoll-bench-{job_id}.h5"  # default: submit dir, named by job id
    assert f"mpicoll bench results: {out}" in log
    assert_bench_file(out)


def test_sbatch_failing_bench_fails(slurm, tmp_path):
    rc, _, log = sbatch_bench(slurm, tmp_path, "--no-such-option")
    assert rc != 0, log
    assert "--no-such-option" in log, log  # it failed for our reason, not e.g. a missing module
    assert "mpicoll bench failed" in log


def test_mpirun_bench_writes_hdf5(tmp_path):
    out = tmp_path / "bench.h5"
    # The launcher next to the running python first: the mpich wheel's hydra in a venv.
    path = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    proc = subprocess.run(
        ["bash", str(REPO / "jobs" / "bench.mpirun.sh")], cwd=tmp_path,
        env=slurm_cluster.clean_env(PATH=path, NP="2", MPICOLL_BENCH_ARGS=SMALL_BENCH,
                                    MPICOLL_BENCH_OUTPUT=str(out), **job_env()),
        capture_output=True, text=True, timeout=TIMEOUT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"mpicoll bench results: {out}" in proc.stdout
    assert_bench_file(out)
