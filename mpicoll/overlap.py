"""Buckets: allreduce gradients while the backward pass is still computing the rest.

The user names the tensors in the order they become ready (the reverse of the forward pass,
as in PyTorch DDP). The manager packs them into flat buckets of at most ``bucket_bytes`` (the
first one small, ``first_bucket_bytes``, so communication starts early) and starts a bucket's
nonblocking allreduce once all its tensors are ready. MPI moves data only inside MPI calls, so
outstanding transfers are progressed by a policy:

- ``"test"``: between the user's compute callbacks (no thread; progress only that often);
- ``"thread"``: a background thread tests with capped exponential backoff (MPI calls and large
  NumPy kernels release the GIL);
- ``"mpi"``: the MPI library's own progress thread (MPICH: ``MPIR_CVAR_ASYNC_PROGRESS=1`` set
  before the job starts); only the round in flight moves, the next is posted when tested;
- ``"none"``: nothing starts before the end — the "compute, then communicate" baseline.

Buckets start in bucket order on every rank, whatever order tensors become ready locally: a
bucket waits until every earlier one has started. Every rank must describe the same tensors
(names, shapes, dtypes) in the same order; the constructor checks that collectively, so a
mismatch is a clear error on every rank instead of a hang or mixed-up data.

When a process of the communicator fails (an MPI with ULFM), ``run`` and ``wait`` raise
:class:`~mpicoll.ProcessFailedError` with every tensor as this rank made it for the step: no
bucket's result, complete or partial, is left in them, so the step can be redone on the
survivors' communicator with ``manager.on(survivors)``; this one refuses to go on. Survivors
may learn of the failure a step apart: run the steps in ``with mpicoll.Steps(...)`` blocks,
which agree on the step to redo, with ``manager = manager.on(steps.comm)`` atop each.
Results are unpacked only once every bucket has completed; with ``as_views`` (the tensors are
the buckets) a fault-tolerant job keeps a copy of each bucket's input from its start.
"""

from __future__ import annotations

import functools
import hashlib
import os
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Iterable, Mapping, Sequence, TypeAlias, Union

import numpy as np
from mpi4py import MPI

from . import api, codecs, context, inflight, timing
from ._array import Array, array_module, is_device, same_module, writeable
from .fault import ProcessFailedError
from .persistent import PersistentRequest
from .request import Request

__all__ = ["BucketManager", "Metrics", "overlap_percent", "POLICIES"]

POLICIES = ("test", "thread", "mpi", "none")
DEFAULT_BUCKET_BYTES = 25 << 20       # PyTorch DDP's bucket_cap_mb
DEFAULT_FIRST_BUCKET_BYTES = 1 << 20  # and its small first bucket

AnyCodec: TypeAlias = Union[codecs.Codec, codecs.ErrorFeedback]
# What ``codec=`` accepts: a name, a shared stateless codec, or a factory (one codec per bucket).
CodecSpec: TypeAlias = Union[str, codecs.Codec, Callable[[], AnyCodec], None]
TensorRef: TypeAlias = Union[str, int, Array]  # a tensor, its name or its index


def overlap_percent(t_overall: float, t_compute: float, t_pure_comm: float) -> float:
    """OSU's measure: how much of the communication hid behind the compute."""
    if t_pure_comm <= 0:
        return 100.0
    return max(0.0, 100.0 - 100.0 * (t_overall - t_compute) / t_pure_comm)


@dataclass
class Metrics:
    """One ``run``: wall time, time inside the compute callbacks, and per-bucket transfer times."""

    t_overall: float = 0.0
    t_compute: float = 0.0
    bucket_seconds: list[float] = field(default_factory=list)  # start to completion seen

    @property
    def t_exposed(self) -> float:
        """Communication time not hidden behind compute."""
        return max(0.0, self.t_overall - self.t_compute)


@dataclass
class Bucket:
    index: int
    members: list[int]           # tensor indices
    offsets: list[int]           # element offset of each member in the flat buffer
    flat: Array
    codec: AnyCodec | None = None
    pending: set[int] = field(default_factory=set)
    request: Request | None = None
    persistent: PersistentRequest | None = None  # made on the first start, reused every step
    started: float = 0.0
    seconds: float = 0.0
    record: timing.Record | None = None  # this step's, when timing records are on
    saved: Array | None = None  # as_views, fault tolerant: its input, put back if a process fails


class BucketManager:
    """Group tensors into buckets and allreduce them as they become ready.

    Args:
        tensors: the arrays in the order they become ready, or a mapping name -> array (names
            are part of the cross-rank check). Results are written back into them.
        comm: communicator (``MPI.COMM_WORLD`` when None).
        bucket_bytes, first_bucket_bytes: bucket size caps.
        op: "avg" (the default, as for gradients) or "sum".
        algorithm: passed to ``mpicoll.allreduce_init`` (one persistent request per bucket).
        codec: a codec name, or a zero-argument callable returning a codec (e.g.
            ``lambda: codecs.ErrorFeedback(codecs.get("int8"))``): each bucket gets its own,
            since error feedback and adaptive thresholds are state.
        progress: one of ``POLICIES``.
        as_views: make ``manager.tensors`` views into the bucket buffers (their current values
            kept) instead of copying into buckets when ready and back at the end, as DDP's
            ``gradient_as_bucket_view``: write gradients into ``manager.tensors_by_name[...]``.
    """

    def __init__(self, tensors: Sequence[Array] | Mapping[str, Array], *,
                 comm: MPI.Intracomm | None = None, bucket_bytes: int = DEFAULT_BUCKET_BYTES,
                 first_bucket_bytes: int = DEFAULT_FIRST_BUCKET_BYTES, op: str = "avg",
                 algorithm: str = "auto", codec: CodecSpec = None, progress: str = "test",
                 as_views: bool = False) -> None:
        names, arrays = (list(tensors), list(tensors.values())) if isinstance(tensors, Mapping) \
            else ([str(i) for i in range(len(tensors))], list(tensors))
        self.comm = MPI.COMM_WORLD if comm is None else comm
        self._check_arguments(arrays, bucket_bytes, first_bucket_bytes, op, codec, progress)
        self.tensors, self.names = arrays, names
        self.op, self.algorithm, self.progress = op, algorithm, progress
        self.buckets = self._pack(arrays, bucket_bytes, first_bucket_bytes, codec)
        self.as_views = as_views
        if as_views:  # DDP's gradient_as_bucket_view: no copy in, no copy back
            for b in self.buckets:
                for i, start in zip(b.members, b.offsets):
                    view = b.flat[start:start + arrays[i].size].reshape(arrays[i].shape)
                    view[...] = arrays[i]
                    self.tensors[i] = view
            if context.of(self.comm).fault_tolerant:  # the reduction writes into the tensors
                for b in self.buckets:
                    b.saved = array_module(b.flat).empty_like(b.flat)
        self._made_alike = functools.partial(  # (for on())
            BucketManager, bucket_bytes=bucket_bytes, first_bucket_bytes=first_bucket_bytes,
            op=op, algorithm=algorithm, codec=codec, progress=progress, as_views=as_views)
        self._index = {id(a): i for i, a in enumerate(self.tensors)}
        self._bucket_of = {t: b for b in self.buckets for t in b.members}
        self._check_same_on_all_ranks(bucket_bytes, first_bucket_bytes, op, algorithm,
                                      codec if codec is None or isinstance(codec, str) else "factory")
        self._next = 0  # index of the next bucket to start
        self._lock = threading.RLock()  # the progress thread and the caller share the requests
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._failure: ProcessFailedError | None = None  # a process of self.comm failed

    @property
    def tensors_by_name(self) -> dict[str, Array]:
        return dict(zip(self.names, self.tensors))

    def on(self, comm: MPI.Intracomm) -> BucketManager:
        """This manager on ``comm``: itself where it runs there already, else a new manager of
        the same tensors with the same settings (collective over ``comm``). After a failure,
        at the top of each step of a :class:`~mpicoll.Steps` loop:
        ``manager = manager.on(steps.comm)``. The new one's codecs start afresh (error-feedback
        residuals, thresholds) on every survivor alike; with ``as_views`` its ``tensors`` are
        new views, holding the old ones' values."""
        if comm is self.comm:
            return self
        return self._made_alike(self.tensors_by_name, comm=comm)

    # ---- one step
    def run(self, compute: Iterable[Callable[[], Iterable[TensorRef] | None]]) -> Metrics:
        """Run the callbacks in order; each returns the tensors (or names) it made ready.

        Transfers are progressed between callbacks (or by the policy's thread); at the end
        every bucket is waited for and its results are written back into the tensors. If a
        process failed, ProcessFailedError, with no bucket's result in the tensors.
        """
        self._reset()
        metrics = Metrics()
        start = time.perf_counter()
        if self.progress == "thread":
            self._start_thread()
        try:
            for callback in compute:
                t0 = time.perf_counter()
                made_ready = callback()
                metrics.t_compute += time.perf_counter() - t0
                self.ready(*(made_ready or ()))
                if self.progress == "test":
                    self.poll()
        except ProcessFailedError as error:  # (from ready, which put the tensors back)
            raise self._failed(error)
        finally:
            self._stop_thread()
        self.wait()
        metrics.t_overall = time.perf_counter() - start
        metrics.bucket_seconds = [b.seconds for b in self.buckets]
        return metrics

    def ready(self, *tensors: TensorRef) -> None:
        """Mark tensors (arrays or names) ready: copy them into their bucket, start what can start."""
        if self._failure is not None:
            raise self._refused()
        for t in tensors:
            i = self._lookup(t)
            bucket = self._bucket_of[i]
            if i not in bucket.pending:
                raise ValueError(f"tensor {self.names[i]!r} was already marked ready this step")
            if not self.as_views:
                start = bucket.offsets[bucket.members.index(i)]
                bucket.flat[start:start + self.tensors[i].size] = self.tensors[i].reshape(-1)
            bucket.pending.discard(i)
        if self.progress != "none":
            try:
                self._start_ready_buckets()
            except ProcessFailedError as error:
                raise self._failed(error)

    def poll(self) -> bool:
        """Progress every outstanding bucket once; True when all started ones have finished."""
        with self._lock:
            return self._poll()

    def wait(self) -> None:
        """Start whatever is left, wait for every bucket, write the results back (only once all
        have completed: a failed process leaves the tensors as they were, ProcessFailedError)."""
        if self._failure is not None:
            raise self._refused()
        missing = [self.names[t] for b in self.buckets for t in sorted(b.pending)]
        if missing:
            raise ValueError(f"tensors never marked ready this step: {missing}")
        try:
            with self._lock:
                self._start_ready_buckets()
                for bucket in self.buckets:
                    assert bucket.request is not None  # every bucket has started by now
                    bucket.request.wait()
                    self._finished(bucket)
        except ProcessFailedError as error:
            raise self._failed(error)
        if self.as_views:
            return  # the tensors are the buckets
        for bucket in self.buckets:
            for i, start in zip(bucket.members, bucket.offsets):
                t = self.tensors[i]
                t.reshape(-1)[...] = bucket.flat[start:start + t.size]

    # ---- inside
    def _failed(self, error: ProcessFailedError) -> ProcessFailedError:
        """A process failed during this step: stop the progress thread, put back the inputs of
        the buckets that started (as_views; otherwise the tensors were never written), and
        refuse to go on. Returns ``error``."""
        self._stop_thread()
        with self._lock:
            if self._failure is None:
                self._failure = error
                for b in self.buckets:
                    if b.started and b.saved is not None:
                        b.flat[...] = b.saved
        return error

    def _refused(self) -> RuntimeError:
        assert self._failure is not None
        failed = self._failure.failed
        who = f"rank{'s' * (len(failed) != 1)} {', '.join(map(str, failed))}" if failed \
            else "a process"
        return RuntimeError(f"this BucketManager's communicator lost {who} in an earlier step "
                            "(ProcessFailedError): go on with manager.on(survivors), on the "
                            "survivors' communicator (mpicoll.Steps' steps.comm)")

    def _reset(self) -> None:
        if self._failure is not None:
            raise self._refused()
        if any(b.request is not None and not b.seconds for b in self.buckets):
            raise RuntimeError("the previous step still has buckets in flight; call wait() first")
        for b in self.buckets:
            b.pending, b.request, b.started, b.seconds = set(b.members), None, 0.0, 0.0
            b.record = None
        self._next = 0

    def _start_ready_buckets(self) -> None:
        with self._lock:
            while self._next < len(self.buckets) and not self.buckets[self._next].pending:
                b = self.buckets[self._next]
                if b.saved is not None:
                    b.saved[...] = b.flat  # (what the tensors go back to if a process fails)
                b.started = time.perf_counter()
                b.request = self._start(b)
                self._next += 1

    def _start(self, bucket: Bucket) -> Request:
        """Start one bucket's allreduce in place; returns what ``test()``/``wait()`` advance.

        A bucket reuses its buffer every step, so its allreduce is persistent
        (``allreduce_init``, made on the first start: checks, plan and tags once, MPI
        persistent requests bound to the buffer). Persistent starts leave no timing record of
        their own, so the bucket keeps one, from its start to its completion seen."""
        if bucket.persistent is None:
            bucket.persistent = api.allreduce_init(bucket.flat, bucket.flat, op=self.op,
                                                   algorithm=self.algorithm, comm=self.comm,
                                                   codec=bucket.codec)
        bucket.record = self._record(bucket.persistent, bucket.flat, self.op)
        bucket.persistent.start()
        return bucket.persistent

    @staticmethod
    def _record(request: PersistentRequest, flat: Array, op: str, collective: str = "allreduce",
                count: int | None = None) -> timing.Record | None:
        """A timing record for one start of ``request`` on ``flat`` (when records are on);
        ``count``: this rank's block, for the collectives whose buffers are blocks."""
        recorder = timing.active()
        if recorder is None:
            return None
        ctx = request.context
        return recorder.start(
            rank=ctx.rank, ranks=ctx.size, nodes=len(ctx.layout.nodes), op=op,
            algorithm=request.algorithm, codec=request.codec, dtype=flat.dtype.name,
            count=flat.size if count is None else count, nbytes=flat.nbytes,
            transport=request.transport, collective=collective)

    def _poll(self) -> bool:
        inflight.progress()  # one pass advances every bucket (and every other collective)
        done = True
        for b in self.buckets[:self._next]:
            if not b.seconds:
                assert b.request is not None  # the buckets before self._next have started
                if b.request.done:
                    self._finished(b)
                else:
                    done = False
        return done

    def _finished(self, bucket: Bucket) -> None:
        if not bucket.seconds:
            bucket.seconds = time.perf_counter() - bucket.started
            if bucket.record is not None:  # a sparse codec's request names its fallback now
                assert bucket.request is not None
                bucket.record.t1 = MPI.Wtime()
                bucket.record.algorithm = bucket.request.algorithm
                bucket.record.codec = bucket.request.codec

    def _start_thread(self) -> None:
        self._stop.clear()
        self._thread = threading.Thread(target=self._progress_loop, name="mpicoll-progress",
                                        daemon=True)
        self._thread.start()

    def _stop_thread(self) -> None:
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None

    def _progress_loop(self) -> None:
        """Test outstanding buckets; back off (10 µs doubling to 1 ms) while nothing moves."""
        delay = 1e-5
        while not self._stop.is_set():
            with self._lock:
                before = sum(1 for b in self.buckets if b.seconds)
                self._poll()
                moved = sum(1 for b in self.buckets if b.seconds) != before
            delay = 1e-5 if moved else min(delay * 2, 1e-3)
            self._stop.wait(delay)

    def _lookup(self, t: TensorRef) -> int:
        if isinstance(t, str):
            try:
                return self.names.index(t)
            except ValueError:
                raise ValueError(f"no tensor named {t!r}") from None
        if isinstance(t, (int, np.integer)) and not isinstance(t, bool):
            if not 0 <= t < len(self.tensors):
                raise ValueError(f"no tensor {t}")
            return int(t)
        try:
            return self._index[id(t)]
        except KeyError:
            raise ValueError("not one of the manager's tensors (pass the same array object, "
                             "its name or its index)") from None

    def _pack(self, arrays: Sequence[Array], bucket_bytes: int, first_bucket_bytes: int,
              codec: CodecSpec) -> list[Bucket]:
        """Greedy in readiness order: a new bucket when the cap or the dtype would change."""
        groups: list[list[int]] = []
        size = 0
        for i, a in enumerate(arrays):
            cap = first_bucket_bytes if len(groups) == 1 else bucket_bytes
            if not groups or size + a.nbytes > cap and size > 0 or a.dtype != arrays[groups[-1][0]].dtype:
                groups.append([])
                size = 0
            groups[-1].append(i)
            size += a.nbytes
        buckets = []
        for k, members in enumerate(groups):
            offsets = np.cumsum([0] + [arrays[i].size for i in members]).tolist()
            first = arrays[members[0]]
            flat = array_module(first).empty(offsets[-1], first.dtype)  # on the tensors' device
            buckets.append(Bucket(k, members, offsets[:-1], flat, _make_codec(codec)))
        return buckets

    def _check_arguments(self, arrays: Sequence[Array], bucket_bytes: int,
                         first_bucket_bytes: int, op: str, codec: CodecSpec,
                         progress: str) -> None:
        if not arrays:
            raise ValueError("no tensors to manage")
        same_module("BucketManager", *arrays)  # all on the host, or all on the device
        for a in arrays:
            if not hasattr(a, "__array_interface__") and not is_device(a) \
                    or not a.flags.c_contiguous or not writeable(a):
                raise TypeError("tensors must be writeable, C-contiguous NumPy or CuPy arrays")
        if len({id(a) for a in arrays}) != len(arrays):
            raise ValueError("the same array appears twice")
        if bucket_bytes < 1 or first_bucket_bytes < 1:
            raise ValueError("bucket sizes must be positive")
        if op not in ("avg", "sum"):
            raise ValueError(f"buckets reduce with 'avg' or 'sum', not {op!r}")
        if isinstance(codec, codecs.ErrorFeedback) or isinstance(codec, codecs.Codec) and not codec.dense:
            raise TypeError("stateful codecs cannot be shared by buckets: pass a callable that "
                            "makes one, e.g. lambda: codecs.ErrorFeedback(codecs.get('int8'))")
        if progress not in POLICIES:
            raise ValueError(f"unknown progress policy {progress!r}; choose one of {POLICIES}")
        level = MPI.Query_thread()
        if progress == "thread" and level < MPI.THREAD_SERIALIZED:
            raise ValueError(f"progress='thread' needs MPI_THREAD_SERIALIZED or more; this job "
                             f"has level {level} (mpi4py.rc.thread_level)")
        if progress == "mpi" and os.environ.get("MPIR_CVAR_ASYNC_PROGRESS") != "1":
            raise ValueError("progress='mpi' needs the MPI library's progress thread: start the "
                             "job with MPIR_CVAR_ASYNC_PROGRESS=1 (MPICH)")

    def _check_same_on_all_ranks(self, *settings: object) -> None:
        """Collective: every rank must have the same tensors and settings, else all raise."""
        layout = repr([type(self).__name__] +
                      [(n, a.shape, a.dtype.str) for n, a in zip(self.names, self.tensors)])
        mine = hashlib.sha256((layout + repr(settings)).encode()).hexdigest()
        everyone = self.comm.allgather((mine, layout))
        differ = [r for r, (h, _) in enumerate(everyone) if h != everyone[0][0]]
        if differ:
            raise ValueError(f"bucket layouts differ between ranks: rank 0 has {everyone[0][1]}, "
                             f"rank {differ[0]} has {everyone[differ[0]][1]} (or other settings differ)")


def _make_codec(codec: CodecSpec) -> AnyCodec | None:
    """One codec per bucket: a name is built here (not per call, which would restart a
    threshold codec's adaptation every step); a shared stateless codec object is kept."""
    if codec is None or isinstance(codec, codecs.Codec):
        return codec
    return codecs.get(codec) if isinstance(codec, str) else codec()
