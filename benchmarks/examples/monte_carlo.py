"""Monte-Carlo particle transport with per-step tallies, an mpi4py program run natively and
through mpicoll.Comm (run under mpiexec or srun).

    mpiexec -n 2 python benchmarks/examples/monte_carlo.py [--bins 128,16384,131072] [--steps 20]

Particles enter a 1-D slab of thickness 10 (in mean free paths) at its left face; each flies an
exponential distance, then is absorbed (probability 0.3) or scattered into a uniformly random
direction cosine, until it is absorbed or leaves. Every rank follows its own particles (its
own seeded stream) and tallies collisions into ``bins`` slices of the slab and the particles'
fates; after every step one ``Allreduce`` of the int64 tallies (``bins`` × 8 bytes: KiB to MiB)
gives every rank the step's global tally, from which all keep the running mean and spread of
the collision density. Counts are integers, so the two runs must agree bit for bit.

Each repetition runs the steps twice, natively and through mpicoll (alternating order); rank 0
prints per tally size the time per step (the slowest rank's), the time in the allreduce, and
mpicoll/native, as medians over repetitions.
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

THICKNESS, ABSORB = 10.0, 0.3


def transport(rng: np.random.Generator, particles: int, bins: int, tally: np.ndarray) -> None:
    """Follow ``particles`` histories; add their collisions per bin and fates to ``tally``
    (``bins`` collision counts, then absorbed, leaked left, leaked right)."""
    x = np.zeros(particles)
    mu = np.ones(particles)
    while x.size:
        x = x + mu * rng.exponential(size=x.size)
        left, right = x < 0, x > THICKNESS
        tally[bins + 1] += np.count_nonzero(left)
        tally[bins + 2] += np.count_nonzero(right)
        inside = ~(left | right)
        x, mu = x[inside], mu[inside]
        where = np.minimum((x * (bins / THICKNESS)).astype(np.int64), bins - 1)
        tally[:bins] += np.bincount(where, minlength=bins)
        absorbed = rng.random(x.size) < ABSORB
        tally[bins] += np.count_nonzero(absorbed)
        x, mu = x[~absorbed], rng.uniform(-1.0, 1.0, np.count_nonzero(~absorbed))


def run(comm: MPI.Intracomm, bins: int, steps: int, particles: int
        ) -> tuple[np.ndarray, np.ndarray, float, float]:
    """Mean and spread of the collision density over ``steps``, seconds in all and seconds
    in the allreduce, on this rank."""
    rank = comm.Get_rank()
    local = np.zeros(bins + 3, np.int64)
    total = np.empty_like(local)
    mean = np.zeros(bins)
    square = np.zeros(bins)
    reducing = 0.0
    comm.Barrier()
    start = time.perf_counter()
    for step in range(steps):
        local[:] = 0
        transport(np.random.default_rng([step, rank]), particles, bins, local)
        t0 = time.perf_counter()
        comm.Allreduce(local, total, op=MPI.SUM)
        reducing += time.perf_counter() - t0
        density = total[:bins] / (particles * comm.Get_size())
        mean += density
        square += density * density
    seconds = time.perf_counter() - start
    mean /= steps
    spread = np.sqrt(np.maximum(square / steps - mean * mean, 0.0))
    return np.concatenate([mean, total[bins:].astype(float)]), spread, seconds, reducing


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bins", default="128,16384,131072", help="tally sizes, comma-separated")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--particles", type=int, default=2000, help="per rank per step")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--algorithm", default="auto", help="what mpicoll.Comm runs")
    args = parser.parse_args()
    world = MPI.COMM_WORLD
    runs = {"native": world, "mpicoll": mpicoll.Comm(world, algorithm=args.algorithm)}
    if world.Get_rank() == 0:
        print(f"# Monte-Carlo slab transport, {args.particles} particles per rank per step, "
              f"{args.steps} steps, {world.Get_size()} ranks, "
              f"{library()}; mpicoll.Comm algorithm "
              f"{args.algorithm}; medians of {args.reps} alternating repetitions")
        print(f"{'tally(B)':>10} {'native/step(us)':>16} {'mpicoll/step(us)':>17} "
              f"{'ratio':>7} {'native allreduce(us)':>21} {'mpicoll allreduce(us)':>22} "
              f"{'ratio':>7}  answer")
    wrong = False
    for bins in map(int, args.bins.split(",")):
        run(runs["mpicoll"], bins, 2, 10)  # first calls (plans, checks) before the clock
        step: dict[str, list[float]] = {"native": [], "mpicoll": []}
        reduce: dict[str, list[float]] = {"native": [], "mpicoll": []}
        answers = {}
        for rep in range(args.reps):
            for name in (("native", "mpicoll") if rep % 2 == 0 else ("mpicoll", "native")):
                result, spread, seconds, reducing = run(runs[name], bins, args.steps,
                                                        args.particles)
                step[name].append(world.allreduce(seconds, op=MPI.MAX) / args.steps)
                reduce[name].append(world.allreduce(reducing, op=MPI.MAX) / args.steps)
                answers[name] = (result, spread)
        same = all(np.array_equal(a, b) for a, b in zip(answers["native"], answers["mpicoll"]))
        same = all(world.allgather(same))
        wrong |= not same
        if world.Get_rank() == 0:
            sn, sm = np.array(step["native"]), np.array(step["mpicoll"])
            rn, rm = np.array(reduce["native"]), np.array(reduce["mpicoll"])
            print(f"{(bins + 3) * 8:>10} {np.median(sn) * 1e6:>16.1f} {np.median(sm) * 1e6:>17.1f} "
                  f"{np.median(sm / sn):>7.3f} {np.median(rn) * 1e6:>21.1f} "
                  f"{np.median(rm) * 1e6:>22.1f} {np.median(rm / rn):>7.3f}  "
                  f"{'same bits' if same else 'DIFFERENT'}", flush=True)
    if wrong:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
