"""How much CPU one step of bucketed allreduce costs, with no compute to compete with.

    python benchmarks/emucluster.py --hosts 2 --ranks-per-host 2 --rate 1gbit -- \\
        python -m mpi4py benchmarks/comm_cpu.py --layers 16 --layer-mib 1 --buckets 1,16

Overlap hides communication behind compute only if the cores have time for both: when the
ranks' compute alone fills every core, each core-millisecond the communication needs lengthens
the step. This measures that need. Every rank readies all its gradients at once and then
tests the buckets every millisecond, sleeping in between (no busy waiting); the
machine's busy time (user, system, interrupts; /proc/stat, all ranks of the machine together,
so run it where the job has the machine to itself) is reported per step beside the wall time.
The reference is the same buckets, each reduced by MPI_Iallreduce.
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np
from mpi4py import MPI

from mpicoll.overlap import BucketManager
from overlap import NativeBuckets  # benchmarks/overlap.py: the same buckets on MPI_Iallreduce

BUSY = (0, 1, 2, 5, 6)  # user, nice, system, irq, softirq in /proc/stat's cpu line


def busy_ticks() -> np.ndarray:
    with open("/proc/stat") as f:
        return np.array([int(x) for x in f.readline().split()[1:8]])


def sleep_until(test) -> list:
    """Call ``test`` every millisecond until it is true, sleeping in between."""
    while not test():
        time.sleep(0.001)
    return []


def measure(comm, fn, reps: int) -> tuple[float, float]:
    """(median wall seconds, mean busy core-seconds) per call, over ``reps`` calls."""
    fn()  # warm-up: plans, scratch
    walls, ticks = [], np.zeros(7)
    for _ in range(reps):
        comm.Barrier()
        before, t0 = busy_ticks(), time.perf_counter()
        fn()
        comm.Barrier()
        walls.append(time.perf_counter() - t0)
        ticks += busy_ticks() - before
    return float(np.median(walls)), ticks[list(BUSY)].sum() / reps / os.sysconf("SC_CLK_TCK")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--layers", type=int, default=16)
    p.add_argument("--layer-mib", type=float, default=1.0)
    p.add_argument("--buckets", default="1,16", help="bucket caps in MiB, comma-separated")
    p.add_argument("--reps", type=int, default=10)
    args = p.parse_args()
    comm = MPI.COMM_WORLD
    count = int(args.layer_mib * (1 << 20) / 4)
    grads = {f"layer{i}": np.zeros(count, np.float32) for i in reversed(range(args.layers))}
    rows = []
    for cap in [float(b) for b in args.buckets.split(",")]:
        for name, cls in (("mpicoll", BucketManager), ("MPI_Iallreduce", NativeBuckets)):
            manager = cls(grads, bucket_bytes=int(cap * (1 << 20)), progress="test", comm=comm,
                          as_views=True)
            step = lambda: manager.run([lambda: list(grads),  # noqa: E731
                                        lambda: sleep_until(manager.poll)])
            rows.append((f"{name}, {len(manager.buckets)} buckets ({cap:g} MiB)",
                         *measure(comm, step, args.reps)))
    if comm.Get_rank() == 0:
        print(f"# {comm.Get_size()} ranks, {args.layers} x {args.layer_mib:g} MiB float32 "
              f"(avg), {os.cpu_count()} cores, {args.reps} steps each")
        print(f"# {'':40} {'wall ms':>8} {'busy core-ms':>12} {'busy / wall':>11}")
        for name, wall, busy in rows:
            print(f"  {name:40} {wall * 1e3:8.1f} {busy * 1e3:12.0f} {busy / wall:11.2f}")


if __name__ == "__main__":
    main()
