"""Shared-memory cases run on every rank under mpiexec (see tests/test_shm.py).

Every dtype, op, size, in-place and sub-communicator case of tests/mpi/allreduce_cases.py runs
``shm`` too (it is a registered plain algorithm); these add what is particular to a window that
ranks share: chunked pipelines, a window that grows under a fast-path shortcut, collectives
queued for the window in any completion order, persistent requests, communicators that split a
node, emulated nodes, and the refusal on several nodes. Inputs are small integers, so every
result must equal MPI's own Allreduce exactly, and be the same bits on every rank.
"""

import numpy as np
import pytest
from mpi4py import MPI
from helpers import WORLD, assert_agreed, assert_everywhere, data, native

import mpicoll
from mpicoll import blockwise, collective, context, ops, transport
from mpicoll.algorithm import shm
from mpicoll.topology import node_groups

ONE_NODE = len(context.of(WORLD).layout.nodes) == 1
ON_ONE_NODE = pytest.mark.skipif(not ONE_NODE, reason="shm runs on one node")
BOTH = ["shm", "hybrid"]


def exact(comm, out, ref, what):
    assert_agreed(comm, [] if np.array_equal(out, ref) else ["differs from MPI_Allreduce"], out,
                  what)


def algorithms():
    return BOTH if ONE_NODE else ["hybrid"]


@pytest.mark.parametrize("dtype", ["i1", "u2", "i8", "f2", "f4", "f8", "c16"])
@pytest.mark.parametrize("op", ["sum", "prod", "min", "max"])
def test_every_dtype_and_op_in_chunks(dtype, op):
    """Three pipeline chunks and a ragged end: every piece of every slice lands once."""
    if np.dtype(dtype).kind == "c" and op in ("min", "max"):
        pytest.skip("min/max of complex numbers are undefined")
    count = 2 * shm.CHUNK_BYTES // np.dtype(dtype).itemsize + 7 * WORLD.Get_size() + 3
    x = data(WORLD, count, dtype, op)
    ref = native(WORLD, x, op)
    for algorithm in algorithms():
        for inplace in (False, True):
            y = x.copy()
            out = mpicoll.allreduce(y, y if inplace else None, op=op, algorithm=algorithm)
            exact(WORLD, out, ref, f"{algorithm} {dtype} {op} in place={inplace}")


@ON_ONE_NODE
def test_window_grows_under_a_shortcut():
    """A small kind takes the fast path; a larger one grows the window; the small one again
    must leave its shortcut and use the new window on every rank."""
    small = data(WORLD, 100, "i4", "sum")
    large = data(WORLD, 3 * shm.CHUNK_BYTES, "i4", "sum")  # 12 MiB of int32: 12 chunks
    refs = native(WORLD, small, "sum"), native(WORLD, large, "sum")
    outs = []
    for x in (small, small, small, large, small, small, large):
        outs.append(mpicoll.allreduce(x, algorithm="shm"))
    for out in outs:
        exact(WORLD, out, refs[out.size != small.size], f"{out.size} elements")


@ON_ONE_NODE
def test_window_grows_under_starters_and_persistent_requests():
    """Repeated nonblocking calls and a persistent request run bound rounds in the window; a
    larger call grows it between their starts: they must bind the new window, as every rank
    does at the same start, and still agree with MPI."""
    small = data(WORLD, 1000, "i8", "sum")
    large = data(WORLD, 2 * shm.CHUNK_BYTES, "i4", "sum")  # 8 MiB of int32: grows the window
    ref_small, ref_large = native(WORLD, small, "sum"), native(WORLD, large, "sum")
    out = np.empty_like(small)
    ok = True
    with mpicoll.allreduce_init(small, out, algorithm="shm") as persistent:
        for step in range(3):
            requests = [mpicoll.iallreduce(small, algorithm="shm") for _ in range(2)]
            persistent.start()
            ok &= all(np.array_equal(r.wait(), ref_small) for r in requests)
            persistent.wait()
            ok &= np.array_equal(out, ref_small)
            if step == 1:  # the window grows (a new one replaces it) between two starts
                ok &= np.array_equal(mpicoll.allreduce(large, algorithm="shm"), ref_large)
        bound = type(persistent._bound).__name__
    starter = context.of(WORLD).lowered[0]  # the last kind started: binds the window's plan
    binds = starter.plan is not None and starter.window is not None
    assert_everywhere(WORLD, ok and (WORLD.Get_size() == 1 or (bound == "BoundRounds" and binds)),
                      f"wrong result, or not bound ({bound}, starter binds: {binds})")


@pytest.mark.parametrize("order", ["started", "reversed"])
def test_outstanding_requests_complete_in_any_order(order):
    """Collectives queue for the window in start order; waiting on the last one first (or on
    each by test() alone) must finish them all, mixed with messages of other algorithms."""
    p = WORLD.Get_size()
    xs = [data(WORLD, n, "i8", "sum", seed=n) for n in (1, p + 1, 300_000, 5000, 3, 70_000)]
    names = (algorithms() * 3)[:len(xs) - 2] + ["ring", "rabenseifner"]
    requests = [mpicoll.iallreduce(x, algorithm=a) for x, a in zip(xs, names)]
    if order == "reversed":
        outs = [r.wait() for r in reversed(requests)][::-1]
    else:
        while not all([r.test() for r in requests]):
            pass
        outs = [r.wait() for r in requests]
    for x, out, name in zip(xs, outs, names):
        exact(WORLD, out, native(WORLD, x, "sum"), name)


def test_persistent_and_buckets():
    x = data(WORLD, 300_000, "f8", "sum")  # hybrid on emulated nodes: a pipeline of 3 chunks
    ref = native(WORLD, x, "sum")
    for algorithm in algorithms():
        out = np.empty_like(x)
        with mpicoll.allreduce_init(x, out, algorithm=algorithm) as request:
            for _ in range(3):
                request.start()
                other = mpicoll.iallreduce(x, algorithm=algorithm)  # queued behind it
                request.wait()
                exact(WORLD, out, ref, f"persistent {algorithm}")
                exact(WORLD, other.wait(), ref, f"behind persistent {algorithm}")


def test_communicators_that_split_a_node():
    """Each part gets its own window; parts of one node run at the same time."""
    rank = WORLD.Get_rank()
    for comm in (WORLD.Split(rank % 2, rank), WORLD.Split(rank // 2, -rank), WORLD.Dup()):
        for algorithm in (algorithms() if len(node_groups(comm)) == 1 else ["hybrid"]):
            for count in (1, comm.Get_size() + 2, 400_000):
                x = data(comm, count, "i4", "max", seed=3)
                exact(comm, mpicoll.allreduce(x, op="max", algorithm=algorithm, comm=comm),
                      native(comm, x, "max"), f"{algorithm} on a part of {comm.Get_size()}")
        comm.Free()


def test_not_offered_on_several_nodes():
    """Several (emulated) nodes: auto never runs shm, asking for it fails on every rank before
    anything is sent, and hybrid still runs shared memory inside each node. auto's trials
    of the other collectives try shm on one node only, hybrid (which runs another's plan
    there) on several only."""
    layout = context.of(WORLD).layout
    x = data(WORLD, 1000, "f4", "sum")
    for nbytes in (8, 1 << 16, 1 << 20, 1 << 26):
        chosen = mpicoll.choose_algorithm(np.empty(nbytes // 4, np.float32))
        assert_everywhere(WORLD, ONE_NODE or chosen != "shm", f"auto chose shm at {nbytes} B")
    for which in ("allgather", "reduce_scatter", "bcast", "reduce"):  # what auto's trials try
        key = blockwise._key(collective.get(which), x.dtype, ops.resolve("sum"),
                             transport.choose(x), context.of(WORLD), 1 << 24)
        tried = () if key is None else key[1]  # (one rank: no trials)
        several = WORLD.Get_size() > 1
        assert_everywhere(WORLD, ("shm" in tried) == (ONE_NODE and several)
                          and ("hybrid" in tried) == (not ONE_NODE and several),
                          f"{which}'s trials: {tried}")
    if ONE_NODE:
        return
    try:
        mpicoll.reduce_scatter(data(WORLD, 4 * WORLD.Get_size(), "f4", "sum"), algorithm="shm")
        error = None
    except ValueError as e:
        error = str(e)
    assert_everywhere(WORLD, error is not None and "one node" in error, f"no clear error: {error}")
    try:
        mpicoll.allreduce(x, algorithm="shm")
        error = None
    except ValueError as e:
        error = str(e)
    assert_everywhere(WORLD, error is not None and "one node" in error, f"no clear error: {error}")
    exact(WORLD, mpicoll.allreduce(x, algorithm="hybrid"), native(WORLD, x, "sum"),
          f"hybrid on nodes {layout.nodes}")


@ON_ONE_NODE
def test_other_collectives_in_chunks_are_mpis():
    """shm's other collectives: three pipeline chunks and a ragged end, every root in turn, in
    a loop on the same arrays (lowered, in the window) with allreduces in the window between:
    MPI's bits. The allgather's blocks span two chunks and a ragged end, in place every other
    step."""
    p, me, problems = WORLD.Get_size(), WORLD.Get_rank(), []
    block = shm.CHUNK_BYTES // 4 + 7 * p + 3  # float32: p blocks fill several chunks
    x = data(WORLD, p * block, "f4", "sum")
    part, scattered = np.empty(block, "f4"), np.empty(block, "f4")
    WORLD.Reduce_scatter_block(x, scattered)
    gathered, everything = np.empty(p * block, "f4"), np.empty(p * block, "f4")
    WORLD.Allgather(x[:block], everything)
    y = data(WORLD, 2 * shm.CHUNK_BYTES // 8 + 5, "i8", "max", seed=1)
    buf, out, ref = np.empty_like(y), np.zeros_like(y), np.empty_like(y)
    for step in range(2 * p + 2):
        mpicoll.reduce_scatter(x, part, algorithm="shm")
        if not np.array_equal(part, scattered):
            problems.append(f"reduce_scatter step {step}")
        if step % 2:
            gathered[me * block:(me + 1) * block] = x[:block]
            mpicoll.allgather(MPI.IN_PLACE, gathered, algorithm="shm")
        else:
            mpicoll.allgather(x[:block], gathered, algorithm="shm")
        if not np.array_equal(gathered, everything):
            problems.append(f"allgather step {step}")
        root = step % p
        buf[:] = y
        mpicoll.bcast(buf, root, algorithm="shm")
        ref[:] = y
        WORLD.Bcast(ref, root)
        if not np.array_equal(buf, ref):
            problems.append(f"bcast from {root}")
        got = mpicoll.reduce(y, out, op="max", root=root, algorithm="shm")
        WORLD.Reduce(y, ref, MPI.MAX, root)
        if (me == root) != (got is not None) or me == root and not np.array_equal(out, ref):
            problems.append(f"reduce to {root}: {got}")
        if step % 3 == 1:
            exact(WORLD, mpicoll.allreduce(y, algorithm="shm"), native(WORLD, y, "sum"),
                  f"allreduce at step {step}")
    lowered = [call for call in context.known(WORLD).lowered
               if type(call).__name__ == "LoweredBlocks" and call.window is not None]
    if p > 1 and len(lowered) < 3:
        problems.append(f"not lowered in the window: {lowered}")
    assert_agreed(WORLD, problems, buf)


@ON_ONE_NODE
def test_verified_kinds_of_other_collectives_that_differ_raise():
    """A reduce_scatter and a reduce of the same arrays, each agreed and lowered: when the last
    rank calls one and the others the other, the stamps of the first barrier differ and every
    rank raises MismatchError; the next agreed call is right."""
    p, me = WORLD.Get_size(), WORLD.Get_rank()
    if p == 1:
        pytest.skip("one rank cannot disagree with itself")
    comm = WORLD.Dup()
    x = data(comm, 4 * p, "f4", "sum")
    part, out = np.empty(4, "f4"), np.empty(4 * p, "f4")
    for _ in range(2):
        mpicoll.reduce_scatter(x, part, algorithm="shm", comm=comm)
        mpicoll.reduce(x, out, algorithm="shm", comm=comm)
    problems = []
    try:
        if me == p - 1:
            mpicoll.reduce(x, out, algorithm="shm", comm=comm)
        else:
            mpicoll.reduce_scatter(x, part, algorithm="shm", comm=comm)
        problems.append("returned")
    except mpicoll.MismatchError as error:
        if "stamped different collectives" not in str(error):
            problems.append(f"unclear: {error}")
    mpicoll.reduce_scatter(x, part, algorithm="shm", comm=comm)
    ref = np.empty(4, "f4")
    comm.Reduce_scatter_block(x, ref)
    if not np.array_equal(part, ref):
        problems.append("the call after")
    comm.Free()
    assert_everywhere(WORLD, not problems, "; ".join(problems))
