"""Cases run on every rank under mpiexec (see tests/test_allreduce.py).

Every test makes the same collective calls on every rank and asserts only afterwards, so a
failing assertion on one rank never leaves the others waiting. Data are small integers (or
powers of two for products), which every reduction order sums exactly: results must then equal
MPI's own Allreduce exactly, and be the same bits on every rank.
"""

import numpy as np
import pytest
from helpers import WORLD, assert_agreed, data, environment, native, \
    slowed_choice_is_tried_again, value_bytes
from mpi4py import MPI

import mpicoll
from mpicoll import trials
from mpicoll.algorithm import names, select

ALGORITHMS = list(names(plain=True)) + ["auto"]  # every registered plain algorithm, and auto
OPS = ["sum", "prod", "min", "max"]
DTYPES = ["i1", "i2", "i4", "i8", "u1", "u2", "u4", "u8",
          "f2", "f4", "f8", "g", "c8", "c16", "G"]


def sizes(p):
    return sorted({0, 1, max(p - 1, 0), p, p + 1, 2 * p + 1, 13, 97, 1000})


def check(comm, x, op, algorithm, inplace=False, close=None):
    """Run mpicoll and MPI on the same input, and assert on every rank (one allgather) that
    mpicoll wrote MPI's result (exactly, or as ``close(out, ref)`` judges) into ``recvbuf``,
    the same bits on every rank, and left ``sendbuf`` as it was. Exact: +0 == -0 (the sign of
    a complex product's zero imaginary part depends on the order of the factors)."""
    ref = native(comm, x, op)
    before = x.copy()
    out = x if inplace else np.full_like(x, 7)
    result = mpicoll.allreduce(x, out, op=op, algorithm=algorithm, comm=comm)
    problems = []
    if not inplace and value_bytes(x) != value_bytes(before):
        problems.append("sendbuf was modified")
    if not (result is out and out.shape == x.shape and out.dtype == x.dtype):
        problems.append("result is not recvbuf, or shape/dtype changed")
    elif not (np.array_equal(out, ref) if close is None else close(out, ref)):
        problems.append(f"differs from MPI_Allreduce:\n{out.ravel()[:8]}\n{ref.ravel()[:8]}")
    assert_agreed(comm, problems, out)


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", OPS)
def test_dtype_op(algorithm, dtype, op):
    if np.dtype(dtype).kind == "c" and op in ("min", "max"):
        pytest.skip("min/max of complex numbers are undefined (an error; see test_bad_input)")
    p = WORLD.Get_size()
    for count in (1, p + 1, 97):
        check(WORLD, data(WORLD, count, dtype, op), op, algorithm)


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize("inplace", [False, True], ids=["out-of-place", "in-place"])
@pytest.mark.parametrize("dtype", ["i4", "f8"])
def test_sizes(algorithm, inplace, dtype):
    for count in sizes(WORLD.Get_size()) + [1_000_003]:
        check(WORLD, data(WORLD, count, dtype, "sum"), "sum", algorithm, inplace)


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_shapes_kept(algorithm):
    for shape in [(), (3, 5), (2, 0, 4), (4, 3, 2)]:
        x = data(WORLD, int(np.prod(shape)), "f4", "sum").reshape(shape)
        check(WORLD, x, "sum", algorithm)


def communicators():
    """COMM_SELF, a duplicate, and sub-communicators: halves, and one with ranks reversed."""
    rank = WORLD.Get_rank()
    yield "self", MPI.COMM_SELF
    yield "dup", WORLD.Dup()
    yield "halves", WORLD.Split(rank % 2, rank)
    yield "reversed", WORLD.Split(0, -rank)


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_communicators(algorithm):
    for name, comm in communicators():
        for count in (0, comm.Get_size() + 1, 1000):
            for op in ("sum", "max"):
                check(comm, data(comm, count, "i8", op, seed=5), op, algorithm)
        if comm != MPI.COMM_SELF:
            comm.Free()


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize("dtype", ["f4", "f8"])
def test_random_floats_close_to_native(algorithm, dtype):
    """Arbitrary floats: order changes rounding, so close to MPI, but identical across ranks."""
    rng = np.random.default_rng(WORLD.Get_rank())
    x = rng.standard_normal(10_007).astype(dtype)
    tol = 1e-5 if dtype == "f4" else 1e-12
    check(WORLD, x, "sum", algorithm,
          close=lambda out, ref: np.allclose(out, ref, rtol=tol, atol=tol * WORLD.Get_size()))


@pytest.mark.parametrize("algorithm", ["tree", "hybrid"])
def test_many_tree_segments(algorithm):
    """A 40-byte segment forces hundreds of pipelined rounds (and odd last segments)."""
    with environment(MPICOLL_TREE_SEGMENT=40):
        for count in (1, 5, 999):
            check(WORLD, data(WORLD, count, "f8", "sum"), "sum", algorithm)


def test_mpi_op_objects_and_names_agree():
    x = data(WORLD, 50, "i4", "sum")
    by_name = mpicoll.allreduce(x, op="max")
    by_op = mpicoll.allreduce(x, op=MPI.MAX)
    assert np.array_equal(by_name, by_op)
    assert np.array_equal(by_name, native(WORLD, x, "max"))


def test_several_requests_in_flight():
    """Nonblocking calls on one communicator use distinct tags: no crosstalk."""
    p = WORLD.Get_size()
    xs = [data(WORLD, n, "i8", "sum", seed=n) for n in (1, p + 1, 5000, 3)]
    reqs = [mpicoll.iallreduce(x, algorithm=a) for x, a in zip(xs, ["ring", "tree", "ring", "hybrid"])]
    while not all([r.test() for r in reqs]):
        pass
    outs = [r.wait() for r in reqs]
    refs = [native(WORLD, x, "sum") for x in xs]
    for out, ref in zip(outs, refs):
        assert np.array_equal(out, ref)


def test_auto_names_what_it_ran():
    chosen, ran = [], []
    for x in (np.ones(4, "f4"), np.ones(1 << 20, "f4")):
        chosen.append(mpicoll.choose_algorithm(x))
        request = mpicoll.iallreduce(x)
        request.wait()
        ran.append(request.algorithm)
    assert chosen == ran
    assert set(ran) <= set(mpicoll.algorithms()) - {"auto"}


def test_auto_tries_its_shortlist_then_keeps_the_fastest():
    """auto's trials (mpicoll.trials), small and large: every call gives MPI's
    result, through the trials and after; then every rank keeps the same algorithm, one of the
    shortlist, which choose_algorithm names and iallreduce runs; MPICOLL_AUTO=model: none."""
    comm = WORLD.Dup()  # (its trials start afresh)
    layout = mpicoll.context.of(comm).layout
    kept, problems = [], []
    for count in (3, 1 << 14, 1 << 17):
        x = data(comm, count, "f4", "sum")
        shortlist = select.shortlist(x.nbytes, layout)
        left = mpicoll.api.trials_left(x, comm=comm)
        calls = 1 if x.nbytes <= select.OWN_UP_TO else \
            (1 + trials.REPS) * len(shortlist) * trials.per_sample(select.size_class(x.nbytes))
        if left != (calls if len(shortlist) > 1 else 0):
            problems.append(f"{count}: {left} trials left of {shortlist}")
        for _ in range(left + 2):
            check(comm, x, "sum", "auto")
        name = mpicoll.choose_algorithm(x, comm=comm)
        request = mpicoll.iallreduce(x, comm=comm)
        if not np.array_equal(request.wait(), native(comm, x, "sum")) or \
                request.algorithm != name or name not in shortlist or \
                mpicoll.api.trials_left(x, comm=comm):
            problems.append(f"{count}: kept {name} of {shortlist}, iallreduce ran "
                            f"{request.algorithm}")
        kept.append(name)
    with environment(MPICOLL_AUTO="model"):
        x = data(comm, 1 << 15, "f4", "sum")
        if mpicoll.api.trials_left(x, comm=comm) or mpicoll.choose_algorithm(x, comm=comm) != \
                select.resolve(None, x.nbytes, layout, None).name:
            problems.append("MPICOLL_AUTO=model tried")
    assert len({tuple(k) for k in comm.allgather(kept)}) == 1, comm.allgather(kept)
    comm.Free()
    assert_agreed(WORLD, problems, np.zeros(1))


def test_auto_guard_tries_again_a_choice_that_slowed():
    """auto's guard (mpicoll.trials.Watch): a kept choice whose checks find it far slower than
    its trial measured it (here: the trials' figures divided by 1000, as if the node got busy
    since) is tried again at the same call on every rank, every call exact throughout; one
    that runs as measured stays; MPICOLL_AUTO=once keeps it unguarded. An iallreduce made while
    the size is on trial does not keep the blocking calls from their trials."""
    comm = WORLD.Dup()
    x = data(comm, 1 << 14, "f4", "sum")  # 64 KiB: above select.OWN_UP_TO
    problems, ctx = [], mpicoll.context.of(comm)
    ref = native(comm, x, "sum")
    left = mpicoll.api.trials_left(x, comm=comm)
    if not np.array_equal(mpicoll.iallreduce(x, comm=comm).wait(), ref):
        problems.append("iallreduce on trial")

    def calls(n):
        for _ in range(n):
            if not np.array_equal(mpicoll.allreduce(x, comm=comm), ref):
                problems.append("a result differs from MPI's")
                return

    calls(left)
    key = next(iter(ctx.trials.kept), None) if comm.size > 1 else None
    if comm.size > 1:
        problems += slowed_choice_is_tried_again(
            ctx, key, calls, lambda: mpicoll.api.trials_left(x, comm=comm), left)
        with environment(MPICOLL_AUTO="once"):
            once = WORLD.Dup()
            for _ in range(mpicoll.api.trials_left(x, comm=once)):
                mpicoll.allreduce(x, comm=once)
            if mpicoll.context.of(once).trials.watches:
                problems.append("MPICOLL_AUTO=once watches")
            once.Free()
        kept = ctx.trials.kept[key]
    else:
        kept = mpicoll.choose_algorithm(x, comm=comm)  # (one rank tries nothing)
    assert len(set(comm.allgather(kept))) == 1
    comm.Free()
    assert_agreed(WORLD, problems, np.zeros(1))


_NONCOMMUTATIVE = MPI.Op.Create(lambda a, b, t: None, commute=False)
BAD_INPUTS = [
    ("list", lambda x: dict(sendbuf=list(x)), TypeError),
    ("non-contiguous", lambda x: dict(sendbuf=x[::2]), ValueError),
    ("shape mismatch", lambda x: dict(sendbuf=x, recvbuf=np.empty(x.size + 1, x.dtype)), ValueError),
    ("dtype mismatch", lambda x: dict(sendbuf=x, recvbuf=np.empty(x.size, "f8")), ValueError),
    ("read-only recvbuf", lambda x: dict(sendbuf=x, recvbuf=np.broadcast_to(x, x.shape)), ValueError),
    ("overlap", lambda x: dict(sendbuf=x[:-1], recvbuf=x[1:]), ValueError),
    ("unknown algorithm", lambda x: dict(sendbuf=x, algorithm="butterfly"), ValueError),
    ("unknown op", lambda x: dict(sendbuf=x, op="xor"), ValueError),
    ("unsupported MPI.Op", lambda x: dict(sendbuf=x, op=MPI.BXOR), ValueError),
    ("non-commutative user op", lambda x: dict(sendbuf=x, op=_NONCOMMUTATIVE), ValueError),
    ("complex max", lambda x: dict(sendbuf=x.astype("c16"), op="max"), TypeError),
    ("bool", lambda x: dict(sendbuf=x > 0, op="sum"), TypeError),
    ("object", lambda x: dict(sendbuf=x.astype(object)), TypeError),
    ("unknown codec", lambda x: dict(sendbuf=x, codec="zip"), ValueError),
    ("intercomm-like", lambda x: dict(sendbuf=x, comm="world"), TypeError),
    ("COMM_NULL", lambda x: dict(sendbuf=x, comm=MPI.COMM_NULL), TypeError),
]


@pytest.mark.parametrize("case, make, error", BAD_INPUTS, ids=[c[0] for c in BAD_INPUTS])
def test_bad_input_raises_before_sending(case, make, error):
    """Every rank raises; afterwards a normal call still matches up, so nothing was sent."""
    x = np.arange(10, dtype="f4")
    with pytest.raises(error):
        mpicoll.allreduce(**make(x))
    assert np.array_equal(mpicoll.allreduce(x), native(WORLD, x, "sum"))


def test_timing_records_what_ran_without_changing_results():
    from mpicoll import timing
    x = data(WORLD, 5000, "f8", "sum")
    plain = mpicoll.allreduce(x, algorithm="ring")
    with timing.recording() as rec:
        timed = mpicoll.allreduce(x, algorithm="ring")
        mpicoll.allreduce(x[:1], algorithm="auto")
    assert np.array_equal(plain, timed)
    ring, auto = rec.records
    assert (ring.algorithm, ring.count, ring.nbytes, ring.op) == ("ring", 5000, 40000, "sum")
    assert ring.rank == WORLD.Get_rank() and ring.ranks == WORLD.Get_size()
    tried = select.shortlist(8, mpicoll.context.of(WORLD).layout)  # (in its trials, or kept)
    assert auto.algorithm in tried or auto.algorithm == mpicoll.choose_algorithm(x[:1])
    assert ring.t1 >= ring.t0
    if WORLD.Get_size() > 1:
        assert set(ring.phases) == {"reduce-scatter", "allgather"}
        assert sum(ring.phases.values()) == pytest.approx(ring.seconds, rel=1e-6, abs=1e-9)
