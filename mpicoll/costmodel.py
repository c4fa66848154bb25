"""What an allreduce will cost: every rank's schedule run against an α-β-γ model of the machine.

``auto`` shortlists the algorithms with the lowest predictions for the size, ranks and node
layout at hand (and tries them: :mod:`mpicoll.trials`) — also for layouts nobody measured,
since the schedules say what travels where. Per transport level (same node, across nodes) a
message of b bytes costs α + b·β, and reducing or copying b bytes costs b·γ. Each algorithm then has three fitted figures
of its own: its Python overhead per round (``native``: per call), and how far its bytes run
slower than the plain link's (a factor on β and γ: extra copies, MPI's shared-memory cells),
one factor while the node's working set (its ranks' send, receive and scratch buffers, about
three messages each) fits in the last-level cache, one once it is twice the cache or more, in
between a mix (memory runs at another speed there, and algorithms differ in how much they
reuse). The factors apply to the bytes that move through memory (same-node links,
reductions, copies), not to cross-node links: a wire runs at its own rate however the bytes
were copied.
``native`` takes the shape of the better of MPI's usual two, recursive doubling and
Rabenseifner. ``mpicoll tune`` measures α, β, γ and fits the per-algorithm figures on the
machine at hand; without a tuning file the :data:`BUILTIN` figures apply.

The schedules run as in :mod:`mpicoll.simulate`, with clocks instead of data: a round starts
after the rank's previous one plus the overhead; a message arrives once both ends have posted
it, α + β per byte later (a rank's sends in one round leave one after another); a round ends
with its last arrival, then its local steps take γ per byte. A barrier of a node (shared
memory) ends α after the last of its ranks entered it.

MPI's own allreduce pays one more term: MPICH allocates a scratch buffer the message's size on
every call, which glibc maps afresh, at least from 64 MiB on, so that each call faults its pages in
again (``Model.fresh`` per byte; mpicoll's algorithms keep their scratch). Measured at 2 ranks:
native at 64 MiB took 49–60 ms as is and 34–35 ms with glibc told never to map
(``git show abc5a13:docs/results/issue14/native-fresh-pages.txt``); ``tune`` fits it.

A link that is a token bucket (``Model.burst``; the emulated cluster's) passes a burst at once
and its rate only on average: a call then costs its time with the burst's share of its wire time
taken off, but no less than its busiest link's bytes at the rate. Measured there, small calls
took just that: 64 KiB ring on 4 hosts, 96 KiB per link, 816 µs against 819 µs at 0.96 Gbit/s.
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
           "NATIVE_SHAPES_OF",
           "ALWAYS_MAPPED", "predict", "components", "fresh_pages", "busiest_link", "exact",
           "fit_algorithm", "mpi_own"]

NATIVE_SHAPES = ("rd", "rabenseifner")
"""What ``native`` is predicted as: MPICH's and Open MPI's usual short- and long-message
algorithms, the better of the two."""
NATIVE_SHAPES_OF = {"allreduce": NATIVE_SHAPES, "allgather": ("rd", "bruck", "ring"),
                    "reduce_scatter": ("rabenseifner", "ring"), "bcast": ("binomial", "tree"),
                    "reduce": ("binomial", "tree")}
"""What MPI's own call of each collective is predicted as, the fastest of its usual algorithms
(MPICH and Open MPI: allgather by recursive doubling, Bruck or ring; reduce_scatter by
recursive halving or pairwise exchange, here the ring; bcast and reduce by a binomial tree or
a pipelined one, here the binary tree)."""

ALWAYS_MAPPED = 64 << 20
"""From here on glibc's ``malloc`` maps a block afresh on every call: twice its largest mmap
threshold (``DEFAULT_MMAP_THRESHOLD_MAX``, 32 MiB on 64-bit systems), which is its largest trim
threshold, so the heap never keeps that much free. From 32 MiB up to here a block comes from
the heap's free end or is mapped depending on what the process freed before (native at 32 MiB:
7.6–8.0 ms in bench's sweeps, 27–30 ms run after 16 MiB alone; 15–16 ms with glibc told never
to map: abc5a13:docs/results/issue14/native-fresh-pages.txt)."""


@dataclass(frozen=True)
class Model:
    """Seconds: ``alpha`` per message and ``beta`` per byte by level ("local": within a node,
    "remote": across nodes), ``gamma`` per byte reduced or copied; ``algorithms`` maps a name
    to (overhead in seconds per round — per call for ``native`` —, factor on memory bytes
    beyond the cache, factor on those within it).

    ``measured`` holds what ``tune`` found fastest per size, (bytes, name), on the layout
    ``measured_on`` (ranks, nodes): on that layout a measurement beats any prediction;
    ``measured_by`` the same for the other collectives, (collective, its pairs).
    ``nics``: how many links a node's cross-node messages share (ranks of one node behind one
    NIC queue for it); 0 gives each rank a link of its own. ``cache_bytes``: a node's
    last-level cache (0: unknown, every byte is beyond it). ``burst``: bytes a cross-node link
    lets through at once, as a token bucket of that depth does (the emulated cluster's ``tc
    tbf``; 0: a plain link): see :func:`predict`. ``fresh``: seconds per byte of message that
    MPI's own allreduce spends on new memory from :data:`ALWAYS_MAPPED` on."""

    alpha: dict[str, float]
    beta: dict[str, float]
    gamma: float
    algorithms: dict[str, tuple[float, float, float]] = field(default_factory=dict)
    source: str = "built in"
    measured: tuple[tuple[int, str], ...] = ()
    measured_on: tuple[int, int] | None = None
    nics: int = 0  # links a node's cross-node messages share (0: one per rank, no contention)
    cache_bytes: int = 0
    burst: int = 0
    fresh: float = 0.0
    measured_by: tuple[tuple[str, tuple[tuple[int, str], ...]], ...] = ()

    def __hash__(self) -> int:
        """Computed once (``auto`` looks its choices up by the model on every full-path call;
        a model is never changed: its dicts are read only)."""
        try:
            return self.__dict__["_hash"]
        except KeyError:
            value = self.__dict__["_hash"] = hash((
                tuple(sorted(self.alpha.items())), tuple(sorted(self.beta.items())), self.gamma,
                tuple(sorted(self.algorithms.items())), self.source, self.measured,
                self.measured_on, self.nics, self.cache_bytes, self.burst, self.fresh,
                self.measured_by))
            return value

    def in_cache(self, nbytes: int, ranks_on_node: int) -> float:
        """Which part of a node's working set is served from its cache, for messages of
        ``nbytes`` on ``ranks_on_node`` ranks (about three messages each: send, receive,
        scratch): all of it while it fits, none from twice the cache on, linearly between (a
        working set streamed through a cache it overflows evicts what it would reuse; this
        shape fitted the sweeps of 2, 3 and 4 ranks here better than the cache's share,
        docs/seed.md)."""
        if not self.cache_bytes:
            return 0.0
        working_set = 3 * max(nbytes, 1) * ranks_on_node
        return min(1.0, max(0.0, 2.0 - working_set / self.cache_bytes))

    def measured_pick(self, nbytes: int, ranks: int, nodes: int, among: tuple[str, ...],
                      collective: str = "allreduce") -> str | None:
        """What ``tune`` measured fastest for ``collective`` at the size nearest ``nbytes``
        (within a factor of 2), if this is the layout it measured and that algorithm may run;
        else None."""
        measured = self.measured if collective == "allreduce" else \
            dict(self.measured_by).get(collective, ())
        if self.measured_on != (ranks, nodes) or not measured:
            return None
        size, name = min(measured, key=lambda m: abs(np.log2(m[0] / max(nbytes, 1))))
        near = 0.5 <= size / max(nbytes, 1) <= 2
        return name if near and name in among else None

    def of(self, name: str) -> tuple[float, float, float]:
        """(overhead, factor, factor in the cache) of ``name``; an algorithm never measured gets
        the mean of those that were (a new one is Python like the others), MPI's own that of
        ``native`` (the same library)."""
        if name in self.algorithms:
            return self.algorithms[name]
        if mpi_own(name) and "native" in self.algorithms:
            return self.algorithms["native"]
        mine = [v for k, v in self.algorithms.items() if not mpi_own(k)] or [(0.0, 1.0, 1.0)]
        o, f, c = (float(np.mean(column)) for column in zip(*mine))
        return o, f, c


BUILTIN = Model(
    # Fitted on the 2-core development machine (MPICH 5.0.2 wheel, one node, one rank per
    # core) by `mpiexec -bind-to core -n 2 python -m mpicoll tune -m 8:64M -f 2 -i 10`
    # (abc5a13:docs/results/issue14/tuning-p2.json, refitted from that sweep by
    # abc5a13:benchmarks/model_refit.py when the cache's edge and the fresh pages came in). "remote" is
    # not measured there: a 1 Gbit/s link's β and a TCP round trip's α, as the emulated cluster
    # has them (docs/cluster.md).
    alpha={"local": 1.78e-06, "remote": 60e-6},
    beta={"local": 7.61e-11, "remote": 8.4e-9},
    gamma=4.39e-11,
    algorithms={"ring": (6.83e-07, 1.88, 1.20),
                "tree": (7.33e-07, 1.11, 1.10),
                "rd": (1.41e-06, 2.11, 1.00),
                "rabenseifner": (6.85e-07, 1.76, 1.18),
                "hybrid": (8.48e-07, 1.05, 0.50),
                "shm": (1.04e-06, 1.07, 0.53),
                "native": (8.23e-07, 2.19, 1.57)},
    cache_bytes=16 << 20,
    fresh=2.09e-10,
)


EMULATED_1G = Model(
    alpha={"local": BUILTIN.alpha["local"], "remote": BUILTIN.alpha["remote"]},
    beta={"local": BUILTIN.beta["local"], "remote": 8 / 0.96e9},
    gamma=BUILTIN.gamma, algorithms=dict(BUILTIN.algorithms), nics=1, burst=256 << 10,
    fresh=BUILTIN.fresh,
    source="the emulated cluster: this machine's figures inside a host; between hosts one "
           "1 Gbit/s tbf link per host, shared by its ranks (0.96 Gbit/s measured for one TCP "
           "stream, ../shared/notes/emulated-cluster.md), its token bucket's 256 KiB burst "
           "(benchmarks/emucluster.py), MPICH over TCP's latency")
"""The emulated cluster of docs/cluster.md: hosts of this machine behind 1 Gbit/s links."""

GPU_CLUSTER = Model(
    alpha={"local": 3e-6, "remote": 5e-6},
    beta={"local": 1 / 450e9, "remote": 1 / 50e9},
    gamma=1 / 1.1e12, algorithms={name: (overhead, 1.0, 1.0)
                                  for name, (overhead, _, _) in BUILTIN.algorithms.items()},
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
    """Seconds until the last rank finishes ``schedules`` (one per rank). A rank's messages of
    a round go out one after another, and come in one after another (a rank has one link
    each way: a tree's parent takes its children's halves in turn). With ``nics``, a node's
    cross-node messages leave through that many links, each one message at a time (reserved
    in the order the ranks post them)."""
    size = len(schedules)
    links: dict[int, list[float]] = defaultdict(lambda: [0.0] * nics)  # when each is free
    clock = [0.0] * size
    position = [0] * size
    posted: list[float | None] = [None] * size
    # per (sender, receiver): (when its bytes may start, seconds of bytes, latency)
    channels: dict[tuple[int, int], deque[tuple[float, float, float]]] = defaultdict(deque)
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
                            channels[(r, t.peer)].append((leave, busy, alpha[level]))
                            continue
                        channels[(r, t.peer)].append((start + queued, busy, alpha[level]))
                        queued += busy
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
            overlapped = end + _elements(rnd.overlap) * itemsize * gamma  # under the transfers
            inbox = start  # when this rank's incoming link is free
            for t in rnd.transfers:
                if not isinstance(t, Send):
                    leave, busy, latency = channels[(t.peer, r)].popleft()
                    inbox = max(leave, inbox) + busy
                    end = max(end, inbox + latency)
            clock[r] = max(end, overlapped) + _elements(rnd.local) * itemsize * gamma
            position[r] += 1
            posted[r] = None
            moved = True
        if all(position[r] == len(schedules[r].rounds) for r in range(size)):
            return max(clock)
        if not moved:
            raise RuntimeError("the schedules deadlock")  # the simulator's tests rule this out


def _elements(steps: tuple) -> int:
    """Elements a round's steps write (what the model charges ``gamma`` for)."""
    return sum(len(s.dst) for s in steps if isinstance(s, (Reduce, Copy, Scale)))


def predict(name: str, nbytes: int, nodes: tuple[tuple[int, ...], ...], model: Model,
            itemsize: int = 4, events: int | None = None, collective: str = "allreduce"
            ) -> float:
    """Predicted seconds of algorithm ``name`` for ``nbytes`` on ranks laid out as ``nodes``;
    ``events``: the budget up to which every rank's schedule runs on clocks (default
    :data:`EVENTS`; ``auto`` gives :data:`AUTO_EVENTS`); ``collective``: which one it runs
    (``nbytes``: its larger buffer, as bench counts it). An algorithm's fitted overhead and
    factors are its allreduce's, whatever the collective."""
    overhead, factor, cached = model.of(name)
    latency, memory, wire, rounds = components(name, nbytes, nodes, model, itemsize, events,
                                               collective)
    inside = model.in_cache(nbytes, max(map(len, nodes)))
    seconds = (latency + (factor * (1 - inside) + cached * inside) * memory + wire
               + overhead * rounds  # native: one "round", the call
               + fresh_pages(name, nbytes, model))
    if not (model.burst and wire):
        return seconds
    # Token-bucket links: of the L bytes a call puts on its busiest link, the first ``burst``
    # need not wait for the link's rate (the call's wire time shrinks by that share), but calls
    # one after another cannot beat the rate on average: at least L·β.
    busiest = busiest_link(name, nbytes, nodes, model, itemsize, events, collective)
    if not busiest:  # (lockstep: the first node's links idle)
        return seconds
    return max(seconds - wire * min(1.0, model.burst / busiest),
               busiest * model.beta["remote"])


def fresh_pages(name: str, nbytes: int, model: Model) -> float:
    """Seconds a call of ``name`` spends faulting in new memory: MPI's own allreduce, whose
    scratch buffer of ``nbytes`` is mapped afresh on every call from :data:`ALWAYS_MAPPED` on."""
    if model.fresh and nbytes >= ALWAYS_MAPPED and mpi_own(name):
        return model.fresh * nbytes
    return 0.0


@lru_cache(maxsize=4096)
def busiest_link(name: str, nbytes: int, nodes: tuple[tuple[int, ...], ...], model: Model,
                 itemsize: int = 4, events: int | None = None, collective: str = "allreduce"
                 ) -> int:
    """Bytes the busiest cross-node link carries one way in a call of ``name`` (``native``: the
    shape it is predicted as): a node's messages across share its ``nics`` links, or each rank
    has its own. Beyond :data:`EVENTS`, the first node's links (exact for algorithms whose
    nodes all do the same)."""
    from .algorithm import Layout, build_schedule, get
    if mpi_own(name):
        name = _native_shape(nbytes, nodes, model, itemsize, events, collective)
    size, node_of = sum(map(len, nodes)), _node_of(nodes)
    options, count = _options(itemsize, collective), _count(nbytes, itemsize, size, collective)
    first = build_schedule(get(name, collective), Layout(0, size, nodes), count, options)
    ranks = range(size) if _events(size, first, events) else nodes[0]
    link = (lambda r: node_of[r]) if model.nics else (lambda r: r)
    out: dict[int, int] = defaultdict(int)  # bytes per link and direction
    into: dict[int, int] = defaultdict(int)
    for r in ranks:
        schedule = first if r == 0 else build_schedule(get(name, collective),
                                                       Layout(r, size, nodes), count, options)
        for rnd in schedule.rounds:
            for t in rnd.transfers:
                if node_of[t.peer] != node_of[r]:
                    (out if isinstance(t, Send) else into)[link(r)] += len(t.region) * itemsize
    busiest = max([*out.values(), *into.values(), 0])
    return -(-busiest // max(model.nics, 1))


@lru_cache(maxsize=4096)
def components(name: str, nbytes: int, nodes: tuple[tuple[int, ...], ...], model: Model,
               itemsize: int = 4, events: int | None = None, collective: str = "allreduce"
               ) -> tuple[float, float, float, float]:
    """Seconds of latency (α only), of bytes through memory (same-node β and γ), of bytes on
    cross-node links, and rounds on the critical path of algorithm ``name``: a prediction is
    latency + factor·memory + wire + overhead·rounds, the factor weighted by how much of the
    working set is in the cache. For a schedule with overlap steps (run under its messages),
    memory is what it adds to the wire's time."""
    from .algorithm import Layout, build_schedule, get
    if mpi_own(name):
        return _native_components(nbytes, nodes, model, itemsize, events, collective)
    size, node_of = sum(map(len, nodes)), _node_of(nodes)
    options = _options(itemsize, collective)
    count = _count(nbytes, itemsize, size, collective)
    algorithm = get(name, collective)
    first = build_schedule(algorithm, Layout(0, size, nodes), count, options)
    if not _events(size, first, events):
        return _lockstep(algorithm, count, nodes, node_of, options, model, itemsize)
    schedules = [first] + [build_schedule(algorithm, Layout(r, size, nodes), count, options)
                           for r in range(1, size)]
    none = {"local": 0.0, "remote": 0.0}
    memory = {"local": model.beta["local"], "remote": 0.0}
    wire = {"local": 0.0, "remote": model.beta["remote"]}
    on_wire = schedule_time(schedules, itemsize, node_of, none, wire, 0.0, 0.0, model.nics)
    if any(rnd.overlap for rnd in first.rounds):  # memory is what it adds to the wire's time
        both = {"local": model.beta["local"], "remote": model.beta["remote"]}
        in_memory = schedule_time(schedules, itemsize, node_of, none, both, model.gamma, 0.0,
                                  model.nics) - on_wire
    else:
        in_memory = schedule_time(schedules, itemsize, node_of, none, memory, model.gamma, 0.0)
    return (schedule_time(schedules, itemsize, node_of, model.alpha, none, 0.0, 0.0),
            in_memory, on_wire, schedule_time(schedules, itemsize, node_of, none, none, 0.0, 1.0))


def _node_of(nodes: tuple[tuple[int, ...], ...]) -> list[int]:
    """Each rank's node."""
    node_of = [0] * sum(map(len, nodes))
    for n, ranks in enumerate(nodes):
        for r in ranks:
            node_of[r] = n
    return node_of


EVENTS = 1_000_000
"""Steps of all ranks together (each rank's rounds and messages, counted on rank 0's schedule)
up to which :func:`components` runs every rank's schedule (for at most :data:`EVENT_RANKS`
ranks); beyond, it estimates in lockstep (:func:`_lockstep`). Messages count, not only rounds:
a hybrid schedule of 64 MiB on 8 × 8 ranks has 144 rounds but 3,584 messages per rank."""
EVENT_RANKS = 1024
AUTO_EVENTS = 4_000
"""``auto``'s budget: it predicts on every rank at the first call of each size class, so it
runs every rank's schedule only where that is cheap, in lockstep beyond (choosing at 64 MiB on
8 × 8 ranks: 22.7 s with every rank's schedule, 1.8 s so; abc5a13:docs/results/issue12/auto-cost.txt)."""


def _events(size: int, first: Schedule, events: int | None = None) -> bool:
    steps = len(first.rounds) + sum(len(rnd.transfers) for rnd in first.rounds)
    return size <= EVENT_RANKS and size * max(steps, 1) <= (EVENTS if events is None else events)


def exact(name: str, nbytes: int, nodes: tuple[tuple[int, ...], ...], itemsize: int = 4,
          events: int | None = None, collective: str = "allreduce") -> bool:
    """Whether :func:`components` runs every rank's schedule for this case (else lockstep)."""
    from .algorithm import Layout, build_schedule, get
    size = sum(map(len, nodes))
    if mpi_own(name):
        return all(exact(shape, nbytes, nodes, itemsize, events, collective)
                   for shape in NATIVE_SHAPES_OF[collective])
    if size > EVENT_RANKS:
        return False
    first = build_schedule(get(name, collective), Layout(0, size, nodes),
                           _count(nbytes, itemsize, size, collective),
                           _options(itemsize, collective))
    return _events(size, first, events)


@lru_cache(maxsize=None)
def mpi_own(name: str) -> bool:
    """Whether ``name`` is the MPI library's own allreduce (predicted as :data:`NATIVE_SHAPES`)."""
    from .algorithm import UnknownAlgorithmError, get
    try:
        return get(name).mpi
    except UnknownAlgorithmError:
        return False


def _options(itemsize: int, collective: str = "allreduce") -> Options:
    """Plan options for a prediction: only the element size (and the collective) matter."""
    from .algorithm import Options
    return Options(256 * 1024, np.dtype(f"V{itemsize}").str, collective)


def _count(nbytes: int, itemsize: int, size: int, collective: str) -> int:
    """The count a plan takes for a call of ``nbytes`` (the larger buffer): the elements of
    allreduce, bcast and reduce; a block for allgather, all p blocks for reduce_scatter."""
    if collective in ("allreduce", "bcast", "reduce"):
        return max(1, nbytes // itemsize)
    block = max(1, nbytes // itemsize // size)
    return block if collective == "allgather" else block * size


def _lockstep(algorithm: Algorithm, count: int, nodes: tuple[tuple[int, ...], ...],
              node_of: list[int], options: Options, model: Model, itemsize: int
              ) -> tuple[float, float, float, float]:
    """Components for more ranks than :func:`schedule_time` can follow: the ranks of the first
    node (rank 0's: a tree's root) built, all ranks assumed to run round i together. A round
    costs its slowest rank's largest latency, and its bytes at the links' rates, cross-node
    ones shared by the node's ranks that send across in that round; overlap steps cost what
    they take beyond the round's own link time. Exact for algorithms whose
    ranks all do the same, round by round (ring, rd, rabenseifner, hybrid on equal nodes);
    for a tree it leaves out the rounds that fill and drain the pipeline (log p of them)."""
    from .algorithm import Layout, build_schedule
    size = sum(map(len, nodes))
    schedules = [build_schedule(algorithm, Layout(r, size, nodes), count, options)
                 for r in nodes[0]]
    latency = memory = wire = 0.0
    depth = max(len(s.rounds) for s in schedules)
    for i in range(depth):
        rounds = [s.rounds[i] for s in schedules if i < len(s.rounds)]
        across = sum(any(isinstance(t, Send) and node_of[t.peer] != node_of[r]
                         for t in rnd.transfers) for r, rnd in zip(nodes[0], rounds))
        share = max(1, -(-across // model.nics)) if model.nics else 1  # (0: node 0 only receives)
        slowest_alpha = slowest_memory = slowest_wire = 0.0
        for r, rnd in zip(nodes[0], rounds):
            sent = {"local": 0.0, "remote": 0.0}
            got = {"local": 0.0, "remote": 0.0}
            for t in rnd.transfers:
                level = "local" if node_of[t.peer] == node_of[r] else "remote"
                (sent if isinstance(t, Send) else got)[level] += len(t.region) * itemsize
                slowest_alpha = max(slowest_alpha, model.alpha[level])
            if rnd.sync:
                slowest_alpha = max(slowest_alpha, model.alpha["local"])
            link = max(sent["remote"], got["remote"]) * model.beta["remote"] * share
            overlapped = _elements(rnd.overlap) * itemsize * model.gamma  # hidden under the link
            slowest_memory = max(slowest_memory,
                                 max(sent["local"], got["local"]) * model.beta["local"]
                                 + _elements(rnd.local) * itemsize * model.gamma
                                 + max(0.0, overlapped - link))
            slowest_wire = max(slowest_wire, link)
        latency += slowest_alpha
        memory += slowest_memory
        wire += slowest_wire
    return latency, memory, wire, float(depth)


def _native_components(nbytes: int, nodes: tuple[tuple[int, ...], ...], model: Model,
                       itemsize: int, events: int | None, collective: str = "allreduce"
                       ) -> tuple[float, float, float, float]:
    """``native`` as the best of MPI's usual ones, one call's overhead."""
    shape = _native_shape(nbytes, nodes, model, itemsize, events, collective)
    latency, memory, wire, _ = components(shape, nbytes, nodes, model, itemsize, events,
                                          collective)
    return latency, memory, wire, 1.0


def _native_shape(nbytes: int, nodes: tuple[tuple[int, ...], ...], model: Model,
                  itemsize: int, events: int | None = None, collective: str = "allreduce"
                  ) -> str:
    """Which of :data:`NATIVE_SHAPES_OF` the collective's ``native`` is predicted as: the
    fastest."""
    return min(NATIVE_SHAPES_OF[collective], key=lambda shape: sum(
        components(shape, nbytes, nodes, model, itemsize, events, collective)[:3]))


def fit_algorithm(measured: list[tuple[float, float, tuple[float, float, float, float]]],
                  paged: list[int] | None = None) -> tuple[float, float, float, float]:
    """(overhead, factor, factor in the cache, seconds per byte of new memory) that best explain
    ``measured`` [(seconds, part of the working set in the cache, components), ...] in relative
    terms (every size counts alike), none negative (a term that would be is dropped and the rest
    fitted again). ``paged``: per point, the bytes of memory the call maps afresh (MPI's own
    allreduce from :data:`ALWAYS_MAPPED` on); none, the last figure is 0."""
    times = np.array([t for t, _, _ in measured])
    inside = np.array([f for _, f, _ in measured])
    latency, memory, wire, rounds = np.array([c for _, _, c in measured]).T
    fresh = np.array(paged if paged is not None else [0] * len(measured), float)
    rest = (times - latency - wire) / times
    terms = np.column_stack([rounds, memory * (1 - inside), memory * inside, fresh]
                            ) / times[:, None]
    keep = [i for i in range(4) if terms[:, i].any()]  # a term no size has cannot be fitted
    while True:
        solved = np.linalg.lstsq(terms[:, keep], rest, rcond=None)[0]
        if (solved >= 0).all() or len(keep) == 1:
            break
        keep.pop(int(np.argmin(solved)))
    fitted = dict(zip(keep, np.maximum(solved, 0.0)))
    overhead, factor, cached, per_byte = (float(fitted.get(i, 0.0)) for i in range(4))
    if 2 not in keep:  # never in the cache (or no cache known): as beyond it
        cached = factor
    if 1 not in keep:
        factor = cached
    return overhead, factor, cached, per_byte
