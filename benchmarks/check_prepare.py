"""What the fingerprint check adds to a first call's preparation, timed inside the call (run
under mpiexec).

    mpiexec -n 2 python benchmarks/check_prepare.py [--bytes 1048576] [--reps 40]

A first call of a kind is prepared (checked, resolved, numbered, its check started, tagged) with
caches made cold by the data the previous call moved: Python that costs a few hundred
nanoseconds in a loop costs microseconds there, so only a timing inside real calls says what
the check costs. Each repetition makes a batch of first calls (counts ``n + 1 .. n + batch``,
plans dropped before), in ``new`` their kinds verified before (no check), in ``new+chk`` not
(the default: each call checked), alternating which goes first; it times ``mpicoll.api._prepare``
and the whole call on rank 0. Medians over calls, in µs.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from mpi4py import MPI

import mpicoll
from mpicoll import api, context, fastpath
from mpicoll.bench import library


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bytes", type=int, default=1 << 20)
    parser.add_argument("--reps", type=int, default=40)
    parser.add_argument("--batch", type=int, default=50)
    args = parser.parse_args()
    comm = MPI.COMM_WORLD
    n, batch = args.bytes // 4, args.batch
    wide = np.ones(n + batch, np.float32)
    fresh = [wide[:n + k] for k in range(1, batch + 1)]
    out = [np.empty_like(a) for a in fresh]
    ctx = context.of(comm)
    clock = time.perf_counter_ns
    prepared: list[int] = []
    prepare = api._prepare

    def timed_prepare(*a, **k):  # type: ignore[no-untyped-def]
        t0 = clock()
        result = prepare(*a, **k)
        prepared.append(clock() - t0)
        return result

    api._prepare = timed_prepare
    times: dict[str, tuple[list[int], list[int]]] = {"new": ([], []), "new+chk": ([], [])}
    try:
        for rep in range(args.reps):
            for name in ("new", "new+chk") if rep % 2 else ("new+chk", "new"):
                for a, b in zip(fresh, out):  # warm: the memory touched, the kinds verified
                    mpicoll.allreduce(a, b)
                ctx._plans.clear()
                if name == "new+chk":
                    ctx._verified.clear()
                fastpath.forget()
                comm.Barrier()
                calls, preps = times[name]
                for a, b in zip(fresh, out):
                    prepared.clear()
                    t0 = clock()
                    mpicoll.allreduce(a, b)
                    calls.append(clock() - t0)
                    preps.append(prepared[0])
    finally:
        api._prepare = prepare
    if comm.Get_rank() == 0:
        print(f"# {comm.Get_size()} ranks, {library()}; {args.bytes} B float32 sum, first calls "
              f"of {args.reps} x {batch} kinds; medians on rank 0, us")
        (call0, prep0), (call1, prep1) = times["new"], times["new+chk"]
        print(f"prepare: new {np.median(prep0) / 1e3:.1f}  new+chk {np.median(prep1) / 1e3:.1f}"
              f"  (+{(np.median(prep1) - np.median(prep0)) / 1e3:.1f})   "
              f"call: new {np.median(call0) / 1e3:.1f}  new+chk {np.median(call1) / 1e3:.1f}")


if __name__ == "__main__":
    main()
