"""The contract every allreduce algorithm follows, and what all of them share.

An algorithm is an :class:`Algorithm` value: a name, a ``plan`` that appends this rank's rounds
to a :class:`~mpicoll.schedule.Builder`, and the capabilities the API, ``auto``, bench, tune and
the tests read instead of checking names (Gloo's one ``Algorithm`` contract; Horovod's
per-op ``Enabled()``). Plans are cached per shape and run by the engine; an algorithm whose
rounds depend on the data (sparse frames, whose sizes are known only once encoded) supplies
``run`` instead, a generator of executions built on the same schedules
(:mod:`mpicoll.execution`). Nothing here runs anything: no MPI, no communicator.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterator, Protocol

import numpy as np

from .. import collective
from ..schedule import Builder, BufferName, Copy, Recv, Reduce, Region, Scale, Schedule, Send, Zero

if TYPE_CHECKING:
    from ..codecs import Codec

__all__ = ["Algorithm", "Layout", "Options", "Frames", "build_schedule", "prologue",
           "block_bounds", "from_rank_zero"]


@dataclass(frozen=True)
class Layout:
    """Where this rank sits: its rank, the group size, and the ranks of every node in order."""

    rank: int
    size: int
    nodes: tuple[tuple[int, ...], ...]


@dataclass(frozen=True)
class Options:
    """Tunables that change a plan (and so belong to its cache key), and the collective it
    serves (:mod:`mpicoll.collective`: what ``send`` and ``recv`` hold), with its blocks where
    they are uneven (``counts``: each rank's, in rank order; None: equal) and the root of a
    rooted one."""

    segment_bytes: int
    dtype: str
    collective: str = collective.ALLREDUCE.name
    counts: tuple[int, ...] | None = None
    root: int = 0

    @property
    def segment(self) -> int:
        """Tree segment in elements (at least one)."""
        return max(1, self.segment_bytes // np.dtype(self.dtype).itemsize)


@dataclass(frozen=True)
class Frames:
    """How big a dense codec's frame of n elements is: what a compressed plan sizes slots by."""

    codec: Codec
    dtype: np.dtype

    def nbytes(self, count: int) -> int:
        return self.codec.max_frame_nbytes(count, self.dtype)


class PlanFn(Protocol):
    def __call__(self, b: Builder, layout: Layout, count: int, options: Options, src: BufferName,
                 frames: Frames | None) -> None: ...


@dataclass(frozen=True)
class Algorithm:
    """An allreduce algorithm and what it can do.

    Args:
        name: what ``algorithm=`` takes.
        summary: one line for ``info`` and the docs.
        plan: appends this rank's rounds for ``[0, count)`` of ``src`` (see :func:`build_schedule`).
        run: replaces the cached-plan execution when the rounds depend on the data.
        compresses: the codec kinds it runs, ``"dense"`` and/or ``"sparse"``.
        plain: whether it runs without a codec.
        needs_commutative: whether it reorders operands (a ring starts each chunk elsewhere).
        one_node: whether every rank must share one node.
        across_nodes: whether it only differs from the others across nodes (on one node it
            runs shm's or ring's plan): ``auto``'s trials leave it out there.
        compresses_in_node: whether a codec compresses messages inside a node too (hybrid's
            only travel between nodes: on one node it runs plain).
        tunables: environment variables that change its plans.
        tags: message tags one call takes (each stage of a multi-stage run needs its own).
        mpi: the MPI library's own allreduce (no schedule: the cost model predicts it as MPI's
            usual algorithms).
        blocks: its blocking calls block in an MPI collective, which never matches a
            nonblocking one: whether a call blocks is compared by the fingerprint check.
        collectives: the collectives it runs (:mod:`mpicoll.collective`'s names); the registry
            finds an algorithm by collective and name.
    """

    name: str
    summary: str
    plan: PlanFn | None = None
    run: Callable[[Algorithm, Any], Iterator[Any]] | None = None  # (Call -> Stages, Ran)
    compresses: frozenset[str] = frozenset()
    plain: bool = True
    needs_commutative: bool = False
    one_node: bool = False
    across_nodes: bool = False
    compresses_in_node: bool = True
    tunables: tuple[str, ...] = ()
    tags: int = 1
    mpi: bool = False
    blocks: bool = False
    collectives: frozenset[str] = frozenset({collective.ALLREDUCE.name})

    def __post_init__(self) -> None:
        for name in self.collectives:
            collective.get(name)  # ValueError: not a collective
        if (self.plan is None) == (self.run is None):
            raise ValueError(f"algorithm {self.name!r}: give exactly one of plan and run")
        if not self.compresses <= {"dense", "sparse"}:
            raise ValueError(f"algorithm {self.name!r}: compresses {set(self.compresses)}, "
                             "expected 'dense' and/or 'sparse'")


def prologue(b: Builder, size: int, count: int, feedback: bool, average: bool,
             into: BufferName = "recv") -> BufferName:
    """Prepare this rank's contribution in ``into`` (``recv``; ``tmp`` where ``recv`` is
    smaller than the input, a reduce_scatter's) when it is not ``send`` as given; return where
    it now is.

    An average divides by p first; error feedback then adds what earlier calls still owe (in the
    units that travel, so divided ones for an average) and starts owing anew.
    """
    src: BufferName = "send"
    everything = (0, count)
    if into == "tmp" and (average or feedback):
        b.tmp(count)
    if average:
        b.round(local=[Scale(Region(into, *everything), Region("send", *everything), 1 / size)])
        src = into
    if feedback:
        b.round(local=[Reduce(Region(into, *everything), Region(src, *everything),
                              Region("residual", *everything)), Zero(Region("residual", *everything))])
        src = into
    return src


def block_bounds(options: Options, count: int, p: int) -> list[tuple[int, int]]:
    """Rank i's block ``[start, stop)`` of an allgather's ``recv`` or a reduce_scatter's input:
    ``count`` is this rank's block (allgather) or every block (reduce_scatter), uneven blocks
    are ``options.counts``."""
    sizes = options.counts or (count if options.collective == "allgather" else count // p,) * p
    return list(zip(itertools.accumulate(sizes, initial=0), itertools.accumulate(sizes)))


def from_rank_zero(b: Builder, me: int, root: int, count: int) -> None:
    """A reduce made on rank 0 (trees that keep rank order, so any op reduces as MPI's does),
    sent on to a ``root`` other than 0: one more message."""
    if root and me in (0, root):
        whole = Region("recv", 0, count)
        b.round([Send(root, whole) if me == 0 else Recv(0, whole)])


def build_schedule(algorithm: Algorithm, layout: Layout, count: int, options: Options,
                   frames: Frames | None = None, feedback: bool = False,
                   average: bool = False) -> Schedule:
    """The schedule of ``algorithm`` for this rank: the shared prologue, then its own rounds
    (``mpicoll.algorithm.build_schedule`` also takes a registered name).

    A lone rank only copies its input: there is nothing to add, nothing to compress (and a
    bcast's input is its output already).
    """
    if algorithm.plan is None:
        raise ValueError(f"{algorithm.name} has no fixed plan: its rounds depend on the data")
    if frames is not None and "dense" not in algorithm.compresses:
        raise ValueError(f"{algorithm.name} does not compress with dense codecs")
    b = Builder()
    smaller = options.collective == collective.REDUCE_SCATTER.name and layout.size > 1
    src = prologue(b, layout.size, count, feedback, average, "tmp" if smaller else "recv")
    if layout.size == 1:
        if src == "send" and options.collective != "bcast":
            b.round(local=[Copy(Region("recv", 0, count), Region("send", 0, count))])
    else:
        algorithm.plan(b, layout, count, options, src, frames)
    return b.build(algorithm.name, count)
