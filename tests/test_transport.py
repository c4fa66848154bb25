"""The GPU logic that needs no GPU: transport choice, staging plans and pinned-buffer reuse,
kernel and array-module selection, and the errors for mixing host and device arrays.

A fake ``cupy`` module (a NumPy subclass as its ndarray) stands in where the code only asks where
an array lives; nothing computes with it. The staged and direct paths themselves run on real
processes with NumPy standing in for device memory (tests/mpi/transport_cases.py).
"""

import subprocess
import sys
import types

import numpy as np
import pytest
from gpu_standin import StandIn

import mpicoll
from mpicoll import _array, codecs, cuda_aware, ops, transport
from mpicoll.algorithm import Frames, Layout, Options, build_schedule, get, names
from mpicoll.codecs import blocks, kernels
from mpicoll.schedule import Recv, Region, Round, Schedule, Send

CASES = "tests/mpi/transport_cases.py"
GPU_CASES = "tests/mpi/gpu_cases.py"


@pytest.fixture
def fake_cupy(monkeypatch):
    module = types.ModuleType("cupy")
    module.ndarray = type("ndarray", (np.ndarray,), {})
    for name in ("add", "multiply", "minimum", "maximum"):
        setattr(module, name, f"cupy.{name}")
    monkeypatch.setitem(sys.modules, "cupy", module)
    transport._cupy_transports.cache_clear()
    kernels._cupy_kernels.cache_clear()
    yield module
    transport._cupy_transports.cache_clear()
    kernels._cupy_kernels.cache_clear()


def device(module, *shape, dtype="f4"):
    return np.zeros(shape, dtype).view(module.ndarray)


# ---- detection and transport choice

def test_override_wins_both_ways(monkeypatch):
    monkeypatch.setenv(cuda_aware.OVERRIDE_ENV, "1")
    assert cuda_aware.detect() == cuda_aware.Answer(True, "MPICOLL_CUDA_AWARE=1")
    monkeypatch.setenv(cuda_aware.OVERRIDE_ENV, "0")
    assert cuda_aware.detect() == cuda_aware.Answer(False, "MPICOLL_CUDA_AWARE=0")
    monkeypatch.setenv(cuda_aware.OVERRIDE_ENV, "yes")
    with pytest.raises(ValueError, match="expected 0 or 1"):
        cuda_aware.detect()


def test_the_pypi_mpich_wheel_says_not_cuda_aware(monkeypatch):
    monkeypatch.delenv(cuda_aware.OVERRIDE_ENV, raising=False)
    answer = cuda_aware.detect()
    assert not answer.aware
    assert "MPIX_Query_cuda_support" in answer.source or "mpi_memory_alloc_kinds" in answer.source


def test_host_arrays_always_go_as_they_are(monkeypatch):
    monkeypatch.setenv(cuda_aware.OVERRIDE_ENV, "1")
    assert transport.choose(np.ones(3)) is transport.HOST
    assert transport.HOST.bind(None, None) is None  # the engine's NumPy path: nothing to do


@pytest.mark.parametrize("aware, name", [("1", "cuda-aware"), ("0", "staged")])
def test_device_arrays_follow_detection(fake_cupy, monkeypatch, aware, name):
    monkeypatch.setenv(cuda_aware.OVERRIDE_ENV, aware)
    chosen = transport.choose(device(fake_cupy, 4))
    assert chosen.name == name and isinstance(chosen.device, transport.CupyDevice)
    assert transport.choose(device(fake_cupy, 8)) is chosen  # one per process: pinned pool kept


def test_staged_without_an_answer_saying_yes(fake_cupy, monkeypatch):
    monkeypatch.delenv(cuda_aware.OVERRIDE_ENV, raising=False)
    assert transport.choose(device(fake_cupy, 4)).name == "staged"


def test_cupy_is_never_imported_for_host_work():
    code = ("import sys, numpy as np, mpicoll; from mpicoll import codecs, transport; "
            "mpicoll.allreduce(np.ones(5)); transport.choose(np.ones(1)); "
            "[codecs.get(n).decode_add(codecs.get(n).encode(np.ones(300, 'f4')), np.zeros(300, 'f4'))"
            " for n in codecs.available()]; assert 'cupy' not in sys.modules, 'imported'")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


# ---- array module, kernel and chunk selection

def test_array_module_and_kernels_follow_the_array(fake_cupy):
    host, dev = np.ones(4, "f4"), device(fake_cupy, 4)
    assert _array.array_module(host) is np and not _array.is_device(host)
    assert _array.array_module(dev) is fake_cupy and _array.is_device(dev)
    assert kernels.for_array(host) is kernels.NUMPY
    assert isinstance(kernels.for_array(dev), kernels.CupyKernels)
    assert ops.resolve("max").kernel_in(np) is np.maximum
    assert ops.resolve("avg").kernel_in(fake_cupy) == "cupy.add"
    assert blocks.chunk_elements(host) == blocks.CHUNK_ELEMENTS
    assert blocks.chunk_elements(device(fake_cupy, 10**6)) == 10**6  # one launch on a device


@pytest.mark.parametrize("dtype", ["f2", "f4", "f8"])
@pytest.mark.parametrize("add", [False, True])
def test_numpy_dequantize_rounds_the_float32_product_once(dtype, add):
    rng = np.random.default_rng(0)
    q = rng.integers(-127, 128, 1000).astype(np.int8)
    scales = rng.random(8).astype(np.float32)
    out = rng.standard_normal(1000).astype(dtype)
    expected = (q.astype(np.float32) * np.repeat(scales, 128)[:1000])
    expected = (out.astype(np.float64 if dtype == "f8" else np.float32) + expected) if add else expected
    kernels.NUMPY.dequantize(q, scales, 128, out, add)
    np.testing.assert_array_equal(out, expected.astype(dtype))


# ---- mixing host and device arrays

def test_mixing_in_allreduce_is_refused_before_anything_is_sent(fake_cupy):
    with pytest.raises(TypeError, match="cannot be mixed"):
        mpicoll.allreduce(device(fake_cupy, 4), np.zeros(4, "f4"))
    with pytest.raises(TypeError, match="cannot be mixed"):
        mpicoll.iallreduce(np.zeros(4, "f4"), device(fake_cupy, 4))
    with pytest.raises(TypeError, match="NumPy or CuPy"):
        mpicoll.allreduce([1.0, 2.0])


def test_a_user_op_on_device_arrays_is_refused(fake_cupy):
    """A user-defined MPI.Op runs through MPI_Reduce_local, which reads host memory."""
    from mpi4py import MPI
    op = MPI.Op.Create(lambda a, b, t: None, commute=True)
    try:
        with pytest.raises(TypeError, match="host arrays only"):
            mpicoll.allreduce(device(fake_cupy, 4), op=op)
    finally:
        op.Free()


@pytest.mark.parametrize("name", codecs.available())
def test_mixing_in_codecs_is_refused(fake_cupy, name):
    codec, x = codecs.get(name), np.ones(300, "f4")
    frame = codec.encode(x)
    with pytest.raises(TypeError, match="cannot be mixed"):
        codec.encode(x, out=device(fake_cupy, frame.size, dtype="u1"))
    with pytest.raises(TypeError, match="cannot be mixed"):
        codec.decode(frame, out=device(fake_cupy, 300))
    with pytest.raises(TypeError, match="cannot be mixed"):
        codec.decode_add(frame, device(fake_cupy, 300))
    with pytest.raises(TypeError, match="cannot be mixed"):
        codecs.ErrorFeedback(codec).decode_add(frame, device(fake_cupy, 300))


# ---- staging plans

def schedules():
    for name in names(plain=True, planned=True):
        for nodes in [((0, 1, 2, 3),), ((0, 1), (2, 3)), ((0,), (1,), (2,))]:
            if get(name).one_node and len(nodes) > 1:
                continue
            p = sum(map(len, nodes))
            for count in (0, 1, p + 1, 1000):
                for rank in range(p):
                    yield build_schedule(name, Layout(rank, p, nodes), count, Options(256, "<f8"))
    int8 = Frames(codecs.get("int8"), np.dtype("f4"))
    for rank in range(3):
        yield build_schedule("ring", Layout(rank, 3, ((0, 1, 2),)), 1001, Options(256, "<f4"), int8)


@pytest.mark.parametrize("schedule", list(schedules()), ids=lambda s: f"{s.algorithm}-{s.count}")
def test_staging_plan_gives_each_region_of_a_round_its_own_bytes(schedule):
    itemsize = 4 if schedule.wire_nbytes else 8  # the compressed plans above are float32

    def nbytes(r):
        return len(r) * (1 if r.buf == "wire" else itemsize)

    staged = transport.staging_plan(schedule, nbytes)
    assert len(staged.spans) == len(schedule.rounds)
    largest = 0
    for rnd, span, sends, recvs in zip(schedule.rounds, staged.spans, staged.sends, staged.recvs):
        assert set(span) == {t.region for t in rnd.transfers}
        ranges = sorted((s.start, s.stop) for s in span.values())
        assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:]))  # packed, no overlap
        assert all(span[r].stop - span[r].start == nbytes(r) for r in span)
        assert set(sends) == {t.region for t in rnd.transfers if isinstance(t, Send)}
        assert list(recvs) == [t.region for t in rnd.transfers if isinstance(t, Recv)]
        largest = max(largest, ranges[-1][1] if ranges else 0)
    assert staged.nbytes == largest


def test_staging_plan_of_a_ring_is_two_chunks_not_the_array():
    schedule = build_schedule("ring", Layout(1, 4, ((0, 1, 2, 3),)), 1000, Options(256, "<f4"))
    assert transport.staging_plan(schedule, lambda r: 4 * len(r)).nbytes == 2 * 250 * 4


def test_a_region_sent_twice_is_staged_once():
    a, b = Region("recv", 0, 10), Region("tmp", 0, 5)
    schedule = Schedule("x", 10, (Round((Send(1, a), Send(2, a), Recv(3, b)), ()),), 5)
    staged = transport.staging_plan(schedule, len)
    assert staged.sends == ((a,),) and staged.recvs == ((b,),)
    assert staged.spans[0] == {a: slice(0, 10), b: slice(10, 15)} and staged.nbytes == 15


def test_pinned_buffers_are_reused_smallest_first_and_bounded():
    staged = transport.Staged(StandIn())
    first = staged.take(100)
    assert first.size == 128  # powers of two, so nearby sizes share buffers
    staged.give_back(first)
    assert staged.take(120) is first
    big = staged.take(1000)
    staged.give_back(first)
    staged.give_back(big)
    assert staged.take(50) is first and staged.take(600) is big
    assert staged.device.allocated == [128, 1024]
    for n in range(transport.KEEP_PINNED + 3):
        staged.give_back(staged.device.pinned(n + 1))
    assert len(staged.free) == transport.KEEP_PINNED


# ---- the staged and direct paths on real processes

@pytest.mark.parametrize("nprocs", [1, 2, 3, 4])
def test_staged_and_direct_paths_give_the_host_bits(run_cases, nprocs):
    run_cases(CASES, nprocs)


@pytest.mark.parametrize("nprocs, per_node", [(4, 2), (5, 2)])
def test_staged_hybrid_on_emulated_nodes(run_cases, nprocs, per_node):
    run_cases(CASES, nprocs, select="hybrid or auto", env={"MPICOLL_RANKS_PER_NODE": str(per_node)})


def test_gpu_case_file_runs_on_its_numpy_backend(run_cases):
    """The GPU differential cases run here with NumPy only (CuPy cases skip), so the file the GPU
    check runs cannot rot unnoticed."""
    run_cases(GPU_CASES, 2)


def test_staged_pinned_buffers_are_taken_by_identity():
    """Several free pinned buffers (requests in flight together): taking the best fit that is
    not the first free one never compares arrays element by element (list.remove did: a
    ValueError)."""
    staged = transport.Staged(StandIn())
    big, small, other = staged.take(200), staged.take(64), staged.take(64)
    for buf in (big, small, other):
        staged.give_back(buf)
    assert staged.take(64) is small and staged.take(64) is other and staged.take(64) is big
    assert staged.free == []
