"""Is the cost model right? Its predicted time against the measured one, per algorithm and size.

    python benchmarks/model_validate.py p4-1.txt p4-2.txt [--preset this-machine | --model F]
        [--min-bytes 65536] [--within 0.2] [--fitted-on tune-p4.txt] [--collective allgather]

Reads ``mpicoll bench`` tables (stdout; the header says the ranks and nodes, the ranks of a node
are consecutive as mpiexec and the emulated cluster place them) and, for every algorithm
measured at every size from ``--min-bytes`` up — ``native`` too, from the native column —,
prints the measured time (median over the runs), the model's prediction and their ratio, then
how many rows are within ``--within``, and on how many rows the first two runs are within
``--within`` of each other (the measurement's own noise). With ``--fitted-on``, the sweep the
model was fitted on (``tune``'s output): on how many rows that sweep itself is within
``--within`` of the runs' median, the most a model that matched it exactly could reach.
Runs without MPI: the predictions are ``python -m mpicoll simulate``'s, for the runs' layout.
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys

import sweep_summary

PRESETS = ("this-machine", "emulated-1g", "gpu-cluster")  # python -m mpicoll simulate --help


def read(path: str, collective: str = "allreduce") -> tuple[int, int, dict[tuple[int, str], float]]:
    """(ranks, nodes, {(size, algorithm): µs}) of one bench table's ``collective`` section;
    native's from its column."""
    with open(path) as f:
        header = re.search(r"# mpicoll bench: (\d+) ranks on (\d+) node", f.read())
    if not header:
        raise SystemExit(f"{path}: no bench header")
    times: dict[tuple[int, str], float] = {}
    for (size, name), row in sweep_summary.read(path, collective).items():
        if name != "auto":
            times[(size, name)] = row.time_us
        times[(size, "native")] = row.native_us
    return int(header[1]), int(header[2]), times


def predicted(ranks: int, nodes: int, names: list[str], sizes: list[int], model: list[str],
              collective: str = "allreduce") -> dict[tuple[int, str], float]:
    """{(size, algorithm): µs} as ``mpicoll simulate`` predicts them for ranks on nodes."""
    def simulate(spec: str) -> dict[tuple[int, str], float]:
        out = subprocess.run([sys.executable, "-m", "mpicoll", "simulate", "--ranks", str(ranks),
                              "--ranks-per-node", str(ranks // nodes), *model, "-m", spec,
                              "-a", ",".join(names), "-C", collective],
                             check=True, capture_output=True, text=True).stdout
        rows = [line.split() for line in out.splitlines() if line[:1] != "#" and line.strip()]
        return {(int(r[0]), r[4]): float(r[7]) for r in rows}

    times = simulate(f"{min(sizes)}:{max(sizes)}")  # a factor-2 sweep, as bench's default
    for size in sorted({s for s in sizes if (s, names[0]) not in times}):
        times.update(simulate(f"{size}:{size}"))
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+")
    parser.add_argument("--preset", default="this-machine", choices=PRESETS)
    parser.add_argument("--model", help="a tuning file instead of a preset")
    parser.add_argument("--min-bytes", type=int, default=65536)
    parser.add_argument("--within", type=float, default=0.2)
    parser.add_argument("--fitted-on", help="the sweep the model was fitted on (tune's output)")
    parser.add_argument("--collective", default="allreduce",
                        help="the runs' section to compare (bench -C), e.g. allgather")
    args = parser.parse_args()
    measured: dict[tuple[int, str], list[float]] = {}
    layouts = set()
    for path in args.runs:
        ranks, nodes, rows = read(path, args.collective)
        layouts.add((ranks, nodes))
        for key, us in rows.items():
            measured.setdefault(key, []).append(us)
    if len(layouts) != 1:
        raise SystemExit(f"runs of different layouts: {sorted(layouts)}")
    (ranks, nodes), = layouts
    names = list(dict.fromkeys(name for _, name in measured))
    sizes = sorted({s for s, _ in measured if s >= args.min_bytes})
    model = ["--model", args.model] if args.model else ["--preset", args.preset]
    prediction = predicted(ranks, nodes, names, sizes, model, args.collective) if sizes else {}
    print(f"# {args.collective}: {len(args.runs)} run(s), {ranks} ranks on {nodes} node(s); model: "
          f"{args.model or args.preset}; times in µs, medians over runs; "
          f"ratio = predicted / measured")
    print(f"{'size(B)':>10} " + " ".join(f"{n:>26}" for n in names))
    hits = total = 0
    worst: list[tuple[float, int, str]] = []
    for size in sizes:
        cells = []
        for name in names:
            if (size, name) not in measured:
                cells.append(f"{'-':>26}")
                continue
            got = statistics.median(measured[(size, name)])
            want = prediction[(size, name)]
            ratio = want / got
            total += 1
            hits += abs(ratio - 1) <= args.within
            worst.append((abs(ratio - 1), size, name))
            cells.append(f"{got:>9.0f} {want:>9.0f} {ratio:>6.2f}")
        print(f"{size:>10} " + " ".join(cells))
    print(f"{'':>10} " + " ".join(f"{'measured predicted ratio':>26}" for _ in names))
    off, size, name = max(worst)
    print(f"# within {args.within:.0%}: {hits} of {total} rows; worst {name} at {size} B "
          f"({off:+.0%} off)")
    pairs = [times[:2] for (size, _), times in measured.items()
             if size >= args.min_bytes and len(times) > 1]
    if pairs:  # the runs against each other: how much of the miss is the measurement's
        agree = sum(abs(first / second - 1) <= args.within for first, second in pairs)
        print(f"# the first two runs agree within {args.within:.0%} on {agree} of {len(pairs)} rows")
    if args.fitted_on:  # a perfect fit of that sweep, checked as the model was
        fitted = read(args.fitted_on, args.collective)[2]
        rows = [(fitted[key], statistics.median(times)) for key, times in measured.items()
                if key[0] >= args.min_bytes and key in fitted]
        close = sum(abs(swept / got - 1) <= args.within for swept, got in rows)
        print(f"# the sweep fitted on is within {args.within:.0%} of the runs on {close} of "
              f"{len(rows)} rows (a model that matched it exactly)")


if __name__ == "__main__":
    main()
