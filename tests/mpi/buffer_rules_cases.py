"""mpi4py's buffer and object rules, side by side (run under mpiexec): every spelling through
plain mpi4py and through ``mpicoll.Comm``, in each call form; the same results, shapes and
dtypes, the same exception class where mpi4py raises, and each spelling run by mpicoll or
counted as a fallback as the table says (a regression to fallback fails).

A message is a buffer, a count and a datatype, never a shape: send ``()`` and receive ``(1,)``,
a Fortran-ordered array, ``[buf, MPI.DOUBLE]``, a ``bytearray``. The lowercase ``allreduce``
takes any objects, different types on different ranks included.
"""

import array
import functools

import numpy as np
import pytest
from helpers import WORLD, assert_everywhere
from mpi4py import MPI

import mpicoll

RANK = WORLD.Get_rank()
N = 6


def vec(shape=(N,), order="C", dtype="d"):
    """This rank's input: small integers, exact in any order of summation."""
    count = int(np.prod(shape))
    return np.asarray((np.arange(count) % 5 + RANK).reshape(shape, order=order), dtype,
                      order=order)


def fresh(shape=(N,), order="C", dtype="d"):
    return np.full(shape, -7, dtype, order=order)


def as_array(buf):
    """The elements a buffer argument holds, in memory order (a spec's buffer for a spec)."""
    if isinstance(buf, (list, tuple)):
        buf = buf[0]
    if isinstance(buf, np.ndarray):
        return buf.ravel(order="K"), buf.shape, buf.dtype
    return np.asarray(memoryview(buf)).ravel(), None, None


# name -> (how mpicoll runs it, a function giving (sendbuf, recvbuf) anew: "in place" sends
# MPI.IN_PLACE). Each call builds new buffers, so the two runs never share one.
SPELLINGS = {
    "0-d send, (1,) receive": ("mpicoll", lambda: (vec(()), fresh((1,)))),
    "(1,) send, 0-d receive": ("mpicoll", lambda: (vec((1,)), fresh(()))),
    "(n, 1) send, (n,) receive": ("mpicoll", lambda: (vec((N, 1)), fresh((N,)))),
    "(n,) send, (n, 1) receive": ("mpicoll", lambda: (vec((N,)), fresh((N, 1)))),
    "(2, 3) send, (3, 2) receive": ("mpicoll", lambda: (vec((2, 3)), fresh((3, 2)))),
    "a reshaped view of a slice": ("mpicoll", lambda: (vec((2 * N,))[N:].reshape(2, -1),
                                                        fresh((2 * N,))[:N].reshape(-1, 2))),
    "Fortran-ordered send": ("mpicoll", lambda: (vec((2, 3), "F"), fresh((2, 3)))),
    "Fortran-ordered both": ("mpicoll", lambda: (vec((2, 3), "F"), fresh((3, 2), "F"))),
    "Fortran-ordered receive": ("mpicoll", lambda: (vec((2, 3)), fresh((2, 3), "F"))),
    "[buf, MPI.DOUBLE]": ("mpicoll", lambda: ([vec((2, 3)), MPI.DOUBLE],
                                              [fresh((3, 2)), MPI.DOUBLE])),
    "[buf, count, MPI.DOUBLE]": ("mpicoll", lambda: ([vec(), 4, MPI.DOUBLE],
                                                     [fresh(), 4, MPI.DOUBLE])),
    "(buf, MPI.DOUBLE)": ("mpicoll", lambda: ((vec(), MPI.DOUBLE), (fresh(), MPI.DOUBLE))),
    "[buf, count] of a 0-d array": ("mpicoll", lambda: ([vec(()), 1], [fresh((1,)), 1])),
    "bytearray": ("mpicoll", lambda: (bytearray(vec(dtype="B").tobytes()), bytearray(N))),
    "memoryview": ("mpicoll", lambda: (memoryview(vec()), memoryview(fresh()))),
    "memoryview, cast": ("mpicoll", lambda: (memoryview(vec().tobytes()).cast("d"),
                                             memoryview(bytearray(8 * N)).cast("d"))),
    "array.array": ("mpicoll", lambda: (array.array("d", vec().tolist()),
                                        array.array("d", [0.0] * N))),
    "a NumPy scalar sent, (1,) receive": ("mpicoll", lambda: (np.float64(RANK + 0.5),
                                                             fresh((1,)))),
    "zero-size arrays": ("mpicoll", lambda: (vec((0,)), fresh((0,)))),
    "zero-size, (0, 3) and (0,)": ("mpicoll", lambda: (vec((0, 3)), fresh((0,)))),
    "in place, 0-d": ("mpicoll", lambda: (MPI.IN_PLACE, vec(()))),
    "in place, (n, 1)": ("mpicoll", lambda: (MPI.IN_PLACE, vec((N, 1)))),
    "in place, Fortran-ordered": ("mpicoll", lambda: (MPI.IN_PLACE, vec((2, 3), "F"))),
    "in place, [buf, MPI.DOUBLE]": ("mpicoll", lambda: (MPI.IN_PLACE, [vec((2, 3)), MPI.DOUBLE])),
    "in place, [buf, count, MPI.DOUBLE]": ("mpicoll", lambda: (MPI.IN_PLACE,
                                                               [vec(), 3, MPI.DOUBLE])),
    "in place, (buf, MPI.DOUBLE)": ("mpicoll", lambda: (MPI.IN_PLACE, (vec(), MPI.DOUBLE))),
    "in place, bytearray": ("mpicoll", lambda: (MPI.IN_PLACE,
                                                bytearray(vec(dtype="B").tobytes()))),
    "in place, memoryview": ("mpicoll", lambda: (MPI.IN_PLACE, memoryview(vec()))),
    "in place, array.array": ("mpicoll", lambda: (MPI.IN_PLACE,
                                                  array.array("d", vec().tolist()))),
    "in place, zero-size": ("mpicoll", lambda: (MPI.IN_PLACE, vec((0,)))),
    # What mpicoll does not run: mpi4py runs it (and raises what it raises)
    "non-contiguous send": ("fallback", lambda: (vec((2 * N,))[::2], fresh())),
    "non-contiguous receive": ("fallback", lambda: (vec(), fresh((2 * N,))[::2])),
    "read-only receive": ("fallback", lambda: (vec(), np.frombuffer(fresh().tobytes()))),
    "a Python float sent (no buffer)": ("fallback", lambda: (RANK + 0.5, fresh((1,)))),
    "different counts": ("fallback", lambda: (vec(), fresh((N + 1,)))),
    "different types": ("fallback", lambda: (vec(), fresh(dtype="f"))),
    "MPI.LONG and MPI.LONG_LONG": ("fallback", lambda: (vec(dtype="l"), fresh(dtype="q"))),
    "a datatype that does not fit the buffer": ("fallback", lambda: ([vec(), MPI.FLOAT],
                                                                     [fresh(), MPI.DOUBLE])),
}


def run(form, comm, sendbuf, recvbuf):
    """One allreduce in ``form``: the exception class it raised, or None."""
    try:
        if form == "blocking":
            comm.Allreduce(sendbuf, recvbuf, op=MPI.SUM)
        elif form == "nonblocking":
            comm.Iallreduce(sendbuf, recvbuf, op=MPI.SUM).Wait()
        else:
            request = comm.Allreduce_init(sendbuf, recvbuf, op=MPI.SUM)
            request.Start()
            request.Wait()
            request.Free()
    except Exception as error:  # noqa: BLE001  (the class is compared with mpi4py's)
        return type(error)
    return None


def outcome(form, comm, spelling):
    """What a call of ``spelling`` gave: the exception class, or the receive buffer's elements,
    shape and dtype (the in-place buffer's for MPI.IN_PLACE)."""
    sendbuf, recvbuf = SPELLINGS[spelling][1]()
    raised = run(form, comm, sendbuf, recvbuf)
    if raised is not None:
        return raised
    values, shape, dtype = as_array(recvbuf)
    return values.tobytes(), shape, dtype


def persistent_in_mpi():
    """Whether the MPI library has MPI-4's persistent collectives (mpi4py's reference)."""
    try:
        WORLD.Allreduce_init(np.zeros(1), np.zeros(1)).Free()
    except NotImplementedError:
        return False
    return True


@pytest.mark.parametrize("form", ["blocking", "nonblocking", "persistent"])
@pytest.mark.parametrize("spelling", SPELLINGS)
def test_a_spelling_as_mpi4py_takes_it(spelling, form):
    if form == "persistent" and not persistent_in_mpi():
        pytest.skip("no MPI_Allreduce_init in this MPI library")
    comm = mpicoll.Comm(MPI.COMM_WORLD)
    want = outcome(form, WORLD, spelling)
    got = outcome(form, comm, spelling)
    assert_everywhere(WORLD, got == want, f"{spelling}, {form}: mpicoll {got!r}, mpi4py {want!r}")
    expected = SPELLINGS[spelling][0]
    fell_back = sum(comm.fallbacks.values())
    assert_everywhere(WORLD, fell_back == (expected == "fallback"),
                      f"{spelling}, {form}: expected {expected}, fallbacks {dict(comm.fallbacks)}")


LIBRARY_SHAPES = {
    "0-d send, (1,) receive": (lambda: vec(()), lambda: fresh((1,))),
    "(n, 1) send, (n,) receive": (lambda: vec((N, 1)), lambda: fresh((N,))),
    "(2, 3) send, (3, 2) receive": (lambda: vec((2, 3)), lambda: fresh((3, 2))),
    "Fortran-ordered both": (lambda: vec((2, 3), "F"), lambda: fresh((3, 2), "F")),
    "Fortran-ordered send": (lambda: vec((2, 3), "F"), lambda: fresh((2, 3))),
    "zero-size": (lambda: vec((0, 3)), lambda: fresh((0,))),
}


@pytest.mark.parametrize("algorithm", ["ring", "native", "auto"])
@pytest.mark.parametrize("shapes", LIBRARY_SHAPES)
def test_the_library_calls_take_any_shapes_with_one_count(shapes, algorithm):
    """mpicoll.allreduce, iallreduce and allreduce_init: the result in the receive buffer's
    shape, its elements in memory order MPI's; no receive buffer: one like the send buffer."""
    make_send, make_recv = LIBRARY_SHAPES[shapes]
    want = make_recv()
    WORLD.Allreduce(make_send(), want)
    results = []
    for form in ("blocking", "nonblocking", "persistent", "allocated"):
        send, recv = make_send(), make_recv()
        if form == "blocking":
            out = mpicoll.allreduce(send, recv, algorithm=algorithm)
        elif form == "nonblocking":
            out = mpicoll.iallreduce(send, recv, algorithm=algorithm).wait()
        elif form == "persistent":
            with mpicoll.allreduce_init(send, recv, algorithm=algorithm) as request:
                request.start()
                out = request.wait()
        else:
            out = mpicoll.allreduce(send, algorithm=algorithm)
            recv, want_shape = out, send.shape
        results.append((form, out is recv and out.shape == (want_shape if form == "allocated"
                                                              else want.shape)
                        and out.ravel(order="K").tobytes() == want.ravel(order="K").tobytes()))
    assert_everywhere(WORLD, all(ok for _, ok in results), f"{shapes}, {algorithm}: {results}")


def test_the_library_calls_refuse_different_counts_and_types_before_sending():
    for send, recv in ((vec(), fresh((N + 1,))), (vec(), fresh(dtype="f"))):
        with pytest.raises(ValueError, match="as many elements of one dtype"):
            mpicoll.allreduce(send, recv)
        with pytest.raises(ValueError, match="as many elements of one dtype"):
            mpicoll.iallreduce(send, recv)
    with pytest.raises(ValueError, match="not contiguous"):
        mpicoll.allreduce(vec((2 * N,))[::2])


# Lowercase allreduce: what each rank passes, by rank (cycled), for each op.
MIXED = {
    "int / numpy.int64": [3, np.int64(2)],
    "numpy.int64 / int / float": [np.int64(4), 1, 2.5],
    "int64 and float64 scalars": [np.int64(5), np.float64(1.5)],
    "bool / numpy.bool_ / int": [True, np.bool_(True), 2],
    "numpy.bool_ only": [np.bool_(True), np.bool_(False)],
    "float / numpy.float32": [1.5, np.float32(2.5)],
    "0-d arrays / scalars": [np.array(2.0), np.float64(3.0), 4],
    "0-d int arrays only": [np.array(3), np.array(-1)],
    "floats only": [1.25, -2.5, 0.5],
    "ints only": [2, -3, 5],
    "complex / float": [1 + 2j, 1.5],
    "int8 / int16 scalars": [np.int8(3), np.int16(-2)],
    "big int / int": [2 ** 70, 1],
    "float32 arrays": [np.arange(3, dtype="f"), np.ones(3, "f")],
    "int arrays of two shapes": [np.arange(3), np.ones((3, 1), int)],
    "an array / a number": [np.arange(3.0), 2.0],
}
UNORDERED = ("complex / float",)  # MIN and MAX do not compare complex numbers (mpi4py raises)
DIFFERING = ("int arrays of two shapes", "an array / a number")
ARRAYS = ("float32 arrays",) + DIFFERING


def lowercase_ops(case):
    if case in UNORDERED or case in ARRAYS:
        return ["sum", "prod"]  # (mpi4py's MIN of arrays: "truth value ... ambiguous")
    return ["sum", "prod", "min", "max"]


def describe(value):
    """What a result is: its type, dtype, shape and value, as comparable across runs."""
    if isinstance(value, np.ndarray):
        return type(value), value.dtype, value.shape, value.tobytes()
    if isinstance(value, np.generic):
        return type(value), value.dtype, value.tobytes()
    return type(value), repr(value)


OPS = {"sum": MPI.SUM, "prod": MPI.PROD, "min": MPI.MIN, "max": MPI.MAX}


@pytest.mark.parametrize("case", MIXED)
def test_lowercase_allreduce_of_mixed_objects_is_mpi4pys(case):
    """Ranks pass different kinds of objects: the same answer as mpi4py (type, dtype, shape,
    value), no MismatchError, no hang (the launch's timeout fails it); numbers and arrays of one
    kind run in mpicoll, the rest counted as fallbacks."""
    objects = MIXED[case]
    mine = objects[RANK % len(objects)]
    comm = mpicoll.Comm(MPI.COMM_WORLD)
    problems = []
    for op in lowercase_ops(case):
        want = describe(WORLD.allreduce(mine, op=OPS[op]))
        got = describe(comm.allreduce(mine, op=OPS[op]))
        if got != want:
            problems.append(f"{op}: mpicoll {got}, mpi4py {want}")
    assert_everywhere(WORLD, not problems, f"{case}: {problems}")
    # mpi4py's: an int beyond int64 on rank 0; arrays that differ across ranks, or arrays and
    # numbers (at one rank, rank 0's array alone: mpicoll's)
    mpi4pys = case == "big int / int" or case in DIFFERING and WORLD.Get_size() > 1
    fell_back = sum(comm.fallbacks.values()) > 0
    assert_everywhere(WORLD, fell_back == mpi4pys,
                      f"{case}: fallbacks {dict(comm.fallbacks)}, expected {mpi4pys}")


def test_lowercase_keeps_types_when_every_rank_passes_the_same_kind():
    comm = mpicoll.Comm(MPI.COMM_WORLD)
    size = WORLD.Get_size()
    total = sum(range(size))
    checks = {
        "float": (comm.allreduce(float(RANK)), float(total)),
        "0-d array": (comm.allreduce(np.array(float(RANK))),
                      np.array(float(total)) if size == 1 else np.float64(total)),
        "numpy.float32 max": (comm.allreduce(np.float32(RANK), op=MPI.MAX), np.float32(size - 1)),
        "int": (comm.allreduce(RANK), total),
        "array": (comm.allreduce(np.arange(3) + RANK), np.arange(3) * size + total),
    }
    for what, (got, want) in checks.items():
        assert_everywhere(WORLD, describe(got) == describe(want), f"{what}: {got!r} {want!r}")
    assert_everywhere(WORLD, not comm.fallbacks, f"fell back: {dict(comm.fallbacks)}")


def test_lowercase_float_sums_have_mpi4pys_bits():
    """Floats that round differently in each order: mpi4py's order of combining, so its bits."""
    comm = mpicoll.Comm(MPI.COMM_WORLD)
    value = functools.reduce(lambda a, _: a * 1.1, range(RANK), 0.1) + 1e16 * (RANK % 2)
    assert_everywhere(WORLD, comm.allreduce(value) == WORLD.allreduce(value), "bits")
