"""HDF5 output: gather to rank 0, append rows to resizable tables, keep each run's provenance.

Layout (docs/hdf5.md)::

    /runs/<n>       group per run; attributes: provenance (MPI library, versions, hosts, job ...)
    /records        one row per collective per rank (timing.Record), column ``run`` = n
    /phases         one row per (collective, rank, phase)
    /bench          one row per (size, algorithm) of ``python -m mpicoll bench``

Tables are compound datasets with unlimited first dimension: later runs append rows. Serial
h5py on rank 0 is enough (PyPI's h5py has no MPI driver); only rank 0 touches the file.
"""

from __future__ import annotations

import datetime
import getpass
import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable, Sequence

import h5py
import numpy as np
from mpi4py import MPI

from .timing import Record

__all__ = ["provenance", "write", "RECORD_DTYPE", "PHASE_DTYPE", "LAYOUT_VERSION"]

LAYOUT_VERSION = 5  # 2: /bench gained "error"; 3: /records gained "transport", 4: "collective"; 5: /bench "collective"
TUNING_PREFIXES = ("MPICOLL_", "MPIR_CVAR_", "MPICH_", "HYDRA_", "OMPI_MCA_", "PRTE_MCA_",
                   "FI_", "UCX_", "I_MPI_", "CUDA_VISIBLE_DEVICES")

RECORD_DTYPE = np.dtype([
    ("run", "i4"), ("rank", "i4"), ("seq", "i8"), ("t0", "f8"), ("t1", "f8"), ("seconds", "f8"),
    ("op", "S8"), ("algorithm", "S16"), ("codec", "S32"), ("dtype", "S16"), ("count", "i8"),
    ("nbytes", "i8"), ("ranks", "i4"), ("nodes", "i4"), ("transport", "S16"),
    ("collective", "S16"),
])
PHASE_DTYPE = np.dtype([("run", "i4"), ("rank", "i4"), ("seq", "i8"), ("phase", "S48"),
                        ("seconds", "f8")])


def provenance(comm: MPI.Comm) -> dict[str, str | int | float]:
    """What a reader needs to trust or reproduce a run (Adiak's names where they exist).

    Collective; the full dictionary is returned on rank 0, an empty one elsewhere.
    """
    import mpi4py

    from ._version import __version__
    hosts = comm.gather(socket.gethostname(), root=0)
    if comm.Get_rank() != 0:
        return {}
    assert hosts is not None  # the root's gather result
    version = MPI.Get_library_version().rstrip("\x00").strip()
    return {
        "launchdate": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "user": _safe(getpass.getuser),
        "executable": sys.executable,
        "cmdline": " ".join(sys.orig_argv),
        "jobsize": comm.Get_size(),
        "hostname": hosts[0],
        "hostlist": ",".join(dict.fromkeys(hosts)),
        "numhosts": len(set(hosts)),
        "mpi_library": MPI.get_vendor()[0],
        "mpi_library_version": version,
        "mpi_version": "%d.%d" % MPI.Get_version(),
        "mpi_thread_level": ["single", "funneled", "serialized", "multiple"][MPI.Query_thread()],
        "mpi_wtick": MPI.Wtick(),
        "mpicoll_version": __version__,
        "mpi4py_version": mpi4py.__version__,
        "numpy_version": np.__version__,
        "h5py_version": h5py.__version__,
        "python_version": sys.version.split()[0],
        "git_commit": _git_commit(),
        "slurm_job_id": os.environ.get("SLURM_JOB_ID", ""),
        "tuning": json.dumps({k: v for k, v in sorted(os.environ.items())
                              if k.startswith(TUNING_PREFIXES)}),
    }


def write(path: str | os.PathLike[str], comm: MPI.Comm, *, records: Sequence[Record] = (),
          tables: dict[str, np.ndarray] | None = None,
          attrs: dict[str, Any] | None = None) -> int | None:
    """Append this run to ``path``; return its run number on rank 0 (None elsewhere). Collective.

    Args:
        records: this rank's timing records; gathered from every rank.
        tables: rank 0's extra tables (structured arrays with a ``run`` column), e.g. ``bench``.
        attrs: extra run attributes (e.g. the bench's settings).
    """
    meta = provenance(comm)
    rows = comm.gather(_record_rows(records), root=0)
    if comm.Get_rank() != 0:
        return None
    assert rows is not None  # the root's gather result
    meta.update(attrs or {})
    tables = {"records": np.concatenate([r for r, _ in rows]),
              "phases": np.concatenate([p for _, p in rows]), **(tables or {})}
    with h5py.File(path, "a") as f:
        found = f.attrs.get("mpicoll_layout_version", LAYOUT_VERSION)
        if found != LAYOUT_VERSION:
            raise ValueError(f"{path} has layout version {found}, this mpicoll writes "
                             f"{LAYOUT_VERSION}: write to a new file")
        for name, table in tables.items():  # refuse before writing anything
            if name in f and f[name].dtype != table.dtype:
                raise ValueError(f"{path}:/{name} has columns {f[name].dtype}, not {table.dtype}; "
                                 "write to a new file")
        f.attrs["mpicoll_layout_version"] = LAYOUT_VERSION
        runs = f.require_group("runs")
        run = max((int(k) for k in runs), default=0) + 1
        group = runs.create_group(str(run))
        for key, value in meta.items():
            group.attrs[key] = value
        for name, table in tables.items():
            table = table.copy()
            table["run"] = run
            _append(f, name, table)
    return run


def _record_rows(records: Sequence[Record]) -> tuple[np.ndarray, np.ndarray]:
    recs = np.zeros(len(records), RECORD_DTYPE)
    phases = []
    for i, r in enumerate(records):
        recs[i] = (0, r.rank, r.seq, r.t0, r.t1, r.seconds, r.op, r.algorithm, r.codec, r.dtype,
                   r.count, r.nbytes, r.ranks, r.nodes, r.transport, r.collective)
        phases += [(0, r.rank, r.seq, name, secs) for name, secs in r.phases.items()]
    return recs, np.array(phases, PHASE_DTYPE)


def _append(f: h5py.File, name: str, rows: np.ndarray) -> None:
    if name not in f:
        f.create_dataset(name, shape=(0,), maxshape=(None,), dtype=rows.dtype,
                         chunks=(max(1, 65536 // rows.dtype.itemsize),))
    dataset = f[name]
    start = dataset.shape[0]
    dataset.resize((start + len(rows),))
    dataset[start:] = rows


def _git_commit() -> str:
    """The commit of the mpicoll source in use, when it is a git checkout."""
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=Path(__file__).parent,
                             capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return out.stdout.strip() if out.returncode == 0 else ""


def _safe(fn: Callable[[], str]) -> str:
    try:
        return fn()
    except Exception:  # getpass fails without a passwd entry, as in some containers
        return ""
