"""Conjugate gradients for the 2-D Poisson problem, an mpi4py program run natively and through
mpicoll.Comm (run under mpiexec or srun).

    mpiexec -n 2 python benchmarks/examples/cg_poisson.py [--n 256] [--reps 5]

-Δu = 1 on the unit square, u = 0 on its edge, the 5-point stencil on an n × n grid of interior
points; grid rows are split into blocks, one per rank; each iteration exchanges one halo row
with each neighbour (``Sendrecv``) and makes three allreduces of 8 bytes: the two dot products
of CG (``Allreduce`` in place on a one-element array) and the residual's max norm for the stop
test (the lowercase ``allreduce`` of a Python float). ``solve`` is written against mpi4py;
the only change for mpicoll is the communicator it is given.

Each repetition solves twice, natively and through mpicoll (in alternating order); rank 0
prints iterations, time per iteration (the slowest rank's) and the ratio, as medians over
repetitions, and checks that both runs took the same iterations and agree to 1e-10.
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # one BLAS thread per rank: ranks share cores
os.environ.setdefault("OMP_NUM_THREADS", "1")  # (else 4 ranks × 2 BLAS threads spin on 2 cores)

import numpy as np  # noqa: E402
from mpi4py import MPI  # noqa: E402

import mpicoll  # noqa: E402


def library() -> str:
    """The MPI library in one line (Open MPI's ends in a NUL)."""
    return MPI.Get_library_version().rstrip("\x00").strip().splitlines()[0]


def solve(comm: MPI.Intracomm, n: int, tol: float = 1e-8, max_iter: int = 10_000
          ) -> tuple[np.ndarray, int, float]:
    """This rank's rows of the solution, the iterations and the seconds they took."""
    rank, size = comm.Get_rank(), comm.Get_size()
    rows = [len(r) for r in np.array_split(np.arange(n), size)]
    mine = rows[rank]
    up = rank - 1 if rank > 0 else MPI.PROC_NULL
    down = rank + 1 if rank < size - 1 else MPI.PROC_NULL
    h2 = 1.0 / (n + 1) ** 2
    p = np.zeros((mine + 2, n))  # with a halo row above and below (zero at the edge)

    def laplacian(v: np.ndarray, out: np.ndarray) -> None:
        """out = A v on this rank's rows, after filling v's halo rows from the neighbours."""
        comm.Sendrecv(v[1], dest=up, recvbuf=v[-1], source=down)
        comm.Sendrecv(v[-2], dest=down, recvbuf=v[0], source=up)
        core = v[1:-1]
        np.multiply(core, 4.0, out=out)
        out -= v[:-2]
        out -= v[2:]
        out[:, 1:] -= core[:, :-1]
        out[:, :-1] -= core[:, 1:]

    x = np.zeros((mine, n))
    r = np.full((mine, n), h2)  # b - A·0
    p[1:-1] = r
    ap = np.empty_like(r)
    dot = np.empty(1)
    dot[0] = np.vdot(r, r)
    comm.Allreduce(MPI.IN_PLACE, dot, op=MPI.SUM)
    rr = dot[0]
    stop = tol * comm.allreduce(float(np.abs(r).max()) if mine else 0.0, op=MPI.MAX)
    comm.Barrier()
    start = time.perf_counter()
    for it in range(1, max_iter + 1):
        laplacian(p, ap)
        dot[0] = np.vdot(p[1:-1], ap)
        comm.Allreduce(MPI.IN_PLACE, dot, op=MPI.SUM)
        alpha = rr / dot[0]
        x += alpha * p[1:-1]
        r -= alpha * ap
        dot[0] = np.vdot(r, r)
        comm.Allreduce(MPI.IN_PLACE, dot, op=MPI.SUM)
        largest = comm.allreduce(float(np.abs(r).max()) if mine else 0.0, op=MPI.MAX)
        if largest <= stop:
            break
        p[1:-1] *= dot[0] / rr
        p[1:-1] += r
        rr = dot[0]
    seconds = time.perf_counter() - start
    return x, it, seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=256, help="interior grid points per side")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--algorithm", default="auto", help="what mpicoll.Comm runs")
    args = parser.parse_args()
    world = MPI.COMM_WORLD
    if args.n < world.Get_size():
        parser.error(f"--n {args.n}: fewer grid rows than ranks")
    runs = {"native": world, "mpicoll": mpicoll.Comm(world, algorithm=args.algorithm)}
    solve(runs["mpicoll"], min(args.n, 32))  # first calls (plans, checks) before the clock
    per_iter: dict[str, list[float]] = {"native": [], "mpicoll": []}
    iterations, answers = {}, {}
    for rep in range(args.reps):
        for name in (("native", "mpicoll") if rep % 2 == 0 else ("mpicoll", "native")):
            x, iters, seconds = solve(runs[name], args.n)
            per_iter[name].append(world.allreduce(seconds, op=MPI.MAX) / iters)
            iterations[name], answers[name] = iters, x
    differ = world.allreduce(float(np.abs(answers["native"] - answers["mpicoll"]).max(initial=0)),
                             op=MPI.MAX)
    scale = world.allreduce(float(np.abs(answers["native"]).max(initial=0)), op=MPI.MAX)
    same = iterations["native"] == iterations["mpicoll"] and differ <= 1e-10 * scale
    if world.Get_rank() == 0:
        native, ours = np.array(per_iter["native"]), np.array(per_iter["mpicoll"])
        print(f"# CG, 2-D Poisson, {args.n}x{args.n} grid, {world.Get_size()} ranks, "
              f"{library()}; mpicoll.Comm algorithm "
              f"{args.algorithm}; medians of {args.reps} alternating repetitions")
        print(f"iterations native {iterations['native']} mpicoll {iterations['mpicoll']}; "
              f"largest difference {differ:.2e} (solution max {scale:.3e}): "
              f"{'same answer' if same else 'DIFFERENT ANSWERS'}")
        print(f"time per iteration: native {np.median(native) * 1e6:.1f} us, mpicoll "
              f"{np.median(ours) * 1e6:.1f} us, mpicoll/native {np.median(ours / native):.3f}")
    if not same:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
