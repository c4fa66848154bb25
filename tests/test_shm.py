"""Shared-memory allreduce (``shm``, and hybrid's node stages) on real processes.

The cases live in tests/mpi/shm_cases.py; they run on one node for p = 1..6 (oversubscribed
on small machines), then on emulated nodes, where shm is refused and hybrid uses the window
only inside each node. The schedules' own checks (races on the window, two calls in a row) are
in tests/test_schedules.py.
"""

import pytest

CASES = "tests/mpi/shm_cases.py"


@pytest.mark.parametrize("nprocs", [1, 2, 3, 4, 5, 6])
def test_on_one_node(run_cases, nprocs):
    run_cases(CASES, nprocs)


@pytest.mark.parametrize("nprocs, per_node", [(4, 2), (6, 3), (5, 2)])
def test_on_emulated_nodes(run_cases, nprocs, per_node):
    run_cases(CASES, nprocs, env={"MPICOLL_RANKS_PER_NODE": str(per_node)})
