"""allgather and reduce_scatter: the collectives whose buffers are blocks, one per rank.

Sharded training lives on them (ZeRO and FSDP reduce-scatter gradients and allgather
parameters), and ring allreduce is one followed by the other. They run through the same
machinery as allreduce: checked arguments, the collective numbered on its communicator, the
fingerprint check (which names the collective, so ranks that call different collectives raise
``MismatchError``), requests the progress engine completes in any order alongside allreduce's.
``ring`` runs them from its allreduce's two halves and ``native`` is MPI's own, in every call
form, with equal blocks or uneven ``counts`` (``MPI_Allgatherv``, ``MPI_Reduce_scatter``) and
in place as MPI does it. ``auto`` measures, as allreduce's does: a communicator's first
blocking calls of each size class try MPI's own two calls (and above 8 KiB every algorithm
that plans the collective) in turn, and keep the fastest (:func:`_trial`), guarded as
allreduce's choice is (:class:`mpicoll.trials.Watch`); until then, a rule
(:data:`RING_FROM`). A dense codec compresses both through ``ring``'s compressed halves
(:func:`check_codec`: float data, sums); an average is refused clearly.
A blocking call on the same arrays as an earlier one (a loop's) takes a fast path
(:class:`mpicoll.fastpath.LoweredBlocks`): some 10 µs of Python less.
"""

from __future__ import annotations

import operator
import time
from functools import lru_cache
from typing import Any, Callable, Sequence, Union, cast

import numpy as np

from mpi4py import MPI

from . import _env, codecs, collective, context, execution, fastpath, fault, inflight, ops, \
    timing, transport, tuning
from ._array import Array, array_module, flat, writeable
from ._mpi import threads_allow
from .api import SAMPLE, AnyCodec, CodecArg, _array, _params, codec_for_floats, communicator
from .algorithm import Options, native, registry, select
from .algorithm.native import NativeExecution
from .execution import Call
from .persistent import PersistentRequest
from .request import Request

__all__ = ["allgather", "iallgather", "allgather_init", "reduce_scatter", "ireduce_scatter",
           "reduce_scatter_init", "trials_left", "choose_algorithm", "launch", "persist",
           "run_blocking", "tried", "auto_algorithm", "check_codec", "RING_FROM", "TREE_FROM"]

OpArg = Union[str, MPI.Op, ops.Op]


RING_FROM = {"reduce_scatter": 16 << 20}
"""``auto``'s rule for these collectives where its trials have kept nothing (a size class
still on trial, nonblocking and persistent calls before, device arrays): ``ring``
from this many bytes of ``sendbuf`` on (and wherever MPI's own cannot run the call as mpicoll does:
device buffers staged through the host, Open MPI's saturating 8- and 16-bit integer sums),
else MPI's own (``bench -C allgather,reduce_scatter``: reduce_scatter of
32 MiB through ring 0.70× MPICH's own on 2 ranks, 0.86× on 4, 0.13× Open MPI's on 2; allgather
through ring never below 1.05× MPI's own)."""

TREE_FROM = 64 << 10
"""``auto``'s rule for bcast and reduce where MPI's own cannot run the call as mpicoll does
(device buffers staged through the host; Open MPI's saturating 8- and 16-bit integer sums):
``binomial``'s whole messages below this many bytes, the pipelined ``tree`` from here on."""


def allgather(sendbuf: Array, recvbuf: Array | None = None, *, algorithm: str = "auto",
              comm: MPI.Intracomm | None = None, codec: CodecArg = None,
              counts: Sequence[int] | None = None) -> Array:
    """Every rank's ``sendbuf``, in rank order, in ``recvbuf`` on every rank (``MPI_Allgather``;
    with ``counts``, ``MPI_Allgatherv``).

    Args:
        sendbuf: contiguous NumPy or CuPy array of n elements, any shape (its elements in
            memory order); CuPy arrays reach MPI as for ``allreduce`` (``ring``; ``native``
            only with a CUDA-aware MPI). ``MPI.IN_PLACE`` (or ``recvbuf`` itself): this rank's
            block is in ``recvbuf`` already.
        recvbuf: array of size·n elements of the same dtype, any shape (allocated flat when
            None); rank i's block is elements [i·n, (i+1)·n).
        counts: every rank's block, in rank order (the same on every rank; zeros allowed):
            rank i sends ``counts[i]`` elements, its block in ``recvbuf`` starts after the
            blocks of ranks below it.
        algorithm: one of ``algorithms("allgather")``; "auto" runs what its trials measured
            fastest for the size class, else MPI's own (``ring`` where the buffers are staged
            through the host: :data:`RING_FROM`).
        codec: compress what travels (float arrays; ``ring``, which ``auto`` then runs): a
            dense codec's name or spec ("fp16", "int8", "int8+ef"), a codec from
            ``codecs.get``, or ``codecs.ErrorFeedback(codec)``. Every rank's block arrives as
            its owner's frame decodes, its own included: the same bits on every rank.
        comm: any intra-communicator; ``MPI.COMM_WORLD`` when None.
    """
    if codec is None and recvbuf is not None:
        result = fastpath.blocks("allgather", sendbuf, recvbuf, None, algorithm, comm, counts)
        if result is not None:
            return result
    return _blocking(collective.ALLGATHER, sendbuf, recvbuf, None, algorithm, comm, codec,
                     counts)


def iallgather(sendbuf: Array, recvbuf: Array | None = None, *, algorithm: str = "auto",
               comm: MPI.Intracomm | None = None, codec: CodecArg = None,
               counts: Sequence[int] | None = None) -> Request:
    """Start the allgather ``allgather`` describes; its :class:`Request` completes in any order
    with other requests."""
    return _start(collective.ALLGATHER, sendbuf, recvbuf, None, algorithm, comm, codec, counts)


def allgather_init(sendbuf: Array, recvbuf: Array | None = None, *, algorithm: str = "auto",
                   comm: MPI.Intracomm | None = None, codec: CodecArg = None,
                   counts: Sequence[int] | None = None) -> PersistentRequest:
    """A persistent allgather of these buffers: ``start()``, then ``wait()``, as often as wanted
    (collective: every rank makes it, and later starts it, in the same order)."""
    return _persistent(collective.ALLGATHER, sendbuf, recvbuf, None, algorithm, comm, codec,
                       counts)


def reduce_scatter(sendbuf: Array, recvbuf: Array | None = None, *, op: OpArg = "sum",
                   algorithm: str = "auto", comm: MPI.Intracomm | None = None,
                   codec: CodecArg = None, counts: Sequence[int] | None = None) -> Array:
    """Rank i gets the reduction over all ranks of block i of their ``sendbuf``
    (``MPI_Reduce_scatter_block``; with ``counts``, ``MPI_Reduce_scatter``).

    Args:
        sendbuf: contiguous NumPy or CuPy array of size·n elements (a multiple of the
            communicator's size), any shape; block i is elements [i·n, (i+1)·n).
            ``MPI.IN_PLACE`` (or ``recvbuf`` itself): the input is ``recvbuf``, and the result
            goes to its first n elements (the rest is left as it is).
        recvbuf: array of n elements of the same dtype (allocated flat when None).
        counts: every rank's block, in rank order (the same on every rank; zeros allowed):
            ``sendbuf`` holds ``sum(counts)`` elements, rank i gets ``counts[i]``.
        op: "sum", "prod", "min", "max" or the matching ``mpi4py.MPI.Op`` (or a commutative
            user-defined one); "avg" is not built yet.
        algorithm: one of ``algorithms("reduce_scatter")``; "auto" runs what its trials
            measured fastest for the size class, else ``ring`` from 16 MiB of ``sendbuf`` on
            and MPI's own below (:data:`RING_FROM`).
        codec: compress what travels (float sums; ``ring``, which ``auto`` then runs), as
            ``allgather``'s: each hop decodes, adds in the array's own precision and encodes
            again; with ``codecs.ErrorFeedback`` each rank owes what its frames lost.
        comm: any intra-communicator; ``MPI.COMM_WORLD`` when None.
    """
    if codec is None and recvbuf is not None:
        result = fastpath.blocks("reduce_scatter", sendbuf, recvbuf, op, algorithm, comm, counts)
        if result is not None:
            return result
    return _blocking(collective.REDUCE_SCATTER, sendbuf, recvbuf, op, algorithm, comm, codec,
                     counts)


def ireduce_scatter(sendbuf: Array, recvbuf: Array | None = None, *, op: OpArg = "sum",
                    algorithm: str = "auto", comm: MPI.Intracomm | None = None,
                    codec: CodecArg = None, counts: Sequence[int] | None = None) -> Request:
    """Start the reduce_scatter ``reduce_scatter`` describes; its :class:`Request` completes in
    any order with other requests."""
    return _start(collective.REDUCE_SCATTER, sendbuf, recvbuf, op, algorithm, comm, codec,
                  counts)


def reduce_scatter_init(sendbuf: Array, recvbuf: Array | None = None, *, op: OpArg = "sum",
                        algorithm: str = "auto", comm: MPI.Intracomm | None = None,
                        codec: CodecArg = None, counts: Sequence[int] | None = None
                        ) -> PersistentRequest:
    """A persistent reduce_scatter of these buffers: ``start()``, then ``wait()``, as often as
    wanted (collective: every rank makes it, and later starts it, in the same order)."""
    return _persistent(collective.REDUCE_SCATTER, sendbuf, recvbuf, op, algorithm, comm, codec,
                       counts)


def _blocking(which: collective.Collective, sendbuf: Any, recvbuf: Any, op: Any,
              algorithm: Any, comm: Any, codec: Any, counts: Any) -> Array:
    """A blocking call on the full path (or one of ``auto``'s trials); then calls like it take
    the fast path (:class:`mpicoll.fastpath.LoweredBlocks`)."""
    if algorithm == registry.AUTO and codec is None:
        ran, result = tried(which, sendbuf, recvbuf, op, comm, counts,
                            lambda send, recv, name: _call(which, send, recv, op, name, comm,
                                                           counts))
        if ran:
            return result
    chosen, call, recv, kind, number, bits = _prepare(which, sendbuf, recvbuf, op, algorithm,
                                                      comm, codec, counts, blocking=True)
    return run_blocking(chosen, call, recv, kind, number, bits,
                        (which.name, sendbuf, recvbuf, op, algorithm, comm, counts))


def _call(which: collective.Collective, sendbuf: Any, recvbuf: Any, op: Any, algorithm: str,
          comm: Any, counts: Any) -> Array:
    """A blocking call of ``which`` as the program makes it (the fast path included)."""
    if which is collective.ALLGATHER:
        return allgather(sendbuf, recvbuf, algorithm=algorithm, comm=comm, counts=counts)
    return reduce_scatter(sendbuf, recvbuf, op="sum" if op is None else op,
                          algorithm=algorithm, comm=comm, counts=counts)


def tried(which: collective.Collective, sendbuf: Any, recvbuf: Any, op: Any, comm: Any,
          counts: Any, call: Callable[[Any, Any, str], Any]) -> tuple[bool, Any]:
    """A blocking ``auto`` call that is one of its trials, run as one: (True, its result);
    else (False, None), and the caller runs it (a small size's trials, all run here on scratch
    arrays, have just kept a choice). ``call(sendbuf, recvbuf, name)``: the blocking call with
    algorithm ``name``, as the program makes it."""
    trial = _trial(which, sendbuf, recvbuf, op, comm, counts)
    if trial is None:
        return False, None
    ctx, key, shortlist = trial
    try:
        if key[0] <= own_up_to(which):  # all its trials now, on scratch arrays
            _sampled(ctx, key, shortlist, sendbuf, recvbuf, call)
            return False, None
        name, _ = ctx.trials.next(key, shortlist)  # (a check of a kept choice: that choice)
        ctx.in_step()  # (mpicoll.trials: on links the call before has drained)
        began = time.perf_counter()  # (a call as after the choice: the fast path from the 2nd)
        result = call(sendbuf, recvbuf, name)
        if ctx.trials.ran(key, shortlist, name, time.perf_counter() - began) \
                and key not in ctx.trials.kept:  # (a check sent it back to its trials)
            ctx.forget_lowered(registry.AUTO)  # the calls lowered for the old choice
        return True, result
    except MPI.Exception as error:
        failed = fault.failure(error, ctx.comm)
        if failed is None:
            raise
        raise ctx.failed(failed).during("agreeing on auto's choice") from None


def _sampled(ctx: context.Context, key: tuple, shortlist: tuple[str, ...], sendbuf: Any,
             recvbuf: Any, call: Callable[[Any, Any, str], Any]) -> None:
    """Trials of a small size (MPI's own two calls), each the mean of ``api.SAMPLE`` calls
    back to back on scratch arrays like the call's, as allreduce's ``auto`` samples them
    (single calls of microseconds timed between Python rank them unlike a loop's)."""
    in_place = sendbuf is MPI.IN_PLACE or sendbuf is recvbuf
    out = None if recvbuf is None else np.zeros_like(recvbuf)  # (None: allocated, as the call's)
    send = MPI.IN_PLACE if in_place else np.zeros_like(sendbuf)
    while ctx.trials.left(key, shortlist):
        name, _ = ctx.trials.next(key, shortlist)
        began = time.perf_counter()
        for _ in range(SAMPLE):
            call(send, out, name)
        ctx.trials.ran(key, shortlist, name, (time.perf_counter() - began) / SAMPLE,
                       guard=False)


def _start(which: collective.Collective, sendbuf: Any, recvbuf: Any, op: Any, algorithm: Any,
           comm: Any, codec: Any, counts: Any) -> Request:
    """Check, number and fingerprint-check the call everywhere, then start it: its request."""
    chosen, call, recv, kind, number, _ = _prepare(which, sendbuf, recvbuf, op, algorithm,
                                                   comm, codec, counts)
    return launch(chosen, call, recv, kind, number)


def run_blocking(chosen: Any, call: Call, result: Any, kind: tuple, number: int, bits: int,
                 args: tuple) -> Any:
    """Run a prepared blocking call to its end, and keep a lowered call for later calls with
    the arguments ``args`` (what the fast path compares: the collective's name, sendbuf,
    recvbuf, op, algorithm, comm, counts), where they can take it."""
    request = launch(chosen, call, result, kind, number)
    if call.codec is not None:  # (compressed: every call on the full path)
        return request.wait()
    ctx = cast(context.Context, call.ctx)
    plan = None if chosen.plan is None else \
        ctx.cached_plan(chosen, call.send.size, call.options, None, False, False)
    watch = None
    if args[4] == registry.AUTO:  # (its guard counts the lowered call's calls)
        key = _key(collective.get(args[0]), call.send.dtype, call.op, call.path, ctx,
                   max(call.send.size, call.recv.size))
        watch = None if key is None else ctx.trials.watches.get(key[0])
    made = fastpath.LoweredBlocks.make(args, call.send, call.recv, ctx, call.op, chosen, kind,
                                       bits, call.options, plan, watch)
    result = request.wait()
    if made is not None:
        ctx.keep_lowered(made, fastpath.KEPT)
    return result


def launch(chosen: Any, call: Call, result: Any, kind: tuple, number: int) -> Request:
    """Start a prepared call of ``chosen`` (its fingerprint check completed first on every
    rank) and put its request in flight; ``result`` is what its wait returns."""
    request = Request(result, chosen.name, codecs.spec(call.feedback or call.codec),
                      call.path.name, call.record, kind, number, call.ctx)
    cast(context.Context, call.ctx).hold(call.tags, request)  # (earlier users of its tags: done)
    try:
        request.run(execution.start(chosen, call))
    finally:
        if call.fingerprint is not None:
            call.fingerprint.finish()  # every rank started the check: every rank completes it
    inflight.add(request)
    return request


def persist(chosen: Any, call: Call, result: Any, kind: tuple, number: int
            ) -> PersistentRequest:
    """A persistent request of a prepared call: MPI's own ``_init`` for ``chosen`` native, else
    the call run anew at each start."""
    if call.fingerprint is not None:
        call.fingerprint.finish()
    ctx, options = call.ctx, call.options
    bound = NativeExecution.persistent(call.send, call.recv, False, call.op, ctx.comm, ctx.spins,
                                       options.collective, options.counts, options.root) \
        if chosen.mpi else None  # (else: run anew)
    return PersistentRequest(result, chosen.name, codecs.spec(call.feedback or call.codec),
                             call.path.name, kind, number, ctx, bound,
                             lambda: execution.start(chosen, call), call.tags)


def _persistent(which: collective.Collective, sendbuf: Any, recvbuf: Any, op: Any,
                algorithm: Any, comm: Any, codec: Any, counts: Any) -> PersistentRequest:
    # No timing record, as allreduce_init's: a record is of one start, which the caller keeps
    # (as BucketManager does).
    chosen, call, recv, kind, number, bits = _prepare(which, sendbuf, recvbuf, op, algorithm,
                                                      comm, codec, counts, record=False)
    return persist(chosen, call, recv, kind, number)


def _prepare(which: collective.Collective, sendbuf: Any, recvbuf: Any, op: Any, algorithm: Any,
             comm: Any, codec: Any, counts: Any, blocking: bool = False, record: bool = True
             ) -> tuple[Any, Call, Array, tuple, int, int]:
    """Validate every argument locally (before anything is sent: every rank raises alike),
    then number the call and start its fingerprint check: the algorithm, the call, the result
    array, the call's kind, number and tag hash."""
    in_place = sendbuf is MPI.IN_PLACE or (sendbuf is recvbuf and sendbuf is not None)
    if in_place and recvbuf is None:
        raise ValueError(f"{which.name} in place: recvbuf holds the data, it cannot be None")
    given = recvbuf if in_place else sendbuf
    xp = array_module(given)
    data = _array("recvbuf" if in_place else "sendbuf", given, xp)
    if data.dtype.kind not in "iufc" or data.dtype.fields is not None:
        raise TypeError(f"{which.name} of dtype {data.dtype}: only integer, floating and "
                        "complex dtypes")
    op_ = ops.resolve("sum" if op is None else op)  # (allgather reduces nothing: unused)
    if which.reduces:
        ops.check_dtype(data.dtype, op_)
        if op_.average:
            raise ValueError(f"op 'avg' on {which.name} is not built yet: reduce with 'sum' "
                             "and divide by the communicator's size")
    codec_ = check_codec(which, codec, data.dtype, op_)
    comm_ = communicator(comm)
    p, me = comm_.Get_size(), comm_.Get_rank()
    sizes = _blocks(which, counts, p, data.size, in_place)
    wanted_send, wanted_recv = (sizes[me], sum(sizes)) if which.receives_all \
        else (sum(sizes), sizes[me])
    what = f"{sizes[0]} per block on {p} ranks" if counts is None else f"counts {list(sizes)}"
    if not in_place and data.size != wanted_send:
        raise ValueError(f"{which.name}: sendbuf holds {data.size} elements; with {what} it "
                         f"must hold {wanted_send}")
    if recvbuf is None:
        recv = xp.empty(wanted_recv, data.dtype)
    else:
        recv = data if in_place else _array("recvbuf", recvbuf, xp)
        if in_place:  # recvbuf holds the whole (allgather: result; reduce_scatter: input)
            wanted_recv = sum(sizes)
        if recv.size != wanted_recv or recv.dtype != data.dtype:
            raise ValueError(f"{which.name}: recvbuf holds {recv.size} {recv.dtype}; it must "
                             f"hold {wanted_recv} {data.dtype} ({what}"
                             + (", in place" if in_place else "") + ")")
        if not writeable(recv):
            raise ValueError("recvbuf is read-only")
        if not in_place and xp.may_share_memory(data, recv):
            raise ValueError(f"{which.name}: recvbuf overlaps sendbuf; for in place pass "
                             "MPI.IN_PLACE (or recvbuf itself) as sendbuf")
    send = flat(recv) if in_place else flat(data)
    if in_place and which.receives_all:  # this rank's block, already in place
        first = sum(sizes[:me])
        send = send[first:first + sizes[me]]
    if not isinstance(algorithm, str):
        raise TypeError(f"algorithm must be a name, not {type(algorithm).__name__}")
    path = transport.choose(send)
    ctx = context.of(comm_)
    compressing = [] if codec_ is None else \
        [a.name for a in registry.registered(which.name) if "dense" in a.compresses]
    if algorithm == registry.AUTO:
        algorithm = compressing[0] if compressing else \
            auto_algorithm(which, send, path, op_, ctx, max(sum(sizes), recv.size))
    chosen = registry.get(algorithm, which.name)
    if codec_ is not None and chosen.name not in compressing:
        raise ValueError(f"{chosen.name} does not compress {which.name}: use "
                         f"{', '.join(compressing + [registry.AUTO])}")
    if chosen.mpi and path.name == "staged":
        raise ValueError(f"{chosen.name} needs host arrays or a CUDA-aware MPI: this MPI cannot "
                         "take device memory (use ring, which stages through the host)")
    if chosen.needs_commutative and not op_.commutative:
        raise ValueError(f"{chosen.name} reorders operands: op {op_.name!r} is not commutative")
    n = sizes[me] if counts is None else sizes  # the fingerprint's count: every rank's if uneven
    inner, feedback = (codec_.codec, codec_) if isinstance(codec_, codecs.ErrorFeedback) \
        else (codec_, None)
    spec = codecs.spec(codec_)
    kind = (n, send.dtype, op_.name if which.reduces else "", chosen.name,
            spec if inner is None else f"{spec}({_params(inner)})", which.name)
    number, bits, checking = ctx.begin_checked(kind, blocks=blocking and chosen.blocks)
    recorder = timing.active() if record else None  # (persistent: none, as allreduce_init)
    record_ = None if recorder is None else recorder.start(
        rank=ctx.rank, ranks=p, nodes=len(ctx.layout.nodes), op=kind[2], algorithm=chosen.name,
        codec=spec, dtype=send.dtype.name, count=sizes[me],
        nbytes=max(send.size, recv.size) * send.dtype.itemsize, transport=path.name,
        collective=which.name)
    options = Options(_env.settings().segment_bytes, send.dtype.str, which.name,
                      None if counts is None else sizes)
    call = Call(ctx, send, flat(recv), op_, options, inner, feedback, record_, path,
                ctx.next_tags(chosen.tags, bits), checking, blocking, which.name)
    return chosen, call, recv, kind, number, bits


def check_codec(which: collective.Collective, codec: Any, dtype: np.dtype, op: ops.Op
                ) -> AnyCodec | None:
    """The dense codec (or error feedback around one) a call of ``which`` compresses with,
    checked; None without one (``MPICOLL_CODEC`` is allreduce's)."""
    codec = codec_for_floats(codec, dtype)
    if codec is None:
        return None
    if which.reduces and op.name != "sum":
        raise ValueError(f"codecs compress sums, not {op.name!r}")
    if not codec.dense:
        raise ValueError(f"{which.name} compresses with dense codecs only ("
                         f"{', '.join(n for n in codecs.available() if codecs.get(n).dense)}): "
                         f"{codec.name} is sparse, allreduce's")
    return codec


def _kept(which: collective.Collective, dtype: Any, op: ops.Op, path: Any, ctx: context.Context,
         elements: int) -> str | None:
    """The algorithm ``auto``'s trials kept for a call whose larger buffer holds ``elements``,
    or None."""
    key = _key(which, dtype, op, path, ctx, elements)
    return None if key is None else ctx.trials.kept.get(key[0])


def auto_algorithm(which: collective.Collective, send: Any, path: Any, op: ops.Op,
                   ctx: context.Context, elements: int) -> str:
    """What ``auto`` runs: the algorithm its trials kept for this size class, or what ``tune``
    measured fastest on this layout (:func:`_measured`), else the rule:
    MPI's own where it can run the call as mpicoll does (not device memory staged for it, nor
    Open MPI's saturating small-integer sums), else ``ring`` (:data:`RING_FROM`) or, for the
    rooted collectives, ``binomial`` or ``tree`` (:data:`TREE_FROM`)."""
    chosen = _kept(which, send.dtype, op, path, ctx, elements)
    if chosen is not None:
        return chosen
    mpi_can = path.name != "staged" and (native.exact(send.dtype) or not which.reduces)
    nbytes = elements * send.dtype.itemsize
    measured = _measured(which, nbytes, mpi_can, op.commutative, ctx)
    if measured is not None:
        return measured
    if which.rooted:
        return "native" if mpi_can else "binomial" if nbytes < TREE_FROM else "tree"
    large = nbytes >= RING_FROM.get(which.name, nbytes + 1)
    return "ring" if op.commutative and (large or not mpi_can) else "native"


def own_up_to(which: collective.Collective) -> int:
    """Up to how many bytes ``auto`` tries MPI's own calls only, as samples (no Python schedule
    beats MPI's C below): ``select.OWN_UP_TO``, but 2 KiB for a reduce, which mpicoll's trees
    win from 4 KiB (``bench -C reduce``: 0.76x MPICH's own on 2 ranks, 0.53x on 4, where
    MPI's own calls ran 1.02-1.23x)."""
    return 2 << 10 if which is collective.REDUCE else select.OWN_UP_TO


def _key(which: collective.Collective, dtype: Any, op: ops.Op, path: Any, ctx: context.Context,
         elements: int) -> tuple[tuple, tuple[str, ...]] | None:
    """The key of ``auto``'s trials for a call whose larger buffer holds ``elements`` (the
    size class, the collective, dtype and op) and what they try (:func:`_shortlist`); None
    where nothing is tried: one rank, device memory, ``MPICOLL_AUTO=model``."""
    nbytes = elements * dtype.itemsize
    if ctx.size == 1 or path.name != "host" or _env.settings().auto == "model":
        return None
    mpi_can = native.exact(dtype) or not which.reduces
    if _measured(which, nbytes, mpi_can, op.commutative, ctx) is not None:
        return None  # (what tune measured on this layout decides)
    shortlist = _shortlist(which, nbytes > own_up_to(which), mpi_can, op.commutative,
                           threads_allow(), len(ctx.layout.nodes) == 1, registry.generation())
    if len(shortlist) < 2:
        return None
    return (select.size_class(nbytes), which.name, dtype.str, op.name), shortlist


@lru_cache(maxsize=256)
def _shortlist(which: collective.Collective, every: bool, mpi_can: bool, commutative: bool,
               threads: bool, one_node: bool, generation: int) -> tuple[str, ...]:
    """What ``auto``'s trials try: MPI's own two calls first (ties go to them; the blocking
    one only where threads allow it), then, above :func:`own_up_to` (``every``), every
    algorithm that plans the collective, takes the op and runs on this many nodes (on one
    node, none that would run another's plan there). Cached per registry ``generation``: a
    call's choice costs a lookup."""
    own = tuple(sorted((a.name for a in registry.registered(which.name)
                        if a.mpi and mpi_can and (threads or not a.blocks)),
                       key=lambda name: not registry.get(name, which.name).blocks))
    return own + (tuple(a.name for a in registry.registered(which.name)
                        if not a.mpi and (commutative or not a.needs_commutative)
                        and not (a.across_nodes if one_node else a.one_node))
                  if every else ())


def _measured(which: collective.Collective, nbytes: int, mpi_can: bool, commutative: bool,
              ctx: context.Context) -> str | None:
    """What ``tune`` measured fastest for ``which`` near ``nbytes`` on this layout (the
    tuning file in force, ``MPICOLL_TUNING``), where it can run this call; else None."""
    model = tuning.model_in_force()
    if model.measured_on != (ctx.size, len(ctx.layout.nodes)):
        return None
    among = tuple(a.name for a in registry.registered(which.name)
                  if (mpi_can or not a.mpi) and (commutative or not a.needs_commutative))
    return model.measured_pick(nbytes, ctx.size, len(ctx.layout.nodes), among, which.name)


def _elements(which: collective.Collective, given: Any, sendbuf: Any, counts: Any,
              p: int) -> int:
    """How many elements the larger buffer of a call holds (its size class is of them): the
    sum of ``counts``, else ``given`` times p where it is one block of the p received."""
    if counts is not None:
        return sum(int(c) for c in counts)
    return given.size * (p if which.receives_all and given is sendbuf else 1)


def _trial(which: collective.Collective, sendbuf: Any, recvbuf: Any, op: Any, comm: Any,
           counts: Any, counted: bool = True
           ) -> tuple[context.Context, tuple, tuple[str, ...]] | None:
    """A blocking ``auto`` call that is one of its trials, or a timed check of the kept choice
    (:class:`mpicoll.trials.Watch`, as allreduce's): its context, key and shortlist; else None.
    Each trial runs the next candidate, timed, and after the last the ranks keep the fastest
    for the size class (:class:`mpicoll.trials.Trials`). Every rank makes the same calls, so
    each reaches the same trial, and the same check, at the same call. ``counted``: the call
    is about to run (its size class's guard counts it)."""
    given = recvbuf if sendbuf is MPI.IN_PLACE or sendbuf is recvbuf else sendbuf
    if given is None or type(given) is not np.ndarray:
        return None  # (bad input, or device arrays: the full path says or decides)
    comm_ = communicator(comm)
    ctx = context.of(comm_)
    key = _key(which, given.dtype, ops.resolve("sum" if op is None else op, which.rooted),
               transport.choose(given), ctx, _elements(which, given, sendbuf, counts, ctx.size))
    if key is None or key[0] in ctx.trials.kept and not (counted
                                                        and ctx.trials.counted(key[0])):
        return None
    return ctx, *key


def trials_left(which: str, sendbuf: Array, recvbuf: Array | None = None, *, op: OpArg = "sum",
                comm: MPI.Intracomm | None = None, counts: Sequence[int] | None = None) -> int:
    """How many more blocking ``auto`` calls of collective ``which`` like this one are trials
    (a benchmark of the steady state warms up through them). The same on every rank."""
    trial = _trial(collective.get(which), sendbuf, recvbuf, op, comm, counts, counted=False)
    return 0 if trial is None else trial[0].trials.left(*trial[1:])


def choose_algorithm(which: str, sendbuf: Array, recvbuf: Array | None = None, *,
                     op: OpArg = "sum", comm: MPI.Intracomm | None = None,
                     counts: Sequence[int] | None = None) -> str:
    """Name the algorithm ``auto`` runs for a call of collective ``which`` with these
    arguments now (what its trials kept, or its rule); collective on first use."""
    which_ = collective.get(which)
    given = recvbuf if sendbuf is MPI.IN_PLACE or sendbuf is recvbuf else sendbuf
    xp = array_module(given)
    data = _array("sendbuf", given, xp)
    op_ = ops.resolve("sum" if op is None else op, which_.rooted)
    ctx = context.of(communicator(comm))
    return auto_algorithm(which_, data, transport.choose(data), op_, ctx,
                 _elements(which_, data, data if given is sendbuf else None, counts, ctx.size))


def _blocks(which: collective.Collective, counts: Any, p: int, size: int, in_place: bool
            ) -> tuple[int, ...]:
    """Every rank's block, in elements: ``counts`` checked, or equal blocks of the buffer that
    holds one per rank (sendbuf of a reduce_scatter, recvbuf in place) or of one (sendbuf of an
    allgather)."""
    if counts is None:
        if which.receives_all and not in_place:
            return (size,) * p
        if size % p:
            where = "recvbuf (in place)" if in_place else "sendbuf"
            raise ValueError(f"{which.name}: {where} holds {size} elements, not a multiple of "
                             f"the communicator's {p} ranks (a block per rank)")
        return (size // p,) * p
    try:
        sizes = tuple(operator.index(c) for c in counts)
    except TypeError:
        raise TypeError(f"{which.name}: counts must be integers, one per rank, not "
                        f"{counts!r}") from None
    if len(sizes) != p or min(sizes, default=0) < 0:
        raise ValueError(f"{which.name}: counts {list(sizes)} must give {p} counts (one per "
                         "rank), none negative")
    return sizes
