"""The differential cases over NumPy and CuPy buffers, run on every rank under mpiexec.

tests/test_gpu.py runs them on a GPU (several ranks sharing it), once staged and once directly
when the MPI library is CUDA-aware; tests/test_transport.py runs the NumPy half everywhere, so
this file cannot rot where no GPU is present. Integer-valued data sum exactly in any order, so
device results must be MPI's own Allreduce bit for bit; compressed ones the bits the NumPy path
gives for the codecs whose arithmetic is exact on both (casts, max, products), within the codec's
bound otherwise.
"""

import numpy as np
import pytest
from helpers import MPI_OPS, WORLD, assert_everywhere, data, native, same_on_all_ranks

import mpicoll
from mpicoll import codecs, cuda_aware, timing
from mpicoll._array import to_host as host
from mpicoll.algorithm import names

ALGORITHMS = list(names(plain=True)) + ["auto"]  # every registered plain algorithm, and auto
DENSE_ALGORITHMS = list(names(compresses="dense"))  # every algorithm that runs dense codecs
EXACT_CODECS = ["fp16", "bf16", "int8", "topk"]  # same bits on host and device
OTHER_CODECS = {"sign": 1.5, "threshold": 1.0}   # relative L2 error bounds on normal data


@pytest.fixture(params=["numpy", "cupy"])
def xp(request):
    """The array module of the buffers; CuPy only where it and a GPU are present."""
    if request.param == "numpy":
        return np
    cupy = pytest.importorskip("cupy")
    try:
        gpus = cupy.cuda.runtime.getDeviceCount()
    except cupy.cuda.runtime.CUDARuntimeError:
        gpus = 0
    if not gpus:
        pytest.skip("no GPU")
    cupy.cuda.Device(WORLD.Get_rank() % gpus).use()  # ranks share the GPUs there are
    return cupy


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize("op", list(MPI_OPS))
@pytest.mark.parametrize("dtype", ["i4", "u1", "f4", "f8", "c16"])
def test_matches_native_and_stays_on_the_device(xp, algorithm, op, dtype):
    if dtype == "c16" and op in ("min", "max"):
        pytest.skip("min/max are undefined for complex")
    p, ok = WORLD.Get_size(), True
    for count in (0, 1, p + 1, 1000, 70_001):
        for inplace in (False, True):
            x = data(WORLD, count, dtype, op)
            ref = native(WORLD, x, op)
            given = xp.asarray(x)
            out = mpicoll.allreduce(given, given if inplace else None, op=op, algorithm=algorithm)
            ok &= isinstance(out, xp.ndarray) and host(out).tobytes() == ref.tobytes()
            ok &= inplace or host(given).tobytes() == x.tobytes()
    assert_everywhere(WORLD, ok, f"{xp.__name__} result differs from MPI's")


@pytest.mark.parametrize("algorithm", DENSE_ALGORITHMS)
@pytest.mark.parametrize("name", EXACT_CODECS + list(OTHER_CODECS))
def test_compressed_on_the_device(xp, algorithm, name):
    ok = True
    for count in (1, 97, 100_003):
        x = np.random.default_rng([WORLD.Get_rank(), count]).standard_normal(count).astype("f4")
        ref = mpicoll.allreduce(x, algorithm=algorithm, codec=codecs.get(name, **_seeded(name)))
        out = host(mpicoll.allreduce(xp.asarray(x), algorithm=algorithm,
                                     codec=codecs.get(name, **_seeded(name))))
        ok &= same_on_all_ranks(WORLD, out)
        if name in EXACT_CODECS:
            ok &= out.tobytes() == ref.tobytes()
        else:
            exact = native(WORLD, x, "sum")
            ok &= np.linalg.norm(out - exact) <= OTHER_CODECS[name] * np.linalg.norm(exact)
    assert_everywhere(WORLD, ok, f"{name} on {xp.__name__} differs")


def test_error_feedback_keeps_its_residual_where_the_data_are(xp):
    codec = codecs.ErrorFeedback(codecs.get("int8"))
    x = xp.asarray(np.random.default_rng(WORLD.Get_rank()).standard_normal(5000).astype("f4"))
    for _ in range(3):
        out = mpicoll.allreduce(x, op="sum", codec=codec, algorithm="ring")
    ok = isinstance(out, xp.ndarray) and isinstance(codec.owed(x), xp.ndarray)
    assert_everywhere(WORLD, ok, "residual moved between host and device")


def test_request_and_record_say_which_path_ran(xp):
    with timing.recording() as rec:
        request = mpicoll.iallreduce(xp.ones(100, "f4"), algorithm="ring")
        request.wait()
    expected = "host" if xp is np else ("cuda-aware" if cuda_aware.detect().aware else "staged")
    ok = request.transport == rec.records[-1].transport == expected
    assert_everywhere(WORLD, ok, f"{request.transport} / {rec.records[-1].transport} != {expected}")


def test_several_requests_in_flight(xp):
    xs = [data(WORLD, n, "f8", "sum", seed=n) for n in (10, 3000, 200_000)]
    requests = [mpicoll.iallreduce(xp.asarray(x), algorithm=a) for x, a in
                zip(xs, ["tree", "ring", "hybrid"])]
    outs = [host(o) for o in mpicoll.waitall(requests)]
    ok = all(o.tobytes() == native(WORLD, x, "sum").tobytes() for o, x in zip(outs, xs))
    assert_everywhere(WORLD, ok, "concurrent requests")


def _seeded(name):
    return {"seed": 5} if name in ("topk", "threshold") else {}
