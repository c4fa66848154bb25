"""A data-parallel backward pass: overlap of bucketed allreduce with real compute, per bucket size
and progress policy (OSU's overlap %).

    mpiexec -n 4 python -m mpi4py benchmarks/overlap.py --layers 16 --layer-mib 1 \\
        --buckets 1,4,16,64 --policies test,thread,none --output overlap.h5 --plot overlap.png

Each of L layers has a float32 gradient of --layer-mib MiB and a backward callback that does
real NumPy work (matrix products, calibrated so that the whole backward pass takes
--compute-ratio times the pure communication time of one step) and then reports its gradient
ready. Per bucket size it measures, interleaved over --reps repetitions, with medians:
  compute alone  the callbacks with no communication,
  pure comm      every gradient ready at once, no compute (the nonblocking allreduce alone),
  step           callbacks and communication together, for each progress policy,
and reports overlap% = max(0, 100 - 100 (step - compute alone) / pure comm) and step / compute.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # one BLAS thread per rank: ranks share cores
os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402
from mpi4py import MPI  # noqa: E402

from mpicoll import h5  # noqa: E402
from mpicoll.overlap import BucketManager, overlap_percent  # noqa: E402

ROW = np.dtype([("run", "i4"), ("bucket_mib", "f8"), ("buckets", "i4"), ("policy", "S8"),
                ("impl", "S8"), ("codec", "S16"), ("ranks", "i4"), ("layers", "i4"), ("layer_mib", "f8"),
                ("step_ms", "f8"), ("compute_ms", "f8"), ("comm_ms", "f8"), ("overlap", "f8"),
                ("slowdown", "f8")])


def parse():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--layers", type=int, default=16)
    p.add_argument("--layer-mib", type=float, default=1.0, help="gradient MiB per layer")
    p.add_argument("--buckets", default="1,4,16,64", help="bucket caps in MiB, comma-separated")
    p.add_argument("--policies", default="test,thread,none")
    p.add_argument("--codec", default="", help="codec for every bucket (default: none)")
    p.add_argument("--native", action="store_true",
                   help="also run the reference: the same buckets and policies, each bucket "
                        "reduced by the MPI library's MPI_Iallreduce")
    p.add_argument("--compute-ratio", type=float, default=1.2,
                   help="backward compute per step / pure communication time (default 1.2)")
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--output", help="append rows to this HDF5 file (table /overlap)")
    p.add_argument("--plot", help="draw step time and overlap %% against bucket size (PNG)")
    return p.parse_args()


class Backward:
    """Per-layer compute: k products of a 128x128 block, k calibrated to a target time."""

    def __init__(self, comm):
        self.a = np.random.default_rng(comm.Get_rank()).standard_normal((128, 128)).astype("f4")
        self.k = 1
        comm.Barrier()
        t0 = time.perf_counter()
        for _ in range(200):
            self.a @ self.a
        self.seconds_per_product = comm.allreduce((time.perf_counter() - t0) / 200, op=MPI.MAX)

    def calibrate(self, comm, seconds: float, layers: int) -> None:
        """Set k so that a pass of ``layers`` layers takes ``seconds`` with every rank computing
        at once; re-measured, because the first estimate misses how the ranks share the cores."""
        self.k = max(1, round(seconds / layers / self.seconds_per_product))
        for _ in range(3):
            took = timed(comm, lambda: [self.layer() for _ in range(layers)])
            if abs(took / seconds - 1) < 0.03:
                break
            self.k = max(1, round(self.k * seconds / took))

    def layer(self):
        for _ in range(self.k):
            self.a @ self.a


def steps(manager, grads, backward, comm):
    """Callbacks for one backward pass: the last layer's gradient is ready first."""
    names = list(grads)  # registered in the order they become ready: the last layer first

    def make(name):
        def callback():
            backward.layer()
            grads[name][0] = comm.Get_rank()  # "computed"
            return [name]
        return callback
    return [make(n) for n in names]


def one_step(manager, backward, comm):
    return lambda: manager.run(steps(manager, manager.tensors_by_name, backward, comm))


def pure_comm(manager, grads):
    """Every gradient ready at once, no compute: the nonblocking allreduce alone."""
    return lambda: manager.run([lambda: list(grads)])


class NativeBuckets(BucketManager):
    """The reference: the same buckets, readiness order and progress policy, each bucket reduced
    by the MPI library's own MPI_Iallreduce (divided by p first, as mpicoll's "avg")."""

    def _start(self, bucket):
        if self.op == "avg":
            bucket.flat *= 1 / self.comm.Get_size()
        return _MPIRequest(self.comm.Iallreduce(MPI.IN_PLACE, bucket.flat))


class _MPIRequest:
    def __init__(self, request):
        self._request = request

    def test(self) -> bool:
        return self._request.Test()

    @property
    def done(self) -> bool:  # what BucketManager polls: MPI's own Test, which progresses it
        return self._request.Test()

    def wait(self) -> None:
        self._request.Wait()


class Progress:
    """A progress line on stderr per finished repetition (``[done/total] ...``, redrawn in place
    on a terminal); ``clear`` wipes it so that a table line can take its place."""

    def __init__(self, total: int, enabled: bool) -> None:
        self.total, self.done, self.enabled = total, 0, enabled and total > 0
        self.tty = sys.stderr.isatty()

    def step(self, label: str) -> None:
        self.done += 1
        if self.enabled:
            line = f"[{self.done}/{self.total}] {label}"
            sys.stderr.write(f"\r\033[K{line}" if self.tty else line + "\n")
            sys.stderr.flush()

    def clear(self) -> None:
        if self.enabled and self.tty:
            sys.stderr.write("\r\033[K")
            sys.stderr.flush()

    def close(self) -> None:
        if self.enabled and self.tty:
            sys.stderr.write("\n")
            sys.stderr.flush()


def timed(comm, fn) -> float:
    comm.Barrier()
    t0 = time.perf_counter()
    fn()
    return comm.allreduce(time.perf_counter() - t0, op=MPI.MAX)


def main():
    args = parse()
    comm = MPI.COMM_WORLD
    root = comm.Get_rank() == 0
    count = int(args.layer_mib * (1 << 20) / 4)
    grads = {f"layer{i}": np.zeros(count, np.float32) for i in reversed(range(args.layers))}
    policies = args.policies.split(",")
    codec = args.codec or None
    if args.native and codec:
        raise SystemExit("--native compares uncompressed buckets: drop --codec")
    backward = Backward(comm)
    rows = []
    bar = Progress(len(args.buckets.split(",")) * args.reps, enabled=root)
    if root:
        print(f"# {comm.Get_size()} ranks, {args.layers} layers x {args.layer_mib} MiB, codec "
              f"{codec or 'none'}, compute = {args.compute_ratio} x pure comm, "
              f"{args.reps} interleaved repetitions, medians")
        print(f"# {'bucket MiB':>10} {'buckets':>7} {'impl':>7} {'policy':>7} {'step ms':>9} {'compute ms':>10} "
              f"{'comm ms':>9} {'overlap %':>9} {'step/compute':>12}")
    impls = {"mpicoll": BucketManager, **({"native": NativeBuckets} if args.native else {})}
    variants = [(impl, p) for impl in impls for p in policies]
    for cap in [float(b) for b in args.buckets.split(",")]:
        managers = {(impl, p): cls(grads, bucket_bytes=int(cap * (1 << 20)), progress=p, codec=codec,
                                   comm=comm, as_views=True)
                    for impl, cls in impls.items() for p in policies}
        pure = {impl: pure_comm(managers[impl, policies[0]], grads) for impl in impls}
        timed(comm, pure["mpicoll"])  # warm-up: plans, scratch
        comm_s = np.median([timed(comm, pure["mpicoll"]) for _ in range(3)])
        backward.calibrate(comm, args.compute_ratio * comm_s, args.layers)
        alone = lambda: [backward.layer() for _ in range(args.layers)]  # noqa: E731
        tasks = {"alone": alone, **{("comm", impl): f for impl, f in pure.items()},
                 **{v: one_step(managers[v], backward, comm) for v in variants}}
        samples = {name: [] for name in tasks}
        order = list(tasks)
        for rep in range(args.reps):
            for name in order[rep % len(order):] + order[:rep % len(order)]:
                samples[name].append(timed(comm, tasks[name]))
            bar.step(f"bucket {cap:g} MiB")
        compute = np.median(samples["alone"])
        for impl, p in variants:
            step, comm_med = float(np.median(samples[impl, p])), np.median(samples["comm", impl])
            row = (0, cap, len(managers[impl, p].buckets), p, impl, codec or "", comm.Get_size(),
                   args.layers, args.layer_mib, step * 1e3, compute * 1e3, comm_med * 1e3,
                   overlap_percent(step, compute, comm_med), step / compute)
            rows.append(row)
            if root:
                bar.clear()
                print(f"  {cap:>10g} {row[2]:>7} {impl:>7} {p:>7} {row[9]:9.1f} {row[10]:10.1f} "
                      f"{row[11]:9.1f} {row[12]:9.1f} {row[13]:12.2f}", flush=True)
    bar.close()
    table = np.array(rows, ROW)
    if args.output:
        h5.write(args.output, comm, tables={"overlap": table}, attrs={"overlap_args": repr(vars(args))})
    if root and args.plot:
        plot(table, args.plot)


def plot(table, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    colors = {p: f"C{i}" for i, p in enumerate(dict.fromkeys(table["policy"]))}
    for impl in dict.fromkeys(table["impl"]):
        style = "-" if impl == b"mpicoll" else "--"
        for p, color in colors.items():
            sel = table[(table["policy"] == p) & (table["impl"] == impl)]
            label = f"{impl.decode()}, {p.decode()}"
            ax1.plot(sel["bucket_mib"], sel["step_ms"], style, color=color, marker="o", label=label)
            ax2.plot(sel["bucket_mib"], sel["overlap"], style, color=color, marker="o", label=label)
        first = table[table["impl"] == impl][::len(colors)]
        ax1.plot(first["bucket_mib"], first["comm_ms"], style, color="grey",
                 label=f"pure communication, {impl.decode()}")
    ax1.plot(table["bucket_mib"], table["compute_ms"], "k", linewidth=2, label="compute alone")
    for ax, label in ((ax1, "time per step (ms, median)"), (ax2, "overlap % (OSU)")):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("bucket cap (MiB)")
        ax.set_ylabel(label)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    ax2.set_ylim(0, 105)
    fig.suptitle(f"{table['ranks'][0]} ranks, {table['layers'][0]} layers x "
                 f"{table['layer_mib'][0]:g} MiB, codec {table['codec'][0].decode() or 'none'}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    main()
