"""Which ranks share a node: from MPI's shared-memory split, or emulated with an environment variable."""

from __future__ import annotations

from mpi4py import MPI

from . import _env

__all__ = ["blocks", "node_groups", "RANKS_PER_NODE_ENV"]

RANKS_PER_NODE_ENV = "MPICOLL_RANKS_PER_NODE"


def blocks(size: int, per_node: int) -> tuple[tuple[int, ...], ...]:
    """``size`` ranks placed ``per_node`` at a time on consecutive nodes, as ``mpiexec`` places
    them by default (the last node takes what is left)."""
    return tuple(tuple(range(lo, min(lo + per_node, size))) for lo in range(0, size, per_node))


def node_groups(comm: MPI.Comm) -> tuple[tuple[int, ...], ...]:
    """Ranks of ``comm`` grouped by node, groups ordered by their lowest rank. Collective.

    ``MPICOLL_RANKS_PER_NODE=k`` puts ranks 0..k-1 on node 0, k..2k-1 on node 1 and so on, so
    one machine can stand in for several nodes in tests and benchmarks.
    """
    size = comm.Get_size()
    k = _env.positive_int(RANKS_PER_NODE_ENV)
    if k:
        return blocks(size, k)
    local = comm.Split_type(MPI.COMM_TYPE_SHARED)
    try:
        leader = local.bcast(comm.Get_rank(), root=0)
    finally:
        local.Free()
    leaders = comm.allgather(leader)
    groups: dict[int, list[int]] = {}
    for rank, lead in enumerate(leaders):
        groups.setdefault(lead, []).append(rank)
    return tuple(tuple(g) for g in sorted(groups.values()))
