"""The lean call path, allreduce_init and native on real processes (tests/mpi/latency_cases.py)."""

import pytest


@pytest.mark.parametrize("nprocs", [1, 2, 3, 4, 5])
def test_cases(run_cases, nprocs):
    run_cases("tests/mpi/latency_cases.py", nprocs, timeout=240)
