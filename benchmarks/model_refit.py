"""Fit the cost model again from a saved ``tune`` run, for when the model changed and the
machine did not: the same sweep, the same measured α, β, γ, the new shape.

    python benchmarks/model_refit.py tune-p2.txt --model tuning-p2.json

Reads the bench table ``tune`` printed (its stdout) and the tuning file it wrote (α, β, γ, the
layout; the cache Linux reported is in the printed figures), fits as ``tune`` does
(:func:`mpicoll.tune.fit`) and writes the tuning file again, printing the new figures. Runs
without MPI.
"""

from __future__ import annotations

import argparse
import json
import re

import numpy as np

import sweep_summary

from mpicoll import bench, topology, tune


def rows_of(path: str, ranks: int, nodes: int) -> np.ndarray:
    """The plain calls of a printed bench table as ``bench`` rows (the fields ``fit`` reads)."""
    table = sweep_summary.read(path)
    rows = np.zeros(len(table), bench.ROW_DTYPE)
    for row, ((size, name), cells) in zip(rows, table.items()):
        row["size"], row["algorithm"], row["dtype"] = size, name, "float32"
        row["ranks"], row["nodes"] = ranks, nodes
        row["time_us"], row["native_us"], row["ratio"] = cells.time_us, cells.native_us, cells.ratio
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", help="what `mpicoll tune` printed")
    parser.add_argument("--model", required=True, help="the tuning file it wrote (rewritten)")
    args = parser.parse_args()
    with open(args.model) as f:
        saved = json.load(f)
    with open(args.run) as f:
        text = f.read()
    if "float32 sum" not in text:
        raise SystemExit(f"{args.run}: not a float32 sum sweep")
    reported = re.search(r"# links: .*; (\d+) MiB of cache", text)
    cache_bytes = int(reported[1]) << 20 if reported else 0
    ranks, nodes = int(saved["ranks"]), int(saved["nodes"])
    layout = topology.blocks(ranks, ranks // nodes)
    model = tune.fit(rows_of(args.run, ranks, nodes), layout, saved["alpha"], saved["beta"],
                     saved["gamma"], f"{args.model} ({saved['mpi_library']}), refitted",
                     cache_bytes=cache_bytes)
    tune.save(args.model, model, ranks, nodes, saved["mpi_library"])
    print(f"# wrote {args.model}")


if __name__ == "__main__":
    main()
