"""How the chunk of hybrid's pipeline sets its time: each chunk size against native, interleaved.

    python benchmarks/emucluster.py --hosts 2 --ranks-per-host 2 --rate 1gbit \\
        -- python benchmarks/hybrid_chunks.py --bytes 16M

Smaller chunks fill and drain the pipeline sooner; larger ones pay a round's own cost (a
barrier and Python) fewer times. Each chunk size plans on a communicator of its own (plans are
cached per communicator), and every repetition runs each of them and native once, after a
barrier; ratios are medians of per-repetition ratios to native.
"""

from __future__ import annotations

import argparse

import numpy as np
from mpi4py import MPI

import mpicoll
from mpicoll import bench
from mpicoll.algorithm import hybrid


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bytes", default="16M", help="float32 bytes per rank (default 16M)")
    parser.add_argument("--chunks", default="128K,256K,512K,1M", help="chunk sizes to compare")
    parser.add_argument("--reps", type=int, default=7)
    args = parser.parse_args()
    world = MPI.COMM_WORLD
    x = np.ones(bench.parse_size(args.bytes) // 4, np.float32)
    y = np.empty_like(x)
    chunks = [bench.parse_size(c) for c in args.chunks.split(",")]
    comms = {}
    for chunk in chunks:  # the plan is made (and the window grown) with this chunk, once
        hybrid.PIPELINE_BYTES = chunk
        comms[chunk] = world.Dup()
        mpicoll.allreduce(x, y, algorithm="hybrid", comm=comms[chunk])
        assert np.all(y == world.Get_size()), "hybrid gave a wrong sum"
    times: dict[int, list[float]] = {c: [] for c in [0, *chunks]}  # 0: native
    for _ in range(args.reps):
        for chunk in [0, *chunks]:
            world.Barrier()
            t0 = MPI.Wtime()
            if chunk:
                mpicoll.allreduce(x, y, algorithm="hybrid", comm=comms[chunk])
            else:
                world.Allreduce(x, y)
            times[chunk].append(world.allreduce(MPI.Wtime() - t0, op=MPI.MAX))
    if world.Get_rank() == 0:
        print(f"# hybrid, {x.nbytes} B float32 sum, {world.Get_size()} ranks; medians of "
              f"{args.reps} interleaved repetitions (slowest rank's time)")
        print(f"# {'chunk':>8} {'ms':>8} {'/native':>8}")
        print(f"  {'native':>8} {np.median(times[0]) * 1e3:8.1f}")
        for chunk in chunks:
            ratio = np.median(np.array(times[chunk]) / np.array(times[0]))
            print(f"  {chunk >> 10:>7}K {np.median(times[chunk]) * 1e3:8.1f} {ratio:8.2f}")
    for comm in comms.values():
        comm.Free()


if __name__ == "__main__":
    main()
