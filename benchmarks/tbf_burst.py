"""One message between two hosts of the emulated cluster, after an idle gap: what the links'
token bucket (``tc tbf``, burst 256 KiB) lets through at once (docs/seed.md).

    python benchmarks/emucluster.py --hosts 2 --ranks-per-host 1 --rate 1gbit \\
        -- python benchmarks/tbf_burst.py

Rank 0 sends ``m`` bytes to rank 1, which answers with one byte; after a barrier and a sleep of
``gap`` ms (0: back to back). Medians of 7; ``ratio``: to the time ``m`` takes at 1 Gbit/s.
"""

import time

import numpy as np
from mpi4py import MPI

RATE = 1e9  # bits per second, emucluster's --rate 1gbit


def main() -> None:
    comm, ack = MPI.COMM_WORLD, np.zeros(1, np.uint8)
    rank = comm.Get_rank()
    if comm.Get_size() != 2:
        raise SystemExit("tbf_burst.py runs on 2 ranks, one per emulated host")
    for gap_ms in (0, 2, 10):
        for m in (16 << 10, 64 << 10, 128 << 10, 256 << 10, 512 << 10, 1 << 20, 4 << 20):
            buf, times = np.ones(m, np.uint8), []
            for _ in range(7):
                comm.Barrier()
                time.sleep(gap_ms / 1e3)
                start = time.perf_counter()
                if rank == 0:
                    comm.Send(buf, 1, 5)
                    comm.Recv(ack, 1, 6)
                else:
                    comm.Recv(buf, 0, 5)
                    comm.Send(ack, 0, 6)
                times.append(time.perf_counter() - start)
            if rank == 0:
                took, line = float(np.median(times)), m * 8 / RATE
                print(f"gap {gap_ms:3d} ms {m:>9d} B {took * 1e3:8.3f} ms   at 1 Gbit/s "
                      f"{line * 1e3:7.3f} ms   ratio {took / line:5.2f}", flush=True)


if __name__ == "__main__":
    main()
