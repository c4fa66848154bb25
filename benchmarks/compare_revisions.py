"""Did a change move the bench figures? Run the bench sweep of two revisions alternately.

    python benchmarks/compare_revisions.py OLD_REV [--ranks 2,4] [--reps 4] [-- BENCH ARGS]
    python benchmarks/compare_revisions.py OLD_REV --calls [--ranks 1,2] [-- CALLS ARGS]

Checks OLD_REV out into a temporary git worktree and runs ``python -m mpicoll bench`` there
and in this working tree, alternating old/new ``--reps`` times per rank count (old first in
even repetitions, new first in odd ones). Each bench already reports ratio = median(mpicoll /
native) measured interleaved; this prints, per size and algorithm, the median over
repetitions of that ratio for old and new (with the range) and new/old, so machine drift
cancels twice. With ``--time`` it compares mpicoll's own median time per call instead: at 4
ranks on 2 cores MPI's own time at 256 KiB - 16 MiB moves by up to 10% from one process to the
next, and the ratio with it. With ``--calls``, the run is this tree's
``benchmarks/calls.py`` (the blocking call, ``iallreduce`` + ``wait``, ``allreduce_init``'s
start + wait, ``mpicoll.Comm``) against each revision's library, and the ratio compared is
each kind's to MPI's own call of the same kind (its ``vs-mpi`` column).
"""

from __future__ import annotations

import argparse
import collections
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from mpicoll.bench import table

ROOT = Path(__file__).resolve().parents[1]
BENCH = ["-m", "8:16M", "-f", "8", "-i", "25", "-a", "ring,tree,hybrid,auto"]
CALLS = ["-m", "8:1M", "-f", "8", "-i", "25", "-a", "auto,native"]


def bench(tree: Path, ranks: int, args: list[str], calls: bool = False, time: bool = False
          ) -> dict[tuple[int, str], float]:
    mpiexec = Path(sys.executable).with_name("mpiexec")
    env = {**os.environ, "PYTHONPATH": str(tree), "MPIR_CVAR_POLLS_BEFORE_YIELD": "1",
           "MPIR_CVAR_CH4_PROGRESS_THROTTLE": "1"}
    tool = [str(ROOT / "benchmarks" / "calls.py")] if calls else \
        ["-m", "mpicoll", "bench", "--no-progress"]
    out = subprocess.run([str(mpiexec), "-n", str(ranks), sys.executable, *tool, *args],
                         cwd=tree, env=env, check=True, capture_output=True, text=True).stdout
    rows = table(out.splitlines())  # (bench: allreduce's section)
    if calls:  # size, algorithm, kind, ran, time, mpi, vs-mpi, ...: MPI's own of that kind
        return {(int(r[0]), f"{r[1]}/{r[2]}"): float(r[6]) for r in rows if r[6] != "-"}
    return {(int(r[0]), r[4]): float(r[7] if time else r[11]) for r in rows}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("old", help="the revision to compare against (e.g. HEAD)")
    parser.add_argument("--ranks", help="comma-separated (default 2,4; with --calls 1,2)")
    parser.add_argument("--reps", type=int, default=4)
    parser.add_argument("--calls", action="store_true",
                        help="run benchmarks/calls.py instead of mpicoll bench")
    parser.add_argument("--time", action="store_true",
                        help="compare mpicoll's median time per call (µs), not its ratio to "
                        "native: where MPI's own time moves between processes (its buffers' "
                        "placement), the ratio moves with it")
    parser.add_argument("bench", nargs="*", help="after --: bench arguments (default: %s; "
                        "with --calls: %s)" % (" ".join(BENCH), " ".join(CALLS)))
    argv = sys.argv[1:]  # split at "--" here: argparse has given the empty list to bench by then
    split = argv.index("--") if "--" in argv else len(argv)
    args = parser.parse_args(argv[:split])
    tool_args = argv[split + 1:] or args.bench or (CALLS if args.calls else BENCH)
    args.ranks = args.ranks or ("1,2" if args.calls else "2,4")
    width = 21 if args.calls else 10  # "native-blocking/start"
    with tempfile.TemporaryDirectory() as tmp:
        old = Path(tmp) / "old"
        subprocess.run(["git", "worktree", "add", "-q", "--detach", str(old), args.old], cwd=ROOT,
                       check=True)
        try:
            for ranks in map(int, args.ranks.split(",")):
                ratios: dict = collections.defaultdict(lambda: collections.defaultdict(list))
                for rep in range(args.reps):
                    # Each one first every other time: the second run of a pair here reads up
                    # to 5% slower at 1 MiB on 4 ranks, whichever revision it is.
                    pair = (("old", old), ("new", ROOT))
                    for tag, tree in pair if rep % 2 == 0 else pair[::-1]:
                        for key, ratio in bench(tree, ranks, tool_args, args.calls,
                                                args.time and not args.calls).items():
                            ratios[key][tag].append(ratio)
                against = "MPI's own call of the same kind" if args.calls else "native"
                what = "time per call (us)" if args.time and not args.calls else \
                    f"ratio to {against}"
                print(f"# {ranks} ranks: median over {args.reps} runs of each run's {what} "
                      f"[range]; {args.old} = old, working tree = new")
                print(f"{'size(B)':>10} {'algorithm':>{width}} {'old':>18} {'new':>18} {'new/old':>8}")
                changes = []
                for (size, name), r in sorted(ratios.items()):
                    o, n = statistics.median(r["old"]), statistics.median(r["new"])
                    changes.append(n / o)
                    print(f"{size:>10} {name:>{width}} {o:7.2f} [{min(r['old']):.2f}-{max(r['old']):.2f}]"
                          f" {n:7.2f} [{min(r['new']):.2f}-{max(r['new']):.2f}] {n / o:8.2f}")
                print(f"# median new/old over all rows: {statistics.median(changes):.3f}\n", flush=True)
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(old)], cwd=ROOT, check=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
