"""Several runs of one bench sweep, summarized: per size and algorithm the median over runs of
each run's ratio to native [range], what auto ran, and the best algorithm that is not MPI's own.

    python benchmarks/sweep_summary.py run1.txt run2.txt run3.txt   # bench tables (stdout)

A run's ratio is already a median of interleaved repetitions (``mpicoll bench``); the median
over runs keeps one noisy run on a shared machine from deciding a row.
"""

from __future__ import annotations

import statistics
import sys
from collections import defaultdict
from typing import NamedTuple

from mpicoll.algorithm import get
from mpicoll.bench import table

WIDTH = 24  # a cell: "1.15 native-blocking", "0.80 [0.77-0.83]"


class Row(NamedTuple):
    ratio: float      # median of mpicoll time / native time
    ran: str          # what auto (or the algorithm asked for) ran
    native_us: float
    time_us: float    # mpicoll's


def read(path: str, section: str = "allreduce") -> dict[tuple[int, str], Row]:
    """(size, algorithm) -> its row of one bench table (stdout), plain calls only, of one
    collective's section."""
    rows = {}
    with open(path) as f:
        for cells in table(f, section):
            if len(cells) >= 14 and cells[0].isdigit() and cells[6] == "-":
                rows[(int(cells[0]), cells[4])] = Row(float(cells[11]), cells[5],
                                                      float(cells[10]), float(cells[7]))
    return rows


def main(paths: list[str]) -> None:
    runs = [read(p) for p in paths]
    ratios: dict[tuple[int, str], list[float]] = defaultdict(list)
    ran: dict[tuple[int, str], set[str]] = defaultdict(set)
    native: dict[int, list[float]] = defaultdict(list)
    for rows in runs:
        for (size, name), (ratio, what, native_us, _) in rows.items():
            ratios[(size, name)].append(ratio)
            ran[(size, name)].add(what)
            if name == "auto":
                native[size].append(native_us)
    names = list(dict.fromkeys(name for _, name in ratios))
    print(f"# {len(runs)} runs: median over runs of each run's ratio to native [min-max]; "
          "auto: what it ran; best: the lowest median among mpicoll's own algorithms (not MPI's)")
    print(f"{'size(B)':>9} {'native us':>9}" + "".join(f"{n:>{WIDTH}}" for n in names)
          + f"{'best':>22}")
    for size in sorted({s for s, _ in ratios}):
        cells, best = [], None
        for name in names:
            values = ratios.get((size, name))
            if not values:
                cells.append(f"{'-':>{WIDTH}}")
                continue
            median = statistics.median(values)
            text = f"{median:.2f} [{min(values):.2f}-{max(values):.2f}]"
            if name == "auto":
                text = f"{median:.2f} {'/'.join(sorted(ran[(size, name)]))}"
            cells.append(f"{text:>{WIDTH}}")
            if name != "auto" and not get(name).mpi and (best is None or median < best[0]):
                best = (median, name)
        best_text = f"{best[0]:.2f} {best[1]}" if best else "-"
        print(f"{size:>9} {statistics.median(native[size]) if native[size] else 0:>9.1f}"
              + "".join(cells) + f"{best_text:>22}")


if __name__ == "__main__":
    main(sys.argv[1:])
