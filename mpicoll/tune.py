"""Fit ``auto``'s cost model to this machine: measure the links and the local reduction, run the
bench, fit each algorithm's overhead, save the model.

``python -m mpicoll tune --model tuning.json`` writes a file; ``MPICOLL_TUNING=tuning.json``
makes ``auto`` predict with it on any number of ranks and nodes (the schedules say what
travels where; :mod:`mpicoll.costmodel`), and follow what it measured fastest per size on the
layout it measured, for allreduce and for every other collective it measured (``-C``). Without a file, :data:`costmodel.BUILTIN` applies.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Callable

import numpy as np
from mpi4py import MPI

from .costmodel import (ALWAYS_MAPPED, BUILTIN, Model, components, fit_algorithm, fresh_pages,
                        mpi_own, predict)
from .tuning import TUNING_ENV, candidates, load, model_in_force, save

__all__ = ["candidates", "measure_links", "measure_gamma", "cache_size", "fit", "save", "load",
           "model_in_force", "TUNING_ENV"]


def measure_links(comm: MPI.Intracomm, nodes: tuple[tuple[int, ...], ...], repeats: int = 200
                  ) -> tuple[dict[str, float], dict[str, float]]:
    """(α, β) by level from ping-pongs of 8 B and of 1 MiB ("local": rank 0 with another rank
    of its node) or 8 MiB ("remote": with the first rank of the next node; a token-bucket link
    lets its first few hundred kB through at once, which would make 1 MiB look faster than the
    link); a level this job cannot measure keeps the built-in figures. Collective."""
    alpha, beta = dict(BUILTIN.alpha), dict(BUILTIN.beta)
    peers = {"local": nodes[0][1] if len(nodes[0]) > 1 else None,
             "remote": nodes[1][0] if len(nodes) > 1 else None}
    for level, peer in peers.items():
        if peer is None:
            continue
        small = _half_round_trip(comm, peer, 8, repeats)
        nbytes = 1 << (20 if level == "local" else 23)
        large = _half_round_trip(comm, peer, nbytes, max(3, repeats // 20))
        alpha[level] = small
        beta[level] = max(large - small, 0.0) / nbytes
    return alpha, beta


def _half_round_trip(comm: MPI.Intracomm, peer: int, nbytes: int, repeats: int) -> float:
    """Median half round trip between rank 0 and ``peer``, as every rank learns."""
    buf = np.zeros(nbytes, np.uint8)
    rank = comm.Get_rank()
    samples = []
    for _ in range(repeats):
        comm.Barrier()
        t0 = time.perf_counter()
        if rank == 0:
            comm.Send(buf, peer, 7)
            comm.Recv(buf, peer, 7)
        elif rank == peer:
            comm.Recv(buf, 0, 7)
            comm.Send(buf, 0, 7)
        samples.append((time.perf_counter() - t0) / 2)
    return float(comm.bcast(np.median(samples), root=0))


def measure_gamma(nbytes: int = 64 << 20, repeats: int = 20) -> float:
    """Seconds per byte of a local float32 sum of ``nbytes`` (the median of ``repeats``; by
    default beyond the caches, as the large messages that this term matters for)."""
    a, b = np.ones(nbytes // 4, np.float32), np.ones(nbytes // 4, np.float32)
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        np.add(a, b, out=a)
        samples.append(time.perf_counter() - t0)
    return float(np.median(samples)) / nbytes


def cache_size() -> int:
    """This node's last-level cache in bytes, as Linux reports it (0 where it does not: the
    model then treats every byte as beyond the cache)."""
    try:
        with open("/sys/devices/system/cpu/cpu0/cache/index3/size") as f:
            text = f.read().strip()
        return int(text.rstrip("KMG")) << {"K": 10, "M": 20, "G": 30}.get(text[-1:], 0)
    except (OSError, ValueError):
        return 0


def fit(rows: np.ndarray, nodes: tuple[tuple[int, ...], ...], alpha: dict[str, float],
        beta: dict[str, float], gamma: float, source: str,
        emit: Callable[[str], object] = print, cache_bytes: int = 0) -> Model:
    """The model for measured bench rows: α, β, γ as measured, and per algorithm the overhead
    and factors that best explain its times (``native``: as mpicoll runs it, or else MPI's
    own column). How much of the ``cache_bytes`` of last-level cache the working set really
    has (other tenants, MPI's own buffers) is fitted too: the share, down to 1/16, that
    explains the times best; and from ``native``'s times, what MPI's own allreduce pays for new
    memory from :data:`~mpicoll.costmodel.ALWAYS_MAPPED` on (``Model.fresh``). Rows of other
    collectives (``bench -C``) give what was measured fastest for each (``Model.measured_by``);
    the fit is allreduce's."""
    measured_by = _measured_by(rows)
    if measured_by:
        rows = rows[~np.isin(rows["collective"], [name.encode() for name, _ in measured_by])]
    times: dict[str, list[tuple[int, float]]] = {}
    for row in rows:
        name = row["algorithm"].decode()
        if name != "auto":
            times.setdefault(name, []).append((int(row["size"]), row["time_us"] * 1e-6))
    if "native" not in times:  # MPI's own column, as auto's native runs it (less our call)
        times["native"] = [(size, float(rows["native_us"][rows["size"] == size][0]) * 1e-6)
                           for size in sorted(set(rows["size"].tolist()))]
    itemsize = np.dtype(rows["dtype"][0].decode()).itemsize
    on_node = max(map(len, nodes))
    ranks = int(rows["ranks"][0])
    best: tuple[float, Model] | None = None
    for share in (1, 2, 4, 8, 16) if cache_bytes else (1,):
        model = Model(alpha, beta, gamma, {}, source, _fastest_measured(rows),
                      (ranks, len(nodes)), cache_bytes=cache_bytes // share,
                      measured_by=measured_by)
        fitted: dict[str, tuple[float, float, float]] = {}
        for name in sorted(times, key=lambda name: name != "native"):  # native's fresh first
            points = times[name]
            paged = [size if name == "native" and size >= ALWAYS_MAPPED else 0
                     for size, _ in points]
            overhead, factor, cached, fresh = fit_algorithm(
                [(t - fresh_pages(name, size, model), model.in_cache(size, on_node),
                  components(name, size, nodes, model, itemsize)) for size, t in points], paged)
            fitted[name] = (overhead, factor, cached)
            if name == "native":
                model = dataclasses.replace(model, fresh=fresh)
        model = dataclasses.replace(model, algorithms=fitted)
        error = float(np.mean([np.log(predict(name, size, nodes, model, itemsize) / t) ** 2
                               for name, points in times.items() for size, t in points]))
        if best is None or error < best[0]:
            best = error, model
    assert best is not None
    model = best[1]
    emit(f"# the working set fits in {model.cache_bytes >> 20} MiB of cache "
         f"(of {cache_bytes >> 20}); MPI's own pays {model.fresh * (1 << 20) * 1e3:.3f} ms "
         f"per MiB for new memory from {ALWAYS_MAPPED >> 20} MiB; "
         f"rms error {np.sqrt(best[0]):.0%} in the fit")
    for name, (overhead, factor, cached) in model.algorithms.items():
        emit(f"# {name:>15}: {overhead * 1e6:6.2f} us per "
             f"{'call' if mpi_own(name) else 'round'}, "
             f"bytes x{factor:.2f} (x{cached:.2f} in the cache)")
    return model


def _measured_by(rows: np.ndarray) -> tuple[tuple[str, tuple[tuple[int, str], ...]], ...]:
    """(collective, its fastest per size) for every collective other than allreduce in
    ``rows``."""
    if "collective" not in (rows.dtype.names or ()):
        return ()
    others = sorted(set(rows["collective"].tolist()) - {b"allreduce", b""})
    return tuple((name.decode(), _fastest_measured(rows[rows["collective"] == name]))
                 for name in others)


def _fastest_measured(rows: np.ndarray) -> tuple[tuple[int, str], ...]:
    """(size, the algorithm with the lowest ratio to native there) for every size measured."""
    best = []
    for size in sorted(set(rows["size"].tolist())):
        at = rows[(rows["size"] == size) & (rows["algorithm"] != b"auto")]
        best.append((int(size), at["algorithm"][np.argmin(at["ratio"])].decode()))
    return tuple(best)
