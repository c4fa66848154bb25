"""Random differential cases, run on every rank under mpiexec (see tests/test_differential.py).

Each case draws, from ``[seed, case]`` (so the same on every rank, and any one case can be
rerun alone), a communicator, a dtype, an op, an algorithm, in place or not, and a count
(0..5000, log-uniform, with 0, 1, p-1, p, p+1 and 2p+1 often), and sometimes a tree segment
(MPICOLL_TREE_SEGMENT) of a few elements; each rank's input comes from
``[seed, case, 1 + its rank in that communicator]``. Then:

* integers (full range; wrap-around included) must equal NumPy's modular reduction of every
  rank's input, regenerated here from the seed: not MPI's own Allreduce, which is not always
  modular (Open MPI's op/avx saturates uint8 sums, open-mpi/ompi#8045);
* floats and complex numbers, exact-valued (small integers, powers of two, or anything for
  min/max) so every order of reduction gives the same values, must equal ``comm.Allreduce``;
* every rank of a communicator must end with the same bits; ``recvbuf`` must be the result;
  an out-of-place ``sendbuf`` must be left alone.

Mismatches are collected, not raised one by one, so all ranks always make the same calls; at
the end rank 0 prints ``differential: N cases, M mismatches (MPI library ...)`` and the test
fails on every rank, naming the first mismatching cases, if M > 0. Environment:
``DIFFERENTIAL_SEED`` (default 1), ``DIFFERENTIAL_CASES`` cases (default 1000) from number
``DIFFERENTIAL_FIRST`` (default 0), or ``DIFFERENTIAL_ONLY`` (comma-separated case numbers:
rerun just those).
"""

import hashlib
import math
import os

import numpy as np
from helpers import MPI_OPS, WORLD, assert_everywhere, environment, value_bytes
from mpi4py import MPI

import mpicoll
from mpicoll import context
from mpicoll.algorithm import get, names, native

ALGORITHMS = list(names(plain=True)) + ["auto"]
OPS = ["sum", "prod", "min", "max"]
INTEGERS = ["i1", "i2", "i4", "i8", "u1", "u2", "u4", "u8"]
FLOATS = ["f2", "f4", "f8", "c8", "c16"]
MAX_COUNT = 5000
NAMED = 20  # mismatches named in the failure at most

# Largest |value| of a float sum's inputs: 6 of them still add up exactly.
SUM_RANGE = {"f2": 300, "f4": 1 << 21, "f8": 1 << 49}
POWERS_OF_TWO = [0.0, 0.5, -0.5, 1.0, -1.0, 2.0, -2.0, 4.0, -4.0]  # |product of 6| <= 4096
GAUSSIAN = [-1, 0, 1, 2]  # components of complex factors: products of 6 stay exact integers
UFUNCS = {"sum": np.add, "prod": np.multiply, "min": np.minimum, "max": np.maximum}
SEGMENT_ENV = "MPICOLL_TREE_SEGMENT"


def communicators():
    """(kind, communicator, group key): ranks with equal keys share the communicator."""
    rank = WORLD.Get_rank()
    return [("world", WORLD, 0), ("dup", WORLD.Dup(), 0),
            ("halves", WORLD.Split(rank % 2, rank), rank % 2),
            ("reversed", WORLD.Split(0, -rank), 0), ("self", MPI.COMM_SELF, rank)]


def draw_case(seed, case, comms):
    """The case's parameters: the same on every rank."""
    rng = np.random.default_rng([seed, case, 0])
    kind, comm, key = comms[rng.integers(len(comms))]
    dtype = np.dtype(rng.choice(INTEGERS + FLOATS))
    ops = OPS if dtype.kind != "c" else ["sum", "prod"]
    op = ops[rng.integers(len(ops))]
    algorithm = ALGORITHMS[rng.integers(len(ALGORITHMS))]
    if algorithm != "auto" and get(algorithm).mpi and not native.exact(dtype):
        algorithm = "auto"  # Open MPI's own 8/16-bit sums saturate: known, and not ours to test
    if algorithm != "auto" and get(algorithm).one_node and len(context.of(comm).layout.nodes) > 1:
        algorithm = "auto"  # shm on several (emulated) nodes is refused: shm_cases tests that
    inplace = bool(rng.integers(2))
    p = comm.Get_size()
    if rng.random() < 0.3:
        count = int(rng.choice([0, 1, max(p - 1, 0), p, p + 1, 2 * p + 1]))
    else:
        count = int(math.exp(rng.uniform(0, math.log(MAX_COUNT + 1)))) - 1
    wide_prod = bool(rng.integers(2))  # integer products: full range (wraps) or small factors
    segment = None  # the default, else a small tree segment: 2..40 pipelined rounds, odd last ones
    if count and rng.random() < 0.25:
        segment = max(1, count * dtype.itemsize // int(rng.integers(2, 41)) + int(rng.integers(8)))
    return kind, comm, key, dtype, op, algorithm, inplace, count, wide_prod, segment


def rank_input(seed, case, rank, dtype, op, count, wide_prod):
    """Rank ``rank``'s input of a case (any rank can regenerate any other's)."""
    rng = np.random.default_rng([seed, case, 1 + rank])
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        if op == "prod" and not wide_prod:
            return rng.integers(max(info.min, -3), 4, size=count).astype(dtype)
        return rng.integers(info.min, info.max, size=count, dtype=dtype, endpoint=True)
    real = np.dtype(dtype.char.lower()) if dtype.kind == "c" else dtype
    if op in ("min", "max"):
        return (rng.standard_normal(count) * 100).astype(dtype)  # min/max are exact anyway

    def part():
        if op == "prod":
            return rng.choice(GAUSSIAN if dtype.kind == "c" else POWERS_OF_TWO, size=count)
        limit = SUM_RANGE[real.str[1:]]
        return rng.integers(-limit, limit, size=count, endpoint=True)

    x = part().astype(dtype)
    if dtype.kind == "c":
        x += 1j * part().astype(real)
    return x


def expected(seed, case, comm, dtype, op, count, wide_prod, x):
    """The exact answer: NumPy's modular reduction of every rank's input for integers, MPI's
    own Allreduce for exact-valued floats."""
    if dtype.kind in "fc":
        ref = np.empty_like(x)
        comm.Allreduce(x, ref, op=MPI_OPS[op])
        return ref
    inputs = np.stack([rank_input(seed, case, r, dtype, op, count, wide_prod)
                       for r in range(comm.Get_size())])
    return UFUNCS[op].reduce(inputs, axis=0, dtype=dtype)


def run_case(seed, case, comms):
    """Run one case; return (group key, digest of this rank's result, what went wrong or None)."""
    kind, comm, key, dtype, op, algorithm, inplace, count, wide_prod, segment = \
        draw_case(seed, case, comms)
    x = rank_input(seed, case, comm.Get_rank(), dtype, op, count, wide_prod)
    before = x.copy()
    ref = expected(seed, case, comm, dtype, op, count, wide_prod, x)
    out = x if inplace else np.full_like(x, 7)
    what = (f"case {case} (seed {seed}): {kind} of {comm.Get_size()}, {algorithm}, {op}, "
            f"{dtype}, count {count}, {'in place' if inplace else 'out of place'}"
            + (f", {SEGMENT_ENV}={segment}" if segment else ""))
    try:
        with environment(**({SEGMENT_ENV: segment} if segment else {})):
            result = mpicoll.allreduce(x, out, op=op, algorithm=algorithm, comm=comm)
    except Exception as error:  # noqa: BLE001 -- recorded; every rank raising still matches up
        return (case, kind, key), b"", f"{what}: raised {error!r}"
    problem = None
    if result is not out:
        problem = "the result is not recvbuf"
    elif not inplace and value_bytes(x) != value_bytes(before):
        problem = "sendbuf was modified"
    elif not np.array_equal(out, ref):  # values: +0 == -0 (a zero's sign follows the order)
        wrong = np.flatnonzero(out != ref)
        problem = (f"{wrong.size} elements differ, first at {wrong[0]}: "
                   f"got {out[wrong[0]]!r}, expected {ref[wrong[0]]!r}")
    digest = hashlib.blake2b(value_bytes(out), digest_size=16).digest()
    return (case, kind, key), digest, problem and f"{what}: {problem}"


def case_numbers():
    """DIFFERENTIAL_ONLY's cases, else DIFFERENTIAL_CASES of them from DIFFERENTIAL_FIRST."""
    only = os.environ.get("DIFFERENTIAL_ONLY")
    if only:
        return [int(c) for c in only.split(",")]
    first = int(os.environ.get("DIFFERENTIAL_FIRST", "0"))
    return range(first, first + int(os.environ.get("DIFFERENTIAL_CASES", "1000")))


def test_random_cases(capsys):
    seed = int(os.environ.get("DIFFERENTIAL_SEED", "1"))
    cases = case_numbers()
    name, version = MPI.get_vendor()
    library = f"{name} {'.'.join(map(str, version))}"
    if WORLD.Get_rank() == 0:
        with capsys.disabled():  # shown even if the job then hangs: the seed reproduces it
            print(f"\ndifferential: seed {seed}, {len(cases)} cases from case {cases[0]} on "
                  f"{WORLD.Get_size()} ranks", flush=True)
    comms = communicators()
    digests, problems = {}, {}
    for case in cases:
        group, digest, problem = run_case(seed, case, comms)
        digests[group] = digest
        if problem:
            problems[case] = problem
    everywhere = {}
    for found in WORLD.allgather(problems):
        for case, problem in found.items():
            everywhere.setdefault(case, problem)
    results = {}  # the same bits on every rank of a case's communicator
    for found in WORLD.allgather(digests):
        for group, digest in found.items():
            results.setdefault(group, set()).add(digest)
    for (case, kind, _), bits in results.items():
        if len(bits) > 1:
            everywhere.setdefault(case, f"case {case} (seed {seed}): ranks of one {kind} "
                                        "communicator ended with different bits")
    for _, comm, _ in comms[1:4]:
        comm.Free()
    if WORLD.Get_rank() == 0:
        with capsys.disabled():
            print(f"differential: {len(cases)} cases, {len(everywhere)} mismatches "
                  f"(MPI library {library}) on {WORLD.Get_size()} ranks, seed {seed}", flush=True)
            for case in sorted(everywhere)[:NAMED]:
                print(f"differential mismatch: {everywhere[case]}", flush=True)
    named = "\n".join(everywhere[c] for c in sorted(everywhere)[:NAMED])
    assert_everywhere(WORLD, not everywhere, f"{len(everywhere)} of {len(cases)} cases "
                                             f"mismatched (seed {seed}):\n{named}")
