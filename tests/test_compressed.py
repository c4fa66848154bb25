"""Compressed allreduce on real processes (cases in tests/mpi/compressed_cases.py)."""

import pytest

CASES = "tests/mpi/compressed_cases.py"


@pytest.mark.parametrize("nprocs", [1, 2, 3, 4, 5])
def test_compressed_allreduce(run_cases, nprocs):
    run_cases(CASES, nprocs)


@pytest.mark.parametrize("nprocs, per_node", [(4, 2), (5, 2)])
def test_compressed_hybrid_on_emulated_nodes(run_cases, nprocs, per_node):
    run_cases(CASES, nprocs, select="hybrid or auto", env={"MPICOLL_RANKS_PER_NODE": str(per_node)})
