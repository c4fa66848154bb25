"""CuPy device buffers on a GPU: codecs and kernels against their NumPy results, and the
differential cases (tests/mpi/gpu_cases.py) on several ranks sharing the GPU.

Skipped where CuPy or a GPU is absent (CI); benchmarks/gpu_check.sh runs them on a GPU machine.
"""

import numpy as np
import pytest

import mpicoll
from mpicoll import codecs, cuda_aware
from mpicoll.codecs import kernels

cupy = pytest.importorskip("cupy")
try:
    GPUS = cupy.cuda.runtime.getDeviceCount()
except cupy.cuda.runtime.CUDARuntimeError:
    GPUS = 0
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not GPUS, reason="no GPU")]

SEEDED = {"topk": {"seed": 1}, "threshold": {"seed": 1}, "int8": {}, "fp16": {}, "bf16": {},
          "sign": {}}
CASES = "tests/mpi/gpu_cases.py"


def normal(n, dtype="f4", seed=0):
    x = np.random.default_rng(seed).standard_normal(n).astype(dtype)
    x[::97] *= 1000  # blocks with one large value
    return x


@pytest.mark.parametrize("name", codecs.available())
@pytest.mark.parametrize("dtype", ["f2", "f4", "f8"])
def test_device_frames_are_the_host_frames(name, dtype):
    x = normal(100_003, dtype)
    host = codecs.get(name, **SEEDED[name]).encode(x)
    dev = codecs.get(name, **SEEDED[name]).encode(cupy.asarray(x))
    assert isinstance(dev, cupy.ndarray)
    if name == "sign":  # block means are summed in another order on the GPU: same size, close
        assert dev.size == host.size
        np.testing.assert_allclose(codecs.decode(dev.get()), codecs.decode(host), rtol=1e-3)
    else:
        assert dev.get().tobytes() == host.tobytes()


@pytest.mark.parametrize("name", codecs.available())
@pytest.mark.parametrize("acc_dtype", ["f2", "f4", "f8"])
def test_device_decode_and_decode_add_are_the_host_bits(name, acc_dtype):
    x = normal(50_001, "f4", seed=2)
    frame = codecs.get(name, **SEEDED[name]).encode(x)
    codec = codecs.get(name)
    assert codec.decode(cupy.asarray(frame)).get().tobytes() == codec.decode(frame).tobytes()
    acc = normal(50_001, acc_dtype, seed=3)
    dev = cupy.asarray(acc)
    codec.decode_add(cupy.asarray(frame), dev)
    assert dev.get().tobytes() == codec.decode_add(frame, acc).tobytes()


@pytest.mark.parametrize("name", ["int8", "sign", "topk"])
def test_misaligned_device_slots(name):
    """Compressed plans pack frame slots at any byte offset; CUDA needs aligned scales."""
    codec, x = codecs.get(name, **SEEDED[name]), normal(1001)
    frame = codec.encode(x)
    wire = cupy.zeros(frame.size + 3, cupy.uint8)
    codecs.get(name, **SEEDED[name]).encode(cupy.asarray(x), out=wire[3:])
    assert wire[3:].get().tobytes() == frame.tobytes()
    assert codec.decode(wire[3:]).get().tobytes() == codec.decode(frame).tobytes()


@pytest.mark.parametrize("dtype", ["f2", "f4", "f8"])
@pytest.mark.parametrize("stochastic", [False, True])
def test_fused_int8_kernels_are_the_numpy_bits(dtype, stochastic):
    block = 128
    x = normal(block * 300, dtype).reshape(-1, block)
    x[5, 7], x[9, 0] = np.nan, np.inf
    work = np.float64 if dtype == "f8" else np.float32
    with np.errstate(all="ignore"):
        scale = (np.abs(x).max(axis=1).astype(work) / 127).astype(np.float32)
        scale[~np.isfinite(scale)] = np.nan
        inv = np.where(scale > 0, 1 / scale.astype(work), 0).astype(work)
    noise = np.random.default_rng(0).random(x.shape, dtype=work) if stochastic else None
    q_host, q_dev = np.empty(x.shape, np.int8), cupy.empty(x.shape, cupy.int8)
    kernels.NUMPY.quantize(x, inv, q_host, noise)
    fused = kernels.for_array(q_dev)
    assert isinstance(fused, kernels.CupyKernels)
    fused.quantize(cupy.asarray(x), cupy.asarray(inv), q_dev,
                   None if noise is None else cupy.asarray(noise))
    assert q_dev.get().tobytes() == q_host.tobytes()
    for add in (False, True):
        out = normal(q_host.size, dtype, seed=4)
        dev = cupy.asarray(out)
        kernels.NUMPY.dequantize(q_host.reshape(-1), scale, block, out, add)
        fused.dequantize(cupy.asarray(q_host.reshape(-1)), cupy.asarray(scale), block, dev, add)
        assert dev.get().tobytes() == out.tobytes()


def test_one_rank_results_stay_on_the_device_and_mixing_is_refused():
    x = cupy.arange(10, dtype=cupy.float32)
    out = mpicoll.allreduce(x, op="max")
    assert isinstance(out, cupy.ndarray) and out.get().tolist() == list(range(10))
    with pytest.raises(TypeError, match="cannot be mixed"):
        mpicoll.allreduce(x, np.empty(10, np.float32))
    with pytest.raises(TypeError, match="cannot be mixed"):
        codecs.get("int8").decode_add(codecs.get("int8").encode(np.ones(10, "f4")), x)


def transports():
    yield "0"
    if cuda_aware.detect().aware:  # forcing "1" on an MPI that is not CUDA-aware crashes it
        yield "1"


@pytest.mark.parametrize("aware", list(transports()), ids=lambda a: {"0": "staged", "1": "direct"}[a])
@pytest.mark.parametrize("nprocs", [1, 2, 4])
def test_differential_cases_on_ranks_sharing_the_gpu(run_cases, nprocs, aware):
    out = run_cases(CASES, nprocs, env={cuda_aware.OVERRIDE_ENV: aware}, timeout=300)
    assert "no GPU" not in out  # run_cases lists skip reasons: no CuPy case may have skipped
