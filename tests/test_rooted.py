"""Differential tests of mpicoll.bcast and mpicoll.reduce against the MPI library's own Bcast
and Reduce, on real processes: p = 1..6 (oversubscribed on small machines), every root, every
dtype and op allreduce supports, sizes 0 to 4 MiB, the three call forms, bad input,
mismatches. The cases live in tests/mpi/rooted_cases.py."""

import pytest

CASES = "tests/mpi/rooted_cases.py"


@pytest.mark.parametrize("nprocs", [1, 2, 3, 4, 5, 6])
def test_against_mpis_bcast_and_reduce(run_cases, nprocs):
    run_cases(CASES, nprocs)
