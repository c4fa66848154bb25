"""Bucketed, overlapped allreduce cases, run on every rank under mpiexec (tests/test_overlap.py)."""

import numpy as np
import pytest
from helpers import WORLD, assert_everywhere, same_on_all_ranks
from mpi4py import MPI

import mpicoll
from mpicoll import codecs, timing
from mpicoll.algorithm import get, names
from mpicoll.overlap import BucketManager, overlap_percent
from mpicoll.sharded import ShardedBucketManager

ALGORITHMS = list(names(plain=True)) + ["auto"]  # every registered plain algorithm, and auto
SIZES = [1000, 30_000, 7, 70_000, 2_000, 1]


def gradients(seed):
    rng = np.random.default_rng([WORLD.Get_rank(), seed])
    return {f"layer{i}": rng.standard_normal(n).astype("f4") for i, n in enumerate(SIZES)}


def callbacks(grads, values, order):
    """One callback per tensor, in ``order``: it 'computes' the gradient and reports it ready."""
    def make(name):
        def backward():
            np.copyto(grads[name], values[name])
            return [name]
        return backward
    return [make(name) for name in order]


def expected(manager, values, codec=None):
    """What the blocking allreduce gives for each bucket's flat buffer, with the algorithm the
    bucket ran (auto's for a nonblocking call: its trials are the blocking calls'); for an
    algorithm whose blocking call is MPI's blocking collective (native-blocking), what its
    nonblocking form, which buckets run, gives: Open MPI adds in another order there at 3 and
    5 ranks."""
    out = {}
    for b in manager.buckets:
        flat = np.concatenate([values[manager.names[i]] for i in b.members])
        algorithm = manager.algorithm if manager.algorithm != "auto" else \
            mpicoll.choose_algorithm(flat, op="avg", codec=codec)
        if get(algorithm).blocks:
            mpicoll.iallreduce(flat, flat, op="avg", algorithm=algorithm).wait()
        else:
            mpicoll.allreduce(flat, flat, op="avg", algorithm=algorithm, codec=codec)
        for i, start in zip(b.members, b.offsets):
            out[manager.names[i]] = flat[start:start + values[manager.names[i]].size]
    return out


@pytest.mark.parametrize("policy", ["test", "thread", "none"])
@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_buckets_equal_blocking_allreduce_whatever_the_readiness_order(policy, algorithm):
    grads = {k: np.zeros_like(v) for k, v in gradients(0).items()}
    manager = BucketManager(grads, bucket_bytes=64_000, first_bucket_bytes=4_000,
                            algorithm=algorithm, progress=policy)
    assert len(manager.buckets) > 2
    for step in range(3):
        values = gradients(step)
        order = list(np.random.default_rng([WORLD.Get_rank(), step]).permutation(list(grads)))
        metrics = manager.run(callbacks(grads, values, order))
        want = expected(manager, values)
        ok = all(grads[k].tobytes() == want[k].tobytes() for k in grads)
        assert_everywhere(WORLD, ok, f"step {step}: bucketed result != blocking allreduce")
        assert len(metrics.bucket_seconds) == len(manager.buckets)
        assert metrics.t_overall >= metrics.t_compute >= 0


def test_benchmark_reference_on_mpi_iallreduce_matches_native():
    """benchmarks/overlap.py --native: the same buckets through MPI_Iallreduce, compared with
    the MPI library's blocking Allreduce of each bucket (integer-valued, so order-free)."""
    from benchmarks.overlap import NativeBuckets
    values = {k: np.round(v * 8) for k, v in gradients(5).items()}
    grads = {k: np.zeros_like(v) for k, v in values.items()}
    manager = NativeBuckets(grads, bucket_bytes=64_000, first_bucket_bytes=4_000, op="sum",
                            progress="thread")
    manager.run(callbacks(grads, values, list(grads)))
    ok = True
    for b in manager.buckets:
        flat = np.concatenate([values[manager.names[i]] for i in b.members])
        WORLD.Allreduce(MPI.IN_PLACE, flat)
        ok &= all(grads[manager.names[i]].tobytes() == flat[s:s + grads[manager.names[i]].size].tobytes()
                  for i, s in zip(b.members, b.offsets))
    assert_everywhere(WORLD, ok, "the benchmark's MPI_Iallreduce buckets != MPI_Allreduce")


def test_codecs_in_buckets_one_state_each():
    grads = {k: np.zeros_like(v) for k, v in gradients(0).items()}
    make = lambda: codecs.ErrorFeedback(codecs.get("int8"))  # noqa: E731
    manager = BucketManager(grads, bucket_bytes=64_000, first_bucket_bytes=4_000, codec=make)
    assert len({id(b.codec) for b in manager.buckets}) == len(manager.buckets)
    values = gradients(1)
    manager.run(callbacks(grads, values, list(grads)))
    assert all(same_on_all_ranks(WORLD, g) for g in grads.values())
    fp16 = BucketManager({k: np.zeros_like(v) for k, v in grads.items()}, codec="fp16")
    fp16.run(callbacks(fp16.tensors_by_name, values, list(grads)))
    want = expected(fp16, values, codec="fp16")
    assert_everywhere(WORLD, all(np.array_equal(fp16.tensors_by_name[k], want[k]) for k in grads),
                      "fp16 buckets != blocking fp16 allreduce")


def test_layout_mismatch_fails_on_every_rank():
    """A rank with a different tensor list must not hang the others or mix their data."""
    grads = gradients(0)
    if WORLD.Get_rank() == WORLD.Get_size() - 1 and WORLD.Get_size() > 1:
        grads["layer1"] = np.zeros(29_999, "f4")
    if WORLD.Get_size() == 1:
        pytest.skip("one rank cannot disagree with itself")
    with pytest.raises(ValueError, match="bucket layouts differ between ranks"):
        BucketManager(grads)


def test_renamed_tensor_is_a_mismatch():
    grads = gradients(0)
    if WORLD.Get_size() == 1:
        pytest.skip("one rank cannot disagree with itself")
    if WORLD.Get_rank() == 0:
        grads = dict(reversed(list(grads.items())))
    with pytest.raises(ValueError, match="bucket layouts differ"):
        BucketManager(grads)


def test_bad_use_is_refused():
    grads = gradients(0)
    with pytest.raises(ValueError, match="unknown progress policy"):
        BucketManager(grads, progress="magic")
    with pytest.raises(TypeError, match="stateful codecs"):
        BucketManager(grads, codec=codecs.ErrorFeedback(codecs.get("int8")))
    with pytest.raises(ValueError, match="MPIR_CVAR_ASYNC_PROGRESS"):
        BucketManager(grads, progress="mpi")
    manager = BucketManager(grads)
    with pytest.raises(ValueError, match="never marked ready"):
        manager.run([lambda: ["layer0"]])


def test_then_waitall_testall():
    x = np.full(1000, WORLD.Get_rank(), "f8")
    requests = [mpicoll.iallreduce(x, algorithm=a).then(lambda r: r.sum()) for a in ("ring", "tree")]
    while not mpicoll.testall(requests):
        pass
    total = sum(range(WORLD.Get_size())) * 1000
    assert mpicoll.waitall(requests) == [total, total]


def test_overlap_percent_is_osus():
    assert overlap_percent(t_overall=10, t_compute=10, t_pure_comm=4) == 100
    assert overlap_percent(t_overall=14, t_compute=10, t_pure_comm=4) == 0
    assert overlap_percent(t_overall=11, t_compute=10, t_pure_comm=4) == 75


def test_as_views_writes_into_the_buckets():
    grads = {k: np.zeros_like(v) for k, v in gradients(0).items()}
    manager = BucketManager(grads, bucket_bytes=64_000, first_bucket_bytes=4_000, as_views=True)
    views = manager.tensors_by_name
    assert all(np.shares_memory(views[k], b.flat) for b in manager.buckets
               for k in [manager.names[i] for i in b.members])
    values = gradients(2)
    manager.run(callbacks(views, values, list(grads)))
    want = expected(manager, values)
    assert_everywhere(WORLD, all(views[k].tobytes() == want[k].tobytes() for k in grads),
                      "views != blocking allreduce")


def test_each_bucket_leaves_a_timing_record_per_step():
    """Persistent starts record nothing themselves: the manager keeps one record per bucket."""
    grads = {k: np.zeros_like(v) for k, v in gradients(0).items()}
    manager = BucketManager(grads, bucket_bytes=64_000, first_bucket_bytes=4_000, codec="topk")
    with timing.recording() as rec:
        for step in range(2):
            manager.run(callbacks(grads, gradients(step), list(grads)))
    assert [r.count for r in rec.records] == 2 * [b.flat.size for b in manager.buckets]
    assert all(r.t1 >= r.t0 and r.op == "avg" and r.ranks == WORLD.size for r in rec.records)
    # what ran: sparse-allgather, or the dense algorithm it fell back to, as the request says
    assert [(r.algorithm, r.codec) for r in rec.records[-len(manager.buckets):]] == \
        [(b.persistent.algorithm, b.persistent.codec) for b in manager.buckets]
    assert {r.codec for r in rec.records} <= {"topk", "topk:dense-fallback"}


# ---- sharded buckets: reduce_scatter, an update of this rank's block, allgather

def sharded(algorithm="auto", policy="test", codec=None):
    """A sharded manager of ``gradients``' shapes, its parameters the same on every rank; with
    the arrays it manages."""
    params = {f"layer{i}": np.random.default_rng([7, i]).standard_normal(n).astype("f4")
              for i, n in enumerate(SIZES)}  # (seeded alike on every rank)
    grads = {k: np.zeros_like(v) for k, v in params.items()}
    manager = ShardedBucketManager(grads, params, bucket_bytes=64_000, first_bucket_bytes=4_000,
                                   algorithm=algorithm, progress=policy, codec=codec)
    return manager, grads, params


def sgd(seen):
    def update(k, shard):
        seen.append(k)
        shard.params[...] -= 0.5 * shard.grads
    return update


@pytest.mark.parametrize("policy", ["test", "thread"])
@pytest.mark.parametrize("algorithm", ["ring", "native", "auto"])
def test_sharded_steps_are_an_allreduce_then_the_update(policy, algorithm):
    """Every rank's parameters after three steps: those of MPI's own Allreduce of the
    gradients, averaged, then the same update (to float rounding), the same bits on every rank;
    through ring, the bits of mpicoll's ring allreduce (the unsharded manager's). Parameters are
    waited for before the steps, or on demand by the callbacks (step 1)."""
    manager, grads, params = sharded(algorithm, policy)
    assert len(manager.buckets) > 2
    mpi_own = {k: v.astype("f8") for k, v in params.items()}
    ring = {k: v.copy() for k, v in params.items()}
    p = WORLD.Get_size()
    for step in range(3):
        values = gradients(step)
        order = list(np.random.default_rng([WORLD.Get_rank(), step]).permutation(list(grads)))
        steps = callbacks(grads, values, order)
        if step == 1:  # a callback asks for the parameters it reads
            steps.insert(0, lambda: manager.gathered(*params) and None)
        seen = []
        metrics = manager.run(steps, sgd(seen), on_demand=step == 1)
        assert metrics.t_overall >= metrics.t_compute >= 0
        assert seen == list(range(len(manager.buckets)))
        assert all(np.array_equal(grads[k], values[k]) for k in grads)  # read, never written
        for k, v in values.items():
            total = v.astype("f8")
            WORLD.Allreduce(MPI.IN_PLACE, total)
            mpi_own[k] -= 0.5 * (total / p)
        if algorithm == "ring":
            for k, g in expected(manager, values).items():
                ring[k] -= 0.5 * g
    manager.gathered()
    close = all(np.allclose(params[k], mpi_own[k], rtol=1e-4, atol=1e-5) for k in params)
    assert_everywhere(WORLD, close, "sharded steps != MPI_Allreduce, then the update")
    assert all(same_on_all_ranks(WORLD, v) for v in params.values())
    if algorithm == "ring":
        assert_everywhere(WORLD, all(np.array_equal(params[k], ring[k]) for k in params),
                          "sharded ring != ring allreduce, then the update")


def test_sharded_compression_is_the_compressed_reduce_scatters():
    """int8 with error feedback, one state per bucket: each step's averaged gradient shard has
    the bits of ``reduce_scatter`` of the bucket divided by p, with an ErrorFeedback of its own
    carried across the steps; the parameters stay the same bits on every rank."""
    make = lambda: codecs.ErrorFeedback(codecs.get("int8"))  # noqa: E731
    manager, grads, params = sharded(codec=make)
    mine = [make() for _ in manager.buckets]
    p, me = WORLD.Get_size(), WORLD.Get_rank()
    for step in range(2):
        values = gradients(step)
        manager.run(callbacks(grads, values, list(grads)), sgd([]))
        ok = True
        for b, feedback, shard in zip(manager.buckets, mine, manager.shards):
            flat = np.concatenate([values[manager.names[i]] for i in b.members]) * np.float32(1 / p)
            counts = [len(c) for c in np.array_split(np.arange(flat.size), p)]
            want = mpicoll.reduce_scatter(flat, codec=feedback, counts=counts)
            ok &= want.tobytes() == shard.grads.tobytes() and shard.start == sum(counts[:me])
        assert_everywhere(WORLD, ok, f"step {step}: compressed shards != reduce_scatter's")
    manager.gathered()
    assert all(same_on_all_ranks(WORLD, v) for v in params.values())


def test_sharded_bad_use_is_refused_on_every_rank():
    grads = gradients(0)
    params = {k: np.zeros_like(v) for k, v in grads.items()}
    if WORLD.Get_rank() == WORLD.Get_size() - 1:
        params["layer1"] = np.zeros(29_999, "f4")
    with pytest.raises(ValueError, match=f"rank {WORLD.Get_size() - 1}: param 'layer1'"):
        ShardedBucketManager(grads, params)
    params["layer1"] = np.zeros(30_000, "f4")
    with pytest.raises(ValueError, match="sparse"):
        ShardedBucketManager(grads, params, codec="topk")
    manager = ShardedBucketManager(grads, params)
    with pytest.raises(TypeError):
        manager.run(callbacks(grads, gradients(1), list(grads)))  # no update
    other = WORLD.Dup()
    with pytest.raises(RuntimeError, match="cannot move to another communicator"):
        manager.on(other)
    other.Free()
    manager.run(callbacks(grads, gradients(1), list(grads)), sgd([]))  # still runs
    manager.gathered()
    assert all(same_on_all_ranks(WORLD, v) for v in params.values())


def test_sharded_steps_leave_a_reduce_scatter_and_an_allgather_record_per_bucket():
    manager, grads, _ = sharded()
    n = len(manager.buckets)
    with timing.recording() as rec:
        for step in range(2):
            manager.run(callbacks(grads, gradients(step), list(grads)), sgd([]))
        manager.gathered()
    assert sorted(r.collective for r in rec.records) == 2 * n * ["allgather"] + 2 * n * ["reduce_scatter"]
    assert all(r.t1 >= r.t0 and r.ranks == WORLD.size for r in rec.records)
    assert [r.count for r in rec.records if r.collective == "allgather"] == \
        2 * [len(s.params) for s in manager.shards]
