"""Figures from bench HDF5 files: latency, bus bandwidth and the ratio to native against
message size, one row of panels per collective."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import h5py
import numpy as np

from . import collective

__all__ = ["bench_figure", "figure"]


def bench_figure(path: str, run: int | None = None, out: str | None = None) -> str:
    """Plot one run of ``/bench`` (the last by default); return the PNG's path."""
    with h5py.File(path, "r") as f:
        if "bench" not in f:
            raise ValueError(f"{path} has no /bench table (write one with bench --output)")
        rows = f["bench"][:]
        run = int(rows["run"].max()) if run is None else run
        rows = rows[rows["run"] == run]
        if not len(rows):
            raise ValueError(f"{path} has no bench rows for run {run}")
        attrs = dict(f["runs"][str(run)].attrs)
    title = (f"{Path(path).name} run {run}: {rows['ranks'][0]} ranks, {rows['nodes'][0]} "
             f"node(s), {rows['dtype'][0].decode()} {rows['op'][0].decode()} — "
             f"{' '.join(str(attrs.get('mpi_library_version', '')).split()[:3])}")
    return figure(rows, title, out or str(Path(path).with_suffix(".png")))


def figure(rows: np.ndarray, title: str, out: str, native: str | None = None) -> str:
    """Latency, busbw and ratio to native against size for bench rows (``ROW_DTYPE``): a row
    of three panels per collective. ``native``: the reference's label (MPI's own call)."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise ValueError("plotting needs matplotlib: pip install 'mpicoll[plot]'") from None
    names = list(dict.fromkeys(rows["collective"]))
    fig, axes = plt.subplots(len(names), 3, figsize=(18, 4.8 * len(names)), squeeze=False)
    for (lat, bw, rel), name in zip(axes, names):
        which = collective.get(name.decode())
        _panels(lat, bw, rel, rows[rows["collective"] == name], which,
                native or f"native MPI_{which.mpi}")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def _panels(lat: Any, bw: Any, rel: Any, rows: np.ndarray, which: collective.Collective,
            native: str) -> None:
    """One collective's three panels."""
    reference = _unique_by_size(rows, which)
    series = [(native, reference["size"], reference["native_us"], reference["native_bus"],
               np.ones(len(reference)))]
    for name, codec in dict.fromkeys(zip(rows["algorithm"], rows["codec"])):
        sel = rows[(rows["algorithm"] == name) & (rows["codec"] == codec)]
        label = name.decode() + (f" + {codec.decode()}" if codec else "")
        series.append((label, sel["size"], sel["time_us"], sel["busbw"], sel["ratio"]))
    from .algorithm import registered  # MPI's own allreduce through mpicoll: black, dashed
    mpi_own = dict(zip((a.name for a in registered() if a.mpi), ("--", ":", "-.")))
    for label, size, time_us, busbw, ratio in series:
        style = dict(marker="o", ms=3, label=label, lw=2.5 if label == native else 1.5,
                     color="black" if label == native or label in mpi_own else None,
                     ls=mpi_own.get(label, "-"))
        lat.plot(size, time_us, **style)
        bw.plot(size, busbw, **style)
        rel.plot(size, ratio, **style)
    for ax, ylabel in ((lat, f"time per {which.name} (µs, median)"), (bw, "busbw (GB/s)"),
                       (rel, "ratio to native (median of interleaved ratios)")):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("size (bytes, the larger buffer)")
        ax.set_ylabel(ylabel)
        ax.grid(True, which="both", alpha=0.3)
    lat.set_yscale("log")
    rel.set_yscale("log", base=2)
    lat.set_title(which.name)
    lat.legend()


def _unique_by_size(rows: np.ndarray, which: collective.Collective) -> np.ndarray:
    """Native's figures per size (each algorithm's row repeats them; take the median)."""
    sizes = np.unique(rows["size"])
    p = rows["ranks"][0]
    factor = which.bus_factor(p)
    native_us = np.array([np.median(rows["native_us"][rows["size"] == s]) for s in sizes])
    result = np.zeros(len(sizes), [("size", "i8"), ("native_us", "f8"), ("native_bus", "f8")])
    result["size"], result["native_us"] = sizes, native_us
    result["native_bus"] = sizes / (native_us * 1e-6) / 1e9 * factor
    return result
