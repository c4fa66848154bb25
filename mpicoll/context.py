"""Per-communicator state: a private duplicate, the node layout, cached plans and message tags.

It is cached on the user's communicator as an MPI attribute, so it lives exactly as long as
that communicator and is freed with it. Using a duplicate keeps our messages apart from the
user's own traffic on the same communicator.
"""

from __future__ import annotations

import itertools
from collections import OrderedDict

import numpy as np
from mpi4py import MPI

from . import algorithm, topology
from .schedule import Schedule

__all__ = ["Context", "Plan", "of"]

MAX_PLANS = 64


class Plan:
    """A schedule for one (count, dtype size, options, codec) plus reusable scratch buffers,
    and the staging plan when device buffers go through host memory (see ``transport``)."""

    def __init__(self, schedule: Schedule):
        self.schedule = schedule
        self.staging = None
        self._spare: list[tuple[np.ndarray, np.ndarray]] = []

    def take_scratch(self, dtype: np.dtype, xp=np) -> tuple[np.ndarray, np.ndarray]:
        """(tmp, wire) in array module ``xp`` for one execution; several in flight at once each
        get their own."""
        for i, (tmp, wire) in enumerate(self._spare):
            if tmp.dtype == dtype and isinstance(tmp, xp.ndarray):
                return self._spare.pop(i)
        return xp.empty(self.schedule.tmp_count, dtype), xp.empty(self.schedule.wire_nbytes, np.uint8)

    def give_back(self, scratch: tuple[np.ndarray, np.ndarray]) -> None:
        self._spare.append(scratch)


class Context:
    def __init__(self, comm: MPI.Comm):
        self.comm = comm.Dup()
        self.rank = self.comm.Get_rank()
        self.size = self.comm.Get_size()
        self._topology = None
        self._plans: OrderedDict[tuple, Plan] = OrderedDict()
        self._tags = itertools.count()
        self._tag_ub = self.comm.Get_attr(MPI.TAG_UB)

    @property
    def topology(self) -> algorithm.Topology:
        if self._topology is None:  # collective, once; every rank reaches it on its first call
            nodes = topology.node_groups(self.comm)
            self._topology = algorithm.Topology(self.rank, self.size, nodes)
        return self._topology

    def plan(self, name: str, count: int, options: algorithm.Options, codec=None,
             feedback: bool = False, average: bool = False) -> Plan:
        """The cached plan (the MAX_PLANS most recently used are kept, with their scratch).

        ``codec`` is a dense codec whose frames the plan sizes its slots for; its configuration
        is part of the key.
        """
        config = None if codec is None else tuple(sorted(codec.get_config().items()))
        key = (name, count, options, config, feedback, average)
        plan = self._plans.get(key)
        if plan is None:
            frames = None if codec is None else algorithm.Frames(codec, np.dtype(options.dtype))
            schedule = algorithm.plan(name, self.topology, count, options, frames, feedback, average)
            plan = self._plans[key] = Plan(schedule)
            if len(self._plans) > MAX_PLANS:
                self._plans.popitem(last=False)
        else:
            self._plans.move_to_end(key)
        return plan

    def next_tag(self) -> int:
        """A fresh tag per collective: every rank starts collectives in the same order."""
        return next(self._tags) % self._tag_ub

    def free(self) -> None:
        if not MPI.Is_finalized():
            self.comm.Free()


def _delete(comm, keyval, ctx):
    ctx.free()


_KEYVAL = MPI.Comm.Create_keyval(delete_fn=_delete)


def of(comm: MPI.Comm) -> Context:
    """The context of ``comm``, created (collectively) on first use."""
    ctx = comm.Get_attr(_KEYVAL)
    if ctx is None:
        ctx = Context(comm)
        comm.Set_attr(_KEYVAL, ctx)
    return ctx
