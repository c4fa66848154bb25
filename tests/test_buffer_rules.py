"""mpi4py's buffer and object rules through mpicoll.Comm and the library calls, side by side with
plain mpi4py (tests/mpi/buffer_rules_cases.py), at 1 to 4 ranks, under each MPI library."""

import pytest

CASES = "tests/mpi/buffer_rules_cases.py"


@pytest.mark.parametrize("nprocs", [1, 2, 3, 4])
def test_every_spelling_and_object_as_mpi4py_takes_it(run_cases, nprocs):
    run_cases(CASES, nprocs, timeout=300)
