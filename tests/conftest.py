"""Launch real MPI jobs from pytest: every multi-rank test runs under mpiexec, with a timeout."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# Oversubscribed MPICH ranks busy-poll each other off the 2 cores; yielding keeps them moving
# (the settings mpi4py's own CI uses). A hung job is killed by hydra, and again by subprocess.
OVERSUBSCRIBE_ENV = {
    "MPIR_CVAR_POLLS_BEFORE_YIELD": "1",
    "MPIR_CVAR_CH4_PROGRESS_THROTTLE": "1",
    "HYDRA_LAUNCHER": "fork",
    "OMPI_MCA_mpi_yield_when_idle": "1",
    "PRTE_MCA_rmaps_default_mapping_policy": ":oversubscribe",
}


def mpiexec_path() -> str:
    """The mpiexec beside this interpreter (the venv's mpich wheel), else the one on PATH."""
    beside = Path(sys.executable).with_name("mpiexec")
    found = str(beside) if beside.exists() else shutil.which("mpiexec")
    if found is None:
        pytest.fail("no mpiexec found: install the mpich wheel (pip install mpich) or a site MPI")
    return found


def run_mpi(nprocs: int, *argv: str, env: dict | None = None, timeout: float = 200) -> str:
    """Run ``python -m mpi4py ARGV`` on ``nprocs`` ranks; fail the test on error or timeout.

    ``-m mpi4py`` turns an exception on any rank into MPI_Abort, so one failing rank ends the
    job instead of leaving the others blocked.
    """
    full_env = {**os.environ, **OVERSUBSCRIBE_ENV, "MPIEXEC_TIMEOUT": str(int(timeout)),
                "PYTHONPATH": str(ROOT), **(env or {})}
    cmd = [mpiexec_path(), "-n", str(nprocs), sys.executable, "-m", "mpi4py", *argv]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=full_env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout + 30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        pytest.fail(f"timed out after {timeout}s: {' '.join(cmd)}\n{out[-6000:]}")
    if proc.returncode != 0:
        pytest.fail(f"exit code {proc.returncode}: {' '.join(cmd)}\n{out[-6000:]}")
    return out


@pytest.fixture
def mpirun():
    return run_mpi
