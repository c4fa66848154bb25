"""How good are auto's picks? The cost model's choice per size against a measured sweep.

    python benchmarks/model_check.py p4-1.txt p4-2.txt p4-3.txt --ranks 4 [--model tuning.json]

For every size of the bench tables (``mpicoll bench`` output): what ``auto`` picks with the
model (the built-in one, or ``--model``'s: on the layout its ``tune`` run measured, what that
run found fastest) on one node of ``--ranks`` ranks, the measured ratio to native of that pick
(median over the runs), and the measured best, so a pick's cost is ``pick / best``. Runs
without MPI: it reads the tables.
"""

from __future__ import annotations

import argparse
import statistics

from sweep_summary import read

from mpicoll import costmodel, tune


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+")
    parser.add_argument("--ranks", type=int, required=True)
    parser.add_argument("--model", help="a tuning file (default: the built-in model)")
    args = parser.parse_args()
    model = costmodel.BUILTIN if not args.model else tune._load(args.model, 0)
    ratios: dict[tuple[int, str], list[float]] = {}
    for path in args.runs:
        for (size, name), row in read(path).items():
            ratios.setdefault((size, name), []).append(row.ratio)
    nodes = (tuple(range(args.ranks)),)
    names = sorted({n for _, n in ratios if n != "auto"})
    print(f"# {len(args.runs)} runs, {args.ranks} ranks; model: {model.source}")
    print(f"{'size(B)':>9} {'pick':>13} {'measured':>9} {'best':>13} {'measured':>9} {'pick/best':>9}")
    costs = []
    for size in sorted({s for s, _ in ratios}):
        measured = {n: statistics.median(ratios[(size, n)]) for n in names if (size, n) in ratios}
        pick = model.measured_pick(size, args.ranks, 1, tuple(measured)) or \
            min(measured, key=lambda n: costmodel.predict(n, size, nodes, model))
        best = min(measured, key=measured.__getitem__)
        costs.append(measured[pick] / measured[best])
        print(f"{size:>9} {pick:>13} {measured[pick]:>9.2f} {best:>13} {measured[best]:>9.2f} "
              f"{costs[-1]:>9.2f}")
    print(f"# median pick/best {statistics.median(costs):.2f}, worst {max(costs):.2f}")


if __name__ == "__main__":
    main()
