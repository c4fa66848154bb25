"""Differential tests of mpicoll.allgather and mpicoll.reduce_scatter against the MPI library's
own Allgather and Reduce_scatter_block, on real processes: p = 1..6 (oversubscribed on small
machines), every dtype and op allreduce supports, the three call forms, bad input, mismatches.
The cases live in tests/mpi/blockwise_cases.py."""

import pytest

CASES = "tests/mpi/blockwise_cases.py"


@pytest.mark.parametrize("nprocs", [1, 2, 3, 4, 5, 6])
def test_against_mpis_allgather_and_reduce_scatter(run_cases, nprocs):
    run_cases(CASES, nprocs)


@pytest.mark.parametrize("nprocs, per_node", [(4, 2), (6, 2), (5, 2), (4, 1)])
def test_hybrid_on_emulated_nodes(run_cases, nprocs, per_node):
    """Equal nodes (2+2, 2+2+2: hybrid's own plan) and unequal ones (2+2+1), or one rank per
    node (1+1+1+1): ring's plan. (3+3 is in the simulator's tests, tests/test_schedules.py.)"""
    run_cases(CASES, nprocs, select="hybrid or auto", env={"MPICOLL_RANKS_PER_NODE": str(per_node)})
