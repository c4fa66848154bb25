"""Sharded buckets: reduce-scatter gradients as they become ready, update a shard, allgather it.

ZeRO's and FSDP's data parallelism: each rank keeps the optimizer state of 1/p of the
parameters only. A :class:`ShardedBucketManager` packs gradients into buckets as
:class:`~mpicoll.overlap.BucketManager` does, and starts a bucket's nonblocking reduce_scatter
once its tensors are ready, overlapped with the rest of the backward pass. Rank r then holds
block r of each bucket's averaged gradient (``np.array_split``'s blocks) beside block r of the
bucket's parameters, and updates only those (the user's ``update``, called as each bucket
completes). Each updated block is allgathered at once, while the next buckets still complete
and then while the next step computes: a callback asks for the parameters it is about to read
(:meth:`ShardedBucketManager.gathered`), or ``run`` completes every gather before its first
callback.

Rank r's block of a bucket is the same elements in the reduce_scatter and in the allgather,
and an average divides by p before the sum, as ``allreduce``'s does: with ``ring``, the
averaged gradients have the bits of ``allreduce(op="avg", algorithm="ring")``, so an
elementwise update gives the parameters the unsharded run gives. A codec compresses the
gradients (each bucket its own, for error feedback); parameters travel exact.
"""

from __future__ import annotations

import time
from typing import Callable, Iterable, Mapping, NamedTuple, Sequence

from mpi4py import MPI

from . import blockwise, timing
from ._array import Array, array_module, writeable
from .fault import ProcessFailedError
from .overlap import DEFAULT_BUCKET_BYTES, DEFAULT_FIRST_BUCKET_BYTES, Bucket, BucketManager, \
    CodecSpec, Metrics, TensorRef
from .persistent import PersistentRequest
from .request import Request

__all__ = ["ShardedBucketManager", "Shard", "Update"]


class Shard(NamedTuple):
    """This rank's block of one bucket: views of its parameters and its averaged gradients."""

    params: Array
    grads: Array
    start: int  # where the block starts in the bucket's flat buffer (elements)


Update = Callable[[int, Shard], None]
"""The optimizer's step on one bucket's shard: ``update(bucket_index, shard)`` writes the new
parameters into ``shard.params``, in place."""


class ShardedBucketManager(BucketManager):
    """Reduce-scatter gradient buckets as they become ready; allgather the updated parameters.

    Args:
        grads: the gradient arrays in the order they become ready, or a mapping name -> array,
            as for ``BucketManager``. They are read, never written.
        params: the parameter arrays, one per gradient, with the same names (or order), shapes
            and dtypes. Written with every rank's updated blocks once they are gathered.
        comm, bucket_bytes, first_bucket_bytes, op, algorithm, codec, progress: as for
            ``BucketManager`` (``algorithm`` and ``codec`` for the reduce_scatter; parameters
            are allgathered exactly, with the same algorithm).

    ``shards[k]`` is this rank's block of bucket k, for sizing the optimizer's state.
    """

    def __init__(self, grads: Sequence[Array] | Mapping[str, Array],
                 params: Sequence[Array] | Mapping[str, Array], *,
                 comm: MPI.Intracomm | None = None, bucket_bytes: int = DEFAULT_BUCKET_BYTES,
                 first_bucket_bytes: int = DEFAULT_FIRST_BUCKET_BYTES, op: str = "avg",
                 algorithm: str = "auto", codec: CodecSpec = None, progress: str = "test") -> None:
        super().__init__(grads, comm=comm, bucket_bytes=bucket_bytes,
                         first_bucket_bytes=first_bucket_bytes, op=op, algorithm=algorithm,
                         codec=codec, progress=progress)
        self.params = self._matching(params)
        self._param_index = {id(a): i for i, a in enumerate(self.params)}
        p, me = self.comm.Get_size(), self.comm.Get_rank()
        self._counts: list[list[int]] = []
        self._wholes: list[Array] = []  # each bucket's parameters, gathered in place
        self._scatters: list[PersistentRequest] = []
        self._gathers: list[PersistentRequest] = []
        self.shards: list[Shard] = []
        for b in self.buckets:
            each, extra = divmod(b.flat.size, p)  # np.array_split's blocks
            counts = [each + (r < extra) for r in range(p)]
            start = sum(counts[:me])
            whole = array_module(b.flat).empty_like(b.flat)
            for i, offset in zip(b.members, b.offsets):
                whole[offset:offset + self.params[i].size] = self.params[i].reshape(-1)
            shard = Shard(whole[start:start + counts[me]],
                          array_module(b.flat).empty(counts[me], b.flat.dtype), start)
            # Both made now, collectively: a codec or algorithm that cannot run raises on
            # every rank here, before any step.
            self._scatters.append(blockwise.reduce_scatter_init(
                b.flat, shard.grads, algorithm=algorithm, comm=self.comm, codec=b.codec,
                counts=counts))
            self._gathers.append(blockwise.allgather_init(
                whole, whole, algorithm=algorithm, comm=self.comm, counts=counts))
            self._counts.append(counts)
            self._wholes.append(whole)
            self.shards.append(shard)
        self._gathering: list[Request | None] = [None] * len(self.buckets)  # in flight
        self._gather_records: list[timing.Record | None] = [None] * len(self.buckets)
        self._update: Update | None = None
        self._waited = 0.0  # seconds in gathered() during this step's callbacks

    def on(self, comm: MPI.Intracomm) -> ShardedBucketManager:
        """Itself on its own communicator. Another one is refused: the blocks of the
        parameters and of the optimizer's state a failed rank held are gone with it."""
        if comm is self.comm:
            return self
        raise RuntimeError("a ShardedBucketManager cannot move to another communicator: the "
                           "parameters and optimizer state a lost rank held are gone; restart "
                           "from a checkpoint")

    def run(self, compute: Iterable[Callable[[], Iterable[TensorRef] | None]],  # type: ignore[override]
            update: Update, *, on_demand: bool = False) -> Metrics:
        """One step: the callbacks in order, each returning the gradients it made ready, as for
        ``BucketManager.run``; then, bucket by bucket as its reduce_scatter completes,
        ``update(k, shards[k])`` and the start of bucket k's allgather.

        The parameters of the step before must be whole before a callback reads them: every
        outstanding allgather completes before the first callback, or, ``on_demand``, when a
        callback calls :meth:`gathered` for the tensors it is about to read (the allgathers
        then overlap with the callbacks before); those nobody asked for complete at the end.
        ``t_compute`` leaves out the callbacks' waits in :meth:`gathered`: communication.
        """
        if not on_demand:
            self.gathered()
        self._update, self._waited = update, 0.0
        try:
            metrics = super().run(compute)
        finally:
            self._update = None
        metrics.t_compute -= self._waited  # (a callback's wait for parameters: communication)
        return metrics

    def gathered(self, *tensors: TensorRef) -> None:
        """Wait for the allgathers of the buckets holding these parameters (names, indices, or
        gradient or parameter arrays; all when none is named) and write them into ``params``."""
        if self._failure is not None:
            raise self._refused()
        wanted = range(len(self.buckets)) if not tensors else \
            sorted({self._bucket_of[self._lookup_param(t)].index for t in tensors})
        t0 = time.perf_counter()
        try:
            with self._lock:
                for k in wanted:
                    self._unshard(k)
        except ProcessFailedError as error:
            raise self._failed(error)
        self._waited += time.perf_counter() - t0

    def wait(self) -> None:
        """Wait for the reduce_scatters in bucket order; as each completes, update its shard and
        start its allgather; then complete the allgathers no callback asked for."""
        if self._failure is not None:
            raise self._refused()
        if self._update is None:
            raise RuntimeError("a ShardedBucketManager's step is run(compute, update)")
        missing = [self.names[t] for b in self.buckets for t in sorted(b.pending)]
        if missing:
            raise ValueError(f"tensors never marked ready this step: {missing}")
        try:
            with self._lock:
                for k in range(len(self.buckets)):  # the step before's, that nobody asked for
                    self._unshard(k)
                self._start_ready_buckets()
                for b in self.buckets:
                    assert b.request is not None  # every bucket has started by now
                    b.request.wait()
                    self._finished(b)
                    self._update(b.index, self.shards[b.index])
                    self._start_gather(b.index)
        except ProcessFailedError as error:
            raise self._failed(error)

    # ---- inside
    def _start(self, bucket: Bucket) -> Request:
        """Start one bucket's reduce_scatter: an average divides by p first, as allreduce's."""
        if self.op == "avg":
            xp = array_module(bucket.flat)
            xp.multiply(bucket.flat, 1 / self.comm.Get_size(), out=bucket.flat)
        request = bucket.persistent = self._scatters[bucket.index]
        counts = self._counts[bucket.index]
        bucket.record = self._record(request, bucket.flat, "sum", "reduce_scatter",
                                     counts[self.comm.Get_rank()])
        request.start()
        return request

    def _start_gather(self, k: int) -> None:
        gather, me = self._gathers[k], self.comm.Get_rank()
        self._gather_records[k] = self._record(gather, self._wholes[k], "", "allgather",
                                               self._counts[k][me])
        gather.start()
        self._gathering[k] = gather

    def _unshard(self, k: int) -> None:
        """Complete bucket k's allgather, if one is outstanding, and write its parameters."""
        request = self._gathering[k]
        if request is None:
            return
        request.wait()
        self._gathering[k] = None
        record = self._gather_records[k]
        if record is not None:
            record.t1 = MPI.Wtime()
        b, whole = self.buckets[k], self._wholes[k]
        for i, offset in zip(b.members, b.offsets):
            self.params[i].reshape(-1)[...] = whole[offset:offset + self.params[i].size]

    def _matching(self, params: Sequence[Array] | Mapping[str, Array]) -> list[Array]:
        """The parameters in the gradients' order, checked against them on every rank (one
        rank's mistake raises on all, before anything moves)."""
        arrays: list[Array] = []
        error: str | None = None
        if isinstance(params, Mapping):
            if set(params) != set(self.names):
                error = f"params are named {sorted(params)}, gradients {sorted(self.names)}"
            else:
                arrays = [params[n] for n in self.names]
        else:
            arrays = list(params)
            if len(arrays) != len(self.tensors):
                error = f"{len(arrays)} params for {len(self.tensors)} gradients"
        for name, p, g in zip(self.names, arrays, self.tensors):
            if error is None and (p.shape != g.shape or p.dtype != g.dtype
                                  or type(p) is not type(g) or not p.flags.c_contiguous
                                  or not writeable(p)):
                error = (f"param {name!r} is {type(p).__name__} {p.dtype}{list(p.shape)}, its "
                         f"gradient {type(g).__name__} {g.dtype}{list(g.shape)}: params must "
                         "be writeable, C-contiguous arrays shaped as their gradients")
        errors = self.comm.allgather(error)
        wrong = [r for r, e in enumerate(errors) if e is not None]
        if wrong:
            raise ValueError(f"rank {wrong[0]}: {errors[wrong[0]]}")
        return arrays

    def _lookup_param(self, t: TensorRef) -> int:
        i = self._param_index.get(id(t))
        return self._lookup(t) if i is None else i
