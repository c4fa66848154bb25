"""Compressed allreduce on real processes (cases in tests/mpi/compressed_cases.py)."""

import pytest

CASES = ("-m", "pytest", "-q", "-p", "no:cacheprovider", "--tb=short", "tests/mpi/compressed_cases.py")


@pytest.mark.parametrize("nprocs", [1, 2, 3, 4, 5])
def test_compressed_allreduce(mpirun, nprocs):
    assert " passed" in mpirun(nprocs, *CASES, env={"PYTHONPATH": "tests/mpi:."})


@pytest.mark.parametrize("nprocs, per_node", [(4, 2), (5, 2)])
def test_compressed_hybrid_on_emulated_nodes(mpirun, nprocs, per_node):
    out = mpirun(nprocs, *CASES, "-k", "hybrid or auto",
                 env={"PYTHONPATH": "tests/mpi:.", "MPICOLL_RANKS_PER_NODE": str(per_node)})
    assert " passed" in out
