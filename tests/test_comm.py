"""mpicoll.Comm, the drop-in for mpi4py programs, used as mpi4py's own tests use a communicator
(tests/mpi/comm_cases.py: Allreduce, Allgather(v), Reduce_scatter(_block), Bcast and Reduce in
every form), at
1 to 6 ranks; and a real solver changed over by one line."""

import re

import pytest

CASES = "tests/mpi/comm_cases.py"


@pytest.mark.parametrize("nprocs", [1, 2, 3, 4, 5, 6])
def test_as_mpi4py_uses_a_communicator(run_cases, nprocs):
    run_cases(CASES, nprocs)


@pytest.mark.parametrize("nprocs, example", [
    (3, ["benchmarks/examples/cg_poisson.py", "--n", "48"]),
    (5, ["benchmarks/examples/cg_poisson.py", "--n", "24"]),
    (3, ["benchmarks/examples/monte_carlo.py", "--bins", "100,20000", "--steps", "3"]),
    (5, ["benchmarks/examples/power_iteration.py", "--n", "203"])])
def test_an_mpi4py_program_gives_the_same_answer_through_comm(mpirun, nprocs, example):
    """docs/porting.md's examples, natively and through mpicoll.Comm: the same iterations and
    solution (CG), the same bits (integer tallies; power iteration, whose Allgatherv only moves
    data); each exits 1 otherwise."""
    out = mpirun(nprocs, *example, "--reps", "1", timeout=120)
    assert ("same answer" if "cg_poisson" in example[0] else "same bits") in out, out
    assert "DIFFERENT" not in out, out


@pytest.mark.parametrize("nprocs", [1, 4])
def test_mpi4pys_own_collective_tests_pass_through_comm(mpirun, nprocs):
    """mpi4py's own test_cco_{buf,vec} suites (blocking, nonblocking, persistent; fetched
    from the installed release's source distribution) with every test communicator an
    mpicoll.Comm: no test fails on any rank, and mpicoll runs calls of each collective
    (the rest fall back, by reason: benchmarks/mpi4py_tests.py reports them)."""
    out = mpirun(nprocs, "benchmarks/mpi4py_tests.py", timeout=300)
    tests = re.search(r"(\d+) tests, 0 failed on some rank", out)
    assert tests and int(tests.group(1)) > 0, out[-3000:]
    for collective in ("allreduce", "allgather", "reduce_scatter", "bcast", "reduce"):
        ran = re.search(rf"^{collective} \| (\d+) \| (\d+)$", out, re.M)
        assert ran and int(ran.group(1)) > 0, out[-3000:]
