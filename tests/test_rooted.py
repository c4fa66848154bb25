"""Differential tests of mpicoll.bcast and mpicoll.reduce against the MPI library's own Bcast
and Reduce, on real processes: p = 1..6 (oversubscribed on small machines), every root, every
dtype and op allreduce supports, sizes 0 to 4 MiB, the three call forms, bad input,
mismatches. The cases live in tests/mpi/rooted_cases.py."""

import pytest

CASES = "tests/mpi/rooted_cases.py"


@pytest.mark.parametrize("nprocs", [1, 2, 3, 4, 5, 6])
def test_against_mpis_bcast_and_reduce(run_cases, nprocs):
    run_cases(CASES, nprocs)


@pytest.mark.parametrize("nprocs, per_node", [(4, 2), (5, 2), (6, 3), (6, 2), (4, 1)])
def test_hybrid_on_emulated_nodes(run_cases, nprocs, per_node):
    """A binomial tree of node leaders and shared memory in each node, on emulated 2+2, 2+2+1,
    3+3, 2+2+2 and 1+1+1+1 nodes (every layout up to 9 ranks is in tests/test_schedules.py)."""
    run_cases(CASES, nprocs, select="hybrid or auto", env={"MPICOLL_RANKS_PER_NODE": str(per_node)})
