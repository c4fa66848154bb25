"""What an allreduce will cost: every rank's schedule run against an α-β-γ model of the machine.

``auto`` picks the algorithm with the lowest prediction, MPI's own included, for the size,
ranks and node layout at hand — also for layouts nobody measured, since the schedules say what
travels where. Per transport level (same node, across nodes) a message of b bytes costs
α + b·β, and reducing or copying b bytes costs b·γ. Each algorithm then has two fitted figures
of its own: its Python overhead per round (``native``: per call), and how far its bytes run
slower than the plain link's (a factor on β and γ: extra copies, MPI's shared-memory cells).
``native`` takes the shape of the better of MPI's usual two, recursive doubling and
Rabenseifner. ``mpicoll tune`` measures α, β, γ and fits the per-algorithm figures on the
machine at hand; without a tuning file the :data:`BUILTIN` figures apply.

The schedules run as in :mod:`mpicoll.simulate`, with clocks instead of data: a round starts
after the rank's previous one plus the overhead; a message arrives once both ends have posted
it, α + β per byte later (a rank's sends in one round leave one after another); a round ends
with its last arrival, then its local steps take γ per byte. A barrier of a node (shared
memory) ends α after the last of its ranks entered it.
"""

from __future__ import annotations

from collections import defaultdict, deque
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

from typing import TYPE_CHECKING

from .schedule import Copy, Reduce, Scale, Schedule, Send

if TYPE_CHECKING:
    from .algorithm import Algorithm, Options

__all__ = ["Model", "BUILTIN", "EMULATED_1G", "GPU_CLUSTER", "PRESETS", "NATIVE_SHAPES",
           "predict", "components", "exact", "fit_algorithm"]

NATIVE_SHAPES = ("rd", "rabenseifner")
"""What ``native`` is predicted as: MPICH's and Open MPI's usual short- and long-message
algorithms, the better of the two."""


@dataclass(frozen=True)
class Model:
    """Seconds: ``alpha`` per message and ``beta`` per byte by level ("local": within a node,
    "remote": across nodes), ``gamma`` per byte reduced or copied; ``algorithms`` maps a name
    to (overhead in seconds per round — per call for ``native`` —, factor on β and γ).

    ``measured`` holds what ``tune`` found fastest per size, (bytes, name), on the layout
    ``measured_on`` (ranks, nodes): on that layout a measurement beats any prediction.
    ``nics``: how many links a node's cross-node messages share (ranks of one node behind one
    NIC queue for it); 0 gives each rank a link of its own."""

    alpha: dict[str, float]
    beta: dict[str, float]
    gamma: float
    algorithms: dict[str, tuple[float, float]] = field(default_factory=dict)
    source: str = "built in"
    measured: tuple[tuple[int, str], ...] = ()
    measured_on: tuple[int, int] | None = None
    nics: int = 0  # links a node's cross-node messages share (0: one per rank, no contention)

    def __hash__(self) -> int:
        return hash((tuple(sorted(self.alpha.items())), tuple(sorted(self.beta.items())),
                     self.gamma, tuple(sorted(self.algorithms.items())), self.source,
                     self.measured, self.measured_on, self.nics))

    def measured_pick(self, nbytes: int, ranks: int, nodes: int, among: tuple[str, ...]
                      ) -> str | None:
        """What ``tune`` measured fastest at the size nearest ``nbytes`` (within a factor of 2),
        if this is the layout it measured and that algorithm may run; else None."""
        if self.measured_on != (ranks, nodes) or not self.measured:
            return None
        size, name = min(self.measured, key=lambda m: abs(np.log2(m[0] / max(nbytes, 1))))
        near = 0.5 <= size / max(nbytes, 1) <= 2
        return name if near and name in among else None

    def of(self, name: str) -> tuple[float, float]:
        """(overhead, factor) of ``name``; an algorithm never measured gets the mean of those
        that were (a new one is Python like the others)."""
        if name in self.algorithms:
            return self.algorithms[name]
        mine = [v for k, v in self.algorithms.items() if k != "native"] or [(0.0, 1.0)]
        return (float(np.mean([o for o, _ in mine])), float(np.mean([f for _, f in mine])))


BUILTIN = Model(
    # Fitted on the 2-core development machine (MPICH 5.0.2 wheel, one node, one rank per
    # core) by `mpiexec -n 2 python -m mpicoll tune -m 8:64M -f 2 -i 10` (docs/results.md).
    # "remote" is not measured there: a 1 Gbit/s link's β and a TCP round trip's α, as the
    # emulated cluster has them (docs/cluster.md).
    alpha={"local": 2.13e-06, "remote": 60e-6},
    beta={"local": 9.69e-11, "remote": 8.4e-9},
    gamma=3.14e-11,
    algorithms={"ring": (6.37e-07, 1.51),
                "tree": (7.26e-07, 1.16),
                "rd": (1.51e-06, 1.3),
                "rabenseifner": (6.53e-07, 1.4),
                "hybrid": (6.35e-07, 1.42),
                "native": (3.75e-07, 1.83)},
)


EMULATED_1G = Model(
    alpha={"local": BUILTIN.alpha["local"], "remote": BUILTIN.alpha["remote"]},
    beta={"local": BUILTIN.beta["local"], "remote": 8 / 0.96e9},
    gamma=BUILTIN.gamma, algorithms=dict(BUILTIN.algorithms), nics=1,
    source="the emulated cluster: this machine's figures inside a host; between hosts one "
           "1 Gbit/s tbf link per host, shared by its ranks (0.96 Gbit/s measured for one TCP "
           "stream, ../shared/notes/emulated-cluster.md), MPICH over TCP's latency")
"""The emulated cluster of docs/cluster.md: hosts of this machine behind 1 Gbit/s links."""

GPU_CLUSTER = Model(
    alpha={"local": 3e-6, "remote": 5e-6},
    beta={"local": 1 / 450e9, "remote": 1 / 50e9},
    gamma=1 / 1.1e12, algorithms={name: (overhead, 1.0)
                                  for name, (overhead, _) in BUILTIN.algorithms.items()},
    nics=8,
    source="a DGX H100-like node (NVIDIA's datasheet): 8 GPUs on NVLink 4 (900 GB/s per GPU "
           "both ways: 450 GB/s each way), one 400 Gbit/s ConnectX-7 NIC per GPU (50 GB/s), "
           "reduction at a third of HBM3's 3.35 TB/s (two reads, one write); latencies "
           "assumed (3 µs NVLink, 5 µs InfiniBand); this machine's Python overhead per round")
"""A typical GPU cluster, from vendor figures: what mpicoll's schedules would cost there if
messages moved at the links' rates (no codec, no GPU kernels' launch latency)."""

PRESETS = {"this-machine": BUILTIN, "emulated-1g": EMULATED_1G, "gpu-cluster": GPU_CLUSTER}


def schedule_time(schedules: list[Schedule], itemsize: int, node_of: list[int],
                  alpha: dict[str, float], beta: dict[str, float], gamma: float,
                  overhead: float, nics: int = 0) -> float:
    """Seconds until the last rank finishes ``schedules`` (one per rank). With ``nics``, a
    node's cross-node messages leave through that many links, each one message at a time
    (reserved in the order the ranks post them)."""
    size = len(schedules)
    links: dict[int, list[float]] = defaultdict(lambda: [0.0] * nics)  # when each is free
    clock = [0.0] * size
    position = [0] * size
    posted: list[float | None] = [None] * size
    channels: dict[tuple[int, int], deque[tuple[float, float]]] = defaultdict(deque)
    arrived: list[list[float]] = [[] for _ in range(size)]  # when each barrier was entered
    while True:
        moved = False
        for r in range(size):
            rounds = schedules[r].rounds
            if position[r] == len(rounds):
                continue
            rnd = rounds[position[r]]
            start = posted[r]
            if start is None:
                start = posted[r] = clock[r] + overhead
                queued = 0.0
                for t in rnd.transfers:
                    if isinstance(t, Send):
                        level = "local" if node_of[r] == node_of[t.peer] else "remote"
                        busy = len(t.region) * itemsize * beta[level]
                        if level == "remote" and nics:  # the node's link, shared
                            free = links[node_of[r]]
                            k = min(range(nics), key=free.__getitem__)
                            leave = max(start, free[k])
                            free[k] = leave + busy
                            channels[(r, t.peer)].append((leave, busy + alpha[level]))
                            continue
                        queued += busy
                        channels[(r, t.peer)].append((start, queued + alpha[level]))
                if rnd.sync:
                    arrived[r].append(start)
                moved = True
            wanted: dict[int, int] = defaultdict(int)
            for t in rnd.transfers:
                if not isinstance(t, Send):
                    wanted[t.peer] += 1
            if any(len(channels[(peer, r)]) < n for peer, n in wanted.items()):
                continue
            end = start
            if rnd.sync:  # a barrier of the node: once all are in, a message's latency later
                k = len(arrived[r])
                node = schedules[r].node
                if any(len(arrived[q]) < k for q in node):
                    continue
                end = max(arrived[q][k - 1] for q in node) + alpha["local"]
            for t in rnd.transfers:
                if not isinstance(t, Send):
                    sent, travel = channels[(t.peer, r)].popleft()
                    end = max(end, max(sent, start) + travel)
            local = sum(len(s.dst) for s in rnd.local if isinstance(s, (Reduce, Copy, Scale)))
            clock[r] = end + local * itemsize * gamma
            position[r] += 1
            posted[r] = None
            moved = True
        if all(position[r] == len(schedules[r].rounds) for r in range(size)):
            return max(clock)
        if not moved:
            raise RuntimeError("the schedules deadlock")  # the simulator's tests rule this out


def predict(name: str, nbytes: int, nodes: tuple[tuple[int, ...], ...], model: Model,
            itemsize: int = 4) -> float:
    """Predicted seconds of algorithm ``name`` for ``nbytes`` on ranks laid out as ``nodes``."""
    overhead, factor = model.of(name)
    if name == "native":
        latency, bandwidth, _ = _native_components(nbytes, nodes, model, itemsize)
        return latency + factor * bandwidth + overhead
    latency, bandwidth, rounds = components(name, nbytes, nodes, model, itemsize)
    return latency + factor * bandwidth + overhead * rounds


@lru_cache(maxsize=4096)
def components(name: str, nbytes: int, nodes: tuple[tuple[int, ...], ...], model: Model,
               itemsize: int = 4) -> tuple[float, float, float]:
    """Seconds of latency (α only), of bytes (β and γ only) and rounds on the critical path of
    algorithm ``name``: a prediction is latency + factor·bytes + overhead·rounds."""
    from .algorithm import Layout, build_schedule, get
    if name == "native":
        return _native_components(nbytes, nodes, model, itemsize)
    size = sum(map(len, nodes))
    node_of = [0] * size
    for n, ranks in enumerate(nodes):
        for r in ranks:
            node_of[r] = n
    options = _options(itemsize)
    count = max(1, nbytes // itemsize)
    algorithm = get(name)
    first = build_schedule(algorithm, Layout(0, size, nodes), count, options)
    if not _events(size, first):
        return _lockstep(algorithm, count, nodes, node_of, options, model, itemsize)
    schedules = [first] + [build_schedule(algorithm, Layout(r, size, nodes), count, options)
                           for r in range(1, size)]
    none = {"local": 0.0, "remote": 0.0}
    return (schedule_time(schedules, itemsize, node_of, model.alpha, none, 0.0, 0.0),
            schedule_time(schedules, itemsize, node_of, none, model.beta, model.gamma, 0.0,
                          model.nics),
            schedule_time(schedules, itemsize, node_of, none, none, 0.0, 1.0))


EVENTS = 300_000
"""Rounds of all ranks together up to which :func:`components` runs every rank's schedule
(for at most :data:`EVENT_RANKS` ranks); beyond, it estimates in lockstep (:func:`_lockstep`)."""
EVENT_RANKS = 1024


def _events(size: int, first: Schedule) -> bool:
    return size <= EVENT_RANKS and size * max(len(first.rounds), 1) <= EVENTS


def exact(name: str, nbytes: int, nodes: tuple[tuple[int, ...], ...], itemsize: int = 4) -> bool:
    """Whether :func:`components` runs every rank's schedule for this case (else lockstep)."""
    from .algorithm import Layout, build_schedule, get
    size = sum(map(len, nodes))
    if name == "native":
        return all(exact(shape, nbytes, nodes, itemsize) for shape in NATIVE_SHAPES)
    if size > EVENT_RANKS:
        return False
    first = build_schedule(get(name), Layout(0, size, nodes), max(1, nbytes // itemsize),
                           _options(itemsize))
    return _events(size, first)


def _options(itemsize: int) -> Options:
    """Plan options for a prediction: only the element size matters."""
    from .algorithm import Options
    return Options(256 * 1024, np.dtype(f"V{itemsize}").str)


def _lockstep(algorithm: Algorithm, count: int, nodes: tuple[tuple[int, ...], ...],
              node_of: list[int], options: Options, model: Model, itemsize: int
              ) -> tuple[float, float, float]:
    """Components for more ranks than :func:`schedule_time` can follow: the ranks of the first
    node (rank 0's: a tree's root) built, all ranks assumed to run round i together. A round
    costs its slowest rank's largest latency, and its bytes at the links' rates, cross-node
    ones shared by the node's ranks that send across in that round. Exact for algorithms whose
    ranks all do the same, round by round (ring, rd, rabenseifner, hybrid on equal nodes);
    for a tree it leaves out the rounds that fill and drain the pipeline (log p of them)."""
    from .algorithm import Layout, build_schedule
    size = sum(map(len, nodes))
    schedules = [build_schedule(algorithm, Layout(r, size, nodes), count, options)
                 for r in nodes[0]]
    latency = bandwidth = 0.0
    depth = max(len(s.rounds) for s in schedules)
    for i in range(depth):
        rounds = [s.rounds[i] for s in schedules if i < len(s.rounds)]
        across = sum(any(isinstance(t, Send) and node_of[t.peer] != node_of[r]
                         for t in rnd.transfers) for r, rnd in zip(nodes[0], rounds))
        share = -(-across // model.nics) if model.nics else 1
        slowest_alpha = slowest_bytes = 0.0
        for r, rnd in zip(nodes[0], rounds):
            sent = {"local": 0.0, "remote": 0.0}
            got = {"local": 0.0, "remote": 0.0}
            for t in rnd.transfers:
                level = "local" if node_of[t.peer] == node_of[r] else "remote"
                (sent if isinstance(t, Send) else got)[level] += len(t.region) * itemsize
                slowest_alpha = max(slowest_alpha, model.alpha[level])
            if rnd.sync:
                slowest_alpha = max(slowest_alpha, model.alpha["local"])
            moved = max(sum(sent[k] * model.beta[k] * (share if k == "remote" else 1)
                            for k in sent),
                        sum(got[k] * model.beta[k] * (share if k == "remote" else 1)
                            for k in got))
            local = sum(len(s.dst) for s in rnd.local if isinstance(s, (Reduce, Copy, Scale)))
            slowest_bytes = max(slowest_bytes, moved + local * itemsize * model.gamma)
        latency += slowest_alpha
        bandwidth += slowest_bytes
    return latency, bandwidth, float(depth)


def _native_components(nbytes: int, nodes: tuple[tuple[int, ...], ...], model: Model,
                       itemsize: int) -> tuple[float, float, float]:
    """``native`` as the better of MPI's usual two, one call's overhead."""
    shapes = [components(shape, nbytes, nodes, model, itemsize) for shape in NATIVE_SHAPES]
    latency, bandwidth, _ = min(shapes, key=lambda c: c[0] + c[1])
    return latency, bandwidth, 1.0


def fit_algorithm(measured: list[tuple[float, tuple[float, float, float]]]
                  ) -> tuple[float, float]:
    """(overhead, factor) that best explain ``measured`` [(seconds, components), ...] in
    relative terms (every size counts alike), neither negative."""
    times = np.array([t for t, _ in measured])
    latency, bandwidth, rounds = np.array([c for _, c in measured]).T
    rest = (times - latency) / times
    both = np.column_stack([rounds / times, bandwidth / times])
    overhead, factor = np.linalg.lstsq(both, rest, rcond=None)[0]
    if overhead < 0:
        overhead, factor = 0.0, float(np.dot(both[:, 1], rest) / np.dot(both[:, 1], both[:, 1]))
    elif factor < 0:
        overhead, factor = float(np.dot(both[:, 0], rest) / np.dot(both[:, 0], both[:, 0])), 0.0
    return float(max(overhead, 0.0)), float(max(factor, 0.0))
