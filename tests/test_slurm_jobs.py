"""The batch jobs users copy from jobs/ must run, write their HDF5 file, and fail loudly.

The sbatch tests run under a private single-node Slurm (see slurm_cluster.py). They skip where Slurm
is not installed, except in CI (CI=true), which installs it, so there a missing Slurm fails; and
they skip under Open MPI, as the job script launches with MPICH's PMI (srun --mpi=pmi2).
"""
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import h5py
import pytest
from conftest import AS_ROOT_ENV
from mpi4py import MPI

import slurm_cluster

REPO = Path(__file__).resolve().parents[1]
SMALL = {"bench": ["-m", "8:1K", "-i", "3", "-x", "1"],
         "tune": ["-m", "8:1K", "-i", "3", "-x", "1", "--model", "model.json"],
         "train": ["--steps", "20"]}
TIMEOUT = 180  # seconds for any one job; nothing may hang CI


def job_env(**extra):
    """What a user sets: the running python (a venv's) and this checkout importable."""
    pythonpath = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    return dict(PYTHON=sys.executable, PYTHONPATH=pythonpath, **extra)


def assert_output(path, command, workdir):
    """bench and tune write /bench rows; train writes timing records; tune also its model."""
    table = "records" if command == "train" else "bench"
    with h5py.File(path, "r") as f:
        assert table in f, f"{path} has no root dataset {table!r}: {list(f)}"
        assert len(f[table]) >= 1, f"{path}: dataset {table!r} is empty"
        assert "1" in f["runs"]
    if command == "tune":
        model = json.loads((workdir / "model.json").read_text())
        assert model["algorithms"] and model["ranks"] == 2


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    if MPI.get_vendor()[0] != "MPICH":
        pytest.skip("jobs/mpicoll.sbatch launches with srun --mpi=pmi2, MPICH's PMI; "
                    f"{MPI.get_vendor()[0]} would need --mpi=pmix")
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


def sbatch(slurm, submit_dir, *args):
    """sbatch --wait jobs/mpicoll.sbatch ARGS with 2 tasks; returns (exit code, job id, job log)."""
    proc = subprocess.run(
        ["sbatch", "--wait", "--ntasks=2", "--time=5", str(REPO / "jobs" / "mpicoll.sbatch"), *args],
        cwd=submit_dir, env=slurm.env(**job_env()), capture_output=True, text=True, timeout=TIMEOUT)
    match = re.search(r"Submitted batch job (\d+)", proc.stdout)
    assert match, f"sbatch did not submit: {proc.stdout}{proc.stderr}"
    job_id = match.group(1)
    log = (submit_dir / f"mpicoll-{job_id}.out").read_text()
    return proc.returncode, job_id, log


@pytest.mark.parametrize("example", ["cg_poisson.py --n 64", "monte_carlo.py --bins 128 --steps 3"])
def test_sbatch_runs_the_mpi4py_examples_native_and_through_mpicoll(slurm, tmp_path, example):
    """docs/porting.md's examples under srun: both runs give the same answer (else exit 1)."""
    script, *args = example.split()
    path = REPO / "benchmarks" / "examples" / script
    wrap = f'srun --kill-on-bad-exit=1 --mpi=pmi2 "$PYTHON" {path} ' + " ".join(args) + " --reps 1"
    proc = subprocess.run(
        ["sbatch", "--wait", "--ntasks=2", "--time=5", "--output=example-%j.out", "--wrap", wrap],
        cwd=tmp_path, env=slurm.env(**job_env()), capture_output=True, text=True, timeout=TIMEOUT)
    match = re.search(r"Submitted batch job (\d+)", proc.stdout)
    assert match, f"sbatch did not submit: {proc.stdout}{proc.stderr}"
    log = (tmp_path / f"example-{match.group(1)}.out").read_text()
    assert proc.returncode == 0, log
    assert ("same answer" if script == "cg_poisson.py" else "same bits") in log, log
    assert "2 ranks" in log, log


@pytest.mark.parametrize("command", ["bench", "tune", "train"])
def test_sbatch_job_writes_hdf5(slurm, tmp_path, command):
    rc, job_id, log = sbatch(slurm, tmp_path, command, *SMALL[command])
    assert rc == 0, log
    out = tmp_path / f"mpicoll-{command}-{job_id}.h5"  # default: submit dir, named by job id
    assert f"mpicoll {command} results: {out}" in log
    assert_output(out, command, tmp_path)


def test_sbatch_failing_job_fails(slurm, tmp_path):
    rc, _, log = sbatch(slurm, tmp_path, "bench", "--no-such-option")
    assert rc != 0, log
    assert "--no-such-option" in log, log  # it failed for our reason, not e.g. a missing module
    assert "mpicoll bench failed" in log


@pytest.mark.parametrize("command", ["bench", "train"])
def test_mpirun_job_writes_hdf5(tmp_path, command):
    out = tmp_path / "out.h5"
    # The launcher next to the running python first: the mpich wheel's hydra in a venv.
    path = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    proc = subprocess.run(
        ["bash", str(REPO / "jobs" / "mpicoll.mpirun.sh"), command, *SMALL[command]], cwd=tmp_path,
        env=slurm_cluster.clean_env(PATH=path, NP="2", MPICOLL_OUTPUT=str(out), **job_env(),
                                    **AS_ROOT_ENV),  # what a root user of Open MPI sets
        capture_output=True, text=True, timeout=TIMEOUT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"mpicoll {command} results: {out}" in proc.stdout
    assert_output(out, command, tmp_path)
