"""Does ``auto``'s guard follow a node that gets busy? Its choice, kept on a quiet node, then
beside a background load, with the guard (``MPICOLL_AUTO=measure``, the default) or without
(``MPICOLL_AUTO=once``).

    for mode in once measure; do for size in 256K 2M 16M; do
        MPICOLL_AUTO=$mode mpiexec -n 2 -bind-to core python benchmarks/auto_guard.py -m $size
    done; done

One size per run: a second communicator in the same processes ran the same algorithm up to
1.6× slower than the first (a fresh launch each is what a job is). ``auto``'s trials on the
quiet node, then ``-n`` calls of ``auto`` in blocks of 16, each block beside a block of MPI's
own ``MPI_Allreduce`` (which first alternates), then the same with one Python process spinning
on each core (started and stopped by rank 0, as ``performance.sh``'s busy step). Per phase it
prints the median over blocks of auto's time / MPI's (the slowest rank's), over all blocks and
over the second half (after the guard had time to act), what ``auto`` ran at the end, and the
guard's checks and new trials so far.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from typing import Callable

import numpy as np
from mpi4py import MPI

import mpicoll
from mpicoll import bench, context


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-m", "--size", default="16M", help="message size in bytes")
    parser.add_argument("-n", "--calls", type=int, default=512,
                        help="auto's calls per phase (default 512)")
    parser.add_argument("--header", action="store_true", help="print the column names first")
    args = parser.parse_args(argv)
    comm = MPI.COMM_WORLD
    mode = os.environ.get("MPICOLL_AUTO") or "measure"
    if args.header and comm.Get_rank() == 0:
        print(f"# auto's guard: {comm.Get_size()} ranks, {bench.library()}, {os.cpu_count()} "
              f"cores; ratio: median over blocks of {BLOCK} calls of auto / MPI_Allreduce")
        print(f"#{'size':>7} {'mode':>8} {'phase':>6} {'ratio':>6} {'2nd half':>8} "
              f"{'MPI(us)':>8} {'ran':>14} {'checks':>6} {'again':>5}")
    nbytes = bench.parse_size(args.size)
    x = np.ones(nbytes // 4, np.float32)
    out, ref = np.empty_like(x), np.empty_like(x)
    for _ in range(mpicoll.api.trials_left(x, comm=comm)):
        mpicoll.allreduce(x, out, comm=comm)
    calls = (lambda: mpicoll.allreduce(x, out, comm=comm), lambda: comm.Allreduce(x, ref))
    for phase in ("quiet", "busy"):
        load = _load() if phase == "busy" and comm.Get_rank() == 0 else []
        times = np.array([[_block(comm, calls[(which + block) % 2])
                           for which in range(2)][::1 - 2 * (block % 2)]
                          for block in range(max(2, args.calls // BLOCK))])
        for process in load:
            process.kill()
            process.wait()
        comm.Allreduce(MPI.IN_PLACE, times, op=MPI.MAX)
        ratios = times[:, 0] / times[:, 1]
        trials = context.of(comm).trials
        checks, again = sum(trials.checks.values()), sum(trials.again.values())
        ran = mpicoll.choose_algorithm(x, comm=comm)
        if not np.array_equal(out, ref):
            raise SystemExit(f"auto's result differs from MPI's at {nbytes} B")
        if comm.Get_rank() == 0:
            print(f"{bench.format_size(nbytes) + 'B':>8} {mode:>8} {phase:>6} "
                  f"{np.median(ratios):>6.2f} {np.median(ratios[len(ratios) // 2:]):>8.2f} "
                  f"{np.median(times[:, 1]) / BLOCK * 1e6:>8.0f} {ran:>14} {checks:>6} "
                  f"{again:>5}", flush=True)


BLOCK = 16


def _block(comm: MPI.Intracomm, call: Callable[[], object]) -> float:
    """Seconds of :data:`BLOCK` calls back to back, from a barrier."""
    comm.Barrier()
    began = time.perf_counter()
    for _ in range(BLOCK):
        call()
    return time.perf_counter() - began


def _load() -> list[subprocess.Popen]:
    """One Python process spinning on each core, pinned there."""
    spin = [sys.executable, "-c", "while True: pass"]
    started = [subprocess.Popen(["taskset", "-c", str(core), *spin], start_new_session=True)
               for core in range(os.cpu_count() or 1)]
    time.sleep(0.5)  # (running before the first sample)
    return started


if __name__ == "__main__":
    main()
