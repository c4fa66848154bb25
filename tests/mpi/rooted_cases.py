"""Cases run on every rank under mpiexec (see tests/test_rooted.py): mpicoll.bcast and
mpicoll.reduce against the MPI library's own Bcast and Reduce, every root, in place and not.

Every test makes the same collective calls on every rank and asserts only afterwards
(assert_agreed), so a failing assertion on one rank never leaves the others waiting. Data are
small integers (powers of two for products): every reduction order gives MPI's bits exactly;
a non-commutative op shows the order itself.
"""

import numpy as np
import pytest
from helpers import MPI_OPS, WORLD, assert_agreed, data, digest, runnable
from mpi4py import MPI

import mpicoll
from mpicoll.algorithm import registry

DTYPES = ["i1", "i2", "i4", "i8", "u1", "u2", "u4", "u8",
          "f2", "f4", "f8", "g", "c8", "c16", "G"]
OPS = ["sum", "prod", "min", "max"]
BCAST = runnable("bcast")
REDUCE = runnable("reduce")
REORDERS = [name for name in REDUCE if name != "auto"
            and registry.get(name, "reduce").needs_commutative]  # ring: reduce-scatter first
_KEEPS_B = MPI.Op.Create(lambda a, b, t: None, commute=False)  # inout kept: rank order matters


def counts(p):
    return sorted({0, 1, max(p - 1, 0), 13})  # 13: a prime


def ops_for(dtype):
    return [op for op in OPS if not (np.dtype(dtype).kind == "c" and op in ("min", "max"))]


def comms():
    """COMM_WORLD (every root) and a split of it, the even and the odd ranks (its first and
    last root)."""
    split = WORLD.Split(WORLD.Get_rank() % 2, WORLD.Get_rank())
    return [("world", WORLD, list(range(WORLD.Get_size()))),
            ("split", split, sorted({0, split.Get_size() - 1}))]


def bcast_reference(comm, x, root):
    ref = x.copy()
    comm.Bcast(ref, root)
    return ref


def reduce_reference(comm, x, op, root):
    ref = np.empty_like(x) if comm.Get_rank() == root else None
    comm.Reduce(x, ref, op=MPI_OPS[op] if isinstance(op, str) else op, root=root)
    return ref


def compare(problems, what, result, ref):
    if result is None or result.dtype != ref.dtype or result.size != ref.size \
            or not np.array_equal(result.ravel(), ref.ravel()):
        problems.append(what)


@pytest.mark.parametrize("algorithm", BCAST)
@pytest.mark.parametrize("dtype", DTYPES)
def test_bcast_is_mpis(dtype, algorithm):
    problems, results = [], []
    for name, comm, roots in comms():
        for root in roots:
            for n in counts(comm.Get_size()):
                x = data(comm, n, dtype, "sum", seed=root)
                ref = bcast_reference(comm, x, root)
                if mpicoll.bcast(x, root, comm=comm, algorithm=algorithm) is not x:
                    problems.append("bcast did not return buf")
                compare(problems, f"{name} root {root} n={n}", x, ref)
                if name == "world":
                    results.append(digest(x))
        if comm is not WORLD:
            comm.Free()
    assert_agreed(WORLD, problems, np.frombuffer("".join(results).encode(), np.uint8))


@pytest.mark.parametrize("algorithm", REDUCE)
@pytest.mark.parametrize("dtype", DTYPES)
def test_reduce_is_mpis(dtype, algorithm):
    """The root's result is MPI's; the others get None and their recvbuf is left alone."""
    problems = []
    for name, comm, roots in comms():
        me = comm.Get_rank()
        for root in roots:
            for op in ops_for(dtype):
                for n in counts(comm.Get_size()):
                    x = data(comm, n, dtype, op, seed=root)
                    ref = reduce_reference(comm, x, op, root)
                    out = np.full(n, 7, dtype)
                    result = mpicoll.reduce(x, out, op=MPI_OPS[op] if n % 2 else op, root=root,
                                            comm=comm, algorithm=algorithm)
                    if me == root:
                        if result is not out:
                            problems.append("the root's result is not recvbuf")
                        compare(problems, f"{name} {op} root {root} n={n}", out, ref)
                    elif result is not None or (out != 7).any():
                        problems.append(f"rank {me} off root {root}: {result}, recvbuf {out}")
        if comm is not WORLD:
            comm.Free()
    assert_agreed(WORLD, problems, np.zeros(1))


@pytest.mark.parametrize("algorithm", REDUCE)
def test_reduce_in_place_and_in_rank_order(algorithm):
    """In place at the root (MPI.IN_PLACE or recvbuf itself), an allocated result, and a
    non-commutative op reduced in rank order, as MPI_Reduce does, at every root (refused by
    an algorithm that reorders)."""
    problems = []
    for name, comm, roots in comms():
        me = comm.Get_rank()
        for root in roots:
            x = data(comm, 9, "i8", "sum", seed=root)
            ref = reduce_reference(comm, x, "sum", root)
            if me == root:
                y = x.copy()
                mpicoll.reduce(MPI.IN_PLACE if root % 2 else y, y, root=root, comm=comm,
                               algorithm=algorithm)
                compare(problems, f"{name} in place root {root}", y, ref)
            else:
                mpicoll.reduce(x, root=root, comm=comm, algorithm=algorithm)
            before = x.copy()
            got = mpicoll.reduce(x, root=root, comm=comm, algorithm=algorithm)
            if me == root:
                compare(problems, f"{name} allocated root {root}", got, ref)
            compare(problems, f"{name} sendbuf left as it was, root {root}", x, before)
            z = data(comm, 5, "f8", "sum", seed=root + 1)
            ref = reduce_reference(comm, z, _KEEPS_B, root)
            if algorithm in REORDERS:  # (it says so, on every rank, before anything moves)
                with pytest.raises(ValueError, match="not commutative"):
                    mpicoll.reduce(z, op=_KEEPS_B, root=root, comm=comm, algorithm=algorithm)
                continue
            got = mpicoll.reduce(z, op=_KEEPS_B, root=root, comm=comm, algorithm=algorithm)
            if me == root:
                compare(problems, f"{name} non-commutative root {root}", got, ref)
        if comm is not WORLD:
            comm.Free()
    assert_agreed(WORLD, problems, np.zeros(1))


@pytest.mark.parametrize("bcast, reduce", list(zip(BCAST, REDUCE)))
def test_four_mebibytes_and_any_shape(bcast, reduce):
    """About 4 MiB, in shapes other than flat (as MPI: the elements in memory order), from
    the last rank."""
    p, problems = WORLD.Get_size(), []
    root = p - 1
    x = data(WORLD, 1 << 19, "f8", "sum").reshape(512, -1, order="F")
    ref = bcast_reference(WORLD, x.ravel(order="F"), root)
    mpicoll.bcast(x, root, algorithm=bcast)
    compare(problems, "bcast 4 MiB", x.ravel(order="F"), ref)
    y = data(WORLD, 1 << 20, "f4", "sum").reshape(1024, -1)
    ref = reduce_reference(WORLD, y, "sum", root)
    got = mpicoll.reduce(y, np.empty_like(y), root=root, algorithm=reduce)
    if WORLD.Get_rank() == root:
        compare(problems, "reduce 4 MiB", got, ref)
    assert_agreed(WORLD, problems, x)


@pytest.mark.parametrize("bcast, reduce", list(zip(BCAST, REDUCE)))
def test_persistent_started_ten_times(bcast, reduce):
    """bcast_init and reduce_init: each start reads the input as it is then."""
    p, me, problems = WORLD.Get_size(), WORLD.Get_rank(), []
    root = 1 % p
    buf, x, out = np.zeros(6, "i4"), np.zeros(11, "f8"), np.zeros(11, "f8")
    with mpicoll.bcast_init(buf, root, algorithm=bcast) as bc, \
            mpicoll.reduce_init(x, out, op="max", root=root, algorithm=reduce) as rd:
        for start in range(10):
            mine = data(WORLD, 6, "i4", "sum", seed=start)
            buf[:] = mine
            x[:] = data(WORLD, 11, "f8", "max", seed=start)
            bc.start()
            rd.start()
            if bc.wait() is not buf or (rd.wait() is out) != (me == root):
                problems.append("wait did not return buf, or recvbuf at the root only")
            compare(problems, f"bcast start {start}", buf, bcast_reference(WORLD, mine, root))
            ref = reduce_reference(WORLD, x, "max", root)
            if me == root:
                compare(problems, f"reduce start {start}", out, ref)
    assert_agreed(WORLD, problems, buf)


@pytest.mark.parametrize("bcast, reduce", list(zip(BCAST, REDUCE)))
@pytest.mark.parametrize("order", ["allreduce first", "theirs first"])
def test_nonblocking_beside_an_allreduce_in_flight(order, bcast, reduce):
    """ibcast and ireduce with an iallreduce in flight, completed in either order."""
    p, me, problems = WORLD.Get_size(), WORLD.Get_rank(), []
    x = data(WORLD, 1000, "f8", "sum")
    buf = data(WORLD, 3000, "i8", "sum", seed=1)
    sent = bcast_reference(WORLD, buf, p // 2)
    reduced = mpicoll.iallreduce(x, algorithm="ring")
    broadcast = mpicoll.ibcast(buf, p // 2, algorithm=bcast)
    rooted = mpicoll.ireduce(x, op="min", root=p - 1, algorithm=reduce)
    requests = [reduced, broadcast, rooted]
    for request in (requests if order == "allreduce first" else requests[::-1]):
        request.wait()
    ref = np.empty_like(x)
    WORLD.Allreduce(x, ref)
    compare(problems, "allreduce", reduced.wait(), ref)
    compare(problems, "bcast", broadcast.wait(), sent)
    ref = reduce_reference(WORLD, x, "min", p - 1)
    if me == p - 1:
        compare(problems, "reduce", rooted.wait(), ref)
    elif rooted.wait() is not None:
        problems.append("ireduce's wait off the root is not None")
    assert_agreed(WORLD, problems, buf)


@pytest.mark.parametrize("bcast, reduce", list(zip(BCAST, REDUCE)))
def test_a_loop_on_the_same_arrays_takes_the_fast_path(bcast, reduce):
    """Blocking calls in a loop on the same arrays run lowered (mpicoll.fastpath.LoweredBlocks)
    and give MPI's bits as the data change: off the root a reduce returns None (recvbuf None,
    or one left as it was); another root or op between them takes the full path and is right."""
    from mpicoll import context
    p, me, problems = WORLD.Get_size(), WORLD.Get_rank(), []
    buf, x = np.empty(7, "f8"), np.empty(5, "i8")
    out = np.zeros(5, "i8")
    for step in range(8):
        root = (p - 1) if step != 5 else 0
        mine = data(WORLD, 7, "f8", "sum", seed=step)
        buf[:] = mine
        mpicoll.bcast(buf, root, algorithm=bcast)
        compare(problems, f"bcast step {step}", buf, bcast_reference(WORLD, mine, root))
        x[:] = data(WORLD, 5, "i8", "max", seed=step)
        op = "max" if step != 6 else "min"
        ref = reduce_reference(WORLD, x, op, root)
        before = out.copy()
        got = mpicoll.reduce(x, out if me == root or step % 2 else None, op=op, root=root,
                             algorithm=reduce)
        if me == root:
            compare(problems, f"reduce {op} step {step}", got, ref)
        elif got is not None or (out != before).any():
            problems.append(f"step {step} off the root: {got}, recvbuf {out}")
    lowered = [call for call in context.known(WORLD).lowered
               if type(call).__name__ == "LoweredBlocks"]
    if p > 1 and len(lowered) < 2:
        problems.append(f"no lowered bcast and reduce: {lowered}")
    assert_agreed(WORLD, problems, buf)


def test_auto_tries_its_candidates_and_keeps_the_fastest():
    """Blocking auto calls above 8 KiB try each candidate in turn (MPI's own among them),
    then keep what ran fastest on the slowest rank, the same on every rank, for that size
    class; later calls (nonblocking ones too) run it. Every call gives MPI's bits."""
    from mpicoll import context
    comm, p, me, problems = WORLD.Dup(), WORLD.Get_size(), WORLD.Get_rank(), []
    buf, out = np.empty(4096, "f4"), np.empty(4096, "f4")
    x = data(comm, 4096, "f4", "sum")
    for call in range(400):
        mine = data(comm, 4096, "f4", "sum", seed=call % 3)
        buf[:] = mine
        mpicoll.bcast(buf, 1 % p, comm=comm)
        got = mpicoll.reduce(x, out, root=0, comm=comm)
        if call % 100 == 0:
            compare(problems, f"bcast call {call}", buf, bcast_reference(comm, mine, 1 % p))
            ref = reduce_reference(comm, x, "sum", 0)
            if me == 0:
                compare(problems, f"reduce call {call}", got, ref)
    kept = {key[1]: name for key, name in context.known(comm).trials.kept.items()}
    ran = (mpicoll.ibcast(buf, comm=comm), mpicoll.ireduce(x, comm=comm))
    for request in ran:
        request.wait()
    if p > 1 and (set(kept) != {"bcast", "reduce"} or kept["bcast"] not in BCAST
                  or kept["reduce"] not in REDUCE
                  or [r.algorithm for r in ran] != [kept["bcast"], kept["reduce"]]):
        problems.append(f"kept {kept}, then ran {[r.algorithm for r in ran]}")
    if p == 1 and kept:
        problems.append(f"one rank tried {kept}")
    comm.Free()
    assert_agreed(WORLD, problems, np.frombuffer(repr(sorted(kept.items())).encode(), np.uint8))


BAD = [
    ("root out of range", lambda p: mpicoll.bcast(np.ones(3), p), ValueError),
    ("negative root", lambda p: mpicoll.reduce(np.ones(3), root=-1), ValueError),
    ("root not an integer", lambda p: mpicoll.bcast(np.ones(3), 0.0), TypeError),
    ("recvbuf size", lambda p: mpicoll.reduce(np.ones(3), np.empty(4)), ValueError),
    ("recvbuf dtype", lambda p: mpicoll.reduce(np.ones(3), np.empty(3, "f4")), ValueError),
    ("read-only recvbuf", lambda p: mpicoll.reduce(np.ones(3), _read_only()), ValueError),
    ("in place without recvbuf", lambda p: mpicoll.reduce(MPI.IN_PLACE), ValueError),
    ("a codec", lambda p: mpicoll.bcast(np.ones(4), codec="fp16"), ValueError),
    ("op avg", lambda p: mpicoll.reduce(np.ones(4), op="avg"), ValueError),
    ("unknown algorithm", lambda p: mpicoll.bcast(np.ones(4), algorithm="rd"), ValueError),
    ("bool", lambda p: mpicoll.bcast(np.ones(4, bool)), TypeError),
    ("not contiguous", lambda p: mpicoll.bcast(np.ones(8)[::2]), ValueError),
]


def _read_only():
    x = np.ones(3)
    x.flags.writeable = False
    return x


@pytest.mark.parametrize("case, call, error", BAD, ids=[case[0] for case in BAD])
def test_bad_input_raises_on_every_rank_before_sending(case, call, error):
    """Every rank raises; then a normal call still matches up: nothing was sent."""
    with pytest.raises(error):
        call(WORLD.Get_size())
    x = data(WORLD, 3, "i4", "sum")
    ref = bcast_reference(WORLD, x, 0)
    mpicoll.bcast(x)
    problems = []
    compare(problems, "the call after", x, ref)
    assert_agreed(WORLD, problems, x)


def test_ranks_that_disagree_raise_mismatch_everywhere():
    """A rank that names another root, another count or another collective than the others:
    MismatchError on every rank, naming what differs; nothing sent (the communicator works
    afterwards)."""
    if WORLD.Get_size() == 1:
        pytest.skip("one rank cannot disagree with itself")
    comm, p = WORLD.Dup(), WORLD.Get_size()
    last = comm.Get_rank() == p - 1
    caught = []
    for field, call in [
            ("collective", lambda: mpicoll.bcast(np.ones(4), p - 1 if last else 0, comm=comm)),
            ("collective", lambda: mpicoll.reduce(np.ones(4), root=p - 1 if last else 0,
                                                  comm=comm)),
            ("count", lambda: mpicoll.bcast(np.ones(5 if last else 4), comm=comm)),
            ("collective", lambda: mpicoll.reduce(np.ones(4), comm=comm) if last
             else mpicoll.bcast(np.ones(4), comm=comm))]:
        with pytest.raises(mpicoll.MismatchError) as error:
            call()
        caught.append(f"  {field}:" in str(error.value))
    x = data(comm, 2, "f8", "sum")
    ref = bcast_reference(comm, x, 1)
    mpicoll.bcast(x, 1, comm=comm)
    problems = [] if all(caught) else [f"the error names the field: {caught}"]
    compare(problems, "the call after", x, ref)
    comm.Free()
    assert_agreed(WORLD, problems, x)


def test_bcast_reads_a_read_only_buf_at_the_root():
    """The root's buf is only read (as MPI_Bcast's): read-only there is fine."""
    me, problems = WORLD.Get_rank(), []
    for algorithm in BCAST:
        x = data(WORLD, 5, "i4", "sum", seed=3)
        ref = bcast_reference(WORLD, x, 0)
        if me == 0:
            x.flags.writeable = False
        mpicoll.bcast(x, 0, algorithm=algorithm)
        compare(problems, f"{algorithm}: read-only at the root", x, ref)
    assert_agreed(WORLD, problems, x)


def test_in_place_off_the_root_is_refused():
    """MPI.IN_PLACE is the root's alone (MPI_Reduce): a rank off the root raises at once."""
    p, me = WORLD.Get_size(), WORLD.Get_rank()
    problems = []
    if me != 0:
        try:
            mpicoll.reduce(MPI.IN_PLACE, np.ones(3), root=0)
            problems.append("no error")
        except ValueError as error:
            if "root" not in str(error):
                problems.append(str(error))
    assert_agreed(WORLD, problems, np.zeros(1))


def test_timing_records_name_the_collective():
    """A timing record per call, naming the collective; nbytes is the buffer's. A persistent
    call leaves none, as allreduce_init's."""
    from mpicoll import timing
    with timing.recording() as recorder:
        mpicoll.bcast(np.ones(100, "f8"), algorithm="binomial")
        mpicoll.reduce(np.ones(50, "f4"), algorithm="native")
        persistent = mpicoll.bcast_init(np.ones(10, "f4"), algorithm="binomial")
        persistent.start()
        persistent.wait()
    seen = [(r.collective, r.algorithm, r.count, r.nbytes, r.seconds > 0)
            for r in recorder.records]
    expected = [("bcast", "binomial", 100, 800, True), ("reduce", "native", 50, 200, True)]
    assert_agreed(WORLD, [] if seen == expected else [f"records {seen}"], np.zeros(1))
