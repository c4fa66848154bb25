"""Differential tests of mpicoll.allgather and mpicoll.reduce_scatter against the MPI library's
own Allgather and Reduce_scatter_block, on real processes: p = 1..6 (oversubscribed on small
machines), every dtype and op allreduce supports, the three call forms, bad input, mismatches.
The cases live in tests/mpi/blockwise_cases.py."""

import pytest

CASES = "tests/mpi/blockwise_cases.py"


@pytest.mark.parametrize("nprocs", [1, 2, 3, 4, 5, 6])
def test_against_mpis_allgather_and_reduce_scatter(run_cases, nprocs):
    run_cases(CASES, nprocs)
