"""Figures from bench HDF5 files: latency, bus bandwidth and the ratio to native against
message size."""

from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np

__all__ = ["bench_figure"]


def bench_figure(path: str, run: int | None = None, out: str | None = None) -> str:
    """Plot one run of ``/bench`` (the last by default); return the PNG's path."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise ValueError("plotting needs matplotlib: pip install 'mpicoll[plot]'") from None
    with h5py.File(path, "r") as f:
        if "bench" not in f:
            raise ValueError(f"{path} has no /bench table (write one with bench --output)")
        rows = f["bench"][:]
        run = int(rows["run"].max()) if run is None else run
        rows = rows[rows["run"] == run]
        if not len(rows):
            raise ValueError(f"{path} has no bench rows for run {run}")
        attrs = dict(f["runs"][str(run)].attrs)
    fig, (lat, bw, rel) = plt.subplots(1, 3, figsize=(18, 4.8))
    native = _unique_by_size(rows)
    series = [("native MPI_Allreduce", native["size"], native["native_us"], native["native_bus"],
               np.ones(len(native)))]
    for name, codec in dict.fromkeys(zip(rows["algorithm"], rows["codec"])):
        sel = rows[(rows["algorithm"] == name) & (rows["codec"] == codec)]
        label = name.decode() + (f" + {codec.decode()}" if codec else "")
        series.append((label, sel["size"], sel["time_us"], sel["busbw"], sel["ratio"]))
    for label, size, time_us, busbw, ratio in series:
        style = dict(marker="o", ms=3, label=label, lw=2.5 if label.startswith("native") else 1.5,
                     color="black" if label.startswith("native") else None)
        lat.plot(size, time_us, **style)
        bw.plot(size, busbw, **style)
        rel.plot(size, ratio, **style)
    for ax, ylabel in ((lat, "time per allreduce (µs, median)"), (bw, "busbw (GB/s)"),
                       (rel, "ratio to native (median of interleaved ratios)")):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("message size (bytes)")
        ax.set_ylabel(ylabel)
        ax.grid(True, which="both", alpha=0.3)
    lat.set_yscale("log")
    rel.set_yscale("log", base=2)
    lat.legend()
    size = rows["ranks"][0]
    fig.suptitle(f"{Path(path).name} run {run}: {size} ranks, {rows['nodes'][0]} node(s), "
                 f"{rows['dtype'][0].decode()} {rows['op'][0].decode()} — "
                 f"{' '.join(str(attrs.get('mpi_library_version', '')).split()[:3])}", fontsize=10)
    fig.tight_layout()
    out = out or str(Path(path).with_suffix(".png"))
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def _unique_by_size(rows: np.ndarray) -> np.ndarray:
    """Native's figures per size (each algorithm's row repeats them; take the median)."""
    sizes = np.unique(rows["size"])
    p = rows["ranks"][0]
    factor = 2 * (p - 1) / p if p > 1 else 1.0
    native_us = np.array([np.median(rows["native_us"][rows["size"] == s]) for s in sizes])
    result = np.zeros(len(sizes), [("size", "i8"), ("native_us", "f8"), ("native_bus", "f8")])
    result["size"], result["native_us"] = sizes, native_us
    result["native_bus"] = sizes / (native_us * 1e-6) / 1e9 * factor
    return result
