"""Cases run on every rank under mpiexec (see tests/test_blockwise.py): mpicoll.allgather and
mpicoll.reduce_scatter against the MPI library's own Allgather and Reduce_scatter_block.

Every test makes the same collective calls on every rank and asserts only afterwards
(assert_agreed), so a failing assertion on one rank never leaves the others waiting. Data are
small integers (powers of two for products): every reduction order gives MPI's bits exactly.
"""

import numpy as np
import pytest
from helpers import MPI_OPS, WORLD, assert_agreed, data, digest
from mpi4py import MPI

import mpicoll
from mpicoll import blockwise
from mpicoll.algorithm import native

DTYPES = ["i1", "i2", "i4", "i8", "u1", "u2", "u4", "u8",
          "f2", "f4", "f8", "g", "c8", "c16", "G"]
OPS = ["sum", "prod", "min", "max"]
ALGORITHMS = mpicoll.algorithms("allgather")  # (and reduce_scatter's: the same)


def counts(p):
    return sorted({0, 1, max(p - 1, 0), 13})  # 13: a prime


def ops_for(dtype):
    return [op for op in OPS if not (np.dtype(dtype).kind == "c" and op in ("min", "max"))]


def reference(comm, which, x, op=None):
    p = comm.Get_size()
    if which == "allgather":
        ref = np.empty(x.size * p, x.dtype)
        comm.Allgather(x, ref)
    else:
        ref = np.empty(x.size // p, x.dtype)
        comm.Reduce_scatter_block(x, ref, op=MPI_OPS[op])
    return ref


def compare(comm, problems, what, result, ref):
    """Exactly MPI's values, +0 == -0: the sign of a complex product's zero imaginary part
    depends on the order of the factors, which Open MPI's blocking and nonblocking calls take
    differently (an allgather's bits the same on every rank: the caller's assert_agreed)."""
    if result.dtype != ref.dtype or result.size != ref.size \
            or not np.array_equal(result.ravel(), ref.ravel()):
        problems.append(what)


def comms():
    """COMM_WORLD and a split of it (the even and the odd ranks)."""
    split = WORLD.Split(WORLD.Get_rank() % 2, WORLD.Get_rank())
    return [("world", WORLD, False), ("split", split, True)]


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_allgather_is_mpis(dtype, algorithm):
    problems, results = [], []
    for name, comm, free in comms():
        for n in counts(comm.Get_size()):
            x = data(comm, n, dtype, "sum")
            out = mpicoll.allgather(x, comm=comm, algorithm=algorithm)
            compare(comm, problems, f"{name} n={n}", out, reference(comm, "allgather", x))
            if name == "world":
                results.append(digest(out))
        if free:
            comm.Free()
    assert_agreed(WORLD, problems, np.frombuffer("".join(results).encode(), np.uint8))


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_reduce_scatter_is_mpis(dtype, algorithm):
    problems = []
    for name, comm, free in comms():
        p = comm.Get_size()
        for op in ops_for(dtype):
            for n in counts(p):
                x = data(comm, n * p, dtype, op)
                out = np.full(n, 7, dtype)
                result = mpicoll.reduce_scatter(x, out, op=MPI_OPS[op] if n % 2 else op,
                                                comm=comm, algorithm=algorithm)
                if result is not out:
                    problems.append("the result is not recvbuf")
                compare(comm, problems, f"{name} {op} n={n}", out,
                        reference(comm, "reduce_scatter", x, op))
        if free:
            comm.Free()
    assert_agreed(WORLD, problems, np.zeros(1))


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_about_a_mebibyte_and_any_shape(algorithm):
    """About 1 MiB per rank, in shapes other than flat (as MPI: the elements in memory order)."""
    p = WORLD.Get_size()
    x = data(WORLD, 1 << 18, "f4", "sum").reshape(512, -1)
    gathered = np.empty((p, 1 << 18), "f4")
    mpicoll.allgather(x, gathered, algorithm=algorithm)
    problems = []
    compare(WORLD, problems, "allgather 1 MiB", gathered, reference(WORLD, "allgather", x.ravel()))
    y = data(WORLD, p << 16, "f8", "sum").reshape(p, -1, order="F")
    out = mpicoll.reduce_scatter(y, algorithm=algorithm)
    compare(WORLD, problems, "reduce_scatter 512 KiB", out,
            reference(WORLD, "reduce_scatter", y.ravel(order="F"), "sum"))
    assert_agreed(WORLD, problems, gathered)


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_persistent_started_ten_times(algorithm):
    """allgather_init and reduce_scatter_init: each start reads sendbuf as it is then."""
    p, problems = WORLD.Get_size(), []
    x, y = np.zeros(5, "i8"), np.zeros(3 * p, "f8")
    gathered, scattered = np.empty(5 * p, "i8"), np.empty(3, "f8")
    with mpicoll.allgather_init(x, gathered, algorithm=algorithm) as ag, \
            mpicoll.reduce_scatter_init(y, scattered, op="max", algorithm=algorithm) as rs:
        for start in range(10):
            x[:] = data(WORLD, 5, "i8", "sum", seed=start)
            y[:] = data(WORLD, 3 * p, "f8", "max", seed=start)
            ag.start()
            rs.start()
            if rs.wait() is not scattered or ag.wait() is not gathered:
                problems.append("wait did not return recvbuf")
            compare(WORLD, problems, f"allgather start {start}", gathered,
                    reference(WORLD, "allgather", x))
            compare(WORLD, problems, f"reduce_scatter start {start}", scattered,
                    reference(WORLD, "reduce_scatter", y, "max"))
    assert_agreed(WORLD, problems, gathered)


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize("order", ["allreduce first", "theirs first"])
def test_nonblocking_beside_an_allreduce_in_flight(order, algorithm):
    """iallgather and ireduce_scatter with an iallreduce in flight, completed in either order."""
    p, problems = WORLD.Get_size(), []
    x = data(WORLD, 1000, "f8", "sum")
    y = data(WORLD, 7 * p, "i4", "sum")
    reduced = mpicoll.iallreduce(x, algorithm="ring")
    gathered = mpicoll.iallgather(x, algorithm=algorithm)
    scattered = mpicoll.ireduce_scatter(y, algorithm=algorithm)
    requests = [reduced, gathered, scattered]
    for request in (requests if order == "allreduce first" else requests[::-1]):
        request.wait()
    ref = np.empty_like(x)
    WORLD.Allreduce(x, ref)
    compare(WORLD, problems, "allreduce", reduced.wait(), ref)
    compare(WORLD, problems, "allgather", gathered.wait(), reference(WORLD, "allgather", x))
    compare(WORLD, problems, "reduce_scatter", scattered.wait(),
            reference(WORLD, "reduce_scatter", y, "sum"))
    assert_agreed(WORLD, problems, gathered.wait())


_NONCOMMUTATIVE = MPI.Op.Create(lambda a, b, t: None, commute=False)
BAD = [
    ("allgather recvbuf size", lambda p: (mpicoll.allgather, np.ones(4), np.empty(4 * p + 1)),
     ValueError),
    ("allgather recvbuf dtype", lambda p: (mpicoll.allgather, np.ones(4), np.empty(4 * p, "f4")),
     ValueError),
    ("reduce_scatter not a multiple", lambda p: (mpicoll.reduce_scatter, np.ones(p + 1), None)
     if p > 1 else (mpicoll.reduce_scatter, np.ones(2), np.empty(3)), ValueError),
    ("reduce_scatter recvbuf size", lambda p: (mpicoll.reduce_scatter, np.ones(2 * p),
                                               np.empty(3)), ValueError),
    ("in place", lambda p: (mpicoll.allgather, np.ones(4 * p)[:4], "view"), ValueError),
    ("a codec", lambda p: (lambda s, r: mpicoll.allgather(s, r, codec="fp16"), np.ones(4), None),
     ValueError),
    ("op avg", lambda p: (lambda s, r: mpicoll.reduce_scatter(s, r, op="avg"), np.ones(p), None),
     ValueError),
    ("unknown algorithm", lambda p: (lambda s, r: mpicoll.allgather(s, r, algorithm="tree"),
                                     np.ones(4), None), ValueError),
    ("non-commutative op on ring", lambda p: (lambda s, r: mpicoll.reduce_scatter(
        s, r, op=_NONCOMMUTATIVE, algorithm="ring"), np.ones(p), None), ValueError),
    ("bool", lambda p: (mpicoll.allgather, np.ones(4, bool), None), TypeError),
    ("COMM_NULL", lambda p: (lambda s, r: mpicoll.allgather(s, r, comm=MPI.COMM_NULL),
                             np.ones(4), None), TypeError),
]


@pytest.mark.parametrize("case, make, error", BAD, ids=[case[0] for case in BAD])
def test_bad_input_raises_on_every_rank_before_sending(case, make, error):
    """Every rank raises; then a normal call still matches up: nothing was sent."""
    call, send, recv = make(WORLD.Get_size())
    if isinstance(recv, str):  # in place: recvbuf is the memory sendbuf is part of
        recv = send.base
    with pytest.raises(error):
        call(send, recv)
    x = data(WORLD, 3, "i4", "sum")
    out = mpicoll.allgather(x)
    problems = []
    compare(WORLD, problems, "the call after", out, reference(WORLD, "allgather", x))
    assert_agreed(WORLD, problems, out)


def test_ranks_that_disagree_raise_mismatch_everywhere():
    """A rank that calls another collective, or another count, than the others: MismatchError
    on every rank, nothing sent (afterwards the communicator still works)."""
    if WORLD.Get_size() == 1:
        pytest.skip("one rank cannot disagree with itself")
    comm, p = WORLD.Dup(), WORLD.Get_size()
    last = comm.Get_rank() == p - 1
    caught = []
    with pytest.raises(mpicoll.MismatchError) as error:
        if last:
            mpicoll.reduce_scatter(np.ones(2 * p), comm=comm)
        else:
            mpicoll.allgather(np.ones(2), comm=comm)
    caught.append("collective" in str(error.value))
    with pytest.raises(mpicoll.MismatchError) as error:
        mpicoll.allgather(np.ones(3 if last else 2), comm=comm)
    caught.append("count" in str(error.value))
    for field, args in [("dtype", dict(sendbuf=np.ones(2 * p, "f4" if last else "f8"))),
                        ("op", dict(sendbuf=np.ones(2 * p), op="max" if last else "sum")),
                        ("algorithm", dict(sendbuf=np.ones(2 * p),
                                           algorithm="ring" if last else "native"))]:
        with pytest.raises(mpicoll.MismatchError) as error:
            mpicoll.reduce_scatter(comm=comm, **args)
        caught.append(f"  {field}:" in str(error.value))
    x = data(comm, 2, "f8", "sum")
    out = mpicoll.allgather(x, comm=comm)
    problems = [] if all(caught) else [f"the error names the field: {caught}"]
    compare(comm, problems, "the call after", out, reference(comm, "allgather", x))
    comm.Free()
    assert_agreed(WORLD, problems, out)


def test_auto_runs_ring_for_large_reduce_scatter():
    """auto's size rule (blockwise.RING_FROM): ring from 16 MiB of sendbuf, MPI's own below and
    for allgather, ring for small-integer sums under Open MPI; what ran is the request's."""
    p = WORLD.Get_size()
    big = data(WORLD, (blockwise.RING_FROM["reduce_scatter"] // 4 // p + 1) * p, "f4", "sum")
    requests = [mpicoll.ireduce_scatter(big), mpicoll.ireduce_scatter(big[:p]),
                mpicoll.iallgather(big[:1000]), mpicoll.ireduce_scatter(np.ones(2 * p, "i2"))]
    results = [request.wait() for request in requests]
    ran = [request.algorithm for request in requests]
    small_ints = "native" if native.exact(np.dtype("i2")) else "ring"  # (Open MPI saturates)
    problems = [] if ran == ["ring", "native", "native", small_ints] else [f"auto ran {ran}"]
    compare(WORLD, problems, "16 MiB", results[0], reference(WORLD, "reduce_scatter", big, "sum"))
    assert_agreed(WORLD, problems, results[2])


def test_timing_records_name_the_collective():
    """A timing record per call, naming the collective; count is a block, nbytes nccl-tests'
    size (the larger buffer)."""
    from mpicoll import timing
    p = WORLD.Get_size()
    with timing.recording() as recorder:
        mpicoll.allgather(np.ones(100, "f8"), algorithm="ring")
        mpicoll.reduce_scatter(np.ones(50 * p, "f4"), algorithm="native")
    seen = [(r.collective, r.algorithm, r.count, r.nbytes, r.seconds > 0)
            for r in recorder.records]
    expected = [("allgather", "ring", 100, 800 * p, True),
                ("reduce_scatter", "native", 50, 200 * p, True)]
    assert_agreed(WORLD, [] if seen == expected else [f"records {seen}"], np.zeros(1))
