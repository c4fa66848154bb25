"""Differential tests of mpicoll.allreduce against MPI's own Allreduce, on real processes.

The cases live in tests/mpi/allreduce_cases.py and run under ``mpiexec -n p`` for p = 1..5
(oversubscribed on small machines), then again with emulated multi-rank nodes for hybrid.
"""

import pytest

CASES = "tests/mpi/allreduce_cases.py"


@pytest.mark.parametrize("nprocs", [1, 2, 3, 4, 5])
def test_against_native_allreduce(run_cases, nprocs):
    run_cases(CASES, nprocs)


@pytest.mark.parametrize("nprocs, per_node", [(3, 1), (3, 2), (4, 2), (5, 2), (5, 3), (6, 3)])
def test_hybrid_on_emulated_nodes(run_cases, nprocs, per_node):
    """Equal nodes (4 = 2+2, 6 = 3+3, 3 = 1+1+1) and unequal ones (3 = 2+1, 5 = 2+2+1, 5 = 3+2)."""
    run_cases(CASES, nprocs, select="hybrid or auto", env={"MPICOLL_RANKS_PER_NODE": str(per_node)})
