"""What ``mpicoll.Steps`` costs a step when nothing fails: a training-like step (an allreduce of
the gradient, then the update) with and without ``with steps:`` around it, interleaved.

    mpiexec -n 2 python benchmarks/steps_cost.py [-m 8,1M] [-i 41]
    mpiexec --with-ft ulfm --mca btl tcp,self -n 2 python benchmarks/steps_cost.py  # ULFM

The state ``Steps`` keeps is the parameters, as many bytes as the gradient. In a fault-tolerant
job (``--with-ft ulfm``) each step copies them first; elsewhere a death ends the job and the
step only counts. Measured as ``mpicoll bench`` measures (``mpicoll.bench.measure``): the
slowest rank's time, medians; ``ratio``: the median of the per-repetition ratios, with Steps
over without.
"""

from __future__ import annotations

import argparse

import mpi4py

mpi4py.rc.finalize = False  # (as every ULFM program: Open MPI's MPI_Finalize, ompi#11404)
import numpy as np  # noqa: E402
from mpi4py import MPI  # noqa: E402

import mpicoll  # noqa: E402
from mpicoll import bench, fault  # noqa: E402


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-m", "--sizes", default="8,1M", help="gradient sizes in bytes")
    parser.add_argument("-i", "--iters", type=int, default=41, help="repetitions (default 41)")
    args = parser.parse_args(argv)
    world = MPI.COMM_WORLD
    settings = bench.Settings(sizes=[], algorithms=[], iters=args.iters)
    if world.Get_rank() == 0:
        print(f"# mpicoll.Steps, {world.Get_size()} ranks, {bench.library()}, fault-tolerant "
              f"job: {fault.tolerant()}; medians of {args.iters} interleaved repetitions")
        print(f"#{'size(B)':>9} {'step(us)':>9} {'in Steps(us)':>12} {'ratio':>6}")
    for nbytes in (bench.parse_size(size) for size in args.sizes.split(",")):
        grad = np.ones(max(1, nbytes // 8))
        params, out = np.zeros_like(grad), np.empty_like(grad)
        steps = mpicoll.Steps(world, [params])

        def step() -> None:
            mpicoll.allreduce(grad, out, comm=world)
            params[...] -= 1e-3 * out

        def guarded() -> None:
            with steps:
                step()

        samples = bench.measure(world, {bench.NATIVE: step, "steps": guarded}, settings)
        plain, kept = samples[bench.NATIVE], samples["steps"]
        if world.Get_rank() == 0:
            print(f"{nbytes:>10} {np.median(plain) * 1e6:>9.2f} {np.median(kept) * 1e6:>12.2f} "
                  f"{np.median(kept / plain):>6.2f}", flush=True)


if __name__ == "__main__":
    main()
