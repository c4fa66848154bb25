"""What leaving timing records on costs: the same allreduce with and without recording, interleaved.

    mpiexec -n 2 python benchmarks/timing_overhead.py
"""

import time

import numpy as np
from mpi4py import MPI

import mpicoll
from mpicoll import timing

comm = MPI.COMM_WORLD
REPS, INNER = 15, 400


def per_call(x, recorder):
    comm.Barrier()
    t0 = time.perf_counter()
    if recorder is None:
        for _ in range(INNER):
            mpicoll.allreduce(x, algorithm="ring")
    else:
        with timing.recording(recorder):
            for _ in range(INNER):
                mpicoll.allreduce(x, algorithm="ring")
    return comm.allreduce(time.perf_counter() - t0, op=MPI.MAX) / INNER


if comm.rank == 0:
    print(f"# {comm.size} ranks, ring, {REPS} interleaved repetitions of {INNER} calls")
    print(f"# {'bytes':>9} {'off(us)':>9} {'on(us)':>9} {'extra(us)':>10} {'ratio':>6}")
for nbytes in (8, 65536, 1 << 20):
    x = np.ones(nbytes // 4, np.float32)
    off, on = [], []
    for rep in range(REPS):
        pair = [("off", None), ("on", timing.Recorder())]
        for name, recorder in (pair if rep % 2 else pair[::-1]):
            (off if name == "off" else on).append(per_call(x, recorder))
    off, on = np.array(off), np.array(on)
    if comm.rank == 0:
        print(f"  {nbytes:>9} {np.median(off)*1e6:9.1f} {np.median(on)*1e6:9.1f} "
              f"{np.median(on - off)*1e6:10.2f} {np.median(on / off):6.3f}")
