"""A data-parallel training run, as an application would use mpicoll (``python -m mpicoll train``).

Each rank trains the same small NumPy MLP on its own shard of a synthetic classification task
and averages gradients with ``mpicoll.allreduce`` every step. Because every rank receives the
same bits, the replicas never drift apart; the run checks that at the end.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import numpy as np
from mpi4py import MPI

from . import api, codecs, timing

__all__ = ["Settings", "train"]


@dataclass
class Settings:
    steps: int = 200
    batch: int = 64
    features: int = 32
    hidden: int = 256
    classes: int = 10
    lr: float = 0.1
    algorithm: str = "auto"
    codec: str = ""  # as bench's -c: "", "int8", "int8+ef", "topk+ef", ...
    seed: int = 0


class MLP:
    """Two layers, ReLU, softmax cross-entropy; parameters live in one flat buffer so that one
    allreduce moves every gradient (views keep the per-layer shapes)."""

    def __init__(self, s: Settings) -> None:
        shapes = [(s.features, s.hidden), (s.hidden,), (s.hidden, s.classes), (s.classes,)]
        sizes = [int(np.prod(shape)) for shape in shapes]
        self.flat = np.zeros(sum(sizes), np.float32)
        self.grad = np.zeros_like(self.flat)
        bounds = np.cumsum([0] + sizes)
        self.params = [self.flat[a:b].reshape(shape) for a, b, shape in zip(bounds, bounds[1:], shapes)]
        self.grads = [self.grad[a:b].reshape(shape) for a, b, shape in zip(bounds, bounds[1:], shapes)]
        rng = np.random.default_rng(s.seed)  # same seed on every rank: identical replicas
        self.params[0][...] = rng.standard_normal(shapes[0]) / np.sqrt(s.features)
        self.params[2][...] = rng.standard_normal(shapes[2]) / np.sqrt(s.hidden)

    def loss_and_grad(self, x: np.ndarray, y: np.ndarray) -> float:
        w1, b1, w2, b2 = self.params
        h = np.maximum(x @ w1 + b1, 0)
        logits = h @ w2 + b2
        logits -= logits.max(axis=1, keepdims=True)
        p = np.exp(logits)
        p /= p.sum(axis=1, keepdims=True)
        loss = float(-np.log(p[np.arange(len(y)), y] + 1e-12).mean())
        d = p
        d[np.arange(len(y)), y] -= 1
        d /= len(y)
        gw1, gb1, gw2, gb2 = self.grads
        gw2[...] = h.T @ d
        gb2[...] = d.sum(axis=0)
        dh = (d @ w2.T) * (h > 0)
        gw1[...] = x.T @ dh
        gb1[...] = dh.sum(axis=0)
        return loss


def batches(s: Settings, rank: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """This rank's shard of a fixed random teacher's labels (a learnable task)."""
    teacher = np.random.default_rng(1234).standard_normal((s.features, s.classes))
    rng = np.random.default_rng(1000 + rank)
    while True:
        x = rng.standard_normal((s.batch, s.features)).astype(np.float32)
        yield x, np.argmax(x @ teacher, axis=1)


def train(s: Settings, comm: MPI.Intracomm,
          emit: Callable[[str], object] = print) -> dict[str, Any]:
    """Run the training; return this rank's losses and timings (rank 0 prints every 10%)."""
    rank = comm.Get_rank()
    model = MLP(s)
    data = batches(s, rank)
    codec = codecs.parse(s.codec)  # one instance for the run: error feedback keeps its residual
    losses: list[float] = []
    compute = communicate = 0.0
    for step in range(s.steps):
        t0 = time.perf_counter()
        x, y = next(data)
        loss = model.loss_and_grad(x, y)
        t1 = time.perf_counter()
        api.allreduce(model.grad, model.grad, op="avg", algorithm=s.algorithm, comm=comm,
                      codec=codec)
        t2 = time.perf_counter()
        model.flat -= s.lr * model.grad
        compute, communicate = compute + t1 - t0, communicate + t2 - t1
        losses.append(loss)
        if rank == 0 and (step + 1) % max(1, s.steps // 10) == 0:
            emit(f"step {step + 1:5d}  loss {losses[-1]:.4f}")
    digests = comm.allgather(hashlib.sha256(model.flat.tobytes()).hexdigest())
    return {"losses": losses, "compute_s": compute, "allreduce_s": communicate,
            "replicas_identical": len(set(digests)) == 1, "parameters": model.flat.size}


def run_recorded(s: Settings, comm: MPI.Intracomm, emit: Callable[[str], object] = print
                 ) -> tuple[dict[str, Any], list[timing.Record]]:
    """``train`` with timing records on, for writing to HDF5."""
    with timing.recording() as rec:
        result = train(s, comm, emit)
    return result, rec.records
