"""mpicoll.Comm as mpi4py's own Allreduce tests use a communicator (run under mpiexec).

In the spirit of mpi4py's test_cco_buf.py, written here (nothing vendored): every typecode of
each array backend (NumPy, ``array.array``, ``bytearray``), each op, counts 0..7, in place and
not, on COMM_SELF, COMM_WORLD, a Dup and a Split; buffer specs with explicit counts,
displacements and datatypes; Iallreduce, Allreduce_init, the lowercase allreduce, user ops; and
what falls back to mpi4py, visibly. The reference is exact: every rank's input, allgathered and
reduced by NumPy in rank order (integers wrap as in C; Open MPI's own uint8 SUM does not).
"""

import array
import functools

import numpy as np
import pytest
from helpers import WORLD, assert_everywhere
from mpi4py import MPI

import mpicoll
from mpicoll import timing

OPS = {"sum": (MPI.SUM, np.add), "prod": (MPI.PROD, np.multiply),
       "min": (MPI.MIN, np.minimum), "max": (MPI.MAX, np.maximum)}
NUMPY_CODES = "bhilqBHILQfdgFD"
ARRAY_CODES = "bhilqBHILQfd"
COUNTS = range(8)


def communicators():
    """(name, factory) of the communicators the cases run on."""
    return [("self", lambda: mpicoll.Comm(MPI.COMM_SELF)),
            ("world", lambda: mpicoll.Comm(MPI.COMM_WORLD)),
            ("dup", lambda: mpicoll.Comm(MPI.COMM_WORLD).Dup()),
            ("split", lambda: mpicoll.Comm(MPI.COMM_WORLD).Split(WORLD.Get_rank() % 2, 0))]


COMMS = dict(communicators())


def values(comm, count, code, op):
    """This rank's input: small integers (exact in every type and any order)."""
    rank = comm.Get_rank()
    base = (np.arange(count) + rank) % 3 + (1 if op == "prod" else 0)
    if op != "prod" and np.dtype(code).kind not in "uc":
        base = base - 1
    return base


def reference(comm, x, op):
    every = comm.allgather(np.array(x))
    return functools.reduce(lambda a, b: OPS[op][1](a, b, dtype=a.dtype), every)


def ops_for(code):
    return [op for op in OPS if not (np.dtype(code).kind == "c" and op in ("min", "max"))]


def check(comm, got, want, what):
    assert_everywhere(comm, np.array_equal(np.asarray(got), want), what)


@pytest.mark.parametrize("comm_name", COMMS)
@pytest.mark.parametrize("code", NUMPY_CODES)
def test_numpy_every_typecode_op_count(comm_name, code):
    comm = COMMS[comm_name]()
    for op in ops_for(code):
        for count in COUNTS:
            x = values(comm, count, code, op).astype(code)
            want = reference(comm, x, op)
            y = np.full(count, 77, code)
            comm.Allreduce(x, y, op=OPS[op][0])
            check(comm, y, want, f"{comm_name} {code} {op} {count}")
            z = x.copy()
            comm.Allreduce(MPI.IN_PLACE, z, op=OPS[op][0])
            check(comm, z, want, f"{comm_name} {code} {op} {count} in place")
    assert_everywhere(comm, not comm.fallbacks, f"fell back: {dict(comm.fallbacks)}")
    if comm_name in ("dup", "split"):
        comm.Free()


@pytest.mark.parametrize("code", ARRAY_CODES)
def test_array_array_every_typecode(code):
    comm = COMMS["world"]()
    for op in ops_for(code):
        for count in COUNTS:
            x = values(comm, count, code, op).astype(code)
            want = reference(comm, x, op)
            sbuf, rbuf = array.array(code, x.tolist()), array.array(code, [0] * count)
            comm.Allreduce(sbuf, rbuf, op=OPS[op][0])
            check(comm, np.array(rbuf, code), want, f"array {code} {op} {count}")
            comm.Allreduce(MPI.IN_PLACE, sbuf, op=OPS[op][0])
            check(comm, np.array(sbuf, code), want, f"array {code} {op} {count} in place")
    assert_everywhere(comm, not comm.fallbacks, f"fell back: {dict(comm.fallbacks)}")


def test_bytearray_is_unsigned_char():
    comm = COMMS["world"]()
    for op in OPS:
        x = values(comm, 7, "B", op).astype("B")
        want = reference(comm, x, op)
        rbuf = bytearray(7)
        comm.Allreduce(bytearray(x.tobytes()), rbuf, op=OPS[op][0])
        check(comm, np.frombuffer(rbuf, "B"), want, f"bytearray {op}")
        spec = bytearray(x.tobytes())
        comm.Allreduce(MPI.IN_PLACE, [spec, MPI.UNSIGNED_CHAR], op=OPS[op][0])
        check(comm, np.frombuffer(spec, "B"), want, f"bytearray {op} in place")


@pytest.mark.parametrize("datatype, code", [(MPI.FLOAT, "f"), (MPI.DOUBLE, "d"), (MPI.INT, "i"),
                                            (MPI.LONG, "l"), (MPI.C_FLOAT_COMPLEX, "F"),
                                            (MPI.C_DOUBLE_COMPLEX, "D"), (MPI.SIGNED_CHAR, "b")])
def test_buffer_specs_with_counts_displacements_and_datatypes(datatype, code):
    """``[buf, datatype]``, ``[buf, count, datatype]``, ``[buf, (count, displ), datatype]`` and
    ``[buf, count, displ, datatype]``, on a raw byte buffer reinterpreted as ``datatype``."""
    comm = COMMS["world"]()
    n = 9
    x = values(comm, n, code, "sum").astype(code)
    want = reference(comm, x, "sum")
    raw = bytearray(x.tobytes())
    out = bytearray(len(raw))
    comm.Allreduce([raw, datatype], [out, datatype])
    check(comm, np.frombuffer(out, code), want, "[buf, datatype]")
    for count, displ in ((0, 0), (4, 0), (4, 3), (n - 2, 2)):
        out = np.zeros(n, code)
        comm.Allreduce([x, count, datatype] if displ == 0 else [x, (count, displ), datatype],
                       [out, (count, displ), datatype])
        expect = np.zeros(n, code)
        expect[displ:displ + count] = want[displ:displ + count]
        check(comm, out, expect, f"count {count} displ {displ}")
        inplace = x.copy()
        comm.Allreduce(MPI.IN_PLACE, [inplace, count, displ, datatype])
        expect = x.copy()
        expect[displ:displ + count] = want[displ:displ + count]
        check(comm, inplace, expect, f"in place count {count} displ {displ}")
    assert_everywhere(comm, not comm.fallbacks, f"fell back: {dict(comm.fallbacks)}")


def test_what_mpicoll_does_not_run_falls_back_visibly():
    """Logical ops on C_BOOL, a derived datatype (with a user op: MPI defines its predefined
    ops on predefined datatypes only), a non-commutative user op: mpi4py's Allreduce runs them
    (same answers as MPI's), counted and in the timing records."""
    comm = COMMS["world"]()
    rank = comm.Get_rank()
    flags = np.array([True, rank % 2 == 0, False], bool)
    land, lor = np.empty_like(flags), np.empty_like(flags)
    pair = MPI.DOUBLE.Create_contiguous(2).Commit()
    pairs = np.arange(6, dtype="d") + rank
    got = np.empty_like(pairs)
    first = MPI.Op.Create(lambda a, b, t: None, commute=False)  # keeps b: rank order matters
    add = MPI.Op.Create(lambda a, b, t: np.add(np.frombuffer(a, "d"), np.frombuffer(b, "d"),
                                               out=np.frombuffer(b, "d")), commute=True)
    with timing.recording() as rec:
        comm.Allreduce(flags, land, op=MPI.LAND)
        comm.Allreduce([flags, MPI.C_BOOL], lor, op=MPI.LOR)
        comm.Allreduce([pairs, 3, pair], [got, 3, pair], op=add)
        kept = np.full(2, float(rank))
        comm.Allreduce(MPI.IN_PLACE, kept, op=first)
    ref_land, ref_lor, ref_got, ref_kept = (np.empty_like(flags), np.empty_like(flags),
                                            np.empty_like(pairs), np.full(2, float(rank)))
    WORLD.Allreduce(flags, ref_land, op=MPI.LAND)
    WORLD.Allreduce(flags, ref_lor, op=MPI.LOR)
    WORLD.Allreduce([pairs, 3, pair], [ref_got, 3, pair], op=add)
    WORLD.Allreduce(MPI.IN_PLACE, ref_kept, op=first)
    pair.Free()
    first.Free()
    add.Free()
    for got_, want, what in ((land, ref_land, "LAND"), (lor, ref_lor, "LOR"),
                             (got, ref_got, "derived"), (kept, ref_kept, "non-commutative")):
        check(comm, got_, want, what)
    reasons = [r for record in rec.records for r in record.phases]
    assert_everywhere(comm, [r.algorithm for r in rec.records] == ["mpi"] * 4, "records say mpi")
    assert_everywhere(comm, any("derived datatype" in r for r in reasons)
                      and any("non-commutative" in r for r in reasons), f"reasons {reasons}")
    assert_everywhere(comm, sum(comm.fallbacks.values()) == 4, f"{comm.fallbacks}")


def test_a_commutative_user_op_runs_in_mpicoll():
    """A user op, MPI.Op.Create(fn, commute=True), applied by MPI_Reduce_local in mpicoll's
    schedules; the same result as MPI's Allreduce with it."""
    def absmax(inbuf, inoutbuf, datatype):
        a = np.frombuffer(inbuf, datatype.tocode())
        b = np.frombuffer(inoutbuf, datatype.tocode())
        np.copyto(b, np.where(np.abs(a) > np.abs(b), a, b))

    op = MPI.Op.Create(absmax, commute=True)
    comm = COMMS["world"]()
    rank = comm.Get_rank()
    for algorithm in ("ring", "tree", "auto"):
        x = (np.arange(13, dtype="d") - 6) * (rank + 1) * (-1) ** rank
        want = np.empty_like(x)
        WORLD.Allreduce(x, want, op=op)
        with timing.recording() as rec:
            got = np.empty_like(x)
            comm.Allreduce(x, got, op=op, algorithm=algorithm)
        check(comm, got, want, f"user op, {algorithm}")
        assert_everywhere(comm, rec.records[-1].algorithm != "mpi", "ran in mpicoll")
    op.Free()


def test_nonblocking_and_persistent():
    comm = COMMS["world"]()
    x = values(comm, 100, "d", "sum").astype("d")
    want = reference(comm, x, "sum")
    outs = [np.empty_like(x) for _ in range(3)]
    requests = [comm.Iallreduce(x, out) for out in outs]
    for request in reversed(requests):  # any completion order
        request.Wait()
    for out in outs:
        check(comm, out, want, "Iallreduce")
    out = np.empty_like(x)
    request = comm.Iallreduce(x, out)
    while not request.Test():
        pass
    check(comm, out, want, "Iallreduce by Test")
    out = np.empty_like(x)
    persistent = comm.Allreduce_init(x, out)
    for k in range(3):
        x[:] = values(comm, 100, "d", "sum") + k
        persistent.Start()
        persistent.Wait()
        check(comm, out, reference(comm, x, "sum"), f"Allreduce_init start {k}")
    persistent.Free()


def test_lowercase_allreduce():
    """Python numbers and NumPy scalars (their type kept) and arrays through mpicoll; ints
    beyond int64 (exact at any size) and lists (MPI.SUM concatenates them) through mpi4py
    (tests/mpi/buffer_rules_cases.py compares every kind with mpi4py's answer)."""
    comm = COMMS["world"]()
    rank, size = comm.Get_rank(), comm.Get_size()
    total = float(sum(range(size)))
    with timing.recording() as rec:
        got_float = comm.allreduce(float(rank))
        got_complex = comm.allreduce(complex(rank, 1))
        got_scalar = comm.allreduce(np.float32(rank), op=MPI.MAX)
        got_array = comm.allreduce(np.arange(3) + rank)
    assert_everywhere(comm, type(got_float) is float and got_float == total, "float")
    assert_everywhere(comm, got_complex == complex(total, size), "complex")
    assert_everywhere(comm, type(got_scalar) is np.float32 and got_scalar == size - 1, "np scalar")
    assert_everywhere(comm, np.array_equal(got_array, np.arange(3) * size + total), "array")
    assert_everywhere(comm, "mpi" not in [r.algorithm for r in rec.records], "ran in mpicoll")
    big = 2 ** 80 + rank
    assert_everywhere(comm, comm.allreduce(big) == WORLD.allreduce(big), "big int, exact")
    assert_everywhere(comm, comm.allreduce([rank]) == WORLD.allreduce([rank]), "list concatenated")
    assert_everywhere(comm, comm.allreduce(rank, op=MPI.MAX) == size - 1, "int max")
    assert_everywhere(comm, sum(comm.fallbacks.values()) == 2, f"{comm.fallbacks}")


def test_settings_travel_and_errors_are_clear():
    comm = mpicoll.Comm(MPI.COMM_WORLD, algorithm="tree")
    child = comm.Split(0, WORLD.Get_rank())
    assert_everywhere(comm, isinstance(child, mpicoll.Comm) and child.algorithm == "tree"
                      and isinstance(comm.Dup(), mpicoll.Comm), "Split/Dup return mpicoll.Comm")
    assert_everywhere(comm, comm == MPI.COMM_WORLD, "the same handle")
    with timing.recording() as rec:
        child.Allreduce(np.ones(4), np.empty(4))
        child.Allreduce(np.ones(4), np.empty(4), algorithm="ring")
    assert_everywhere(comm, [r.algorithm for r in rec.records] == ["tree", "ring"],
                      f"{[r.algorithm for r in rec.records]}")
    child.Free()
    with pytest.raises(ValueError, match="unknown algorithm|choose"):
        mpicoll.Comm(MPI.COMM_WORLD, algorithm="nope")
    with pytest.raises(TypeError, match="intra-communicator"):
        mpicoll.Comm(MPI.COMM_WORLD.Get_group())
    y = np.empty(3)
    with pytest.raises(ValueError):  # mpi4py's own check: counts differ
        comm.Allreduce(np.ones(4), y)


# ---- Allgather, Allgatherv, Reduce_scatter_block, Reduce_scatter (mpicoll.blockwise)

BLOCK_CODES = "bhiqBHLfdgFD"


def every_form(comm, problems, name, args, out, fill, want, what):
    """``comm.<name>(*args)`` blocking, ``I<name>`` waited and ``<name>_init`` started twice:
    each time ``out`` (first set to ``fill``, an array or a callable that refills it) must end as
    ``want`` (compared where ``want`` has elements: an in-place reduce_scatter's first block)."""
    base, init = (name, f"{name}_init")
    for form, call in (("", getattr(comm, base)), ("I", getattr(comm, f"I{base[0].lower()}"
                                                                       f"{base[1:]}")),
                       ("_init", getattr(comm, init))):
        for start in range(2 if form == "_init" else 1):
            fill() if callable(fill) else out.__setitem__(slice(None), fill)
            if form == "":
                call(*args)
            elif form == "I":
                call(*args).Wait()
            else:
                if start == 0:
                    persistent = call(*args)
                persistent.Start()
                persistent.Wait()
            got = np.asarray(out).reshape(-1)[:want.size]
            if not np.array_equal(got, want):
                problems.append(f"{what} {form or 'blocking'}{start or ''}: {got} != {want}")
        if form == "_init":
            persistent.Free()


@pytest.mark.parametrize("comm_name", COMMS)
@pytest.mark.parametrize("code", BLOCK_CODES)
def test_allgather_and_reduce_scatter_every_form(comm_name, code):
    """Each call as mpi4py spells it, blocking, I... and ..._init, in place and not, equal and
    uneven counts (zeros among them): the bits of mpi4py's own call on the same handle, every
    call run by mpicoll (none fell back; each in the timing records)."""
    comm = COMMS[comm_name]()
    own = MPI.Intracomm(comm)  # mpi4py's own methods on the same communicator
    p, me = comm.Get_size(), comm.Get_rank()
    problems = []
    with timing.recording() as rec:
        for n in range(4):
            x = values(comm, n, code, "sum").astype(code)
            want = np.empty(n * p, code)
            own.Allgather(x, want)
            out = np.empty(n * p, code)
            every_form(comm, problems, "Allgather", (x, out), out, 99, want, f"Allgather n={n}")

            def mine_in_place(out=out, x=x, n=n):
                out[:] = 99
                out[me * n:(me + 1) * n] = x
            every_form(comm, problems, "Allgather", (MPI.IN_PLACE, out), out, mine_in_place,
                       want, f"Allgather in place n={n}")
            counts = [(n + i) % 3 for i in range(p)]
            x = values(comm, counts[me], code, "sum").astype(code)
            want = np.empty(sum(counts), code)
            own.Allgatherv(x, [want, counts])
            out = np.empty(sum(counts), code)
            every_form(comm, problems, "Allgatherv", (x, [out, counts]), out, 99, want,
                       f"Allgatherv {counts}")
            for op in ops_for(code):
                mpi_op = OPS[op][0]
                y = values(comm, n * p, code, op).astype(code)
                want = np.empty(n, code)
                own.Reduce_scatter_block(y, want, mpi_op)
                out = np.empty(n, code)
                every_form(comm, problems, "Reduce_scatter_block", (y, out, mpi_op), out, 99,
                           want, f"Reduce_scatter_block {op} n={n}")
                whole = np.empty(n * p, code)
                every_form(comm, problems, "Reduce_scatter_block", (MPI.IN_PLACE, whole, mpi_op),
                           whole, y, want, f"Reduce_scatter_block in place {op} n={n}")
                y = values(comm, sum(counts), code, op).astype(code)
                want = np.empty(counts[me], code)
                own.Reduce_scatter(y, want, counts, mpi_op)
                out = np.empty(counts[me], code)
                every_form(comm, problems, "Reduce_scatter", (y, out, counts, mpi_op), out, 99,
                           want, f"Reduce_scatter {op} {counts}")
                whole = np.empty(sum(counts), code)
                every_form(comm, problems, "Reduce_scatter", (MPI.IN_PLACE, whole, counts, mpi_op),
                           whole, y, want, f"Reduce_scatter in place {op} {counts}")
    ran = {r.algorithm for r in rec.records}
    assert_everywhere(comm, not problems and not comm.fallbacks and "mpi" not in ran
                      and {r.collective for r in rec.records} == {"allgather", "reduce_scatter"},
                      f"{problems[:3]}; fell back: {dict(comm.fallbacks)}; ran {ran}")
    if comm_name in ("dup", "split"):
        comm.Free()


ROOTED_CODES = "biqHfgD"


@pytest.mark.parametrize("comm_name", COMMS)
@pytest.mark.parametrize("code", ROOTED_CODES)
def test_bcast_and_reduce_every_form(comm_name, code):
    """Bcast and Reduce as mpi4py spells them, blocking, I... and ..._init, from and to the
    first and the last rank, in place at the root and not: the bits of mpi4py's own call on
    the same handle (off the root, Reduce's recvbuf left as it was, or None), every call run by
    mpicoll (none fell back; each in the timing records)."""
    comm = COMMS[comm_name]()
    own = MPI.Intracomm(comm)
    p, me = comm.Get_size(), comm.Get_rank()
    problems = []
    with timing.recording() as rec:
        for n in (0, 3):
            for root in sorted({0, p - 1}):
                x = values(comm, n, code, "sum").astype(code)
                want = x.copy()
                own.Bcast(want, root)
                buf = np.empty(n, code)
                every_form(comm, problems, "Bcast", (buf, root), buf, x, want,
                           f"Bcast n={n} root={root}")
                for op in ops_for(code):
                    mpi_op = OPS[op][0]
                    y = values(comm, n, code, op).astype(code)
                    want = np.full(n, 99, code)
                    own.Reduce(y, want, mpi_op, root)  # (off the root: left as it was)
                    out = np.empty(n, code)
                    every_form(comm, problems, "Reduce", (y, out, mpi_op, root), out, 99, want,
                               f"Reduce {op} n={n} root={root}")
                    args = (MPI.IN_PLACE, out, mpi_op, root) if me == root \
                        else (y, None, mpi_op, root)
                    every_form(comm, problems, "Reduce", args, out, y if me == root else 99,
                               want, f"Reduce in place {op} n={n} root={root}")
    ran = {r.algorithm for r in rec.records}
    assert_everywhere(comm, not problems and not comm.fallbacks and "mpi" not in ran
                      and {r.collective for r in rec.records} == {"bcast", "reduce"},
                      f"{problems[:3]}; fell back: {dict(comm.fallbacks)}; ran {ran}")
    if comm_name in ("dup", "split"):
        comm.Free()


def test_a_non_commutative_op_reduces_in_rank_order():
    """Reduce with a non-commutative user op runs in mpicoll (its algorithms keep rank order),
    with mpi4py's bits; Allreduce with it falls back."""
    comm = mpicoll.Comm(MPI.COMM_WORLD)
    own = MPI.Intracomm(comm)
    p, me = comm.Get_size(), comm.Get_rank()
    first = MPI.Op.Create(lambda a, b, t: None, commute=False)  # keeps b: rank order matters
    x = np.arange(4.0) + 10 * me
    problems = []
    for root in range(p):
        want, out = np.zeros(4), np.zeros(4)
        own.Reduce(x, want, first, root)
        comm.Reduce(x, out, first, root)
        if not np.array_equal(out, want):
            problems.append(f"root {root}: {out} != {want}")
    reduced = dict(comm.fallbacks)
    comm.Allreduce(x, np.empty(4), first)
    first.Free()
    assert_everywhere(comm, not problems and not reduced and sum(comm.fallbacks.values()) == 1,
                      f"{problems}; fell back {reduced}, then {dict(comm.fallbacks)}")


def test_allgatherv_and_reduce_scatter_spellings():
    """mpi4py's spellings of the v calls: counts as one int or a sequence, None (equal blocks),
    ``(counts, displs)``, ``[buf, counts, displs, datatype]`` with the packed displacements or a
    stride equal to the block, a byte buffer read as a datatype; ``Reduce_scatter`` without
    recvcounts (each rank's receive count, gathered). All by mpicoll; other displacements and
    a boolean Allgather by mpi4py, counted."""
    comm = COMMS["world"]()
    own = MPI.Intracomm(comm)
    p, me = comm.Get_size(), comm.Get_rank()
    problems = []
    counts = [i % 3 + 1 for i in range(p)]
    starts = [sum(counts[:i]) for i in range(p)]
    x = values(comm, counts[me], "d", "sum").astype("d")
    want = np.empty(sum(counts))
    own.Allgatherv(x, [want, counts])
    for spec in (lambda out: [out, counts], lambda out: [out, (counts, None), MPI.DOUBLE],
                 lambda out: [out, (counts, starts), MPI.DOUBLE],
                 lambda out: [out, counts, starts, MPI.DOUBLE],
                 lambda out: [out.view("B"), counts, MPI.DOUBLE]):
        out = np.full(sum(counts) + 2, -1.0)
        comm.Allgatherv(x, spec(out))
        if not np.array_equal(out[:sum(counts)], want):
            problems.append(f"Allgatherv {spec(out)[1:]}")
    y = values(comm, 2, "i", "sum").astype("i")
    for spec in (lambda out: out, lambda out: [out, 2], lambda out: [out, (2, 2), MPI.INT]):
        out, want = np.full(2 * p, -1, "i"), np.empty(2 * p, "i")
        comm.Allgatherv(y, spec(out))
        own.Allgather(y, want)
        if not np.array_equal(out, want):
            problems.append("Allgatherv of equal blocks")
    z = values(comm, sum(counts), "d", "sum").astype("d")
    got, want = np.empty(counts[me]), np.empty(counts[me])
    comm.Reduce_scatter(z, got)  # recvcounts gathered
    own.Reduce_scatter(z, want, counts)
    if not np.array_equal(got, want):
        problems.append("Reduce_scatter without recvcounts")
    ran_by_mpicoll = not comm.fallbacks
    strided, ref = np.full(3 * p, -1.0), np.full(3 * p, -1.0)
    comm.Allgatherv(x[:1], [strided, 1, 3, MPI.DOUBLE])  # a stride of 3: not packed
    own.Allgatherv(x[:1], [ref, 1, 3, MPI.DOUBLE])
    flags, flags_ref = np.empty(p, bool), np.empty(p, bool)
    comm.Allgather(np.array([me % 2 == 0]), flags)
    own.Allgather(np.array([me % 2 == 0]), flags_ref)
    if not (np.array_equal(strided, ref) and np.array_equal(flags, flags_ref)):
        problems.append("fallbacks: not mpi4py's answer")
    reasons = sorted(comm.fallbacks)  # (on one rank a stride is the packed layout)
    assert_everywhere(comm, not problems and ran_by_mpicoll
                      and len(reasons) == sum(comm.fallbacks.values()) == 1 + (p > 1)
                      and "dtype" in reasons[0] and (p == 1 or "packed" in reasons[1]),
                      f"{problems}; fell back {dict(comm.fallbacks)}")


def test_blockwise_errors_are_mpi4pys():
    """Counts that do not fit: the error mpi4py's own call gives (or none, where it gives
    none), on every rank; a communicator whose allreduce algorithm the collective lacks runs
    auto."""
    comm = mpicoll.Comm(MPI.COMM_WORLD, algorithm="tree")
    own = MPI.Intracomm(comm)
    p = comm.Get_size()
    same = []
    for name, args in (("Allgather", lambda: (np.ones(3), np.empty(3 * p - 1))),
                       ("Reduce_scatter_block", lambda: (np.ones(2 * p + 1), np.empty(2)))):
        raised = []
        for on in (comm, own):
            try:
                getattr(on, name)(*args())
                raised.append(False)
            except (ValueError, MPI.Exception):
                raised.append(True)
        same.append(raised[0] == raised[1] and (p == 1 or raised[0]))
    out = np.empty(2 * p)
    with timing.recording() as rec:
        comm.Allgather(np.ones(2), out)
    assert_everywhere(comm, all(same) and np.all(out == 1)
                      and [r.algorithm for r in rec.records] != ["mpi"],
                      f"the same errors {same}, {[r.algorithm for r in rec.records]}")
