"""The MPI library's own float32 Allreduce: checks the sum and times it (nccl-tests conventions).

    mpiexec -n 4 python tests/mpi_programs/native_allreduce.py --mib 16 --iters 10

Exits 1 if any rank got a wrong sum. Rank 0 prints one line with the median time, algbw = bytes
/ time and busbw = algbw * 2(p-1)/p. Values are small integers so float32 sums are exact.
"""

import argparse
import statistics
import sys

import numpy as np
from mpi4py import MPI


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mib", type=float, default=4.0, help="message size in MiB")
    parser.add_argument("--iters", type=int, default=1, help="timed repetitions after one warm-up")
    args = parser.parse_args()

    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    count = int(args.mib * 2**20) // 4
    pattern = np.arange(count, dtype=np.float32) % 7
    send = pattern + rank
    recv = np.empty_like(send)
    expected = pattern * size + size * (size - 1) / 2

    times = []
    wrong = 0
    for _ in range(args.iters + 1):
        recv.fill(-1)
        comm.Barrier()
        start = MPI.Wtime()
        comm.Allreduce(send, recv, op=MPI.SUM)
        times.append(MPI.Wtime() - start)
        wrong += int(not np.array_equal(recv, expected))
    wrong = comm.allreduce(wrong)
    # The slowest rank's time is the collective's time.
    seconds = statistics.median(comm.allreduce(t, op=MPI.MAX) for t in times[1:] or times)

    if rank == 0:
        algbw = send.nbytes / seconds / 1e9
        busbw = algbw * 2 * (size - 1) / size
        print(f"ranks {size} bytes {send.nbytes} time_ms {seconds * 1e3:.1f} "
              f"algbw_GBps {algbw:.3f} busbw_GBps {busbw:.3f} wrong {wrong}", flush=True)
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
