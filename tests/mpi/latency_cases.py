"""The lean call path, persistent requests and the native algorithm, on real processes (run by
tests/test_latency.py under mpiexec at several process counts).

The fast path (mpicoll.fastpath) must never change what travels: a rank on it and a rank on
the full path must send the same messages, with the same tags, after the same checks.
"""

import threading
import time

import numpy as np
import pytest
from helpers import WORLD, assert_everywhere, data, environment, native, same_on_all_ranks

import mpicoll
from mpicoll import context, fastpath
from mpicoll.algorithm import names

PLAIN = list(names(plain=True)) + ["auto"]


def lowered():
    """The lowered calls COMM_WORLD's context keeps, most recent first."""
    return context.of(WORLD).lowered


@pytest.mark.parametrize("algorithm", PLAIN)
@pytest.mark.parametrize("inplace", [False, True], ids=["out-of-place", "in-place"])
def test_repeated_calls_mixing_fast_and_full_paths(algorithm, inplace):
    """Thirty calls of one kind with new values each time. Odd ranks drop their shortcuts and
    pass new views every other call (the full path) while even ranks repeat their own arrays
    (the fast path): results must still equal MPI's, the same bits on every rank."""
    rank, p = WORLD.Get_rank(), WORLD.Get_size()
    for dtype, op in (("f8", "sum"), ("i4", "max"), ("f4", "avg")):
        for count in (1, p + 1, 97):
            x = data(WORLD, count, dtype, "sum" if op == "avg" else op)
            out = np.empty_like(x)
            ok, results = True, []
            for i in range(30):
                x[...] = data(WORLD, count, dtype, "sum" if op == "avg" else op, seed=i)
                ref = native(WORLD, x, "sum" if op == "avg" else op)
                if op == "avg":
                    ref = ref / p
                send, recv = (x, out)
                if rank % 2 and i % 2:
                    context.of(WORLD).forget_lowered()
                    send, recv = x[:], out[:]
                result = mpicoll.allreduce(send, send if inplace else recv, op=op,
                                           algorithm=algorithm)
                got = send if inplace else recv
                ok &= result is got and (np.allclose(got, ref, atol=1e-5) if op == "avg"
                                         else np.array_equal(got, ref))
                results.append(got.copy())
            assert_everywhere(WORLD, ok, f"{algorithm} {dtype} {op} count {count}: wrong result")
            assert same_on_all_ranks(WORLD, np.array(results)), "ranks ended with different bits"


@pytest.mark.parametrize("algorithm", ["native", "native-blocking", "rd", "shm"])
def test_a_call_without_recvbuf_between_calls_on_the_same_arrays(algorithm):
    """A fast call that allocates its result (recvbuf None) binds the shortcut to that new
    array: the next call on the earlier arrays must bind them again, not write into the
    allocated one and return its own stale output."""
    x, out = np.ones(33), np.empty(33)
    mpicoll.allreduce(x, out, algorithm=algorithm)
    mpicoll.allreduce(x, out, algorithm=algorithm)  # the fast path, on these arrays
    x[...] = 2
    alone = mpicoll.allreduce(x, algorithm=algorithm)  # the fast path, into a new array
    x[...] = 3
    result = mpicoll.allreduce(x, out, algorithm=algorithm)
    p = WORLD.Get_size()
    assert_everywhere(WORLD, result is out and np.all(alone == 2 * p) and np.all(out == 3 * p),
                      f"{algorithm}: out {out[:3]}, alone {alone[:3]} ({p} ranks)")


def test_the_fast_path_is_taken():
    """The second call of a kind runs without building a request: the shortcut stays; a call
    that differs (another count) makes its own, and the first one is found again."""
    x = np.ones(10)
    mpicoll.allreduce(x, algorithm="ring")
    first = lowered()[0]
    mpicoll.allreduce(x, algorithm="ring")
    assert lowered()[0] is first and fastpath.last_run is first
    mpicoll.allreduce(np.ones(11), algorithm="ring")
    second = lowered()[0]
    assert second is not first
    mpicoll.allreduce(x, algorithm="ring")  # alternating kinds keep their lowered calls
    assert lowered()[:2] == [first, second]



def test_a_loop_over_twelve_kinds_of_call_stays_on_the_fast_path():
    """A solver's loop alternating twelve kinds of call (counts here) keeps a shortcut for
    each: after the first pass, every call finds one and builds none."""
    arrays = [np.ones(count) for count in range(1, 13)]
    for x in arrays:
        mpicoll.allreduce(x, algorithm="ring")
    made = set(map(id, lowered()))
    for _ in range(3):
        for x in arrays:
            result = mpicoll.allreduce(x, algorithm="ring")
            assert np.all(result == WORLD.Get_size())
            assert id(fastpath.last_run) in made, f"a call of {x.size} elements missed its lowered call"
    assert set(map(id, lowered())) == made

def test_views_take_the_fast_path_unless_they_overlap():
    x, y, z = np.ones(10), np.empty(10), np.ones(20)
    mpicoll.allreduce(x, y, algorithm="ring")
    mine = fastpath.last_run
    mpicoll.allreduce(z[:10], z[10:], algorithm="ring")  # new views, apart: still the fast path
    assert fastpath.last_run is mine and np.all(z[10:] == WORLD.Get_size())
    with pytest.raises(ValueError, match="overlaps"):  # the full path refuses, on every rank
        mpicoll.allreduce(z[:10], z[5:15], algorithm="ring")


@pytest.mark.parametrize("algorithm", ["native", "native-blocking", "rd"])
def test_arrays_changed_in_place_between_fast_calls(algorithm):
    """The fast path looks only at what can change in place on the arrays of the last call:
    a dtype set in place is a new kind (the full path checks it), a read-only flag gets the
    full path's error on every rank, a shape of the same size keeps the kind; the ranks stay
    in step throughout (a later call of another kind agrees)."""
    p = WORLD.Get_size()
    x, y = np.arange(8, dtype=np.float32), np.empty(8, np.float32)
    for _ in range(2):
        mpicoll.allreduce(x, y, algorithm=algorithm)
    x.dtype = y.dtype = np.int32  # the same bytes, read as integers
    x[...] = np.arange(8)
    mpicoll.allreduce(x, y, algorithm=algorithm)
    ok = y.dtype == np.int32 and np.array_equal(y, np.arange(8) * p)
    y.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        mpicoll.allreduce(x, y, algorithm=algorithm)
    y.flags.writeable = True
    x.shape = y.shape = (2, 4)
    for _ in range(2):
        mpicoll.allreduce(x, y, algorithm=algorithm)
    ok &= np.array_equal(y.ravel(), np.arange(8) * p)
    z = mpicoll.allreduce(np.ones(5), algorithm="rd")
    assert_everywhere(WORLD, ok and np.all(z == p), f"{algorithm}: wrong result")


def test_an_average_into_an_output_made_read_only_is_refused_in_step():
    """MPI's own average divides into the output before it calls MPI: an output made read-only
    after earlier calls gets the full path's error, and the ranks stay in step."""
    p = WORLD.Get_size()
    x, y = np.full(6, float(p), np.float32), np.empty(6, np.float32)
    for _ in range(2):
        mpicoll.allreduce(x, y, op="avg", algorithm="native")
    y.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        mpicoll.allreduce(x, y, op="avg", algorithm="native")
    y.flags.writeable = True
    mpicoll.allreduce(x, y, op="avg", algorithm="native")
    z = mpicoll.allreduce(np.ones(5), algorithm="rd")
    assert_everywhere(WORLD, bool(np.all(y == p) and np.all(z == p)), "wrong result")


@pytest.mark.skipif(WORLD.Get_size() == 1, reason="needs two ranks")
def test_blocking_calls_while_requests_are_in_flight():
    """A blocking call of a verified kind while a nonblocking one is in flight: the full path
    runs it and drives the other meanwhile, so rank 0 may wait on its request after the
    blocking call while the others wait before it (any order, as in MPI)."""
    x, y = np.ones(50_000), np.ones(7)
    mpicoll.allreduce(y, algorithm="rd")
    mpicoll.allreduce(y, algorithm="rd")  # the fast path is set up for this kind
    request = mpicoll.iallreduce(x, algorithm="ring")
    if WORLD.Get_rank() == 0:
        small = mpicoll.allreduce(y, algorithm="rd")
        big = request.wait()
    else:
        big = request.wait()
        small = mpicoll.allreduce(y, algorithm="rd")
    p = WORLD.Get_size()
    assert_everywhere(WORLD, np.all(big == p) and np.all(small == p), "wrong sums")


def test_reload_environment():
    """MPICOLL_ALGORITHM is read once; reload_environment() reads it again, fast path included."""
    x = np.ones(5)
    with environment(MPICOLL_ALGORITHM="tree"):
        mpicoll.allreduce(x)
        mpicoll.allreduce(x)
        first = fastpath.last_run.algorithm.name
    with environment(MPICOLL_ALGORITHM="ring"):
        mpicoll.allreduce(x)
        second = fastpath.last_run.algorithm.name
    assert (first, second) == ("tree", "ring")


@pytest.mark.parametrize("algorithm", ["rd", "ring", "native"])
def test_overflow_on_the_fast_path_gives_the_mpi_result(algorithm):
    """Sums beyond float32's range give inf, as MPI's, even where NumPy is told to raise."""
    x = np.full(4, 3e38, np.float32)
    ref = native(WORLD, x, "sum")
    with np.errstate(all="raise"):
        outs = [mpicoll.allreduce(x, algorithm=algorithm) for _ in range(3)]
    assert_everywhere(WORLD, all(np.array_equal(o, ref) for o in outs), "differs from MPI")


@pytest.mark.skipif(WORLD.Get_size() == 1, reason="needs a rank that has not started yet")
def test_a_second_thread_during_a_fast_blocking_call_is_refused():
    """Thread A blocks on the fast path (the last rank joins only after the others tried);
    thread B starts a collective on the same communicator meanwhile: ConcurrentUseError, and
    A's call still completes."""
    comm = WORLD.Dup()
    x = np.ones(8)
    mpicoll.allreduce(x, comm=comm, algorithm="rd")
    ctx = context.of(comm)
    late = WORLD.Get_rank() == WORLD.Get_size() - 1
    errors, results = [], []
    if late:
        WORLD.Barrier()  # the others have tried by now
        results.append(mpicoll.allreduce(x, comm=comm, algorithm="rd"))
    else:
        blocked = threading.Thread(
            target=lambda: results.append(mpicoll.allreduce(x, comm=comm, algorithm="rd")))
        blocked.start()
        deadline = time.monotonic() + 60
        while not ctx.busy and time.monotonic() < deadline:  # A is inside its call
            time.sleep(1e-3)
        try:
            mpicoll.allreduce(np.ones(3), comm=comm, algorithm="tree")
        except mpicoll.ConcurrentUseError as error:
            errors.append(error)
        WORLD.Barrier()
        blocked.join()
    assert_everywhere(WORLD, late or len(errors) == 1, f"not refused: {errors}")
    assert_everywhere(WORLD, np.all(results[0] == WORLD.Get_size()), "wrong sum")
    comm.Free()


# ---- iallreduce's starters

@pytest.mark.parametrize("algorithm", ["native", "native-blocking", "rd", "ring", "shm", "auto"])
def test_repeated_nonblocking_calls_mixing_starters_and_full_paths(algorithm):
    """Four rounds of three nonblocking calls of one kind in flight at once (out of place, in
    place, into a new array), new values each round. Even ranks wait on them newest first,
    odd ranks oldest first (any order completes, as in MPI), and odd ranks drop their starters
    every other round (the full path) while even ranks keep them: results must equal MPI's,
    the same bits on every rank."""
    rank, p = WORLD.Get_rank(), WORLD.Get_size()
    for dtype, op in (("f8", "sum"), ("i4", "max"), ("f4", "avg")):
        base = "sum" if op == "avg" else op
        for count in (1, p + 1, 97):
            x, y = (data(WORLD, count, dtype, base) for _ in range(2))
            out = np.empty_like(x)
            ok, results = True, []
            for i in range(4):
                x[...] = data(WORLD, count, dtype, base, seed=i)
                y[...] = data(WORLD, count, dtype, base, seed=100 + i)
                refs = [native(WORLD, a, base) for a in (x, y, x)]
                if op == "avg":
                    refs = [r / p for r in refs]
                if rank % 2 and i % 2:
                    context.of(WORLD).forget_lowered()
                requests = [mpicoll.iallreduce(x, out, op=op, algorithm=algorithm),
                            mpicoll.iallreduce(y, y, op=op, algorithm=algorithm),
                            mpicoll.iallreduce(x, op=op, algorithm=algorithm)]
                order = range(3) if rank % 2 else range(2, -1, -1)
                got = [None] * 3
                for k in order:
                    got[k] = requests[k].wait()
                ok &= got[0] is out and got[1] is y
                for result, ref in zip(got, refs):
                    ok &= bool(np.allclose(result, ref, atol=1e-5) if op == "avg"
                               else np.array_equal(result, ref))
                results.append(np.concatenate([g.ravel() for g in got]))
            assert_everywhere(WORLD, ok, f"{algorithm} {dtype} {op} count {count}: wrong result")
            assert same_on_all_ranks(WORLD, np.array(results)), "ranks ended with different bits"


def test_the_nonblocking_starter_is_taken(monkeypatch):
    """A second nonblocking call of a kind skips the full path's preparation; one of another
    kind (another dtype) takes it and makes its own starter; the first is found again."""
    from mpicoll import api
    prepared = []
    full = api._prepare
    monkeypatch.setattr(api, "_prepare", lambda *a, **k: prepared.append(1) or full(*a, **k))
    x = np.ones(10)
    mpicoll.iallreduce(x, algorithm="ring").wait()
    first = lowered()[0]
    results = [mpicoll.iallreduce(x, algorithm="ring") for _ in range(3)]
    taken = len(prepared) == 1 and lowered()[0] is first
    mpicoll.iallreduce(np.ones(10, np.float32), algorithm="ring").wait()
    second = lowered()[0]
    again = mpicoll.iallreduce(x, algorithm="ring").wait()
    p = WORLD.Get_size()
    assert_everywhere(WORLD, taken and len(prepared) == 2 and second is not first
                      and lowered()[:2] == [first, second]
                      and all(np.all(r.wait() == p) for r in results) and np.all(again == p),
                      f"prepared {len(prepared)} times")


def test_a_freed_communicator_gets_the_full_paths_error():
    """Calls on a communicator freed after the fast path and a starter were made for it: the
    full path's clear error, not MPI's on the freed duplicate (nor a mismatch report)."""
    comm, x = WORLD.Dup(), np.ones(4)
    for _ in range(2):
        mpicoll.allreduce(x, comm=comm, algorithm="rd")
        mpicoll.iallreduce(x, comm=comm, algorithm="rd").wait()
    made = context.of(comm).lowered[0]
    comm.Free()
    assert context.known(comm) is None and made.comm is not comm  # retired with its context
    with pytest.raises(TypeError, match="COMM_NULL"):
        mpicoll.allreduce(x, comm=comm, algorithm="rd")
    with pytest.raises(TypeError, match="COMM_NULL"):
        mpicoll.iallreduce(x, comm=comm, algorithm="rd")


def test_each_communicator_keeps_its_own_lowered_calls():
    """Twelve kinds of call on each of two communicators, alternately (24 kinds in all, more
    than a process-wide list of 16 could hold): neither evicts the other's, every call after
    the first pass finds its communicator's lowered call and none is made again."""
    other, p = WORLD.Dup(), WORLD.Get_size()
    try:
        arrays = [np.ones(count) for count in range(1, 13)]
        made: dict[int, list] = {id(WORLD): [], id(other): []}
        for comm in (WORLD, other):
            for x in arrays:
                mpicoll.allreduce(x, algorithm="ring", comm=comm)
                made[id(comm)].append(fastpath.last_run)
        ok = not set(map(id, made[id(WORLD)])) & set(map(id, made[id(other)]))
        for _ in range(2):
            for comm in (WORLD, other):
                for x, mine in zip(arrays, made[id(comm)]):
                    ok &= bool(np.all(mpicoll.allreduce(x, algorithm="ring", comm=comm) == p))
                    ok &= fastpath.last_run is mine and mine in context.of(comm).lowered
        assert_everywhere(WORLD, ok, "a communicator's lowered calls were made again or lost")
    finally:
        other.Free()


def test_threads_on_their_own_communicators_keep_their_own_lowered_calls():
    """Two threads, each looping over twelve kinds of call on its own communicator at once:
    after the first pass neither makes a lowered call again (a process-wide list shared by
    both threads would evict them)."""
    comms, p = [WORLD.Dup(), WORLD.Dup()], WORLD.Get_size()
    made: list[list] = [[], []]
    failed: list[BaseException] = []

    def loop(i: int) -> None:
        try:
            arrays = [np.ones(count) for count in range(1, 13)]
            for x in arrays:
                mpicoll.allreduce(x, algorithm="ring", comm=comms[i])
            made[i] = list(context.of(comms[i]).lowered)
            for _ in range(3):
                for x in arrays:
                    assert np.all(mpicoll.allreduce(x, algorithm="ring", comm=comms[i]) == p)
            assert set(map(id, context.of(comms[i]).lowered)) == set(map(id, made[i]))
        except BaseException as error:  # (reported below, on every rank)
            failed.append(error)

    threads = [threading.Thread(target=loop, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for comm in comms:
        comm.Free()
    assert_everywhere(WORLD, not failed and all(len(m) == 12 for m in made), f"{failed}")


def test_one_lowered_call_serves_the_blocking_and_the_nonblocking_call(monkeypatch):
    """After a blocking call of a kind, an iallreduce of that kind starts from the same
    lowered call, without the full path's preparation, and the other way round."""
    from mpicoll import api
    prepared = []
    full = api._prepare
    monkeypatch.setattr(api, "_prepare", lambda *a, **k: prepared.append(1) or full(*a, **k))
    p = WORLD.Get_size()
    for algorithm in ("ring", "native", "shm"):
        x, y = np.ones(23), np.ones(29)
        mpicoll.allreduce(x, algorithm=algorithm)
        first = lowered()[0]
        ok = np.all(mpicoll.iallreduce(x, algorithm=algorithm).wait() == p)
        mpicoll.iallreduce(y, algorithm=algorithm).wait()
        second = lowered()[0]
        ok &= np.all(mpicoll.allreduce(y, algorithm=algorithm) == p)
        assert_everywhere(WORLD, ok and len(prepared) == 2 and lowered()[:2] == [second, first],
                          f"{algorithm}: prepared {len(prepared)} times")
        prepared.clear()


def test_a_change_of_environment_retires_the_lowered_calls_of_every_communicator():
    other, x = WORLD.Dup(), np.ones(6)
    try:
        for comm in (WORLD, other):
            mpicoll.allreduce(x, algorithm="rd", comm=comm)
        made = [context.of(comm).lowered[0] for comm in (WORLD, other)]
        mpicoll.reload_environment()
        retired = all(not context.of(comm).lowered and made[i].comm is not comm
                      for i, comm in enumerate((WORLD, other)))
        again = mpicoll.allreduce(x, algorithm="rd", comm=other)
        assert_everywhere(WORLD, retired and np.all(again == WORLD.Get_size())
                          and context.of(other).lowered[0] is not made[1],
                          "lowered calls outlived a change of environment")
    finally:
        other.Free()


# ---- allreduce_init

@pytest.mark.parametrize("algorithm", ["native", "rd", "shm"])
def test_a_persistent_start_is_progress_for_the_watchdog(algorithm):
    """The watchdog counts a request's quiet time from its stage's last move: a start after a
    pause is a move (else a wait right after it would look stuck for the whole pause)."""
    waits = WORLD.Get_rank() > 0  # for rank 0, which starts late: its start cannot be done
    with mpicoll.allreduce_init(np.ones(5), algorithm=algorithm) as request:
        request.start()
        request.wait()
        time.sleep(0.3 if waits else 0.4)
        request.start()
        done = request.done
        quiet = time.monotonic() - request.last_progress()
        request.wait()
    assert_everywhere(WORLD, (done and not waits) or quiet < 0.2,
                      f"{algorithm}: quiet for {quiet:.2f} s after a start (done: {done})")


@pytest.mark.parametrize("algorithm", PLAIN)
def test_persistent_requests_reused(algorithm):
    """One request per (dtype, op, in place), started five times on changing inputs."""
    p = WORLD.Get_size()
    for dtype, op in (("f8", "sum"), ("i8", "prod"), ("u2", "min"), ("f4", "avg")):
        for inplace in (False, True):
            for count in (0, 1, 2 * p + 1, 300):
                x = data(WORLD, count, dtype, "sum" if op == "avg" else op)
                out = x if inplace else np.empty_like(x)
                ok = True
                with mpicoll.allreduce_init(x, out, op=op, algorithm=algorithm) as request:
                    for i in range(5):
                        x[...] = data(WORLD, count, dtype, "sum" if op == "avg" else op, seed=i)
                        ref = native(WORLD, x, "sum" if op == "avg" else op)
                        request.start()
                        result = request.wait()
                        ok &= result is out and (np.allclose(out, ref / p, atol=1e-5) if op == "avg"
                                                 else np.array_equal(out, ref))
                assert_everywhere(WORLD, ok, f"{algorithm} {dtype} {op} count {count} "
                                             f"{'in place' if inplace else ''}: wrong result")
                assert same_on_all_ranks(WORLD, out)


def test_persistent_requests_complete_in_any_order_on_sub_communicators():
    """Two persistent requests on two halves' communicators and one on the world, started in
    the same order everywhere and waited in different orders on different ranks."""
    rank = WORLD.Get_rank()
    half = WORLD.Split(rank % 2, rank)
    x, y, z = np.full(1000, 1.0), np.full(10, 2.0), np.full(333, 3.0)
    requests = [mpicoll.allreduce_init(x, algorithm="ring", comm=half),
                mpicoll.allreduce_init(y, algorithm="rd", comm=WORLD),
                mpicoll.allreduce_init(z, algorithm="tree", comm=half)]
    ok = True
    for step in range(4):
        for r in requests:
            r.start()
        order = requests[::-1] if (rank + step) % 2 else requests
        results = {id(r): r.wait() for r in order}
        got = [results[id(r)] for r in requests]
        ok &= bool(np.all(got[0] == half.Get_size()) and np.all(got[1] == 2 * WORLD.Get_size())
                   and np.all(got[2] == 3 * half.Get_size()))
    for r in requests:
        r.free()
    assert_everywhere(WORLD, ok, "wrong sums")
    half.Free()


def test_persistent_misuse_is_refused():
    x = np.ones(4)
    request = mpicoll.allreduce_init(x, algorithm="rd")
    request.start()
    with pytest.raises(RuntimeError, match="in flight"):
        request.start()
    request.wait()
    request.free()
    with pytest.raises(ValueError, match="freed"):
        request.start()


def test_persistent_with_a_codec_restarts_its_executions():
    """A codec cannot be bound to fixed MPI requests (frames are encoded per start): each start
    runs the executions afresh on the same buffers and tags, with error feedback carried."""
    rng = np.random.default_rng(WORLD.Get_rank())
    x = rng.standard_normal(2000).astype(np.float32)
    out = np.empty_like(x)
    with mpicoll.allreduce_init(x, out, codec="int8+ef", algorithm="ring") as request:
        for _ in range(3):
            request.start()
            request.wait()
            ref = native(WORLD, x, "sum")
            close = np.allclose(out, ref, atol=0.1 * WORLD.Get_size(), rtol=0.05)
            assert_everywhere(WORLD, close, "int8 sum too far from MPI's")
            assert same_on_all_ranks(WORLD, out)
