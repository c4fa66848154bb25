"""Does a compressed run end at the uncompressed run's loss? The digits training run, once per
seed and codec, compared by the final model's loss over the whole training set (no batch noise).

    python benchmarks/loss_by_seed.py [--seeds 1,2,3,4,5] [--codecs none,topk+ef] [--ranks 2]
        [-- TRAIN ARGS]

Each run is ``mpiexec -n RANKS python -m mpicoll train TRAIN ARGS --seed S -c CODEC``; the
default TRAIN ARGS are those of docs/seed.md's claim 2 (8 hidden layers of 384, 15 epochs).
Prints, per seed, each codec's final train-set loss and its ratio to the uncompressed run of
the same seed (same initial weights, same batches), then the mean and range of those ratios.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

TRAIN = ["--dataset", "digits", "--layers", "8", "--hidden", "384", "--epochs", "15"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="1,2,3,4,5")
    parser.add_argument("--codecs", default="none,topk+ef")
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("train", nargs="*", help="train arguments (default: %s)" % " ".join(TRAIN))
    args = parser.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    codecs = args.codecs.split(",")
    if codecs[0] != "none":
        codecs.insert(0, "none")  # the reference every ratio is to
    mpiexec = Path(sys.executable).with_name("mpiexec")
    losses: dict[str, list[float]] = {c: [] for c in codecs}
    accuracy: dict[str, list[float]] = {c: [] for c in codecs}
    print(f"# final loss over the whole training set; {args.ranks} ranks; train "
          f"{' '.join(args.train or TRAIN)}", flush=True)
    print(f"{'seed':>5}" + "".join(f"{c:>14}{'ratio':>8}" for c in codecs), flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        for seed in seeds:
            line = f"{seed:>5}"
            for codec in codecs:
                out = Path(tmp) / f"{seed}-{codec}.json"
                subprocess.run([str(mpiexec), "-bind-to", "core", "-n", str(args.ranks),
                                sys.executable, "-m", "mpicoll", "train", *(args.train or TRAIN),
                                "--seed", str(seed), "-c", "" if codec == "none" else codec,
                                "--json", str(out)], check=True, stdout=subprocess.DEVNULL)
                run = json.loads(out.read_text())
                if not run["replicas_identical"]:
                    raise SystemExit(f"seed {seed} {codec}: replicas differ")
                losses[codec].append(run["train_loss"])
                accuracy[codec].append(run["test_accuracy"])
                ratio = run["train_loss"] / losses["none"][-1]
                line += f"{run['train_loss']:>14.5f}{ratio:>8.3f}"
            print(line, flush=True)
    print("# per codec: mean final loss, mean ratio to none [range], mean test accuracy")
    for codec in codecs:
        ratios = [a / b for a, b in zip(losses[codec], losses["none"])]
        print(f"{codec:>14} {statistics.mean(losses[codec]):.5f} {statistics.mean(ratios):.3f} "
              f"[{min(ratios):.3f}-{max(ratios):.3f}] {statistics.mean(accuracy[codec]):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
