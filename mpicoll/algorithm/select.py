"""Which algorithm a call runs: ``auto``'s choice, and the reroutes a codec or an op needs."""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from .. import costmodel, tuning
from .._mpi import threads_allow
from .base import Algorithm, Layout
from . import registry
from .registry import AUTO, get, registered

__all__ = ["choose", "predictions", "resolve", "shortlist", "size_class", "accepts",
           "codec_kind", "SHORTLIST", "OWN_UP_TO"]


def size_class(nbytes: int) -> int:
    """The power of two at or above ``nbytes``: ``auto`` decides once per such class."""
    return 1 << max(nbytes - 1, 0).bit_length()


def choose(nbytes: int, layout: Layout, among: tuple[str, ...] | None = None,
           itemsize: int = 4) -> str:
    """The algorithm of ``among`` (default: every one ``tune`` measures) predicted fastest for
    ``nbytes`` on this layout (:mod:`mpicoll.costmodel`; ``$MPICOLL_TUNING``'s model if set),
    or, on the layout that model's ``tune`` run measured, what it measured fastest.

    A lone rank only copies: ring's schedule is that copy. Sizes are taken in classes of powers
    of two, so that a program with many sizes predicts a few dozen times, not once per size.
    """
    if layout.size == 1:
        return "ring"
    if among is None:
        among = tuning.candidates(len(layout.nodes))
    return _fastest(among, size_class(nbytes), layout.nodes, itemsize, tuning.model_in_force())


def predictions(nbytes: int, layout: Layout, among: tuple[str, ...], itemsize: int = 4
                ) -> dict[str, float]:
    """Predicted seconds of each of ``among``, as ``auto`` predicts them (what ``info`` prints)."""
    model = tuning.model_in_force()
    return {name: costmodel.predict(name, nbytes, layout.nodes, model, itemsize,
                                    costmodel.AUTO_EVENTS) for name in among}


@lru_cache(maxsize=1024)
def _fastest(among: tuple[str, ...], nbytes: int, nodes: tuple[tuple[int, ...], ...],
             itemsize: int, model: costmodel.Model) -> str:
    measured = model.measured_pick(nbytes, sum(map(len, nodes)), len(nodes), among)
    if measured is not None:
        return measured  # the layout tune measured: what it found beats any prediction
    times = {name: costmodel.predict(name, nbytes, nodes, model, itemsize, costmodel.AUTO_EVENTS)
             for name in among}
    return min(among, key=times.__getitem__)  # ties: the first registered


SHORTLIST = (5, 4.0)
"""What ``auto`` tries in real calls (:mod:`mpicoll.trials`): MPI's own, both its calls where
both may run (the reference: so ``auto`` is never slower than it by more than the
measurement's noise; and which of the two is faster depends on the size and the library), and
at most 5 of the other candidates, those predicted within 4× of the fastest prediction."""


OWN_UP_TO = 8 << 10
"""Up to this many bytes ``auto`` tries MPI's own two calls only (unless the model predicts
them more than the shortlist's factor slower than another): no Python schedule beats MPI's C
there by more than a few per cent (docs/performance.md), but which of its calls is faster
depends on the size (MPICH, 2 ranks: ``MPI_Iallreduce`` and a wait 0.77-0.90× the blocking
call at 64-512 B, 1.1× at 8 B). Each trial there is a sample of calls back to back
(``api._sampled``): single calls of a few microseconds, timed between the trials' Python,
ranked ``tree`` first at 8 B where it ran 3.65× MPI's own (Open MPI, 4 ranks on 2 cores)."""


def shortlist(nbytes: int, layout: Layout, commutative: bool = True, itemsize: int = 4,
              native: bool = True) -> tuple[str, ...]:
    """What ``auto`` tries for a call without a codec (:data:`SHORTLIST`), MPI's own first; one
    name where there is nothing to try: a lone rank, a size up to :data:`OWN_UP_TO`, a size
    ``tune`` measured on this layout."""
    if layout.size == 1:
        return ("ring",)
    among = _candidates(len(layout.nodes), commutative, None, native, threads_allow(),
                        registry.generation())
    return _shortlist(among, size_class(nbytes), layout.nodes, itemsize,
                      tuning.model_in_force())


@lru_cache(maxsize=1024)
def _shortlist(among: tuple[str, ...], nbytes: int, nodes: tuple[tuple[int, ...], ...],
               itemsize: int, model: costmodel.Model) -> tuple[str, ...]:
    measured = model.measured_pick(nbytes, sum(map(len, nodes)), len(nodes), among)
    if measured is not None:
        return (measured,)  # the layout tune measured: what it found
    times = {name: costmodel.predict(name, nbytes, nodes, model, itemsize, costmodel.AUTO_EVENTS)
             for name in among}
    most, within = SHORTLIST
    best = min(times.values())
    own = sorted((name for name in among if costmodel.mpi_own(name)),
                 key=lambda name: not get(name).blocks)  # (the blocking call first)
    if nbytes <= OWN_UP_TO:  # (unless the model, a tuned one, says MPI's own is far slower)
        near = [name for name in own if times[name] <= within * best]
        return tuple(near) if near else (min(among, key=times.__getitem__),)
    others = sorted((name for name in among
                     if not costmodel.mpi_own(name) and times[name] <= within * best),
                    key=times.__getitem__)[:most]
    return (*own, *others) if own or len(others) > 1 else (min(among, key=times.__getitem__),)


def codec_kind(codec: Any) -> str | None:
    """"dense" (frame size fixed by the count), "sparse", or None without a codec."""
    if codec is None:
        return None
    return "dense" if codec.dense else "sparse"


def accepts(algorithm: Algorithm, codec_kind: str | None) -> bool:
    """Whether ``algorithm=`` may name this algorithm with a codec of this kind (None: no codec).

    A sparse codec goes to a sparse algorithm whatever was asked (its frames cannot be reduced
    hop by hop), so any algorithm that compresses accepts one.
    """
    if codec_kind is None:
        return algorithm.plain
    return codec_kind in algorithm.compresses or (codec_kind == "sparse" and bool(algorithm.compresses))


def resolve(asked: Algorithm | str | None, nbytes: int, layout: Layout, codec_kind: str | None,
            commutative: bool = True, itemsize: int = 4, native: bool = True) -> Algorithm:
    """The algorithm that runs when ``asked`` (an algorithm or its name that :func:`accepts` the
    codec; None or "auto" for auto) is asked for. ``native``: whether MPI's own may run this
    call (host memory or a CUDA-aware MPI, and a dtype it reduces as mpicoll does).

    Decided from what every rank knows alike (sizes, layout, codec kind), so all agree.
    """
    if isinstance(asked, str):
        asked = None if asked == AUTO else get(asked)
    nodes = len(layout.nodes)
    if codec_kind == "sparse" and layout.size > 1:
        if asked is not None and "sparse" in asked.compresses:
            return asked
        return _fitting(nodes, commutative, lambda a: "sparse" in a.compresses)[0]
    if asked is not None:
        return asked
    among = _candidates(nodes, commutative, codec_kind, native, threads_allow(),
                        registry.generation())
    return get(choose(nbytes, layout, among, itemsize))


@lru_cache(maxsize=64)
def _candidates(nodes: int, commutative: bool, codec_kind: str | None, native: bool,
                threads: bool, generation: int) -> tuple[str, ...]:
    """What ``auto`` chooses among, worked out once per kind of call, not per call
    (``threads``: a helper thread may block in MPI; ``generation``: the registry's, which a
    registration changes)."""
    one_node = nodes == 1
    return tuple(a.name for a in _fitting(
        nodes, commutative, lambda a: accepts(a, codec_kind)
        and (a.plan is not None or (native and a.mpi and (threads or not a.blocks)))
        and not (codec_kind and one_node and not a.compresses_in_node)))


def _fitting(nodes: int, commutative: bool, wanted: Any) -> list[Algorithm]:
    found = [a for a in registered() if wanted(a) and not (a.needs_commutative and not commutative)
             and not (a.one_node and nodes > 1)]
    if not found:
        raise ValueError("no registered algorithm can run this call")
    return found
