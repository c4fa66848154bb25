"""Per-communicator state: a private duplicate, the node layout, cached plans and message tags.

It is cached on the user's communicator as an MPI attribute, so it lives exactly as long as
that communicator and is freed with it. Using a duplicate keeps our messages apart from the
user's own traffic on the same communicator.
"""

from __future__ import annotations

import itertools
from collections import OrderedDict
from typing import Any

import numpy as np
from mpi4py import MPI

from . import topology
from .algorithm import Algorithm, Frames, Layout, Options, build_schedule
from .codecs import Codec
from .schedule import Schedule

__all__ = ["Context", "CachedPlan", "of"]

MAX_PLANS = 64


class CachedPlan:
    """A schedule for one (algorithm, count, options, codec) plus reusable scratch buffers,
    and the staging plan when device buffers go through host memory (see ``transport``)."""

    def __init__(self, schedule: Schedule):
        self.schedule = schedule
        self.staging: Any = None
        self._spare: list[tuple[Any, Any]] = []

    def take_scratch(self, dtype: np.dtype, xp: Any = np) -> tuple[Any, Any]:
        """(tmp, wire) in array module ``xp`` for one execution; several in flight at once each
        get their own."""
        for i, (tmp, wire) in enumerate(self._spare):
            if tmp.dtype == dtype and isinstance(tmp, xp.ndarray):
                return self._spare.pop(i)
        return xp.empty(self.schedule.tmp_count, dtype), xp.empty(self.schedule.wire_nbytes, np.uint8)

    def give_back(self, scratch: tuple[Any, Any]) -> None:
        self._spare.append(scratch)


class Context:
    def __init__(self, comm: MPI.Intracomm):
        self.comm = comm.Dup()
        self.rank = self.comm.Get_rank()
        self.size = self.comm.Get_size()
        self._layout: Layout | None = None
        self._plans: OrderedDict[tuple, CachedPlan] = OrderedDict()
        self._tags = itertools.count()
        # The standard guarantees TAG_UB on COMM_WORLD only (Open MPI leaves it unset on
        # duplicates and splits), and guarantees it is at least 32767.
        self._tag_ub: int = self.comm.Get_attr(MPI.TAG_UB) or MPI.COMM_WORLD.Get_attr(MPI.TAG_UB) \
            or 32767

    @property
    def layout(self) -> Layout:
        if self._layout is None:  # collective, once; every rank reaches it on its first call
            self._layout = Layout(self.rank, self.size, topology.node_groups(self.comm))
        return self._layout

    def cached_plan(self, algorithm: Algorithm, count: int, options: Options,
                    codec: Codec | None = None, feedback: bool = False,
                    average: bool = False) -> CachedPlan:
        """The cached plan (the MAX_PLANS most recently used are kept, with their scratch).

        ``codec`` is a dense codec whose frames the plan sizes its slots for; its configuration
        is part of the key.
        """
        config = None if codec is None else tuple(sorted(codec.get_config().items()))
        key = (algorithm.name, count, options, config, feedback, average)
        plan = self._plans.get(key)
        if plan is None:
            frames = None if codec is None else Frames(codec, np.dtype(options.dtype))
            schedule = build_schedule(algorithm, self.layout, count, options, frames, feedback,
                                      average)
            plan = self._plans[key] = CachedPlan(schedule)
            if len(self._plans) > MAX_PLANS:
                self._plans.popitem(last=False)
        else:
            self._plans.move_to_end(key)
        return plan

    def next_tags(self, count: int) -> tuple[int, ...]:
        """Fresh tags for one collective (one per stage): every rank starts collectives in the
        same order, so all take the same."""
        if count == 1:
            return (next(self._tags) % self._tag_ub,)
        return tuple(next(self._tags) % self._tag_ub for _ in range(count))

    def free(self) -> None:
        if not MPI.Is_finalized():
            self.comm.Free()


def _delete(comm: MPI.Comm, keyval: int, ctx: Context) -> None:
    ctx.free()


_KEYVAL = MPI.Comm.Create_keyval(delete_fn=_delete)


def of(comm: MPI.Intracomm) -> Context:
    """The context of ``comm``, created (collectively) on first use."""
    ctx = comm.Get_attr(_KEYVAL)
    if not isinstance(ctx, Context):
        ctx = Context(comm)
        comm.Set_attr(_KEYVAL, ctx)
    return ctx
