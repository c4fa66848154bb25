"""How cheap a fingerprint check could be: one small MPI collective in front of a call (run
under mpiexec).

    mpiexec -n 2 python benchmarks/check_floor.py [--bytes 1048576] [--reps 61]

Methods, each a batch of 1 MiB ``mpicoll.allreduce`` calls through the full path (the shortcut
dropped, as on a first call), timed interleaved in a seeded random order; medians of the
slowest rank's time per call, ratios medians of per-repetition ratios against ``full``:

- ``full``: no check (the kind verified already);
- ``checked``: the default check of a new kind (``mpicoll.check``);
- ``bookkeeping``: the same, its collective replaced by nothing (what the check's Python costs);
- ``+allreduce``: no check, but a blocking ``MPI_Allreduce`` of four integers before the call;
- ``+barrier``: no check, but an ``MPI_Barrier`` before the call.

Then ``wait``: an ``MPI_Iallreduce`` of four integers started on every rank, 50 µs of work
without MPI calls, and the time its ``Wait`` still takes; and ``late``: a check started on every
rank, the last rank busy 200 µs before it finishes it, the others 20 µs: the time the others
spend finishing it (small if the check's messages leave when it starts, not when it is waited on).
"""

from __future__ import annotations

import argparse
import time
from array import array

import numpy as np
from mpi4py import MPI

import mpicoll
from mpicoll import check, context, fastpath
from mpicoll.bench import library


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bytes", type=int, default=1 << 20)
    parser.add_argument("--reps", type=int, default=61)
    args = parser.parse_args()
    comm = MPI.COMM_WORLD
    x = np.ones(args.bytes // 4, np.float32)
    y = np.empty_like(x)
    ctx = context.of(comm)
    four = np.zeros(4, np.int64)

    def full() -> None:
        fastpath.forget()
        mpicoll.allreduce(x, y)

    def checked() -> None:
        ctx._verified.clear()
        full()

    channel = ctx.checks

    class Nothing:  # a check channel that hashes the kind and compares nothing
        pending = carried = False

        def start(self, call: int, kind: tuple, rest: tuple, known: int | None,
                  *args: object) -> int:
            return check.tag_bits(kind[0], rest) if known is None else known

        def finish(self) -> None:
            pass

    nothing = Nothing()

    def bookkeeping() -> None:
        ctx.checks = nothing  # type: ignore[assignment]
        try:
            checked()
        finally:
            ctx.checks = channel

    def with_allreduce() -> None:
        comm.Allreduce(MPI.IN_PLACE, four, op=MPI.MIN)
        full()

    def with_barrier() -> None:
        comm.Barrier()
        full()

    methods = {"full": full, "checked": checked, "bookkeeping": bookkeeping,
               "+allreduce": with_allreduce,
               "+barrier": with_barrier}
    for method in methods.values():
        for _ in range(5):
            method()
    samples = {name: np.zeros(args.reps) for name in methods}
    order = np.random.default_rng(args.bytes)
    for rep in range(args.reps):
        for name in order.permutation(list(methods)):
            comm.Barrier()
            t0 = time.perf_counter()
            for _ in range(20):
                methods[name]()
            samples[name][rep] = (time.perf_counter() - t0) / 20
    for s in samples.values():
        comm.Allreduce(MPI.IN_PLACE, s, op=MPI.MAX)

    waits = []
    for _ in range(2000):
        values = array("q", (1, 2, 3, 4))
        comm.Barrier()
        request = comm.Iallreduce(MPI.IN_PLACE, values, op=MPI.MIN)
        until = time.perf_counter() + 50e-6
        while time.perf_counter() < until:
            pass
        t0 = time.perf_counter()
        request.Wait()
        waits.append(time.perf_counter() - t0)
    wait = comm.allreduce(float(np.median(waits)), op=MPI.MAX)
    late = []
    last = comm.Get_rank() == comm.Get_size() - 1
    kind = (x.size, x.dtype, "sum", "ring", "")
    for call in range(500):
        comm.Barrier()
        ctx.checks.start(call, kind, kind[1:], 1)
        until = time.perf_counter() + (200e-6 if last else 20e-6)
        while time.perf_counter() < until:
            pass
        t0 = time.perf_counter()
        ctx.checks.finish()
        late.append(time.perf_counter() - t0)
    early = comm.gather(float(np.median(late)), root=0)
    if comm.Get_rank() == 0:
        print(f"# {comm.Get_size()} ranks, {library()}; "
              f"{x.nbytes} B float32 sum through the full path; medians of {args.reps}")
        print("  ".join(f"{name}: {np.median(s) * 1e6:.1f} us ({np.median(s / samples['full']):.3f})"
                        for name, s in samples.items())
              + f"  wait after 50 us: {wait * 1e6:.2f} us"
              + f"  late: {max(early[:-1]) * 1e6:.2f} us")


if __name__ == "__main__":
    main()
