"""Never hang, never return wrong bits: each finding of issue 11 as a real multi-rank run.

Every launch has a timeout far below anything a user would wait (30-90 s), and the watchdog is
off unless a test is about it, so a hang shows up as a failed test, not as a watchdog abort.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from conftest import ROOT, mpi_env, mpiexec_path

PROGRAMS = ROOT / "tests" / "mpi_programs"


def launch(nprocs: int, *argv: str, env: dict | None = None, timeout: float = 60,
           mpi4py: bool = False) -> tuple[int, str]:
    """Run ``python [-m mpi4py] ARGV`` on ``nprocs`` ranks; (exit code, output). Plain python
    by default: a rank that raised while the others waited would then hang the job."""
    cmd = [mpiexec_path(), "-n", str(nprocs), sys.executable,
           *(["-m", "mpi4py"] if mpi4py else []), *argv]
    try:
        proc = subprocess.run(cmd, cwd=ROOT, env=mpi_env(env, timeout), capture_output=True,
                              text=True, timeout=timeout + 15)
    except subprocess.TimeoutExpired as hung:
        pytest.fail(f"hung: {' '.join(cmd)}\n{hung.stdout}")
    return proc.returncode, proc.stdout + proc.stderr


@pytest.mark.parametrize("nprocs", [2, 3, 4])
def test_cases(run_cases, nprocs):
    """Any completion order, threads, error feedback after NaN (tests/mpi/reliability_cases.py)."""
    run_cases("tests/mpi/reliability_cases.py", nprocs, timeout=90)


@pytest.mark.parametrize("nprocs", [2, 3, 4])
@pytest.mark.parametrize("algorithm", ["ring", "tree"])
def test_polling_with_test_then_exit(nprocs, algorithm):
    """100 requests driven by test() only, then exit: a rank whose requests were all done went
    into MPI_Finalize, stopped progressing what its neighbour still needed, and the job hung
    (7 runs in 9). Three runs each."""
    for _ in range(3):
        code, out = launch(nprocs, str(PROGRAMS / "poll_then_exit.py"), algorithm, timeout=30)
        assert code == 0 and out.count("done") == nprocs, out


MISMATCHES = ["count", "dtype", "algorithm", "codec-int8-fp16", "codec-int8-none",
              "codec-none-int8", "codec-int8-topk",
              # in shared memory, where the first barrier of a blocking call carries the check
              "count-shm", "algorithm-shm", "blocking-shm",
              # MPI's blocking collective for blocking calls: a nonblocking one never matches it
              "blocking-mpi", "count-mpi"]



# Open MPI 5.0.11's osc/ucx component is single-threaded whatever thread level was asked
# (open-mpi/ompi#13347): two threads creating shared windows at once crash it (6 runs in 6 of
# a bare mpi4py program); osc/sm, which makes the shared windows, does not. docs/failure-modes.md
OPEN_MPI_THREADS_ENV = {"OMPI_MCA_osc": "^ucx"}


@pytest.mark.parametrize("nprocs", [2, 3, 4])
def test_threads_making_node_windows_at_once_then_exit(nprocs):
    """Four threads with communicators of their own each make node windows (``shm``) at once;
    at exit every window is freed collectively. Each rank ordered its frees by when it made the
    window, which threads make differ across ranks: the exit hung (Open MPI: 4 runs in 6 at 3
    ranks, docs/design/node-window.md). Now the order is agreed when a window is
    made. One run each: it is a race, which such runs caught before."""
    code, out = launch(nprocs, str(PROGRAMS / "threads_windows.py"), env=OPEN_MPI_THREADS_ENV,
                       timeout=30)
    assert code == 0 and out.count("done") == nprocs, out
    orders = {line.split(maxsplit=2)[2] for line in out.splitlines() if line.startswith("frees")}
    assert len(orders) == 1, out


@pytest.mark.parametrize("case", MISMATCHES)
def test_mismatched_arguments_raise_on_every_rank(case):
    """One rank disagrees; every rank raises MismatchError naming the field, no rank returns
    data, within seconds, under plain python (nothing aborts the job for us)."""
    nprocs = 2 + MISMATCHES.index(case) % 3  # 2, 3 and 4 ranks in turn
    code, out = launch(nprocs, str(PROGRAMS / "mismatch.py"), case, timeout=30)
    field = case.split("-")[0]
    assert code == 0, out
    assert out.count("raised MismatchError") == nprocs and "RETURNED DATA" not in out, out
    assert f"  {field}: " in out, out


@pytest.mark.parametrize("case", ["count", "count-shm"])
def test_a_mismatch_after_agreed_calls_is_caught_with_check_on_every_call(case):
    """The same kind agreed first, then one rank changes count: only MPICOLL_CHECK=1 compares
    that call, and then every rank raises."""
    code, out = launch(3, str(PROGRAMS / "mismatch.py"), case, "--after",
                       env={"MPICOLL_CHECK": "1"}, timeout=30)
    assert code == 0 and out.count("raised MismatchError") == 3, out


@pytest.mark.parametrize("nprocs", [2, 3, 4])
@pytest.mark.parametrize("case", ["count-shm", "dtype-shm", "count-shm --nonblocking",
                                  "count-shm --nonblocking --starters"])
def test_shared_memory_calls_of_verified_kinds_that_differ_raise(case, nprocs):
    """Both calls were agreed earlier, so neither is checked again; in shared memory no message
    tag keeps them apart, and each rank read the others' inputs at its own offsets: wrong bits,
    and no rank raised. The stamps of the first barrier now
    differ: every rank raises, on the fast path, in the engine (nonblocking) and on the
    nonblocking starters' bound rounds."""
    code, out = launch(nprocs, str(PROGRAMS / "mismatch.py"), *case.split(), "--verified",
                       timeout=30)
    assert code == 0, out
    assert out.count("raised MismatchError") == nprocs and "RETURNED DATA" not in out, out
    assert "stamped different collectives" in out, out


def test_watchdog_turns_a_hang_into_a_report_and_an_abort():
    """Without the per-call check that mismatch stalls (its messages carry another kind's tag,
    so nothing matches wrongly); MPICOLL_TIMEOUT=3 names the collective and aborts the job."""
    code, out = launch(3, str(PROGRAMS / "mismatch.py"), "count", "--after",
                       env={"MPICOLL_TIMEOUT": "3"}, timeout=40)
    assert code != 0 and "mpicoll watchdog: rank" in out, out
    assert "no round finished" in out or "fingerprint check" in out, out
    assert "RETURNED DATA" not in out, out


def test_a_truncated_message_is_named():
    """With the fingerprint kept out of the tags (a hash collision, forced), a larger message
    reaches a smaller receive: the receiving rank raises MismatchError naming round and peer,
    instead of MPI's opaque error; its peer, still waiting, is ended by the watchdog (after 2 s
    here; the launcher would end the job after 10)."""
    code, out = launch(2, str(PROGRAMS / "mismatch.py"), "count", "--after", "--blind-tags",
                       env={"MPICOLL_TIMEOUT": "2"}, timeout=10, mpi4py=True)
    assert code != 0 and "did not match its receive in round" in out, out
    assert "mpicoll watchdog: rank 1: collective #1" in out and "TIMED OUT" not in out, out
    assert "RETURNED DATA" not in out, out


def test_running_out_of_communicators_says_so():
    """Each communicator mpicoll runs on takes two more of MPI's; MPICH has 2048 context ids,
    so the 682nd communicator kept alive failed with an opaque "Other MPI error" from deep in
    a call. Now every rank raises OutOfCommunicatorsError naming the limit, and mpicoll works
    again once they are freed. (Open MPI has room for all 800.)"""
    code, out = launch(2, str(PROGRAMS / "many_communicators.py"), "800", timeout=60)
    lines = [line for line in out.splitlines() if line.startswith("rank ")]
    assert code == 0 and len(lines) == 2, out
    for line in lines:
        assert line.endswith("afterwards works"), out
        assert "all 800 fine" in line or ("OutOfCommunicatorsError after" in line
                                          and "free the communicators" in line), out
