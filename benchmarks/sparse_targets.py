"""Issue 15's targets over repeated runs: each run's speed-up of every codec over native fp32,
the median over runs, and a plot of them all against the targets.

    for run in 1 2 3 4 5; do for layout in "4 1" "2 2"; do set -- $layout
        python benchmarks/emucluster.py --hosts $1 --ranks-per-host $2 --rate 1gbit \\
            -- python -m mpicoll bench -m 16M:64M -f 4 -i 7 -x 1 -a auto \\
               -c none,topk+ef,threshold+ef --no-progress --output e$1x$2-$run.h5
    done; done
    python benchmarks/sparse_targets.py e*.h5 [--plot docs/img/issue15-targets.png]

A run's speed-up is 1 / bench's ratio (the median of the per-repetition ratios mpicoll time /
native time), read at full precision from the HDF5 rows (the table prints two digits, too few
at 8×). Runs alternate between layouts, so a slow spell of the shared machine hits both.
"""

from __future__ import annotations

import argparse
import statistics
from collections import defaultdict

import h5py

TARGETS = {("4x1", 16 << 20, "topk+ef"): 8.0, ("2x2", 16 << 20, "topk+ef"): 6.0,
           ("4x1", 64 << 20, "topk+ef"): 6.0}
"""(layout, bytes, codec) -> the speed-up issue 15 asks for."""


def read(paths: list[str]) -> dict[tuple[str, int, str], list[float]]:
    """(layout "HxR", bytes, codec) -> the speed-up of each run, in the order of ``paths``."""
    speedups: dict[tuple[str, int, str], list[float]] = defaultdict(list)
    for path in paths:
        with h5py.File(path, "r") as f:
            rows = f["bench"][:]
        for row in rows:
            hosts, ranks = int(row["nodes"]), int(row["ranks"])
            layout = f"{hosts}x{ranks // hosts}"
            speedups[(layout, int(row["size"]), row["codec"].decode() or "none")].append(
                1 / float(row["ratio"]))
    return speedups


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", help="bench --output files, one run each")
    parser.add_argument("--plot", metavar="PNG", help="also draw every run against the targets")
    args = parser.parse_args()
    speedups = read(args.runs)
    print("# speed-up over native fp32 per run (1 / bench's ratio); median over runs; target")
    print(f"{'layout':>6} {'size':>6} {'codec':>13} {'median':>7} {'target':>7} {'met in':>8}  runs")
    for (layout, size, codec), values in sorted(speedups.items()):
        target = TARGETS.get((layout, size, codec))
        met = "" if target is None else f"{sum(v >= target for v in values)}/{len(values)}"
        print(f"{layout:>6} {size >> 20:>4}Mi {codec:>13} {statistics.median(values):>7.2f} "
              f"{'' if target is None else f'{target:.0f}x':>7} {met:>8}  "
              + " ".join(f"{v:.2f}" for v in values))
    if args.plot:
        plot(speedups, args.plot)


def plot(speedups: dict[tuple[str, int, str], list[float]], out: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    keys = sorted(speedups)
    fig, ax = plt.subplots(figsize=(10, 4.5))
    for i, key in enumerate(keys):
        values = speedups[key]
        ax.scatter([i] * len(values), values, s=18, alpha=0.6, color="C0")
        ax.plot([i - 0.3, i + 0.3], [statistics.median(values)] * 2, color="C0", lw=2)
        if key in TARGETS:
            ax.plot([i - 0.35, i + 0.35], [TARGETS[key]] * 2, color="C3", ls="--", lw=1.5)
    ax.set_xticks(range(len(keys)))
    ax.set_xticklabels([f"{layout}\n{size >> 20} MiB\n{codec}" for layout, size, codec in keys],
                       fontsize=8)
    ax.set_ylabel("speed-up over native fp32 (×)")
    ax.set_title("Emulated cluster, 1 Gbit/s, 4 ranks: each run (dots), median (bar), "
                 "issue 15's target (dashed)", fontsize=10)
    ax.grid(True, axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    main()
