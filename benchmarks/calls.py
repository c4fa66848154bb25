"""Every kind of call beside MPI's own of the same kind: the blocking ``allreduce``, ``iallreduce``
+ ``wait``, a persistent ``allreduce_init`` request's ``start`` + ``wait``, and
``mpicoll.Comm(...).Allreduce``, per size and algorithm.

    mpiexec -n 2 python benchmarks/calls.py [-m 8:1M] [-f 8] [-a auto,native,rd] [-i 41]
        [-k call,start,init,comm]
    python benchmarks/calls.py -m 8:8 -a ring,tree,rd,native,native-blocking,auto   # one rank:
        # nothing travels, what is left is the library's own Python in front of MPI's call

Measured as ``mpicoll bench`` measures (``mpicoll.bench.measure``): interleaved, in a new order
every repetition, small calls repeated inside a sample, the slowest rank's time, medians. MPI's
own of each kind, in the same interleaving: ``MPI_Allreduce`` (for ``call`` and ``comm``: what
``mpicoll.Comm`` replaces), ``MPI_Iallreduce`` + ``MPI_Wait`` (``start``), a persistent
``MPI_Allreduce_init`` request's ``Start`` + ``Wait`` (``init``, where the MPI library has
MPI-4's persistent collectives). Per row: mpicoll's time, MPI's of the same kind and the median
of the per-repetition ratios to it (``vs-mpi``), then ``MPI_Allreduce``'s time and the ratio to
it; ``#wrong``: elements of one more call of that kind that differ from the exact sum.
``python benchmarks/compare_revisions.py OLD --calls`` runs this in two revisions alternately.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

import numpy as np
from mpi4py import MPI

import mpicoll
from mpicoll import bench

KINDS = ("call", "start", "init", "comm")
MPI_OF = {"call": "MPI_Allreduce", "start": "MPI_Iallreduce", "init": "MPI_Allreduce_init",
          "comm": "MPI_Allreduce"}


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-m", "--sizes", default="8:1M", metavar="MIN:MAX",
                        help="message sizes in bytes (default 8:1M)")
    parser.add_argument("-f", "--factor", type=int, default=8, help="size step factor (default 8)")
    parser.add_argument("-a", "--algorithms", default="auto,native,rd",
                        help="comma-separated (default auto,native,rd)")
    parser.add_argument("-k", "--kinds", default=",".join(KINDS),
                        help=f"comma-separated, of {','.join(KINDS)} (default all)")
    parser.add_argument("-i", "--iters", type=int, default=41, help="repetitions (default 41)")
    parser.add_argument("-x", "--warmup", type=int, default=3, help="warm-up calls per method")
    args = parser.parse_args(argv)
    args.kinds = [k for k in args.kinds.split(",") if k]
    unknown = sorted(set(args.kinds) - set(KINDS))
    if unknown:
        parser.error(f"unknown kinds {unknown}; choose from {','.join(KINDS)}")
    return args


def mpi_persistent(comm: MPI.Intracomm, x: np.ndarray, out: np.ndarray) -> MPI.Prequest | None:
    """MPI's own persistent allreduce, or None where the library (or mpi4py) has none."""
    try:
        return comm.Allreduce_init(x, out)
    except (AttributeError, NotImplementedError, MPI.Exception):
        return None


def method(kind: str, name: str, x: np.ndarray, out: np.ndarray,
           request: mpicoll.PersistentRequest | None, comm: mpicoll.Comm | None
           ) -> Callable[[], object]:
    """One call of this kind with algorithm ``name``, as a program makes it again and again."""
    if kind == "call":
        return lambda: mpicoll.allreduce(x, out, algorithm=name)
    if kind == "start":
        return lambda: mpicoll.iallreduce(x, out, algorithm=name).wait()
    if kind == "init":
        assert request is not None
        return lambda: (request.start(), request.wait())
    assert comm is not None
    return lambda: comm.Allreduce(x, out)


def main(argv: list[str] | None = None) -> None:
    args = parse(argv)
    world = MPI.COMM_WORLD
    p, root = world.Get_size(), world.Get_rank() == 0
    names = [a for a in args.algorithms.split(",") if a]
    settings = bench.Settings(sizes=bench.size_range(args.sizes, args.factor), algorithms=names,
                              iters=args.iters, warmup=args.warmup)
    comms = {name: mpicoll.Comm(world, algorithm=name) for name in names} \
        if "comm" in args.kinds else {}
    if root:
        print(f"# mpicoll calls: {p} ranks; {bench.library()}; float32 sum; medians of "
              f"{args.iters} interleaved repetitions; vs-mpi = mpicoll / MPI's own call of the "
              "same kind (call, comm: MPI_Allreduce; start: MPI_Iallreduce + MPI_Wait; init: "
              "MPI_Allreduce_init's Start + Wait); ratio = mpicoll / MPI_Allreduce")
        print(f"#{'size(B)':>9} {'algorithm':>15} {'kind':>5} {'ran':>15} {'time(us)':>9} "
              f"{'mpi(us)':>9} {'vs-mpi':>6} {'native(us)':>10} {'ratio':>6} {'#wrong':>6}",
              flush=True)
    for nbytes in settings.sizes:
        count = max(1, nbytes // 4)
        x = np.ones(count, np.float32)  # a sum of ones: exact at every rank count
        out = np.empty_like(x)
        calls = {bench.NATIVE: lambda: world.Allreduce(x, out),
                 "start": lambda: world.Iallreduce(x, out).Wait()}
        native_init = mpi_persistent(world, x, out) if "init" in args.kinds else None
        if native_init is not None:
            calls["init"] = lambda: (native_init.Start(), native_init.Wait())
        persistent = {name: mpicoll.allreduce_init(x, out, algorithm=name) for name in names
                      if "init" in args.kinds}
        for name in names:
            for kind in args.kinds:
                calls[(name, kind)] = method(kind, name, x, out, persistent.get(name),
                                             comms.get(name))
        ran = {name: mpicoll.choose_algorithm(x, algorithm=name) for name in names}
        samples = bench.measure(world, calls, settings)
        wrong = {}
        for key, call in calls.items():
            if isinstance(key, tuple):
                out[...] = 0
                call()
                wrong[key] = world.allreduce(int(np.count_nonzero(out != p)))
        for request in persistent.values():
            request.free()
        if native_init is not None:
            native_init.Free()
        if not root:
            continue
        native = samples[bench.NATIVE]
        for name in names:
            for kind in args.kinds:
                reference = samples.get("init" if kind == "init" else
                                        "start" if kind == "start" else bench.NATIVE)
                times = samples[(name, kind)]
                mpi_us, vs_mpi = ("-", "-") if reference is None else \
                    (f"{np.median(reference) * 1e6:.2f}", f"{np.median(times / reference):.2f}")
                print(f"{nbytes:>10} {name:>15} {kind:>5} {ran[name]:>15} "
                      f"{np.median(times) * 1e6:>9.2f} {mpi_us:>9} {vs_mpi:>6} "
                      f"{np.median(native) * 1e6:>10.2f} {np.median(times / native):>6.2f} "
                      f"{wrong[(name, kind)]:>6}", flush=True)


if __name__ == "__main__":
    main()
