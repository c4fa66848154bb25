"""Which collective a call runs, as data: what each rank gives and gets, whether it reduces or
has a root, MPI's own call for it, and how nccl-tests counts its bandwidth.

Algorithms declare the collectives they plan (``Algorithm.collectives``) and the registry finds
an algorithm by collective and name; everything that exists so far is ``allreduce``. Counts are
per rank and in elements: ``n`` is a block, what one rank contributes to (or gets of) the
result, as in ``MPI_Allgather``'s and ``MPI_Reduce_scatter_block``'s counts.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Collective", "ALLREDUCE", "ALLGATHER", "REDUCE_SCATTER", "BCAST", "REDUCE", "get",
           "names"]


@dataclass(frozen=True)
class Collective:
    """One collective.

    Args:
        name: what the API and ``algorithms(collective=...)`` call it.
        reduces: whether it combines the ranks' data with an op.
        rooted: whether one rank (the root) is where the data starts or ends.
        mpi: the stem of MPI's own call (``MPI_{mpi}``, ``MPI_I...`` and ``MPI_{mpi}_init``).
        sends_all, receives_all: whether a rank's send or receive buffer holds a block per rank
            (``p`` blocks of ``n`` elements) rather than one.
    """

    name: str
    reduces: bool
    rooted: bool
    mpi: str
    sends_all: bool = False
    receives_all: bool = False

    def counts(self, n: int, p: int) -> tuple[int, int]:
        """Elements a rank sends and receives for blocks of ``n`` elements on ``p`` ranks."""
        return n * p if self.sends_all else n, n * p if self.receives_all else n

    def nbytes(self, n: int, p: int, itemsize: int) -> int:
        """nccl-tests' "size" of a call: the larger of its send and receive buffers."""
        return max(self.counts(n, p)) * itemsize

    def bus_factor(self, p: int) -> float:
        """nccl-tests' busbw / algbw, what each link carries of the size, comparable across
        collectives: 2(p-1)/p for allreduce (a reduce-scatter, then an allgather), (p-1)/p for
        allgather and reduce_scatter, 1 for the rooted ones (and on one rank, where nothing
        travels: algbw as it is)."""
        if self.rooted or p < 2:
            return 1.0
        halves = 1 if self.sends_all or self.receives_all else 2
        return halves * (p - 1) / p


ALLREDUCE = Collective("allreduce", reduces=True, rooted=False, mpi="Allreduce")
ALLGATHER = Collective("allgather", reduces=False, rooted=False, mpi="Allgather",
                       receives_all=True)
REDUCE_SCATTER = Collective("reduce_scatter", reduces=True, rooted=False,
                            mpi="Reduce_scatter_block", sends_all=True)
BCAST = Collective("bcast", reduces=False, rooted=True, mpi="Bcast")
REDUCE = Collective("reduce", reduces=True, rooted=True, mpi="Reduce")

_BY_NAME = {c.name: c for c in (ALLREDUCE, ALLGATHER, REDUCE_SCATTER, BCAST, REDUCE)}


def get(name: str | Collective) -> Collective:
    """The collective called ``name`` (a :class:`Collective` as it is); ValueError names the
    known ones."""
    if isinstance(name, Collective):
        return name
    found = _BY_NAME.get(name) if isinstance(name, str) else None
    if found is None:
        raise ValueError(f"unknown collective {name!r}; choose one of {names()}")
    return found


def names() -> tuple[str, ...]:
    """Every collective mpicoll names, allreduce first."""
    return tuple(_BY_NAME)
