"""Where one algorithm's time goes, per rank: medians of its timing records' phases.

    python benchmarks/emucluster.py --hosts 2 --ranks-per-host 2 --rate 1gbit \\
        -- python benchmarks/phases.py --algorithm hybrid --bytes 16M [--codec topk+ef]

Each call runs after a barrier; a phase is charged from the end of the round before it to the
end of its own (``mpicoll.timing``), so waiting on the link counts in the phase that waits (and
the first phase holds what the call did before its first round: a codec's encode). With a codec
the input is normal random numbers, a different stream per rank.
"""

from __future__ import annotations

import argparse

import numpy as np
from mpi4py import MPI

import mpicoll
from mpicoll import bench, codecs, timing


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--algorithm", default="hybrid")
    parser.add_argument("--bytes", default="16M", help="float32 bytes per rank (default 16M)")
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--codec", default=None, help="e.g. topk+ef (default: none)")
    args = parser.parse_args()
    comm = MPI.COMM_WORLD
    count = bench.parse_size(args.bytes) // 4
    x = np.ones(count, np.float32) if args.codec is None else \
        np.random.default_rng(comm.Get_rank()).standard_normal(count).astype(np.float32)
    y = np.empty_like(x)
    codec = codecs.parse(args.codec) if args.codec else None
    mpicoll.allreduce(x, y, algorithm=args.algorithm, codec=codec)  # plan, window, kind checked
    with timing.recording() as rec:
        for _ in range(args.reps):
            comm.Barrier()
            mpicoll.allreduce(x, y, algorithm=args.algorithm, codec=codec)
    total = np.median([r.seconds for r in rec.records]) * 1e3
    phases = {name: np.median([r.phases[name] for r in rec.records]) * 1e3
              for name in rec.records[0].phases}
    rows = comm.gather((comm.Get_rank(), total, phases), root=0)
    if rows is not None:
        print(f"# {args.algorithm}, {x.nbytes} B float32 sum, {comm.Get_size()} ranks; "
              f"medians of {args.reps}, ms")
        for rank, total, phases in rows:
            print(f"rank {rank}: total {total:.1f}  "
                  + "  ".join(f"{name} {ms:.1f}" for name, ms in phases.items()))


if __name__ == "__main__":
    main()
