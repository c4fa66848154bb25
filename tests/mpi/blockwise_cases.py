"""Cases run on every rank under mpiexec (see tests/test_blockwise.py): mpicoll.allgather and
mpicoll.reduce_scatter against the MPI library's own Allgather and Reduce_scatter_block, and
with uneven counts against Allgatherv and Reduce_scatter, in place and not.

Every test makes the same collective calls on every rank and asserts only afterwards
(assert_agreed), so a failing assertion on one rank never leaves the others waiting. Data are
small integers (powers of two for products): every reduction order gives MPI's bits exactly.
"""

import itertools

import numpy as np
import pytest
from helpers import MPI_OPS, WORLD, assert_agreed, data, digest, environment, runnable, \
    slowed_choice_is_tried_again
from mpi4py import MPI

import mpicoll
from mpicoll import blockwise
from mpicoll.algorithm import compressed_ring, native

DTYPES = ["i1", "i2", "i4", "i8", "u1", "u2", "u4", "u8",
          "f2", "f4", "f8", "g", "c8", "c16", "G"]
OPS = ["sum", "prod", "min", "max"]
GATHER = runnable("allgather")
SCATTER = runnable("reduce_scatter")
PAIRS = list(itertools.zip_longest(GATHER, SCATTER, fillvalue="auto"))
"""An allgather algorithm beside a reduce_scatter one, for cases that run both: each of both
collectives' algorithms in some pair."""


def counts(p):
    return sorted({0, 1, max(p - 1, 0), 13})  # 13: a prime


def ops_for(dtype):
    return [op for op in OPS if not (np.dtype(dtype).kind == "c" and op in ("min", "max"))]


def reference(comm, which, x, op=None, counts=None):
    """MPI's own result (``counts``: of the v form, MPI_Allgatherv or MPI_Reduce_scatter)."""
    p = comm.Get_size()
    if which == "allgather":
        if counts is not None:
            ref = np.empty(sum(counts), x.dtype)
            comm.Allgatherv(x, [ref, list(counts)])
            return ref
        ref = np.empty(x.size * p, x.dtype)
        comm.Allgather(x, ref)
    elif counts is not None:
        ref = np.empty(counts[comm.Get_rank()], x.dtype)
        comm.Reduce_scatter(x, ref, list(counts), op=MPI_OPS[op])
    else:
        ref = np.empty(x.size // p, x.dtype)
        comm.Reduce_scatter_block(x, ref, op=MPI_OPS[op])
    return ref


def uneven(comm, seed, most=6):
    """Random block counts, zeros among them, the same on every rank of ``comm``."""
    rng = np.random.default_rng([comm.Get_size(), seed])
    counts = rng.integers(0, most, comm.Get_size())
    counts[rng.integers(comm.Get_size())] = 0
    return [int(c) for c in counts]


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


@pytest.mark.parametrize("gather", GATHER)
@pytest.mark.parametrize("dtype", DTYPES)
def test_allgather_is_mpis(dtype, gather):
    problems, results = [], []
    for name, comm, free in comms():
        for n in counts(comm.Get_size()):
            x = data(comm, n, dtype, "sum")
            out = mpicoll.allgather(x, comm=comm, algorithm=gather)
            compare(comm, problems, f"{name} n={n}", out, reference(comm, "allgather", x))
            if name == "world":
                results.append(digest(out))
        if free:
            comm.Free()
    assert_agreed(WORLD, problems, np.frombuffer("".join(results).encode(), np.uint8))


@pytest.mark.parametrize("scatter", SCATTER)
@pytest.mark.parametrize("dtype", DTYPES)
def test_reduce_scatter_is_mpis(dtype, scatter):
    problems = []
    for name, comm, free in comms():
        p = comm.Get_size()
        for op in ops_for(dtype):
            for n in counts(p):
                x = data(comm, n * p, dtype, op)
                out = np.full(n, 7, dtype)
                result = mpicoll.reduce_scatter(x, out, op=MPI_OPS[op] if n % 2 else op,
                                                comm=comm, algorithm=scatter)
                if result is not out:
                    problems.append("the result is not recvbuf")
                compare(comm, problems, f"{name} {op} n={n}", out,
                        reference(comm, "reduce_scatter", x, op))
        if free:
            comm.Free()
    assert_agreed(WORLD, problems, np.zeros(1))


@pytest.mark.parametrize("gather, scatter", PAIRS)
@pytest.mark.parametrize("dtype", ["i1", "u4", "i8", "f2", "f8", "c16"])
def test_uneven_counts_and_in_place_are_mpis(dtype, gather, scatter):
    """counts= (Allgatherv, Reduce_scatter) with zeros among them, and in place (MPI.IN_PLACE
    or recvbuf itself as sendbuf) with equal and uneven blocks, on COMM_WORLD and a split."""
    problems, results = [], []
    for name, comm, free in comms():
        p, me = comm.Get_size(), comm.Get_rank()
        for seed in range(3):
            blocks = uneven(comm, seed)
            start = sum(blocks[:me])
            x = data(comm, blocks[me], dtype, "sum", seed)
            ref = reference(comm, "allgather", x, counts=blocks)
            out = mpicoll.allgather(x, comm=comm, algorithm=gather, counts=blocks)
            compare(comm, problems, f"{name} allgatherv {blocks}", out, ref)
            whole = np.full(sum(blocks), 9, dtype)
            whole[start:start + blocks[me]] = x
            in_place = MPI.IN_PLACE if seed % 2 else whole
            if mpicoll.allgather(in_place, whole, comm=comm, algorithm=gather,
                                 counts=blocks) is not whole:
                problems.append("in place: the result is not recvbuf")
            compare(comm, problems, f"{name} allgatherv in place {blocks}", whole, ref)
            if name == "world":
                results += [digest(out), digest(whole)]
            for op in ops_for(dtype):
                y = data(comm, sum(blocks), dtype, op, seed)
                ref = reference(comm, "reduce_scatter", y, op, blocks)
                out = mpicoll.reduce_scatter(y, op=op, comm=comm, algorithm=scatter,
                                             counts=blocks)
                compare(comm, problems, f"{name} reduce_scatter {op} {blocks}", out, ref)
                mpicoll.reduce_scatter(MPI.IN_PLACE if seed % 2 else y, y, op=op, comm=comm,
                                       algorithm=scatter, counts=blocks)
                compare(comm, problems, f"{name} reduce_scatter in place {op} {blocks}",
                        y[:blocks[me]], ref)
        for n in counts(p)[-2:]:  # equal blocks in place: MPI_Allgather, MPI_Reduce_scatter_block
            x = data(comm, n, dtype, "sum")
            whole = np.zeros(n * p, dtype)
            whole[me * n:(me + 1) * n] = x
            mpicoll.allgather(MPI.IN_PLACE, whole, comm=comm, algorithm=gather)
            compare(comm, problems, f"{name} allgather in place n={n}", whole,
                    reference(comm, "allgather", x))
            op = ops_for(dtype)[-1]
            y = data(comm, n * p, dtype, op)
            ref = reference(comm, "reduce_scatter", y, op)
            mpicoll.reduce_scatter(y, y, op=op, comm=comm, algorithm=scatter)
            compare(comm, problems, f"{name} reduce_scatter in place n={n}", y[:n], ref)
        if free:
            comm.Free()
    assert_agreed(WORLD, problems, np.frombuffer("".join(results).encode(), np.uint8))


@pytest.mark.parametrize("gather, scatter", PAIRS)
def test_about_a_mebibyte_and_any_shape(gather, scatter):
    """About 1 MiB per rank, in shapes other than flat (as MPI: the elements in memory order)."""
    p = WORLD.Get_size()
    x = data(WORLD, 1 << 18, "f4", "sum").reshape(512, -1)
    gathered = np.empty((p, 1 << 18), "f4")
    mpicoll.allgather(x, gathered, algorithm=gather)
    problems = []
    compare(WORLD, problems, "allgather 1 MiB", gathered, reference(WORLD, "allgather", x.ravel()))
    y = data(WORLD, p << 16, "f8", "sum").reshape(p, -1, order="F")
    out = mpicoll.reduce_scatter(y, algorithm=scatter)
    compare(WORLD, problems, "reduce_scatter 512 KiB", out,
            reference(WORLD, "reduce_scatter", y.ravel(order="F"), "sum"))
    assert_agreed(WORLD, problems, gathered)


@pytest.mark.parametrize("gather, scatter", PAIRS)
def test_persistent_started_ten_times(gather, scatter):
    """allgather_init and reduce_scatter_init: each start reads sendbuf as it is then."""
    p, problems = WORLD.Get_size(), []
    x, y = np.zeros(5, "i8"), np.zeros(3 * p, "f8")
    gathered, scattered = np.empty(5 * p, "i8"), np.empty(3, "f8")
    with mpicoll.allgather_init(x, gathered, algorithm=gather) as ag, \
            mpicoll.reduce_scatter_init(y, scattered, op="max", algorithm=scatter) as rs:
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


@pytest.mark.parametrize("gather, scatter", PAIRS)
def test_persistent_uneven_and_in_place_started_ten_times(gather, scatter):
    """allgather_init and reduce_scatter_init with counts, in place: each start reads the
    input as it is then (MPI_Allgatherv_init, MPI_Reduce_scatter_init for native)."""
    me, problems = WORLD.Get_rank(), []
    blocks = uneven(WORLD, 7)
    start = sum(blocks[:me])
    gathered, scattered = np.empty(sum(blocks), "i4"), np.empty(sum(blocks), "f4")
    with mpicoll.allgather_init(MPI.IN_PLACE, gathered, counts=blocks,
                                algorithm=gather) as ag, \
            mpicoll.reduce_scatter_init(scattered, scattered, counts=blocks, op="min",
                                        algorithm=scatter) as rs:
        for round_ in range(10):
            x = data(WORLD, blocks[me], "i4", "sum", seed=round_)
            gathered[start:start + blocks[me]] = x
            y = data(WORLD, sum(blocks), "f4", "min", seed=round_)
            scattered[:] = y
            rs.start()
            ag.start()
            ag.wait()
            rs.wait()
            compare(WORLD, problems, f"allgatherv start {round_}", gathered,
                    reference(WORLD, "allgather", x, counts=blocks))
            compare(WORLD, problems, f"reduce_scatter start {round_}", scattered[:blocks[me]],
                    reference(WORLD, "reduce_scatter", y, "min", blocks))
    assert_agreed(WORLD, problems, gathered)


@pytest.mark.parametrize("gather, scatter", PAIRS)
@pytest.mark.parametrize("order", ["allreduce first", "theirs first"])
def test_nonblocking_beside_an_allreduce_in_flight(order, gather, scatter):
    """iallgather and ireduce_scatter with an iallreduce in flight, completed in either order."""
    p, problems = WORLD.Get_size(), []
    x = data(WORLD, 1000, "f8", "sum")
    y = data(WORLD, 7 * p, "i4", "sum")
    blocks = uneven(WORLD, 3, most=2000)
    z = data(WORLD, sum(blocks), "f8", "sum")
    reduced = mpicoll.iallreduce(x, algorithm="ring")
    gathered = mpicoll.iallgather(x, algorithm=gather)
    scattered = mpicoll.ireduce_scatter(y, algorithm=scatter)
    scattered_v = mpicoll.ireduce_scatter(z, algorithm=scatter, counts=blocks)
    requests = [reduced, gathered, scattered, scattered_v]
    for request in (requests if order == "allreduce first" else requests[::-1]):
        request.wait()
    ref = np.empty_like(x)
    WORLD.Allreduce(x, ref)
    compare(WORLD, problems, "allreduce", reduced.wait(), ref)
    compare(WORLD, problems, "allgather", gathered.wait(), reference(WORLD, "allgather", x))
    compare(WORLD, problems, "reduce_scatter", scattered.wait(),
            reference(WORLD, "reduce_scatter", y, "sum"))
    compare(WORLD, problems, "reduce_scatter counts", scattered_v.wait(),
            reference(WORLD, "reduce_scatter", z, "sum", blocks))
    assert_agreed(WORLD, problems, gathered.wait())


@pytest.mark.parametrize("gather, scatter", PAIRS)
def test_a_loop_on_the_same_arrays_takes_the_fast_path(gather, scatter):
    """Blocking calls in a loop on the same arrays run lowered (mpicoll.fastpath.LoweredBlocks)
    and give MPI's bits as the data change; another op, other counts (a new list of the same
    values too), in place or other arrays between them take the full path and are right."""
    from mpicoll import context
    p, me, problems = WORLD.Get_size(), WORLD.Get_rank(), []
    blocks = uneven(WORLD, 11)
    x, out = np.empty(blocks[me], "f8"), np.empty(sum(blocks), "f8")
    y, part = np.empty(sum(blocks), "i8"), np.empty(blocks[me], "i8")
    for step in range(8):
        x[:] = data(WORLD, blocks[me], "f8", "sum", seed=step)
        y[:] = data(WORLD, sum(blocks), "i8", "max", seed=step)
        mpicoll.allgather(x, out, algorithm=gather, counts=blocks if step % 4 else list(blocks))
        compare(WORLD, problems, f"allgather step {step}", out,
                reference(WORLD, "allgather", x, counts=blocks))
        op = "max" if step < 6 else "min"
        mpicoll.reduce_scatter(y, part, op=op, algorithm=scatter, counts=blocks)
        compare(WORLD, problems, f"reduce_scatter {op} step {step}", part,
                reference(WORLD, "reduce_scatter", y, op, blocks))
        if step == 3:  # between: in place, and arrays of another size
            whole = reference(WORLD, "allgather", x, counts=blocks)
            mpicoll.allgather(MPI.IN_PLACE, whole, algorithm=gather, counts=blocks)
            compare(WORLD, problems, "in place between", whole, out)
            small = np.empty(p, "f8")
            mpicoll.allgather(x[:1] if len(x) else np.ones(1), small, algorithm=gather)
    lowered = {type(call).__name__ for call in context.known(WORLD).lowered}
    if "LoweredBlocks" not in lowered:
        problems.append(f"no lowered blockwise call: {lowered}")
    assert_agreed(WORLD, problems, out)


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
    ("overlapping", lambda p: (mpicoll.allgather, np.ones(4 * p)[:4], "view"), ValueError),
    ("in place without recvbuf", lambda p: (mpicoll.allgather, MPI.IN_PLACE, None), ValueError),
    ("counts not adding up", lambda p: (lambda s, r: mpicoll.reduce_scatter(
        s, r, counts=[1] * p), np.ones(p + 1), None), ValueError),
    ("counts not this rank's sendbuf", lambda p: (lambda s, r: mpicoll.allgather(
        s, r, counts=[2] * p), np.ones(3), None), ValueError),
    ("a negative count", lambda p: (lambda s, r: mpicoll.allgather(
        s, r, counts=[-1] + [3] * p), np.ones(2), None), ValueError),
    ("a count per rank", lambda p: (lambda s, r: mpicoll.allgather(
        s, r, counts=[2] * (p + 1)), np.ones(2), None), ValueError),
    ("recvbuf not the counts' sum", lambda p: (lambda s, r: mpicoll.allgather(
        s, r, counts=[2] * p), np.ones(2), np.empty(2 * p + 1)), ValueError),
    ("counts not integers", lambda p: (lambda s, r: mpicoll.allgather(
        s, r, counts=[2.0] * p), np.ones(2), None), TypeError),
    ("a codec on integers", lambda p: (lambda s, r: mpicoll.allgather(s, r, codec="fp16"),
                                       np.ones(4, "i4"), None), TypeError),
    ("a codec on native", lambda p: (lambda s, r: mpicoll.reduce_scatter(
        s, r, codec="int8", algorithm="native"), np.ones(p), None), ValueError),
    ("a sparse codec", lambda p: (lambda s, r: mpicoll.reduce_scatter(s, r, codec="topk"),
                                  np.ones(p), None), ValueError),
    ("a codec on max", lambda p: (lambda s, r: mpicoll.reduce_scatter(
        s, r, op="max", codec="fp16"), np.ones(p), None), ValueError),
    ("not a codec", lambda p: (lambda s, r: mpicoll.allgather(s, r, codec=3), np.ones(4),
                               None), TypeError),
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
    with pytest.raises(mpicoll.MismatchError) as error:  # counts that differ across ranks
        mpicoll.reduce_scatter(np.ones(2 * p), comm=comm,
                               counts=[2] * p if last else [2 * p] + [0] * (p - 1))
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


def compressed_reference(comm, which, x, codec, sizes, residuals):
    """What ring's compressed collective gives, modelled apart from mpicoll's schedules on
    every rank's input: a reduce_scatter's block c starts at rank c+1, and each hop decodes,
    adds its own input (x + what it owed) and encodes again until rank c adds the last; an
    allgather's block r is its owner's frame decoded; blocks of two PIECE_BYTES or more in
    pieces, a frame each. ``residuals``: every rank's owed values (error feedback), updated as
    each rank's encodes lose them; None without feedback."""
    p = comm.Get_size()
    inputs = comm.allgather(x)
    if residuals is not None:
        inputs = [v + owed for v, owed in zip(inputs, residuals)]
        for owed in residuals:
            owed[...] = 0
    if p == 1:
        return inputs[0]

    def sent(r, values, lo):  # one encode on rank r, as its frame decodes
        decoded = codec.decode(codec.encode(values))
        if residuals is not None:
            residuals[r][lo:lo + values.size] += values - decoded
        return decoded

    def pieces(n):  # as many pieces as the largest block holds PIECE_BYTES (1 to MAX_STREAMS)
        k = max(1, min(compressed_ring.MAX_STREAMS,
                       max(sizes) * x.itemsize // compressed_ring.PIECE_BYTES))
        cuts = [i * (n // k) + min(i, n % k) for i in range(k + 1)]  # the larger first
        return list(zip(cuts, cuts[1:]))

    blocks = [(sum(sizes[:r]), sum(sizes[:r + 1])) for r in range(p)]
    if which == "allgather":
        return np.concatenate([sent(r, inputs[r][a:b], a) for r in range(p)
                               for a, b in pieces(sizes[r])])
    results = []
    for c, (first, _) in enumerate(blocks):  # (every block: every rank's encodes owe)
        parts = []
        for a, b in pieces(sizes[c]):
            lo, hi = first + a, first + b
            total = sent((c + 1) % p, inputs[(c + 1) % p][lo:hi], lo)
            for k in range(2, p + 1):
                r = (c + k) % p
                total = inputs[r][lo:hi] + total
                if r != c:
                    total = sent(r, total, lo)
            parts.append(total)
        results.append(np.concatenate(parts))
    return results[comm.Get_rank()]


@pytest.mark.parametrize("codec", ["fp16", "bf16", "int8", "int8+ef"])
@pytest.mark.parametrize("which", ["allgather", "reduce_scatter"])
def test_compressed_is_rings_model_in_every_form(which, codec):
    """A dense codec on allgather and reduce_scatter (ring; auto runs it): the bits of a model
    of the compressed ring (compressed_reference) in the blocking, nonblocking and persistent
    forms, with even and uneven counts and in place; with ErrorFeedback, each call delivers what
    the last one owed, and the residual is what this rank's frames lost."""
    from mpicoll import codecs
    comm, p, me, problems = WORLD, WORLD.Get_size(), WORLD.Get_rank(), []
    ef = codec.endswith("+ef")
    model = codecs.get(codec.removesuffix("+ef"))
    rng = np.random.default_rng([p, me])
    big = compressed_ring.PIECE_BYTES // 2 + 3  # (float32: two streams, uneven pieces)
    for sizes in ((300,) * p, tuple(int(n) for n in np.random.default_rng(p).integers(0, 9, p)),
                  (big,) * p):
        total = sum(sizes)
        n_in = sizes[me] if which == "allgather" else total
        feedback = codecs.ErrorFeedback(model) if ef else None
        owed = [np.zeros(sizes[r] if which == "allgather" else total, "f4") for r in range(p)] \
            if ef else None
        run = mpicoll.allgather if which == "allgather" else mpicoll.reduce_scatter
        start = mpicoll.iallgather if which == "allgather" else mpicoll.ireduce_scatter
        init = mpicoll.allgather_init if which == "allgather" else mpicoll.reduce_scatter_init
        persistent_x = np.empty(n_in, "f4")
        persistent_out = np.empty(total if which == "allgather" else sizes[me], "f4")
        persistent = init(persistent_x, persistent_out, counts=sizes,
                          codec=feedback if ef else codec)
        for form in ("blocking", "nonblocking", "persistent", "persistent again", "in place"):
            x = rng.standard_normal(n_in).astype("f4")
            ref = compressed_reference(comm, which, x, model, sizes, owed)
            spec = feedback if ef else codec
            if form == "blocking":
                got = run(x, counts=sizes, codec=spec)
            elif form == "nonblocking":
                got = start(x, counts=sizes, codec=spec).wait()
            elif form.startswith("persistent"):
                persistent_x[:] = x
                persistent.start()
                got = persistent.wait()
            else:  # in place: the input in recvbuf (an allgather's at this rank's block)
                buf = np.full(total, 7, "f4")
                first = sum(sizes[:me])
                if which == "allgather":
                    buf[first:first + sizes[me]] = x
                else:
                    buf[:] = x
                got = run(MPI.IN_PLACE, buf, counts=sizes, codec=spec)
                got = got if which == "allgather" else got[:sizes[me]]
            compare(comm, problems, f"{which} {codec} {sizes} {form}", got, ref)
            if ef and not np.array_equal(feedback.residual, owed[me]):
                problems.append(f"{which} {codec} {sizes} {form}: residual")
    assert_agreed(WORLD, problems, np.zeros(1))


def test_auto_runs_ring_for_large_reduce_scatter():
    """auto's size rule (blockwise.RING_FROM), what a communicator whose trials kept nothing
    yet runs: ring from 16 MiB of sendbuf, MPI's own below and for allgather, ring for
    small-integer sums under Open MPI; what ran is the request's."""
    comm, p = WORLD.Dup(), WORLD.Get_size()  # (fresh: no choice kept by earlier cases' trials)
    big = data(comm, (blockwise.RING_FROM["reduce_scatter"] // 4 // p + 1) * p, "f4", "sum")
    requests = [mpicoll.ireduce_scatter(big, comm=comm),
                mpicoll.ireduce_scatter(big[:p], comm=comm),
                mpicoll.iallgather(big[:1000], comm=comm),
                mpicoll.ireduce_scatter(np.ones(2 * p, "i2"), comm=comm)]
    results = [request.wait() for request in requests]
    ran = [request.algorithm for request in requests]
    small_ints = "native" if native.exact(np.dtype("i2")) else "ring"  # (Open MPI saturates)
    problems = [] if ran == ["ring", "native", "native", small_ints] else [f"auto ran {ran}"]
    compare(comm, problems, "16 MiB", results[0], reference(comm, "reduce_scatter", big, "sum"))
    comm.Free()
    assert_agreed(WORLD, problems, results[2])


def test_auto_tries_its_candidates_and_keeps_the_fastest():
    """Blocking auto calls above 8 KiB try each candidate in turn (MPI's own among them),
    then keep what ran fastest on the slowest rank, the same on every rank, for that size
    class; later calls (nonblocking ones too) run it. Every call gives MPI's bits.
    (MPICOLL_AUTO=once: no guard, whose checks on oversubscribed cores may try a size again.)"""
    from mpicoll import context
    comm, p, problems = WORLD.Dup(), WORLD.Get_size(), []
    x, y = data(comm, 4096, "f4", "sum"), data(comm, 2048 * p, "i4", "sum")
    gathered, scattered = np.empty(4096 * p, "f4"), np.empty(2048, "i4")
    with environment(MPICOLL_AUTO="once"):
        for call in range(400):  # (allgather: 5 candidates, 4 rounds of 16 calls back to back)
            mpicoll.allgather(x, gathered, comm=comm)
            mpicoll.reduce_scatter(y, scattered, comm=comm)
            if call % 100 == 0:
                compare(comm, problems, f"allgather call {call}", gathered,
                        reference(comm, "allgather", x))
                compare(comm, problems, f"reduce_scatter call {call}", scattered,
                        reference(comm, "reduce_scatter", y, "sum"))
        kept = {key[1]: name for key, name in context.known(comm).trials.kept.items()}
        ran = (mpicoll.iallgather(x, comm=comm), mpicoll.ireduce_scatter(y, comm=comm))
        for request in ran:
            request.wait()
    if p > 1 and (set(kept) != {"allgather", "reduce_scatter"} or kept["allgather"] not in GATHER
                  or kept["reduce_scatter"] not in SCATTER
                  or [r.algorithm for r in ran] != [kept["allgather"], kept["reduce_scatter"]]):
        problems.append(f"kept {kept}, then ran {[r.algorithm for r in ran]}")
    if p == 1 and kept:
        problems.append(f"one rank tried {kept}")
    comm.Free()
    assert_agreed(WORLD, problems, np.frombuffer(repr(sorted(kept.items())).encode(), np.uint8))


def test_auto_guard_tries_again_a_choice_that_slowed():
    """auto's guard on the other collectives (allgather; reduce, from mpicoll.rooted), as on
    allreduce (mpicoll.trials.Watch): a kept choice whose checks find it far slower than its
    trial measured it (the trials' figures divided by 1000, as if the node got busy since) is
    tried again at the same call on every rank, every result MPI's bits throughout; one that
    runs as measured stays; after the new trials the period doubles."""
    from mpicoll import context
    comm, p, problems = WORLD.Dup(), WORLD.Get_size(), []
    x = data(comm, 1 << 15, "f4", "sum")  # 128 KiB: above select.OWN_UP_TO
    gathered, reduced = np.empty(x.size * p, "f4"), np.empty(x.size, "f4")
    reduce_ref = np.empty_like(x)
    comm.Reduce(x, reduce_ref, op=MPI.SUM, root=0)
    runs = {"allgather": (gathered, lambda: mpicoll.allgather(x, gathered, comm=comm),
                          reference(comm, "allgather", x)),
            "reduce": (reduced, lambda: mpicoll.reduce(x, reduced, comm=comm), reduce_ref)}
    ctx = context.of(comm)
    for which, (out, run, ref) in runs.items():
        def calls(n):
            for _ in range(n):
                got = run()
                if (which == "allgather" or comm.Get_rank() == 0) \
                        and not np.array_equal(got, ref):
                    problems.append(f"{which}: a result differs from MPI's")
                    return

        def left():
            return blockwise.trials_left(which, x, out, comm=comm)

        first = left()
        calls(first)
        key = next((k for k in ctx.trials.kept if k[1] == which), None)
        if p == 1:
            if first or key is not None:
                problems.append(f"one rank tried {which}")
            continue
        problems += slowed_choice_is_tried_again(ctx, key, calls, left, first, f"{which}: ")
    kept = sorted(map(str, ctx.trials.kept.items()))
    comm.Free()
    assert_agreed(WORLD, problems, np.frombuffer(repr(kept).encode(), np.uint8))


def test_timing_records_name_the_collective():
    """A timing record per call, naming the collective; count is a block, nbytes nccl-tests'
    size (the larger buffer). A persistent call leaves none, as allreduce_init's (whoever
    starts it keeps one per start: BucketManager)."""
    from mpicoll import timing
    p = WORLD.Get_size()
    with timing.recording() as recorder:
        mpicoll.allgather(np.ones(100, "f8"), algorithm="ring")
        mpicoll.reduce_scatter(np.ones(50 * p, "f4"), algorithm="native")
        persistent = mpicoll.reduce_scatter_init(np.ones(10 * p, "f4"), algorithm="ring")
        persistent.start()
        persistent.wait()
    seen = [(r.collective, r.algorithm, r.count, r.nbytes, r.seconds > 0)
            for r in recorder.records]
    expected = [("allgather", "ring", 100, 800 * p, True),
                ("reduce_scatter", "native", 50, 200 * p, True)]
    assert_agreed(WORLD, [] if seen == expected else [f"records {seen}"], np.zeros(1))
