"""Programs that hung or returned wrong bits before the progress engine, run on every rank
(see tests/test_reliability.py): completion in any order, threads, error feedback after NaN."""

import threading
import time
import warnings

import numpy as np
import pytest
from helpers import WORLD, assert_everywhere, native, same_on_all_ranks

import mpicoll
from mpicoll import codecs, context

ORDERS = ["ring", "tree", "hybrid", "auto"]


@pytest.mark.parametrize("algorithm", ORDERS)
@pytest.mark.parametrize("count", [1000, 300_000])
def test_requests_complete_in_any_order(algorithm, count):
    """Every rank starts A then B; rank 0 waits on B first, the others on A first (MPI allows
    any completion order). Before, a request only moved when it was itself waited on: hang."""
    a, b = np.full(count, 1.0, np.float32), np.full(count, 2.0, np.float32)
    ra = mpicoll.iallreduce(a, algorithm=algorithm)
    rb = mpicoll.iallreduce(b, algorithm=algorithm)
    if WORLD.Get_rank() == 0:
        yb, ya = rb.wait(), ra.wait()
    else:
        ya, yb = ra.wait(), rb.wait()
    p = WORLD.Get_size()
    assert_everywhere(WORLD, np.all(ya == p) and np.all(yb == 2 * p), "wrong sums")


def test_more_collectives_in_flight_than_tags(monkeypatch):
    """Tags carry a sequence number that wraps after 4096 stages: a 4100th request in flight
    took the first one's tag, their messages matched each other's receives, and a correct
    program failed (a truncation reported as a mismatch, or a hang at exit). Now a collective
    whose number is still held by one in flight waits for it to finish first. A persistent
    request restarted on its tags while the request that took them since is in flight waits
    for it too (here both run the same rounds in the same order, so MPI's in-order matching
    would have paired them right even without the wait: this part shows the wait is safe).
    The communicator's context is made with 64 sequence numbers, not 4096: the same wrap, on
    64 times fewer collectives (4096 took 15 s at 4 ranks on 2 cores)."""
    monkeypatch.setattr(context, "SEQUENCE_BITS", 6)
    rank, p = WORLD.Get_rank(), WORLD.Get_size()
    comm = WORLD.Dup()
    numbers = context.of(comm).sequence_mod
    monkeypatch.undo()  # (only this communicator's context has so few)
    assert numbers == 64

    def run(n: int, persistent: mpicoll.PersistentRequest | None = None) -> None:
        requests = [mpicoll.iallreduce(np.full(64, i % 97 + rank, np.float64),
                                       algorithm="ring", comm=comm) for i in range(n)]
        if persistent is not None:
            persistent.start()  # the last request took its tag again and is still in flight
        order = range(n) if rank % 2 == 0 else reversed(range(n))
        results = {i: requests[i].wait() for i in order}
        wrong = [i for i in range(n) if not np.all(results[i] == p * (i % 97) + p * (p - 1) / 2)]
        assert_everywhere(WORLD, not wrong, f"wrong sums in {wrong[:5]}")

    run(numbers + 4)
    persistent = mpicoll.allreduce_init(np.full(64, 1000.0 + rank), algorithm="ring", comm=comm)
    run(numbers, persistent)
    assert_everywhere(WORLD, np.all(persistent.wait() == 1000.0 * p + p * (p - 1) / 2),
                      "wrong persistent sum")
    persistent.free()
    comm.Free()


@pytest.mark.parametrize("algorithm", ["ring", "shm", "auto"])
def test_freeing_a_communicator_with_collectives_in_flight(algorithm):
    """MPI_Comm_free lets pending operations complete normally. Before, freeing the user's
    communicator freed mpicoll's duplicate and node window under the requests still using them:
    MPI's "Invalid communicator" (ring) or a segfault (shm). Now the free finishes them first."""
    comm = WORLD.Dup()
    xs = [np.full(300_000, i + 1.0, np.float32) for i in range(3)]
    requests = [mpicoll.iallreduce(x, algorithm=algorithm, comm=comm) for x in xs]
    comm.Free()
    p = WORLD.Get_size()
    results = [r.wait() for r in reversed(requests)][::-1]
    assert_everywhere(WORLD, all(np.all(y == (i + 1) * p) for i, y in enumerate(results)),
                      "wrong sums")

@pytest.mark.parametrize("count", [2, 2048, 300_000])
def test_a_blocking_mpi_allreduce_among_requests_in_flight(count):
    """native-blocking blocks in MPI_Allreduce; with ring requests in flight (waited on after
    it, in any order) a helper thread blocks there while this one drives them: rank 0 starts
    its wait only after a pause, so the others' blocking calls find its requests unfinished."""
    a, b = np.full(count, 1.0, np.float32), np.full(count, 2.0, np.float32)
    ra, rb = mpicoll.iallreduce(a, algorithm="ring"), mpicoll.iallreduce(b, algorithm="ring")
    if WORLD.Get_rank() == 0:
        time.sleep(0.05)
    y = mpicoll.allreduce(np.full(count, 3.0, np.float32), algorithm="native-blocking")
    yb, ya = (rb.wait(), ra.wait()) if WORLD.Get_rank() % 2 else (ra.wait(), rb.wait())[::-1]
    p = WORLD.Get_size()
    assert_everywhere(WORLD, np.all(ya == p) and np.all(yb == 2 * p) and np.all(y == 3 * p),
                      "wrong sums")


def test_reverse_order_with_many_requests_and_a_sparse_codec():
    """Five requests, waited on in reverse on even ranks and in order on odd ones; one of them
    a two-stage sparse allreduce."""
    xs = [np.full(5000, i + 1, np.float32) for i in range(5)]
    reqs = [mpicoll.iallreduce(x, codec="topk" if i == 2 else None) for i, x in enumerate(xs)]
    order = range(5)[::-1] if WORLD.Get_rank() % 2 == 0 else range(5)
    out = {i: reqs[i].wait() for i in order}
    refs = {i: native(WORLD, xs[i], "sum") for i in range(5) if i != 2}
    assert_everywhere(WORLD, all(np.array_equal(out[i], refs[i]) for i in refs), "wrong sums")
    assert same_on_all_ranks(WORLD, out[2])


@pytest.mark.skipif(WORLD.Get_size() == 1, reason="needs a rank that has not started yet")
def test_a_second_thread_on_the_same_communicator_is_refused():
    """Collectives in flight from one thread, and another thread starts one on the same
    communicator (of a new kind, and of a kind the fast path knows): refused with
    ConcurrentUseError before anything is sent, nothing hangs.

    To be in flight for sure, the collective waits for the last rank, which starts it only
    after the others have tried (a collective whose ranks all started may finish at once)."""
    comm = WORLD.Dup()
    x = np.ones(1000)
    mpicoll.allreduce(x, comm=comm, algorithm="ring")  # this kind is checked: no check below
    late = WORLD.Get_rank() == WORLD.Get_size() - 1
    errors = []

    def other():
        for y, algorithm in ((np.ones(10), "auto"), (np.ones(1000), "ring")):  # new, lowered
            try:
                mpicoll.allreduce(y, comm=comm, algorithm=algorithm)
            except Exception as error:  # noqa: BLE001 - the assertion below says which it was
                errors.append(error)

    if not late:
        mine = mpicoll.iallreduce(x, comm=comm, algorithm="ring")
        thread = threading.Thread(target=other)
        thread.start()
        thread.join()
    WORLD.Barrier()
    if late:
        mine = mpicoll.iallreduce(x, comm=comm, algorithm="ring")
    result = mine.wait()
    refused = late or (len(errors) == 2 and all(isinstance(e, mpicoll.ConcurrentUseError)
                                                and "two threads" in str(e) for e in errors))
    assert_everywhere(WORLD, refused, f"not refused: {errors!r}")
    assert_everywhere(WORLD, np.all(result == WORLD.Get_size()), "wrong sum")
    mpicoll.allreduce(np.ones(10), comm=comm)  # the communicator is still usable afterwards
    comm.Free()


def test_threads_on_their_own_communicators_run_at_once():
    """Each thread its own communicator: concurrent collectives, every result right."""
    comms = [WORLD.Dup() for _ in range(3)]
    wrong = []

    def work(k, comm):
        for i in range(40):
            x = np.full(100 + 37 * i, k + i, np.float64)
            y = mpicoll.allreduce(x, comm=comm, algorithm=["ring", "tree"][i % 2])
            if not np.all(y == (k + i) * comm.Get_size()):
                wrong.append((k, i))

    threads = [threading.Thread(target=work, args=(k, c)) for k, c in enumerate(comms)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert_everywhere(WORLD, not wrong, f"wrong results {wrong[:5]}")
    for c in comms:
        c.Free()


@pytest.mark.parametrize("name", ["int8", "topk"])
def test_error_feedback_goes_on_after_a_non_finite_step(name):
    """A step with NaN and inf (mixed precision overflowing) gives a non-finite sum, as it must;
    the residual drops those entries (counted, with a warning), and the next finite call is
    unaffected: before, every later call returned NaN until reset()."""
    ef = codecs.ErrorFeedback(codecs.get(name))
    x = np.random.default_rng(WORLD.Get_rank()).standard_normal(4096).astype(np.float32)
    bad = x.copy()
    bad[7], bad[100] = np.nan, np.inf
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        first = mpicoll.allreduce(bad, codec=ef)
    after = mpicoll.allreduce(x, codec=ef)
    p = WORLD.Get_size()
    assert_everywhere(WORLD, p == 1 or not np.isfinite(first).all(), "a NaN step came out finite")
    assert_everywhere(WORLD, np.isfinite(after).all(), "NaN carried into the next call")
    assert_everywhere(WORLD, np.isfinite(ef.owed(x)).all(), "the residual kept a NaN")
    dropped = p == 1 or (ef.dropped >= 2 and any("non-finite" in str(w.message) for w in caught))
    assert_everywhere(WORLD, dropped, f"not counted or not warned: dropped={ef.dropped}")
    if name == "int8":  # dense: close to the exact sum (top-k sends 1% and owes the rest)
        ref = native(WORLD, x, "sum")
        error = np.linalg.norm(after - ref) / np.linalg.norm(ref)
        assert_everywhere(WORLD, error < 0.05, f"relative error {error:.2e}")
