"""Buckets and overlap on real processes (cases in tests/mpi/overlap_cases.py)."""

import pytest

CASES = ("-m", "pytest", "-q", "-p", "no:cacheprovider", "--tb=short", "tests/mpi/overlap_cases.py")


@pytest.mark.parametrize("nprocs", [1, 2, 3, 4, 5])
def test_overlap(mpirun, nprocs):
    assert " passed" in mpirun(nprocs, *CASES, env={"PYTHONPATH": "tests/mpi:."})
