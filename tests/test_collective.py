"""Which collective a call runs, as data (mpicoll.collective), and the registry by collective."""

import dataclasses

import pytest

import mpicoll
from mpicoll import collective
from mpicoll.algorithm import Algorithm, UnknownAlgorithmError, get, names, registered

pytestmark = pytest.mark.mpi_free


@pytest.mark.parametrize("p", [1, 2, 3, 4, 5, 6])
def test_counts_and_bus_factors_are_nccl_tests(p):
    """Per rank, blocks of n: allgather sends n and gets p·n, reduce_scatter the reverse; busbw
    factors as nccl-tests' (allreduce 2(p-1)/p, allgather and reduce_scatter (p-1)/p, rooted
    ones 1), algbw as it is on one rank; size = the larger buffer."""
    n = 7
    expected = {"allreduce": ((n, n), 2 * (p - 1) / p), "allgather": ((n, p * n), (p - 1) / p),
                "reduce_scatter": ((p * n, n), (p - 1) / p), "bcast": ((n, n), 1.0),
                "reduce": ((n, n), 1.0)}
    assert collective.names() == tuple(expected)
    for name, (counts, bus) in expected.items():
        c = collective.get(name)
        assert c.counts(n, p) == counts
        assert c.bus_factor(p) == pytest.approx(bus if p > 1 or c.rooted else 1.0)
        assert c.nbytes(n, p, 4) == 4 * max(counts)
    assert [c.name for c in map(collective.get, collective.names()) if c.reduces] == \
        ["allreduce", "reduce_scatter", "reduce"]
    assert collective.get(collective.REDUCE_SCATTER) is collective.REDUCE_SCATTER
    assert collective.REDUCE_SCATTER.mpi == "Reduce_scatter_block"


def test_unknown_collective_says_which_exist():
    with pytest.raises(ValueError, match="unknown collective 'alltoall'.*allgather"):
        collective.get("alltoall")
    with pytest.raises(ValueError, match="unknown collective"):
        names(collective="alltoall")
    with pytest.raises(ValueError, match="unknown collective"):
        dataclasses.replace(get("ring"), name="x", collectives=frozenset({"gather"}))


def test_the_registry_finds_algorithms_by_collective():
    """Allreduce is the default collective; ring and MPI's own two run allgather,
    reduce_scatter, bcast and reduce too, rd and bruck allgather, rabenseifner reduce_scatter,
    hybrid and shm every one, tree and binomial bcast and reduce, the others allreduce only
    (bruck and binomial not allreduce); asking a collective for an algorithm that does not run it says which do."""
    assert names() == names(collective="allreduce") == tuple(a.name for a in registered())
    assert mpicoll.algorithms() == names() + ("auto",) == mpicoll.algorithms("allreduce")
    assert "bruck" not in names() and "binomial" not in names()
    assert {a.name for a in registered(None) if a.collectives != {"allreduce"}} == \
        {"ring", "native", "native-blocking", "rd", "rabenseifner", "bruck", "hybrid", "tree",
         "binomial", "shm"}
    for blocks, runs in (("allgather", ("ring", "rd", "bruck", "hybrid", "shm", "native",
                                        "native-blocking")),
                         ("reduce_scatter", ("ring", "rabenseifner", "hybrid", "shm", "native",
                                             "native-blocking"))):
        assert names(collective=blocks) == runs == tuple(a.name for a in registered(blocks))
        assert mpicoll.algorithms(blocks) == runs + ("auto",)
        assert get("native", blocks) is get("native")
        with pytest.raises(UnknownAlgorithmError, match=f"{blocks} has no algorithm 'tree'"
                                                        f".*{', '.join(map(repr, runs))}, 'auto'"):
            get("tree", blocks)
    for rooted in ("bcast", "reduce"):
        runs = ("ring", "tree", "binomial", "hybrid", "shm", "native", "native-blocking")
        assert names(collective=rooted) == runs and mpicoll.algorithms(rooted) == runs + ("auto",)
        with pytest.raises(UnknownAlgorithmError, match=f"{rooted} has no algorithm 'rd'"):
            get("rd", rooted)
    assert isinstance(get("ring", "allreduce"), Algorithm)
