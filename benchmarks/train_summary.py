"""Training runs side by side: time per step and what they learned (``train --json`` files).

    python benchmarks/train_summary.py base.json other.json ... [--plot curves.png]

One row per run: algorithm(s) that ran, codec, layers per bucket, progress policy, medians per
step of the whole step, the compute in it and the communication left exposed, that exposed
time's reduction against the first file's, final loss (mean of the last 10 steps) and train /
test accuracy, the density the threshold codec held, and whether the replicas ended bitwise
identical. ``--at 50,100``: also the loss at those steps (mean of the 10 steps up to each);
``--epoch 3``: also the test accuracy at the end of that epoch. ``--plot``: the loss curves and
the test accuracy per epoch.
"""

from __future__ import annotations

import argparse
import json
import os


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", help="train --json files; the first is the baseline")
    parser.add_argument("--at", default="", metavar="STEPS", help="comma-separated steps")
    parser.add_argument("--epoch", type=int, help="an epoch whose test accuracy to show")
    parser.add_argument("--plot", metavar="FILE.png")
    args = parser.parse_args()
    at = [int(step) for step in args.at.split(",") if step]
    runs = []
    for path in args.runs:
        with open(path) as f:
            runs.append((os.path.splitext(os.path.basename(path))[0], json.load(f)))
    first = runs[0][1]
    print(f"# {first['parameters']} parameters, {first['ranks']} ranks on {first['nodes']} node(s), "
          f"{first['mpi_library']}; {first['steps']} steps, global batch "
          f"{first['dataset']['global_batch']}; times: medians per step after "
          f"{first['timing']['warmup_steps']} warm-up steps, ms")
    print(f"{'run':<26} {'ran':<18} {'codec':<13} {'bucket':>6} {'policy':<7} {'step':>7} "
          f"{'compute':>8} {'exposed':>8} {'cut':>5} {'loss':>6} {'train':>6} {'test':>6} "
          f"{'kept':>7} same" + "".join(f" {f'@{step}':>6}" for step in at)
          + ("" if args.epoch is None else f" {f'test@e{args.epoch}':>9}"))
    base = first["timing"]["exposed_s"]["median"]
    for name, run in runs:
        s, t = run["settings"], run["timing"]
        exposed = t["exposed_s"]["median"]
        kept = "-" if run.get("threshold_kept") is None else f"{run['threshold_kept']:.4f}"
        tail = run["losses"][-10:]
        extra = "".join(f" {_loss_at(run['losses'], step):>6.3f}" for step in at)
        if args.epoch is not None:
            extra += f" {_test_after(run['epochs'], args.epoch):>9.3f}"
        print(f"{name:<26} {','.join(run['algorithms_ran']):<18} {s['codec'] or 'fp32':<13} "
              f"{s['bucket_layers'] or 'all':>6} {s['policy']:<7} {t['step_s']['median'] * 1e3:>7.1f} "
              f"{t['compute_s']['median'] * 1e3:>8.1f} {exposed * 1e3:>8.1f} "
              f"{100 * (1 - exposed / base):>4.0f}% {sum(tail) / len(tail):>6.3f} "
              f"{run['train_accuracy']:>6.3f} {run['test_accuracy']:>6.3f} {kept:>7} "
              f"{'yes' if run['replicas_identical'] else 'NO'}" + extra)
    if args.plot:
        plot(runs, args.plot)


def _loss_at(losses: list[float], step: int) -> float:
    window = losses[max(0, step - 10):step]
    return sum(window) / len(window)


def _test_after(epochs: list[dict], epoch: int) -> float:
    return next(e["test_accuracy"] for e in epochs if e["epoch"] == epoch)


def plot(runs: list, out: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    for name, run in runs:
        left.plot(range(1, len(run["losses"]) + 1), run["losses"], label=name, lw=1)
        right.plot([e["epoch"] for e in run["epochs"]], [e["test_accuracy"] for e in run["epochs"]],
                   marker="o", label=name)
    left.set(xlabel="step", ylabel="training loss (global batch)", yscale="log")
    right.set(xlabel="epoch", ylabel="test accuracy")
    right.legend(fontsize=7)
    fig.suptitle(f"digits, {runs[0][1]['parameters']} parameters, {runs[0][1]['ranks']} ranks")
    fig.tight_layout()
    fig.savefig(out, dpi=110)


if __name__ == "__main__":
    main()
