"""Buckets and overlap on real processes (cases in tests/mpi/overlap_cases.py)."""

import pytest

CASES = "tests/mpi/overlap_cases.py"


@pytest.mark.parametrize("nprocs", [1, 2, 3, 4, 5])
def test_overlap(run_cases, nprocs):
    run_cases(CASES, nprocs)
