"""Random differential testing of mpicoll.allreduce on real processes, under whichever MPI the
running environment has (MPICH or Open MPI): cases in tests/mpi/differential_cases.py.

One job per rank count (the larger ones on emulated nodes, so hybrid is hierarchical), each
running its own cases, numbered on from the previous job's: together at least 10,000, and not
one mismatch. DIFFERENTIAL_SEED=S draws other cases; a failure names the seed and the
mismatching case numbers, and DIFFERENTIAL_ONLY=n,m reruns just those on as many ranks (and
MPICOLL_RANKS_PER_NODE) as the failing job:
``mpiexec -n P python -m mpi4py -m pytest tests/mpi/differential_cases.py``.
"""

import re

CASES = "tests/mpi/differential_cases.py"
JOBS = [(1, 1500, None), (2, 3000, None), (3, 3000, None), (4, 2000, 2), (5, 500, 2),
        (6, 500, 3)]  # (ranks, cases, MPICOLL_RANKS_PER_NODE): about a minute on 2 cores
MINIMUM = 10_000
SUMMARY = re.compile(r"^differential: (\d+) cases, (\d+) mismatches \(MPI library (.+?)\)", re.M)


def test_at_least_ten_thousand_random_cases_match(run_cases):
    first, libraries = 0, set()
    for nprocs, cases, per_node in JOBS:
        env = {"DIFFERENTIAL_FIRST": str(first), "DIFFERENTIAL_CASES": str(cases)}
        if per_node:
            env["MPICOLL_RANKS_PER_NODE"] = str(per_node)
        out = run_cases(CASES, nprocs, env=env, timeout=300)
        summaries = SUMMARY.findall(out)
        assert len(summaries) == 1, f"not one summary line from {nprocs} ranks:\n{out[-3000:]}"
        count, mismatches, library = summaries[0]
        assert (int(count), int(mismatches)) == (cases, 0), summaries[0]
        first += cases
        libraries.add(library)
    print(f"differential: {first} cases, 0 mismatches (MPI library {', '.join(libraries)})")
    assert first >= MINIMUM and len(libraries) == 1, (first, libraries)
