"""Power iteration over row blocks, an mpi4py program that needs an allgather, run natively and
through mpicoll.Comm (run under mpiexec or srun).

    mpiexec -n 3 python benchmarks/examples/power_iteration.py [--n 2000] [--reps 5]

The dominant eigenpair of a symmetric n × n matrix (A[i, j] = 1 / (1 + |i - j|), made row by
row where it is kept), its rows split into uneven blocks, one per rank: each iteration
multiplies this rank's rows by the whole vector, and ``Allgatherv`` of the blocks gives every
rank the whole product (the blocks differ in size where p does not divide n); the eigenvalue
estimate and the norm then need no further message. ``iterate`` is written against mpi4py; the
only change for mpicoll is the communicator it is given.

Each repetition runs twice, natively and through mpicoll (in alternating order); rank 0 prints
iterations, time per iteration (the slowest rank's) and the ratio, as medians over repetitions,
and checks that both runs took the same iterations and gave the same bits (an allgather only
moves data: any difference is a bug).
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # one BLAS thread per rank: ranks share cores
os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402
from mpi4py import MPI  # noqa: E402

import mpicoll  # noqa: E402


def iterate(comm: MPI.Intracomm, n: int, tol: float = 1e-12, max_iter: int = 2000
            ) -> tuple[float, np.ndarray, int, float]:
    """The eigenvalue, the whole eigenvector, the iterations and the seconds they took."""
    rank, size = comm.Get_rank(), comm.Get_size()
    counts = [len(block) for block in np.array_split(np.arange(n), size)]
    first = sum(counts[:rank])
    rows = np.arange(first, first + counts[rank])[:, None]
    matrix = 1.0 / (1.0 + np.abs(rows - np.arange(n)[None, :]))  # this rank's rows
    x = np.full(n, 1.0 / np.sqrt(n))
    y = np.empty(n)
    mine = np.empty(counts[rank])
    value = 0.0
    comm.Barrier()
    start = time.perf_counter()
    for it in range(1, max_iter + 1):
        np.matmul(matrix, x, out=mine)
        comm.Allgatherv(mine, [y, counts])
        previous, value = value, float(x @ y)
        np.divide(y, np.linalg.norm(y), out=x)
        if abs(value - previous) <= tol * abs(value):
            break
    return value, x, it, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=2000, help="matrix rows and columns")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--algorithm", default="auto", help="what mpicoll.Comm runs")
    args = parser.parse_args()
    world = MPI.COMM_WORLD
    runs = {"native": world, "mpicoll": mpicoll.Comm(world, algorithm=args.algorithm)}
    # first calls before the clock: plans, checks, and auto's trials of each candidate (some
    # hundreds of calls of the size: as many as a long run makes first, left out of the medians)
    iterate(runs["mpicoll"], args.n, tol=0.0, max_iter=400)
    per_iter: dict[str, list[float]] = {"native": [], "mpicoll": []}
    results = {}
    for rep in range(args.reps):
        for name in (("native", "mpicoll") if rep % 2 == 0 else ("mpicoll", "native")):
            value, x, iters, seconds = iterate(runs[name], args.n)
            per_iter[name].append(world.allreduce(seconds, op=MPI.MAX) / iters)
            results[name] = (value, x, iters)
    (value, x, iters), (value_m, x_m, iters_m) = results["native"], results["mpicoll"]
    same = world.allreduce(int(iters == iters_m and value == value_m
                               and x.tobytes() == x_m.tobytes()), op=MPI.MIN) == 1
    if world.Get_rank() == 0:
        native, ours = np.array(per_iter["native"]), np.array(per_iter["mpicoll"])
        print(f"# power iteration, {args.n}x{args.n} matrix by uneven row blocks, "
              f"{world.Get_size()} ranks, "
              f"{MPI.Get_library_version().rstrip(chr(0)).strip().splitlines()[0]}; "
              f"mpicoll.Comm algorithm {args.algorithm}; medians of {args.reps} alternating "
              "repetitions")
        print(f"iterations native {iters} mpicoll {iters_m}; eigenvalue native {value!r} "
              f"mpicoll {value_m!r}: {'same bits' if same else 'DIFFERENT ANSWERS'}")
        print(f"time per iteration: native {np.median(native) * 1e6:.1f} us, mpicoll "
              f"{np.median(ours) * 1e6:.1f} us, mpicoll/native {np.median(ours / native):.3f}")
    if not same:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
