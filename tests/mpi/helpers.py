"""What the case files (tests/mpi/*_cases.py) share: the world communicator, reproducible
inputs, MPI's own Allreduce as the reference, and checks that every rank leaves together.

Case files import from here, never from one another.
"""

import hashlib
import os
from contextlib import contextmanager

import numpy as np
from mpi4py import MPI

import mpicoll

__all__ = ["WORLD", "MPI_OPS", "data", "native", "value_bytes", "same_on_all_ranks",
           "assert_everywhere", "assert_agreed", "environment", "runnable"]

WORLD = MPI.COMM_WORLD
MPI_OPS = {"sum": MPI.SUM, "prod": MPI.PROD, "min": MPI.MIN, "max": MPI.MAX}


def runnable(which):
    """The algorithms of collective ``which`` that run on this job's layout, ``auto`` last
    (one-node ones only where every rank shares one node)."""
    from mpicoll import context
    from mpicoll.algorithm import registry
    one_node = len(context.of(WORLD).layout.nodes) == 1
    return [a for a in mpicoll.algorithms(which)
            if one_node or a == "auto" or not registry.get(a, which).one_node]


def data(comm, count, dtype, op, seed=0):
    """This rank's input: values whose reduction is exact in any order."""
    dtype = np.dtype(dtype)
    rng = np.random.default_rng([comm.Get_rank(), count, seed])
    if op == "prod":
        values = rng.choice([1, 2] if dtype.kind == "u" else [1, 2, -1], size=count)
    else:
        lo = 0 if dtype.kind == "u" else -3
        values = rng.integers(lo, 4, size=count)
    x = values.astype(dtype)
    if dtype.kind == "c" and op != "prod":
        x = x + 1j * rng.integers(-3, 4, size=count).astype(dtype)
    return x


def native(comm, x, op):
    """MPI's own Allreduce of ``x``: the reference."""
    ref = np.empty_like(x)
    comm.Allreduce(x, ref, op=MPI_OPS[op])
    return ref


def value_bytes(arr):
    """The bytes that hold the values: x87 long doubles carry 6 bytes of undefined padding."""
    raw = np.ascontiguousarray(arr).view(np.uint8)
    if arr.dtype.kind in "fc" and np.dtype(arr.dtype.char.lower()).itemsize == 16 \
            and np.finfo(np.longdouble).nmant == 63:
        raw = raw.reshape(-1, 16)[:, :10]
    return raw.tobytes()


def digest(arr):
    """A hash of the bits of ``arr``'s values, to compare across ranks in one small message."""
    return hashlib.sha256(value_bytes(arr)).hexdigest()


def same_on_all_ranks(comm, arr):
    digests = comm.allgather(digest(arr))
    return len(set(digests)) == 1


def assert_everywhere(comm, ok, message):
    """Raise on every rank if the check failed on any, so all ranks leave the test together."""
    failed = [rank for rank, good in enumerate(comm.allgather(bool(ok))) if not good]
    assert not failed, f"{message} (on ranks {failed})"


def assert_agreed(comm, problems, result, what=""):
    """One allgather for a whole check: raise on every rank if any rank found ``problems`` (a
    list of messages) or if ``result`` does not hold the same bits on every rank."""
    everyone = comm.allgather((digest(result), problems))
    lead = f"{what}: " if what else ""
    failed = {rank: found for rank, (_, found) in enumerate(everyone) if found}
    assert not failed, lead + "; ".join(f"rank {rank}: {', '.join(found)}"
                                        for rank, found in failed.items())
    assert len({bits for bits, _ in everyone}) == 1, f"{lead}ranks ended with different bits"


@contextmanager
def environment(**values):
    """Set ``MPICOLL_*`` variables inside the block: mpicoll reads them once, so read again on
    the way in and out (``mpicoll.reload_environment``)."""
    saved = {name: os.environ.get(name) for name in values}
    os.environ.update({name: str(value) for name, value in values.items()})
    mpicoll.reload_environment()
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        mpicoll.reload_environment()


def slowed_choice_is_tried_again(ctx, key, calls, left, first, what=""):
    """Drive auto's guard (mpicoll.trials.Watch) of the choice kept under ``key`` through its
    cycle, with ``calls(n)`` making n blocking calls and ``left()`` the trials left (``first``
    after the trials began): a first check finds it as measured (the trials' figures times
    1000) and keeps it; then, the figures divided by 10⁶, the period's last timed call sends
    the size back to its trials, whose end doubles the period. The problems found."""
    from mpicoll import trials
    problems, measured = [], ctx.trials.measured[key]
    for name in measured:  # (a busy moment in the checks must not send it back)
        measured[name] *= 1000
    calls(trials.CHECK_EVERY)  # the first check: as measured, kept
    if ctx.trials.checks.get(key) != 1 or ctx.trials.again.get(key):
        problems.append(f"{what}first check: {ctx.trials.checks} {ctx.trials.again}")
    for name in measured:
        measured[name] /= 1e6
    calls(trials.CHECK_EVERY - 1)  # its last timed call still to come
    if left():
        problems.append(f"{what}tried again before the period ended")
    calls(1)
    if ctx.trials.again.get(key) != 1 or left() != first:
        problems.append(f"{what}not tried again: {ctx.trials.again}, {left()} trials left")
    calls(first)
    watch = ctx.trials.watches.get(key)
    if watch is None or watch.due != 2 * trials.CHECK_EVERY:  # the period doubles
        problems.append(f"{what}after the new trials: {watch and (watch.name, watch.due)}")
    return problems
