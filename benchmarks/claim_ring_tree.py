"""Claim 1 of issue 14 checked: ring against tree, from the schedules and from the cost model.

    python benchmarks/claim_ring_tree.py [--size 64M] [--ranks-per-node 1] [--plot claim.png]
        [--table 1|2|both] [--sim-sizes 1M,16M,64M] [--sim-ranks 128,1024,16384]

The chapter says: a tree allreduce takes 2·log₂N steps and its root is a bandwidth bottleneck;
a ring takes 2(N−1) steps, each rank moving 2(N−1)/N of the data (bandwidth-optimal); at 128
GPUs the ring reaches about 2× the tree's throughput.

Table 1 reads the figures off mpicoll's own schedules (``build_schedule``), for N = 2, 4, …
ranks: rounds in a rank's schedule, the critical path in rounds (every rank's schedule on
clocks, one unit per round, messages free: ``costmodel.schedule_time``), and the elements each
rank sends and receives, as multiples of the message. Thousands of ranks' schedules take too
long to build (a ring rank has 2(N−1) rounds), so only representative ranks are built, each
standing for a class of ranks that do the same: the ring's ranks are all alike, the tree's
differ only by whether they have a parent and how many children, recursive doubling's and
Rabenseifner's by their part in the fold, hybrid's by local rank. Up to ``--verify-upto`` ranks
every rank is built too and the samples must give the same maxima and means.

Table 2 asks the cost model (``costmodel.predict``, what ``python -m mpicoll simulate`` prints)
for ring and tree at each preset, size and ranks per node, with how long each prediction took
and whether it ran every rank on clocks (``events``) or the lockstep estimate.

Runs without MPI (no mpiexec): it only plans schedules and runs them on clocks.
"""

from __future__ import annotations

import argparse
import math
import sys
import textwrap
import time
from dataclasses import dataclass
from typing import Callable, Hashable, TypeVar

import numpy as np

from mpicoll import costmodel
from mpicoll._env import DEFAULT_SEGMENT_BYTES
from mpicoll.algorithm import Layout, Options, build_schedule, get
from mpicoll.algorithm import tree as tree_algorithm
from mpicoll.algorithm.recursive_doubling import folded_size
from mpicoll.bench import format_size, parse_size
from mpicoll.schedule import Schedule, Send
from mpicoll.topology import blocks

Nodes = tuple[tuple[int, ...], ...]


@dataclass(frozen=True)
class Variant:
    """A row kind of table 1: an algorithm, optionally with the tree's segment set to the
    whole message (``unsegmented``: the textbook tree, one message of n per edge and phase)."""

    label: str
    algorithm: str
    unsegmented: bool = False

    def options(self, count: int, dtype: np.dtype, segment_bytes: int) -> Options:
        if self.unsegmented:
            segment_bytes = max(segment_bytes, count * dtype.itemsize)
        return Options(segment_bytes, dtype.str)


VARIANTS = {v.label: v for v in (Variant("ring", "ring"), Variant("tree", "tree"),
                                 Variant("tree-1seg", "tree", unsegmented=True),
                                 Variant("rd", "rd"), Variant("rabenseifner", "rabenseifner"),
                                 Variant("hybrid", "hybrid"))}


@dataclass(frozen=True)
class Traffic:
    """One rank's schedule in figures: its rounds and the elements it sends and receives."""

    rounds: int
    sent: int
    received: int


def traffic(schedule: Schedule) -> Traffic:
    sent = received = 0
    for rnd in schedule.rounds:
        for t in rnd.transfers:
            if isinstance(t, Send):
                sent += len(t.region)
            else:
                received += len(t.region)
    return Traffic(len(schedule.rounds), sent, received)


def note(text: str) -> None:
    """Print a header note, wrapped, each line starting with '# '."""
    print("\n".join(textwrap.wrap(text, 108, initial_indent="# ", subsequent_indent="#   ")))


# ---- which ranks to build: (rank, weight = how many ranks it stands for, role)

Sample = list[tuple[int, int, str]]


K = TypeVar("K", bound=Hashable)


def _classes(size: int, key: Callable[[int], K], role: Callable[[K], str]) -> Sample:
    """The first rank of each class of ``key``, weighted by the class's size."""
    first: dict[K, int] = {}
    weight: dict[K, int] = {}
    for r in range(size):
        k = key(r)
        first.setdefault(k, r)
        weight[k] = weight.get(k, 0) + 1
    return [(first[k], weight[k], role(k)) for k in first]


def _tree_role(k: tuple[bool, int]) -> str:
    has_parent, children = k
    if not has_parent:
        return "root"
    return "leaf" if children == 0 else f"inner{children}"


def sample(algorithm: str, size: int, nodes: Nodes) -> Sample:
    """Ranks whose schedules stand for all ``size`` ranks' (classes of ranks that send,
    receive and round alike)."""
    if algorithm == "ring":
        return [(0, size - 1, "any"), (size - 1, 1, "any")] if size > 1 else [(0, 1, "any")]
    if algorithm == "tree":
        def key(r: int) -> tuple[bool, int]:
            parent, children = tree_algorithm.links(size, r)
            return parent is not None, len(children)
        return _classes(size, key, _tree_role)
    if algorithm in ("rd", "rabenseifner"):
        rem = size - folded_size(size)
        names = {0: "folds out", 1: "folds in", 2: "plain"}
        return _classes(size, lambda r: 2 if r >= 2 * rem else r % 2, names.__getitem__)
    if algorithm == "hybrid":
        if len({len(n) for n in nodes}) > 1:
            raise ValueError("hybrid on unequal nodes (node leaders) has no sampling here")
        return [(r, len(nodes), f"local {j}") for j, r in enumerate(nodes[0])]
    raise ValueError(f"no sampling for {algorithm}")


@dataclass
class Figures:
    """Table 1's figures for one algorithm and size (elements; rounds)."""

    ranks: int
    built: Sample
    rounds: int
    rounds_rank: int
    sent_max: int
    sent_mean: float
    recv_max: int
    recv_mean: float
    busiest: int  # sent + received
    busiest_rank: int
    rank0: int  # sent + received by rank 0 (the tree's root)


def figures(variant: Variant, size: int, nodes: Nodes, count: int, dtype: np.dtype,
            segment_bytes: int, every_rank: bool = False) -> Figures:
    """Figures from the sampled ranks' schedules (or every rank's with ``every_rank``)."""
    built = [(r, 1, "") for r in range(size)] if every_rank else \
        sample(variant.algorithm, size, nodes)
    options = variant.options(count, dtype, segment_bytes)
    algorithm = get(variant.algorithm)
    per_rank = {r: traffic(build_schedule(algorithm, Layout(r, size, nodes), count, options))
                for r, _, _ in built}
    assert 0 in per_rank and sum(w for _, w, _ in built) == size, (variant, size, built)

    def mean(field: str) -> float:
        return sum(w * getattr(per_rank[r], field) for r, w, _ in built) / size

    rounds_rank = max(per_rank, key=lambda r: per_rank[r].rounds)
    busiest_rank = max(per_rank, key=lambda r: per_rank[r].sent + per_rank[r].received)
    return Figures(size, built, per_rank[rounds_rank].rounds, rounds_rank,
                   max(t.sent for t in per_rank.values()), mean("sent"),
                   max(t.received for t in per_rank.values()), mean("received"),
                   per_rank[busiest_rank].sent + per_rank[busiest_rank].received, busiest_rank,
                   per_rank[0].sent + per_rank[0].received)


def chain(variant: Variant, size: int, nodes: Nodes, count: int, dtype: np.dtype,
          segment_bytes: int, budget: int, max_ranks: int) -> float | None:
    """Critical path in rounds: every rank's schedule on clocks, one unit per round, messages
    and reductions free. None beyond ``max_ranks``, or when ``size`` times rank 0's rounds
    exceeds ``budget``."""
    if size > max_ranks:
        return None
    options = variant.options(count, dtype, segment_bytes)
    algorithm = get(variant.algorithm)
    first = build_schedule(algorithm, Layout(0, size, nodes), count, options)
    if size * max(len(first.rounds), 1) > budget:
        return None
    schedules = [first] + [build_schedule(algorithm, Layout(r, size, nodes), count, options)
                           for r in range(1, size)]
    node_of = [n for n, ranks in enumerate(nodes) for _ in ranks]
    free = {"local": 0.0, "remote": 0.0}
    return costmodel.schedule_time(schedules, dtype.itemsize, node_of, free, free, 0.0, 1.0)


def chapter(label: str, size: int, nodes: Nodes) -> tuple[str, str]:
    """The chapter's (or, marked *, DESIGN.md's) steps and per-rank bytes sent, in n."""
    lg = math.ceil(math.log2(size)) if size > 1 else 0
    if label == "ring":
        return f"{2 * (size - 1)}", f"{2 * (size - 1) / size:.4f}"
    if label.startswith("tree"):
        return f"{2 * lg}", "-"
    if label == "rd":
        return f"{lg}*", f"{lg:.4f}*"
    if label == "rabenseifner":
        return f"{2 * lg}*", f"{2 * (size - 1) / size:.4f}*"
    if label == "hybrid":
        m, per = len(nodes), len(nodes[0])
        return "-", (f"{2 * (m - 1) / m / per:.4f}*" if m > 1 else "0*")
    return "-", "-"


def _roles(built: Sample) -> str:
    if len(built) > 2 and all(role.startswith("local") for _, _, role in built):
        return f"{built[0][0]}..{built[-1][0]} (node 0, by local rank)"
    text = ",".join(f"{r}" + (f"({role})" if role and role != "any" else "")
                    for r, _, role in built)
    return text if len(text) <= 40 else text[:37] + "..."


def table1(args: argparse.Namespace, labels: list[str]) -> dict[str, list[tuple[int, Figures]]]:
    dtype = np.dtype(args.dtype)
    count = max(1, args.size // dtype.itemsize)
    n = count * dtype.itemsize
    segments = math.ceil(n / args.segment)
    sizes = [1 << k for k in range(1, args.max_ranks.bit_length()) if 1 << k <= args.max_ranks]
    note(f"Table 1 — from mpicoll's schedules (build_schedule), no MPI: {format_size(n)} "
          f"{dtype.name} ({count} elements), tree segment {format_size(args.segment)} "
          f"({segments} segments; tree-1seg: one segment, the textbook tree), "
          f"{args.ranks_per_node} rank(s) per node.")
    note("Multiples of the message n. rounds: rounds in the rank's own schedule, max over ranks "
          "(@ which rank). chain: critical path in rounds, every rank's schedule on clocks, one "
          f"unit per round, messages free ('-': not run, over {args.chain_ranks} ranks or "
          f"{args.chain_budget} rank-rounds). "
          "chap.steps / chap.sent: the chapter's 2(N-1) (ring) and 2·log2N (tree); * = DESIGN.md's "
          "formula (rd lg N, rabenseifner 2 lg N and 2(N-1)/N, hybrid 2(M-1)/M/L over M nodes).")
    note("sent/recv: elements a rank's messages carry, max and mean over ranks (shm window "
          "traffic is not messages). in+out: sent + received; busiest = the rank with the most "
          "(@ rank); rank0 = rank 0, the tree's root. built: the ranks whose schedules were built "
          "(each stands for its class; weights make the mean exact).")
    head = (f"{'alg':<12} {'N':>6} {'rounds':>6} {'@':>5} {'chain':>6} {'chap.steps':>10} "
            f"{'sent.max':>8} {'sent.mean':>9} {'chap.sent':>9} {'recv.max':>8} {'recv.mean':>9} "
            f"{'busiest':>7} {'@':>5} {'rank0':>6}  {'s':>5}  built")
    print(head)
    rows: dict[str, list[tuple[int, Figures]]] = {}
    for label in labels:
        variant = VARIANTS[label]
        for size in sizes:
            nodes = blocks(size, args.ranks_per_node)
            t0 = time.perf_counter()
            try:
                fig = figures(variant, size, nodes, count, dtype, args.segment)
            except ValueError as error:
                print(f"{label:<12} {size:>6} skipped: {error}")
                continue
            path = chain(variant, size, nodes, count, dtype, args.segment, args.chain_budget,
                         args.chain_ranks)
            seconds = time.perf_counter() - t0
            rows.setdefault(label, []).append((size, fig))
            steps, sent = chapter(label, size, nodes)
            print(f"{label:<12} {size:>6} {fig.rounds:>6} {fig.rounds_rank:>5} "
                  f"{'-' if path is None else f'{path:.0f}':>6} {steps:>10} "
                  f"{fig.sent_max / count:>8.4f} {fig.sent_mean / count:>9.4f} {sent:>9} "
                  f"{fig.recv_max / count:>8.4f} {fig.recv_mean / count:>9.4f} "
                  f"{fig.busiest / count:>7.4f} {fig.busiest_rank:>5} {fig.rank0 / count:>6.4f}  "
                  f"{seconds:>5.2f}  {_roles(fig.built)}", flush=True)
    verify(args, labels, count, dtype)
    return rows


def verify(args: argparse.Namespace, labels: list[str], count: int, dtype: np.dtype) -> None:
    """Sampled figures against every rank's, for every N up to ``--verify-upto``."""
    checked, worst = 0, 0.0
    sizes = sorted({n for n in range(2, 17)} | {m for k in range(4, 13) for m in
                                                 (2**k - 1, 2**k, 2**k + 1, 3 << (k - 1))})
    sizes = [n for n in sizes if n <= args.verify_upto]
    for label in labels:
        variant = VARIANTS[label]
        for size in sizes:
            nodes = blocks(size, args.ranks_per_node)
            try:
                some = figures(variant, size, nodes, count, dtype, args.segment)
            except ValueError:
                continue  # not sampled (hybrid on unequal nodes): nothing to check
            every = figures(variant, size, nodes, count, dtype, args.segment, every_rank=True)
            for a, b in ((some.rounds, every.rounds), (some.sent_max, every.sent_max),
                         (some.recv_max, every.recv_max), (some.sent_mean, every.sent_mean),
                         (some.recv_mean, every.recv_mean), (some.busiest, every.busiest),
                         (some.rank0, every.rank0)):
                worst = max(worst, abs(a - b) / max(abs(b), 1))
            checked += 1
    verdict = "OK" if worst < 1e-6 else "MISMATCH"
    note(f"verified {verdict}: sampled ranks against every rank for N = {_ranges(sizes)}, "
          f"{', '.join(labels)}: {checked} cases, largest "
          f"relative difference {worst:.1e} (uneven chunks when N does not divide the count "
          "differ by an element)")
    if verdict != "OK":
        sys.exit(1)


def _ranges(sizes: list[int]) -> str:
    small = [n for n in sizes if n <= 16]
    head = [f"{small[0]}..{small[-1]}"] if len(small) > 2 else [str(n) for n in small]
    return ",".join(head + [str(n) for n in sizes if n > 16])


# ---- table 2: the cost model

@dataclass
class Prediction:
    seconds: float
    latency: float  # α and the overhead per round
    bandwidth: float  # the rest: β and γ, with the algorithm's factors
    rounds: float
    how: str
    took: float


def predict(name: str, nbytes: int, nodes: Nodes, model: costmodel.Model,
            itemsize: int) -> Prediction:
    t0 = time.perf_counter()
    seconds = costmodel.predict(name, nbytes, nodes, model, itemsize)
    took = time.perf_counter() - t0
    parts = costmodel.components(name, nbytes, nodes, model, itemsize)
    latency, rounds = parts[0], parts[-1]  # the byte terms between them, however many
    overhead = model.of(name)[0]
    how = "events" if costmodel.exact(name, nbytes, nodes, itemsize) else "lockstep"
    return Prediction(seconds, latency + overhead * rounds,
                      seconds - latency - overhead * rounds, rounds, how, took)


def lockstep(name: str, nbytes: int, nodes: Nodes, model: costmodel.Model,
             itemsize: int) -> float:
    """The lockstep estimate where the cost model would run every rank (as its tests compare
    them): what 1024+ ranks get, for comparison with the events at fewer."""
    events_limit = costmodel.EVENTS
    costmodel.EVENTS = 0
    costmodel.components.cache_clear()
    try:
        return costmodel.predict(name, nbytes, nodes, model, itemsize)
    finally:
        costmodel.EVENTS = events_limit
        costmodel.components.cache_clear()


Row2 = tuple[str, int, int, int, Prediction, Prediction]


def table2(args: argparse.Namespace) -> list[Row2]:
    dtype = np.dtype(args.dtype)
    sizes = [parse_size(s) for s in args.sim_sizes.split(",")]
    ranks = [int(r) for r in args.sim_ranks.split(",")]
    presets = list(costmodel.PRESETS) if args.presets == "all" else args.presets.split(",")
    note(f"Table 2 — predicted by mpicoll.costmodel.predict ({dtype.name} sum): ring and tree "
         "times in ms, split into the α part (latency plus the Python overhead per round) and the "
         "bytes part (β and γ, with the algorithm's factors: the rest); rounds: on the critical "
         "path; tree/ring = ring's throughput over the tree's. ran (costmodel.exact): events = "
         "every rank's schedule on clocks (exact for the model), lockstep = the ranks of node 0 "
         "only, all ranks in step (exact for the ring; for the tree it leaves out pipeline fill "
         "and drain: see the comparison below). s = seconds the prediction took here.")
    print(f"{'preset':<12} {'L':>2} {'N':>6} {'size':>5}  {'ring ms':>9} {'α':>8} {'bytes':>8} "
          f"{'rounds':>6} {'ran':>8} {'s':>6}  {'tree ms':>9} {'α':>8} {'bytes':>8} {'rounds':>6} "
          f"{'ran':>8} {'s':>6}  {'tree/ring':>9}")
    out: list[Row2] = []
    compared: list[tuple[str, int, int, float, float]] = []
    for preset in presets:
        model = costmodel.PRESETS[preset]
        for per_node in [int(x) for x in args.sim_ranks_per_node.split(",")]:
            for size in ranks:
                nodes = blocks(size, per_node)
                for nbytes in sizes:
                    nbytes = max(1, nbytes // dtype.itemsize) * dtype.itemsize
                    ring = predict("ring", nbytes, nodes, model, dtype.itemsize)
                    tree = predict("tree", nbytes, nodes, model, dtype.itemsize)
                    cells = [f"{preset:<12} {per_node:>2} {size:>6} {format_size(nbytes):>5}"]
                    for p in (ring, tree):
                        cells.append(f"{p.seconds * 1e3:>9.3f} {p.latency * 1e3:>8.3f} "
                                     f"{p.bandwidth * 1e3:>8.3f} {p.rounds:>6.0f} {p.how:>8} "
                                     f"{p.took:>6.2f}")
                    print("  ".join(cells) + f"  {tree.seconds / ring.seconds:>9.2f}", flush=True)
                    out.append((preset, per_node, size, nbytes, ring, tree))
                    if size == args.lockstep_check:
                        compared.append((preset, per_node, nbytes, *(
                            lockstep(name, nbytes, nodes, model, dtype.itemsize) / p.seconds
                            if p.how == "events" else float("nan")
                            for name, p in (("ring", ring), ("tree", tree)))))
                costmodel.components.cache_clear()  # thousands of ranks' schedules add up
    if compared:
        note(f"lockstep / events at {args.lockstep_check} ranks, where both can run: how far the "
             "lockstep rows above (1024+ ranks) may be from what every rank on clocks would give.")
        for preset, per_node, nbytes, ring_ratio, tree_ratio in compared:
            print(f"#   {preset:<12} L={per_node} {format_size(nbytes):>5}: ring {ring_ratio:.3f}, "
                  f"tree {tree_ratio:.3f}")
    return out


def plot(path: str, rows1: dict[str, list[tuple[int, Figures]]], rows2: list[Row2],
         count: int) -> None:
    """Left: what ranks send, from the schedules; then per preset the predicted tree/ring."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise SystemExit("--plot needs matplotlib: pip install 'mpicoll[plot]'") from None
    presets = list(dict.fromkeys(row[0] for row in rows2))
    panels = bool(rows1) + len(presets)
    cols = min(panels, 2)
    rows = -(-panels // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(6.5 * cols, 4.6 * rows), squeeze=False)
    column = iter(axes.flat)
    if rows1:
        ax = next(column)
        for label, figs in rows1.items():
            n = [r for r, _ in figs]
            line, = ax.plot(n, [f.sent_max / count for _, f in figs], marker="o", ms=3,
                            label=f"{label}: max")
            ax.plot(n, [f.sent_mean / count for _, f in figs], ls="--", color=line.get_color(),
                    label=f"{label}: mean")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log", base=2)
        ax.set_xlabel("ranks N")
        ax.set_ylabel("sent per rank / message (from the schedules)")
        ax.set_title("per-rank traffic", fontsize=9)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    for preset in presets:
        ax = next(column)
        series: dict[tuple[int, int], list[tuple[int, float]]] = {}
        for name, per_node, size, nbytes, ring, tree in rows2:
            if name == preset:
                series.setdefault((per_node, nbytes), []).append((size, tree.seconds / ring.seconds))
        colors: dict[int, str] = {}
        for (per_node, nbytes), points in series.items():
            color = colors.setdefault(nbytes, f"C{len(colors)}")
            ax.plot(*zip(*points), marker="o", ms=3, color=color, ls="-" if per_node == 1 else "--",
                    label=f"{format_size(nbytes)}, {per_node} per node")
        ax.axhline(2, color="black", lw=1, label="the chapter: 2× at 128")
        ax.axhline(1, color="gray", lw=0.8)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log", base=2)
        ax.set_xlabel("ranks N")
        ax.set_ylabel("predicted tree time / ring time")
        ax.set_title(f"cost model, preset {preset}", fontsize=9)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle("claim 1 (issue 14): ring vs tree", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    print(f"# wrote {path}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--table", choices=("1", "2", "both"), default="both")
    parser.add_argument("--size", type=parse_size, default=64 << 20,
                        help="table 1's message in bytes (default 64M)")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--ranks-per-node", type=int, default=1, help="table 1's L (default 1)")
    parser.add_argument("--max-ranks", type=int, default=16384)
    parser.add_argument("--algorithms", default="ring,tree,tree-1seg,rd,rabenseifner,hybrid",
                        help=f"table 1's rows, of {','.join(VARIANTS)}")
    parser.add_argument("--segment", type=parse_size, default=DEFAULT_SEGMENT_BYTES,
                        help="tree segment in bytes (default: the library's, as the cost model)")
    parser.add_argument("--chain-budget", type=int, default=300_000,
                        help="rank-rounds up to which the critical path is run (default %(default)s)")
    parser.add_argument("--chain-ranks", type=int, default=1024,
                        help="ranks up to which the critical path is run (default %(default)s)")
    parser.add_argument("--verify-upto", type=int, default=64)
    parser.add_argument("--presets", default="all")
    parser.add_argument("--sim-ranks", default="128,1024,16384")
    parser.add_argument("--sim-sizes", default="1M,16M,64M")
    parser.add_argument("--sim-ranks-per-node", default="1,8")
    parser.add_argument("--lockstep-check", type=int, default=128,
                        help="ranks of table 2 at which to compare lockstep with events "
                             "(0: none; default %(default)s)")
    parser.add_argument("--plot", metavar="FILE.png")
    args = parser.parse_args(argv)
    unknown = set(args.algorithms.split(",")) - set(VARIANTS)
    if unknown or args.ranks_per_node < 1:
        parser.error(f"unknown algorithms {sorted(unknown)}" if unknown else "--ranks-per-node < 1")
    started = time.perf_counter()
    rows1: dict[str, list[tuple[int, Figures]]] = {}
    rows2: list[Row2] = []
    if args.table in ("1", "both"):
        rows1 = table1(args, args.algorithms.split(","))
        print(f"# table 1 took {time.perf_counter() - started:.1f} s")
    if args.table in ("2", "both"):
        t0 = time.perf_counter()
        rows2 = table2(args)
        print(f"# table 2 took {time.perf_counter() - t0:.1f} s")
    if args.plot:
        count = max(1, args.size // np.dtype(args.dtype).itemsize)
        plot(args.plot, rows1, rows2, count)
    print(f"# total {time.perf_counter() - started:.1f} s")


if __name__ == "__main__":
    main()
