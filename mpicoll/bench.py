"""Side-by-side benchmark: mpicoll's algorithms against the MPI library's own collective.

Method (the rules in docs/measuring.md): for each collective and size, every repetition runs
MPI's own call (``Allreduce``, ``Allgather``, ``Reduce_scatter_block``, ``Bcast``, ``Reduce``,
the rooted ones from rank 0 and to it) and each algorithm
once, in a new (seeded) order per repetition, each after a barrier; a sample is the slowest
rank's time. The figure of merit is the median over repetitions of (algorithm time / native
time in the same repetition), which survives the drift of a shared machine. Sizes and
bandwidths follow nccl-tests: size is the larger of a rank's send and receive buffers (an
allgather's result, a reduce_scatter's input: a block per rank), algbw = size / time, busbw =
algbw · the collective's factor (2(p-1)/p for allreduce, (p-1)/p for allgather and
reduce_scatter, 1 for bcast and reduce). ``#wrong`` counts elements that differ from native's result on exact-valued
data, so it must be 0.

With codecs (``-c fp16,int8,topk``) every algorithm also runs compressed, on normally
distributed data (a codec's error on small integers says nothing), and ``error`` is the relative
L2 distance to native's exact sum of the same data; ``#wrong`` is then -1.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, TypeAlias, Union

import numpy as np
from mpi4py import MPI

from . import api, blockwise, codecs, collective, context, ops, rooted, timing
from . import algorithm as algorithms_
from .algorithm import registry, select
from .progress import Progress

__all__ = ["Settings", "run", "parse_size", "size_range", "ROW_DTYPE", "format_size", "table"]

ROW_DTYPE = np.dtype([
    ("run", "i4"), ("collective", "S16"), ("size", "i8"), ("count", "i8"), ("dtype", "S16"), ("op", "S8"),
    ("algorithm", "S16"), ("ran", "S16"), ("codec", "S32"), ("ranks", "i4"), ("nodes", "i4"),
    ("iters", "i4"), ("time_us", "f8"), ("min_us", "f8"), ("max_us", "f8"), ("native_us", "f8"),
    ("ratio", "f8"), ("algbw", "f8"), ("busbw", "f8"), ("wrong", "i8"), ("error", "f8"),
])
NATIVE = "native"
Method: TypeAlias = Union[str, tuple[str, str]]  # NATIVE, or (algorithm, codec spec)
TARGET_SAMPLE_SECONDS = 2e-3
"""Small messages repeat inside a sample so that it lasts about this (``Settings.sample_seconds``:
on links that are token buckets, many times what the burst takes at the link's rate, or a
sample measures the burst)."""


@dataclass
class Settings:
    sizes: list[int]
    algorithms: list[str]
    dtype: str = "float32"
    op: str = "sum"
    iters: int = 15
    warmup: int = 3
    check: bool = True
    codecs: list[str] = field(default_factory=list)  # names, "+ef" for error feedback; "none" = plain
    sample_seconds: float = TARGET_SAMPLE_SECONDS  # a sample repeats a small call this long
    collectives: list[str] = field(default_factory=lambda: [collective.ALLREDUCE.name])

    @property
    def methods(self) -> list[tuple[str, str]]:
        """(algorithm, codec) pairs, codec "" for none, each algorithm with the codecs it runs
        (the header names the pairs left out)."""
        return [pair for pair in self._pairs() if _runs(*pair)]

    @property
    def skipped(self) -> list[tuple[str, str]]:
        """(algorithm, codec) pairs asked for that cannot run."""
        return [pair for pair in self._pairs() if not _runs(*pair)]

    def methods_for(self, which: collective.Collective) -> list[tuple[str, str]]:
        """The methods that run ``which``: allreduce's :attr:`methods`; for another collective
        each algorithm asked for that plans it, without a codec and, for allgather and
        reduce_scatter, with each dense codec asked for where it compresses them."""
        if which is collective.ALLREDUCE:
            return self.methods
        plain = algorithms_.names(collective=which.name) + (registry.AUTO,)
        dense = algorithms_.names(collective=which.name, compresses="dense") + (registry.AUTO,)
        specs = [("" if c == "none" else c) for c in (self.codecs or ["none"])]
        compressed = not which.rooted
        return [(a, c) for c in specs for a in dict.fromkeys(self.algorithms)
                if (a in plain if not c else compressed and a in dense
                    and select.codec_kind(codecs.parse(c)) == "dense")]

    def _pairs(self) -> list[tuple[str, str]]:
        """allreduce's (algorithm, codec) pairs (algorithms of other collectives only left out)."""
        allreduce = algorithms_.names() + (registry.AUTO,)
        return [(a, "" if c == "none" else c) for c in (self.codecs or ["none"])
                for a in self.algorithms if a in allreduce]


def _runs(algorithm_name: str, spec: str) -> bool:
    """Whether ``algorithm=algorithm_name`` runs with codec ``spec`` ("" for none)."""
    if algorithm_name == registry.AUTO:
        return True
    return select.accepts(algorithms_.get(algorithm_name), select.codec_kind(codecs.parse(spec)))


def parse_size(text: str) -> int:
    """'8', '64K', '16M', '1G' (binary multiples) -> bytes."""
    units = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    text = text.strip().upper().removesuffix("B").removesuffix("I")
    number, unit = (text[:-1], text[-1]) if text and text[-1] in units else (text, "")
    try:
        value = int(float(number) * units[unit])
    except ValueError:
        raise ValueError(f"not a size: {text!r} (examples: 8, 64K, 16M)") from None
    if value < 0:
        raise ValueError(f"negative size {text!r}")
    return value


def size_range(spec: str, factor: int = 2) -> list[int]:
    """'MIN:MAX' -> MIN, MIN·factor, ... up to MAX (OSU's -m)."""
    first, _, last = spec.partition(":")
    lo, hi = parse_size(first), parse_size(last or first)
    if lo > hi or factor < 2 and lo < hi:  # (one size needs no factor)
        raise ValueError(f"bad size range {spec!r} with factor {factor}")
    sizes, size = [], max(lo, 1)
    while size <= hi:
        sizes.append(size)
        if factor < 2:
            break
        size *= factor
    return sizes


def format_size(nbytes: int) -> str:
    for unit, scale in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if nbytes >= scale and nbytes % scale == 0:
            return f"{nbytes // scale}{unit}"
    return str(nbytes)


def exact_input(count: int, dtype: np.dtype, op: str, rank: int) -> np.ndarray:
    """Values every reduction order combines exactly, so the check can demand equality."""
    i = np.arange(count)
    if op == "prod":
        values = 1 + (i + rank) % 2 * (rank < 4)  # at most 2**4: exact in every dtype
    else:
        values = (i + rank) % 7 - (0 if dtype.kind == "u" else 3)
    return values.astype(dtype)


def run(settings: Settings, comm: MPI.Intracomm, *, progress: bool = True,
        emit: Callable[[str], object] = print) -> np.ndarray:
    """Measure every collective, size and algorithm; rank 0 emits table lines and gets the
    rows (others: empty)."""
    dtype = np.dtype(settings.dtype)
    op = ops.resolve(settings.op)
    ops.check_dtype(dtype, op)
    which_all = [collective.get(name) for name in settings.collectives]
    known = tuple(dict.fromkeys(name for which in which_all
                                for name in algorithms_.names(collective=which.name)))
    for name in settings.algorithms:
        if name not in known + (registry.AUTO,):
            raise ValueError(f"unknown algorithm {name!r} for {', '.join(settings.collectives)}; "
                             f"choose from {known + (registry.AUTO,)}")
    codec_of = {which: {method: codecs.parse(method[1]) for method in  # state: own each
                        settings.methods_for(which)} for which in which_all}
    for which, codec_by in codec_of.items():  # refuse what cannot run before measuring anything
        for method, codec in codec_by.items():
            if which is collective.ALLREDUCE:
                api.check_codec(codec, dtype, op, method[0])
            elif codec is not None:
                blockwise.check_codec(which, codec, dtype, op)
    rank, size = comm.Get_rank(), comm.Get_size()
    root = rank == 0
    nodes = len(context.of(comm).layout.nodes)  # collective on first use: every rank, now
    averages = op.average and which_all != [collective.ALLREDUCE]  # (avg: allreduce's only)
    runs = {which: [] if which.reduces and averages and which is not collective.ALLREDUCE
            else settings.methods_for(which) for which in which_all}
    bar = Progress(len(settings.sizes) * sum(1 for methods in runs.values() if methods),
                   enabled=root and progress)
    rows = []

    def show(row: tuple) -> None:
        if root:
            bar.clear()
            emit(format_row(row))

    if root:
        emit(header(settings, comm, nodes))
    for which, methods in runs.items():
        if root:
            emit(f"# {which.name}: against MPI_{which.mpi}; "
                 + (", ".join(a + (f" {c}" if c else "") for a, c in methods) if methods else
                    f"not run (op {op.name} is allreduce's only)" if which.reduces and averages
                    else "not run (no algorithm asked for runs it)"))
        for nbytes in settings.sizes if methods else ():
            rows += _size(settings, which, methods, nbytes, codec_of[which], comm, nodes, op,
                          show)
            bar.step(f"{which.name} {format_size(nbytes)}")
    bar.close()
    return np.array(rows, ROW_DTYPE) if root else np.empty(0, ROW_DTYPE)


def _size(settings: Settings, which: collective.Collective, methods: list[tuple[str, str]],
          nbytes: int, codec_of: dict, comm: MPI.Intracomm, nodes: int, op: ops.Op,
          emit: Callable[[tuple], object]) -> list[tuple]:
    """The rows of one collective at one size: a block per rank where the buffers hold one
    (the size is then the larger buffer, as nccl-tests counts it)."""
    dtype, rank, p = np.dtype(settings.dtype), comm.Get_rank(), comm.Get_size()
    blocks = p if which.sends_all or which.receives_all else 1
    n = max(1, nbytes // dtype.itemsize // blocks)
    sends, receives = which.counts(n, p)
    exact = exact_input(sends, dtype, op.name, rank)
    lossy = np.random.default_rng(rank).standard_normal(sends).astype(dtype)
    reference = np.empty(receives, dtype)
    if any(spec for _, spec in methods):
        _native(comm, which, lossy, reference, op)()
    # (bcast: the buffer is the input at the root; reduce: zeros off the root, left alone)
    fresh = (lambda: exact.copy()) if which is collective.BCAST else \
        (lambda: np.zeros(receives, dtype))
    out: dict[Method, np.ndarray] = {NATIVE: fresh()}
    calls: dict[Method, Callable[[], object]] = {NATIVE: _native(comm, which, exact,
                                                                 out[NATIVE], op)}
    for method in methods:
        x = lossy if method[1] else exact
        out[method] = fresh()
        calls[method] = _call(which, x, out[method], op, method[0], codec_of.get(method), comm)
        if method[0] == registry.AUTO and not method[1]:  # its trials first: the steady state
            left = api.trials_left(x, op=op, comm=comm) if which is collective.ALLREDUCE else \
                blockwise.trials_left(which.name, x, out[method], op=op, comm=comm)
            for _ in range(left):
                calls[method]()
    samples = measure(comm, calls, settings)
    rows = []
    for algorithm, spec in methods:
        result = out[(algorithm, spec)]
        if spec or op.average:  # lossy, or divided before summing: no exact answer to match
            wrong, error = -1, _relative_error(result, reference if spec else out[NATIVE])
        else:
            wrong = int(np.count_nonzero(result != out[NATIVE])) if settings.check else -1
            error = _relative_error(result, out[NATIVE])
        wrong = comm.allreduce(wrong, op=MPI.MAX)
        error = comm.allreduce(error, op=MPI.MAX)
        codec = codec_of.get((algorithm, spec))
        if which is collective.ALLREDUCE and select.codec_kind(codec) != "sparse":
            ran = api.choose_algorithm(exact, op=op, algorithm=algorithm, comm=comm, codec=codec)
        elif algorithm == registry.AUTO and not spec and which in (collective.ALLGATHER,
                                                                   collective.REDUCE_SCATTER):
            ran = blockwise.choose_algorithm(which.name, exact, out[(algorithm, spec)], op=op,
                                             comm=comm)
        else:  # what ran is the call's (sparse frames set the course call by call)
            with timing.recording() as rec:
                calls[(algorithm, spec)]()
            ran = rec.records[-1].algorithm
        row = _row(settings, which, n, algorithm, ran, spec, samples[(algorithm, spec)],
                   samples[NATIVE], p, nodes, wrong, error)
        rows.append(row)
        emit(row)
    return rows


def _native(comm: MPI.Intracomm, which: collective.Collective, x: np.ndarray, out: np.ndarray,
            op: ops.Op) -> Callable[[], object]:
    """MPI's own call of ``which``; MPI has no average, so an average is its sum divided by p."""
    if which is collective.ALLGATHER:
        return lambda: comm.Allgather(x, out)
    if which is collective.REDUCE_SCATTER:
        return lambda: comm.Reduce_scatter_block(x, out, op=op.mpi)
    if which is collective.BCAST:
        return lambda: comm.Bcast(out, 0)
    if which is collective.REDUCE:
        return lambda: comm.Reduce(x, out, op=op.mpi, root=0)
    if op.average:
        def call() -> None:
            comm.Allreduce(x, out, op=op.mpi)
            np.divide(out, comm.Get_size(), out=out)
        return call
    return lambda: comm.Allreduce(x, out, op=op.mpi)


def _call(which: collective.Collective, x: np.ndarray, out: np.ndarray, op: ops.Op,
          algorithm: str, codec: api.AnyCodec | None, comm: MPI.Intracomm
          ) -> Callable[[], object]:
    if which is collective.ALLGATHER:
        return lambda: blockwise.allgather(x, out, algorithm=algorithm, comm=comm, codec=codec)
    if which is collective.REDUCE_SCATTER:
        return lambda: blockwise.reduce_scatter(x, out, op=op, algorithm=algorithm, comm=comm,
                                                codec=codec)
    if which is collective.BCAST:
        return lambda: rooted.bcast(out, 0, algorithm=algorithm, comm=comm)
    if which is collective.REDUCE:
        return lambda: rooted.reduce(x, out, op=op, root=0, algorithm=algorithm, comm=comm)
    return lambda: api.allreduce(x, out, op=op, algorithm=algorithm, comm=comm, codec=codec)


def _relative_error(result: np.ndarray, reference: np.ndarray) -> float:
    scale = float(np.linalg.norm(reference.astype(np.float64)))
    diff = float(np.linalg.norm(result.astype(np.float64) - reference))
    return diff / scale if scale else diff


def record_phases(settings: Settings, comm: MPI.Intracomm) -> list[timing.Record]:
    """One recorded call per (collective, size, method): where the time goes, phase by phase."""
    dtype, p = np.dtype(settings.dtype), comm.Get_size()
    op = ops.resolve(settings.op)
    with timing.recording() as rec:
        for which in map(collective.get, settings.collectives):
            if which.reduces and op.average and which is not collective.ALLREDUCE:
                continue
            for nbytes in settings.sizes:
                blocks = p if which.sends_all or which.receives_all else 1
                n = max(1, nbytes // dtype.itemsize // blocks)
                sends, receives = which.counts(n, p)
                x = exact_input(sends, dtype, settings.op, comm.Get_rank())
                for algorithm, spec in settings.methods_for(which):
                    comm.Barrier()
                    _call(which, x, np.empty(receives, dtype), op, algorithm,
                          codecs.parse(spec), comm)()
    return rec.records


def measure(comm: MPI.Intracomm, calls: dict[Method, Callable[[], object]], settings: Settings
             ) -> dict[Method, np.ndarray]:
    """Per-call seconds of each method, one sample per repetition, slowest rank's."""
    for call in calls.values():
        for _ in range(settings.warmup):
            call()
    inner = _inner_repeats(comm, calls[NATIVE], settings.sample_seconds)
    names = list(calls)
    samples = np.zeros((len(names), settings.iters))
    # A new order every repetition, the same on every rank (seeded): no method always runs
    # first, nor always after the same other one, whose cache footprint it would inherit (a
    # rotation keeps the neighbours: "auto", always after MPI's own call, read up to 9% slower
    # than "shm", the same plan: docs/design/, git show abc5a13:docs/results.md, "The order of the methods").
    order = np.random.default_rng(len(names) * settings.iters)
    for rep in range(settings.iters):
        for i in order.permutation(len(names)):
            call = calls[names[i]]
            comm.Barrier()
            t0 = time.perf_counter()
            for _ in range(inner):
                call()
            samples[i, rep] = (time.perf_counter() - t0) / inner
    comm.Allreduce(MPI.IN_PLACE, samples, op=MPI.MAX)
    return dict(zip(names, samples))


def _inner_repeats(comm: MPI.Intracomm, call: Callable[[], object], seconds: float) -> int:
    """Enough back-to-back calls that one sample lasts about ``seconds`` (same on all ranks)."""
    comm.Barrier()
    t0 = time.perf_counter()
    call()
    once = comm.allreduce(time.perf_counter() - t0, op=MPI.MAX)
    return int(min(1000, max(1, seconds // max(once, 1e-7))))


def _row(settings: Settings, which: collective.Collective, n: int, name: str, ran: str,
         codec: str, times: np.ndarray, native: np.ndarray, size: int, nodes: int, wrong: int,
         error: float) -> tuple:
    """A table row: ``n`` elements a block (count), the size and bandwidths as nccl-tests'."""
    median = float(np.median(times))
    dtype = np.dtype(settings.dtype)
    nbytes = which.nbytes(n, size, dtype.itemsize)
    algbw = nbytes / median / 1e9
    return (0, which.name, nbytes, n, dtype.name, settings.op if which.reduces else "", name,
            ran, codec, size, nodes, settings.iters, median * 1e6, times.min() * 1e6,
            times.max() * 1e6, float(np.median(native)) * 1e6, float(np.median(times / native)),
            algbw, algbw * which.bus_factor(size), wrong, error)


COLUMNS = ("size(B)", "count", "type", "redop", "algorithm", "ran", "codec", "time(us)",
           "algbw(GB/s)", "busbw(GB/s)", "native(us)", "ratio", "#wrong", "error")
WIDTHS = (12, 11, 9, 6, 10, 17, 10, 11, 12, 12, 11, 7, 7, 9)


def library() -> str:
    """The MPI library in one line, for the header of a table (Open MPI's ends in a NUL)."""
    return MPI.Get_library_version().rstrip("\x00").strip().splitlines()[0]


def header(settings: Settings, comm: MPI.Intracomm, nodes: int) -> str:
    lib = library()
    return "\n".join([
        f"# mpicoll bench: {comm.Get_size()} ranks on {nodes} node(s); {lib}",
        f"# {settings.dtype} {settings.op}; {settings.iters} interleaved repetitions after "
        f"{settings.warmup} warm-up, small calls repeated for {settings.sample_seconds * 1e3:g} ms "
        "a sample; ratio = median(mpicoll time / native time)"
        + ("; not run (the algorithm does not compress that way): "
           + ", ".join(f"{a} {c or 'none'}" for a, c in settings.skipped) if settings.skipped else ""),
        "#" + cells(COLUMNS)[1:],
    ])


def format_row(row: Any) -> str:
    """A row of the table (the collective: the section it is printed in)."""
    (_, _, nbytes, count, dtype, op, name, ran, codec, _, _, _, t, _, _, native, ratio, algbw,
     busbw, wrong, error) = row
    return cells((nbytes, count, dtype, op or "-", name, ran, codec or "-", f"{t:.1f}", f"{algbw:.3f}",
                  f"{busbw:.3f}", f"{native:.1f}", f"{ratio:.2f}", wrong, f"{error:.1e}"))


def table(lines: Iterable[str], which: str = "allreduce") -> list[list[str]]:
    """The cells of each row of ``which``'s section of a table bench printed (a table printed
    before bench had sections, or simulate's: every row allreduce's)."""
    rows, section = [], collective.ALLREDUCE.name
    for line in lines:
        if line.startswith("# ") and ": against MPI_" in line:
            section = line[2:].split(":")[0]
        elif line.strip() and not line.startswith("#") and section == which:
            rows.append(line.split())
    return rows


def cells(values: tuple) -> str:
    """Right-aligned columns, always at least one space apart (a long name widens its cell)."""
    return "".join(" " + str(c).rjust(w - 1) for c, w in zip(values, WIDTHS))
