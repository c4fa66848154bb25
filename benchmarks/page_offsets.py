"""Where a buffer sits in its page changes what copying into it costs (run under mpiexec -n 2).

    mpiexec -n 2 -bind-to core python benchmarks/page_offsets.py [--algorithms shm,native-blocking]

glibc's memcpy on this CPU runs about 15 times slower on cache-resident data when the
destination lies 8 to 24 bytes past the source modulo 4096 (4K aliasing: the CPU's store-to-load
checks compare the low 12 address bits). NumPy puts large arrays 16 bytes past a page boundary,
so copies between them and page-aligned memory (an MPI window, MPI's own buffers) can hit it.
Three tables, medians of interleaved repetitions (rank 0's times):

1. memcpy of 64 KiB from a page-aligned source, by the destination's offset (one process);
2. ``Sendrecv`` between the two ranks plus an add (recursive doubling's step), the send buffer
   page-aligned, by the receive buffer's offset;
3. ``mpicoll.allreduce`` of each ``--algorithms``, the input 16 bytes past a page boundary (as
   NumPy's), by the output's offset.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from mpi4py import MPI

import mpicoll

OFFSETS = (0, 16, 64, 2048)


class Pool:
    """Arrays placed at chosen offsets from page boundaries, in one block."""

    def __init__(self, nbytes: int):
        self.block = np.empty(nbytes + 4096, np.uint8)
        self.base = -self.block.ctypes.data % 4096
        self.next_page = 0

    def placed(self, offset: int, nbytes: int) -> np.ndarray:
        start = self.base + self.next_page * 4096 + offset
        self.next_page += -(-(offset + nbytes) // 4096) + 1
        return self.block[start:start + nbytes].view(np.float32)


def medians(calls: dict, reps: int, repeat: int, comm: MPI.Comm | None = None) -> dict:
    times: dict = {key: [] for key in calls}
    for _ in range(reps):
        for key, call in calls.items():
            if comm is not None:
                comm.Barrier()
            start = time.perf_counter()
            for _ in range(repeat):
                call()
            times[key].append((time.perf_counter() - start) / repeat)
    return {key: float(np.median(t)) * 1e6 for key, t in times.items()}


def row(label: str, us: dict) -> str:
    return f"{label:>28}" + "".join(f"{us[o]:>9.2f}" for o in OFFSETS)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--algorithms", default="shm,native-blocking")
    parser.add_argument("--reps", type=int, default=15)
    args = parser.parse_args()
    comm = MPI.COMM_WORLD
    if comm.Get_size() != 2:
        raise SystemExit("run with 2 ranks")
    rank, peer = comm.Get_rank(), 1 - comm.Get_rank()
    say = print if rank == 0 else (lambda *a, **k: None)
    say(f"# {MPI.Get_library_version().splitlines()[0].strip()}; µs, medians of {args.reps}; "
        f"columns: the destination's offset from a page boundary")
    say("# where np.empty puts float32 arrays here, bytes past a page boundary: "
        + ", ".join(f"{n * 4 >> 10} KiB at {np.empty(n, np.float32).ctypes.data % 4096}"
                    for n in (2048, 32768, 1 << 18, 1 << 20)))
    say(f"{'':>28}" + "".join(f"{o:>9}" for o in OFFSETS))

    pool = Pool(64 << 20)
    src = pool.placed(0, 65536)
    src[:] = 1
    dst = {o: pool.placed(o, 65536) for o in OFFSETS}
    if rank == 0:
        say(row("memcpy 64 KiB", medians({o: (lambda d=d: np.copyto(d, src))
                                          for o, d in dst.items()}, args.reps, 50)))
    comm.Barrier()

    for nbytes in (8192, 65536, 1 << 20):
        x, y = pool.placed(0, nbytes), pool.placed(1024, nbytes)
        x[:] = 1
        calls = {}
        for o in OFFSETS:
            tmp = pool.placed(o, nbytes)
            calls[o] = (lambda t=tmp: (comm.Sendrecv([x, MPI.BYTE], peer, 0, [t, MPI.BYTE],
                                                     peer, 0), np.add(x, t, out=y)))
        say(row(f"exchange + add {nbytes} B", medians(calls, args.reps, 50, comm)))

    for nbytes in (65536, 262144, 1 << 20):
        x = pool.placed(16, nbytes)
        x[:] = 1
        outs = {o: pool.placed(o, nbytes) for o in OFFSETS}
        for algorithm in args.algorithms.split(","):
            calls = {o: (lambda y=y, a=algorithm: mpicoll.allreduce(x, y, algorithm=a))
                     for o, y in outs.items()}
            for call in calls.values():
                call()
            say(row(f"{algorithm} {nbytes} B", medians(calls, args.reps, 20, comm)))


if __name__ == "__main__":
    main()
