"""Ranks disagree on one argument of an allreduce; every rank must raise MismatchError.

Run under plain ``python`` (not ``-m mpi4py``): a rank that raised while the others wait would
hang the job. ``python mismatch.py CASE[-shm] [--after] [--blind-tags]`` (``-shm``: in shared
memory, where a blocking call's first barrier carries the check): with ``--after`` the
mismatched call comes after an agreed one of the same kind on every rank, so only
MPICOLL_CHECK=1 catches it; with ``--verified`` every rank first makes both calls, agreed, so
neither is checked again (in shared memory, where no tag keeps them apart, the stamps of the
first barrier catch it; ``--nonblocking``: through ``iallreduce``, the engine's path, instead of
the fast path; ``--starters``: the agreed calls nonblocking too, so that the mismatched one
takes its kind's starter); ``--blind-tags`` skips every check and keeps the fingerprint out of the tags (as
a hash collision would), so mismatched messages meet.
"""

import sys

import numpy as np
from mpi4py import MPI

import mpicoll

comm = MPI.COMM_WORLD
rank = comm.Get_rank()
case = sys.argv[1]
odd = rank == comm.Get_size() - 1  # the last rank disagrees

args = {"count": 1000, "dtype": "f4", "algorithm": "ring", "codec": None}
if case.endswith("-shm"):  # shared memory: the check is the first barrier of blocking calls
    args["algorithm"], case = "shm", case[:-len("-shm")]
if case.endswith("-mpi"):  # MPI's blocking MPI_Allreduce, which no nonblocking call matches
    args["algorithm"], case = "native-blocking", case[:-len("-mpi")]


def call_of(odd: bool) -> tuple[dict, bool]:
    """The arguments of a rank's call, and whether it blocks: the last rank's differ."""
    if case == "count":
        return dict(args, count=1001 if odd else 1000), True
    if case == "dtype":
        return dict(args, dtype="f8" if odd else "f4"), True
    if case == "algorithm":
        return dict(args, algorithm=("tree" if args["algorithm"] == "ring" else "ring") if odd
                    else args["algorithm"]), True
    if case == "blocking":  # the last rank starts it nonblocking (erroneous in MPI too)
        return args, not odd
    if case.startswith("codec-"):  # codec-int8-fp16: the last rank uses the second
        first, second = case.split("-")[1:]
        args["codec"] = None if first == "none" else first
        theirs = second if odd else first
        return dict(args, codec=None if theirs == "none" else theirs), True
    raise SystemExit(f"unknown case {case}")


mine, blocking = call_of(odd)

if "--blind-tags" in sys.argv:
    begin = mpicoll.context.Context.begin
    mpicoll.context.Context.begin = lambda self, kind: (begin(self, kind)[0], 0)

if "--after" in sys.argv:  # the agreed kind first, so the mismatched call is not a first call
    mpicoll.allreduce(np.ones(args["count"], args["dtype"]), algorithm=args["algorithm"],
                      codec=args["codec"])
if "--verified" in sys.argv:  # both calls, agreed on every rank: neither is checked again
    for agreed, _ in (call_of(False), call_of(True)):
        x = np.ones(agreed["count"], agreed["dtype"])
        if "--starters" in sys.argv:  # nonblocking: each kind gets its starter
            mpicoll.iallreduce(x, algorithm=agreed["algorithm"], codec=agreed["codec"]).wait()
        else:
            mpicoll.allreduce(x, algorithm=agreed["algorithm"], codec=agreed["codec"])
blocking = blocking and "--nonblocking" not in sys.argv
x = np.full(mine["count"], rank + 1, mine["dtype"])
try:
    if blocking:
        y = mpicoll.allreduce(x, algorithm=mine["algorithm"], codec=mine["codec"])
    else:
        y = mpicoll.iallreduce(x, algorithm=mine["algorithm"], codec=mine["codec"]).wait()
except mpicoll.MismatchError as error:
    print(f"rank {rank} raised MismatchError: {error}", flush=True)
else:
    print(f"rank {rank} RETURNED DATA {y[:3]}", flush=True)
