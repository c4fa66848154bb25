"""The staged and direct transports on real processes, with NumPy standing in for device memory
(tests/gpu_standin.py); run under mpiexec by tests/test_transport.py.

Whatever the transport, the result must be the bits the host path gives.
"""

import numpy as np
import pytest
from helpers import WORLD, assert_everywhere, data
from gpu_standin import StandIn

import mpicoll
from mpicoll import codecs, context, fastpath, timing, transport
from mpicoll.algorithm import names

ALGORITHMS = list(names(plain=True)) + ["auto"]  # every registered plain algorithm, and auto
DENSE_ALGORITHMS = list(names(compresses="dense"))  # every algorithm that runs dense codecs
CODECS = [None, "fp16", "bf16", "int8", "sign", "topk", "threshold"]


def make(codec):
    """A fresh codec each run (sparse codecs keep random streams and thresholds)."""
    return None if codec is None else codecs.get(codec, **({"seed": 3} if codec in
                                                         ("topk", "threshold") else {}))


@pytest.fixture(params=["staged", "cuda-aware"])
def path(request, monkeypatch):
    """Every call takes this transport, as a CuPy array would on a GPU (whose calls never take
    the fast path, which is for NumPy arrays: the stand-in's are NumPy, so it is kept off)."""
    device = StandIn()
    chosen = transport.Staged(device) if request.param == "staged" else transport.Direct(device)
    monkeypatch.setattr(transport, "choose", lambda array: chosen)
    monkeypatch.setattr(fastpath.LoweredCall, "make", staticmethod(lambda *args: None))
    for ctx in context.live():
        ctx.forget_lowered()
    return chosen


def host_result(x, **kwargs):
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(transport, "choose", lambda array: transport.HOST)
        return mpicoll.allreduce(x, **kwargs)


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize("op, dtype", [("sum", "i4"), ("sum", "f8"), ("max", "u1"), ("prod", "c8")])
@pytest.mark.parametrize("inplace", [False, True], ids=["out-of-place", "in-place"])
def test_plain_same_bits_as_host(path, algorithm, op, dtype, inplace):
    if algorithm in ("native", "native-blocking") and path.name == "staged":  # MPI itself
        with pytest.raises(ValueError, match="needs host arrays or a CUDA-aware MPI"):  # cannot
            mpicoll.allreduce(data(WORLD, 5, dtype, op), op=op, algorithm=algorithm)
        return
    p, ok = WORLD.Get_size(), True
    for count in (0, 1, p + 1, 1000):
        x = data(WORLD, count, dtype, op)
        ran = mpicoll.choose_algorithm(x, op=op, algorithm=algorithm)  # auto: never native here
        ref = host_result(x.copy(), op=op, algorithm=ran)
        before = x.copy()
        out = mpicoll.allreduce(x, x if inplace else None, op=op, algorithm=algorithm)
        ok &= out.tobytes() == ref.tobytes() and (inplace or x.tobytes() == before.tobytes())
    assert_everywhere(WORLD, ok, f"{path.name} differs from host")


@pytest.mark.parametrize("algorithm", DENSE_ALGORITHMS)
@pytest.mark.parametrize("codec", CODECS[1:])
@pytest.mark.parametrize("feedback", [False, True], ids=["plain", "ef"])
def test_compressed_same_bits_as_host(path, algorithm, codec, feedback):
    wrap = codecs.ErrorFeedback if feedback else (lambda c: c)
    ok = True
    for count in (1, 97, 5000):
        x = np.random.default_rng([WORLD.Get_rank(), count]).standard_normal(count).astype("f4")
        ref_codec, codec_here = wrap(make(codec)), wrap(make(codec))
        ref = host_result(x, op="avg", algorithm=algorithm, codec=ref_codec)
        out = mpicoll.allreduce(x, op="avg", algorithm=algorithm, codec=codec_here)
        ok &= out.tobytes() == ref.tobytes()
        if feedback:
            ok &= ref_codec.residual.tobytes() == codec_here.residual.tobytes()
    assert_everywhere(WORLD, ok, f"{codec} over {path.name} differs from host")


def test_staging_buffers_are_reused_and_copies_match_the_plan(path):
    if path.name != "staged":
        pytest.skip("only the staged transport copies")
    device, p = path.device, WORLD.Get_size()
    x = data(WORLD, 10_000, "f4", "sum")
    mpicoll.allreduce(x, algorithm="ring")
    allocated, out, back = list(device.allocated), device.to_host_bytes, device.to_device_bytes
    for _ in range(5):
        mpicoll.allreduce(x, algorithm="ring")
    ok = device.allocated == allocated  # no new pinned memory after the first call
    ok &= len(allocated) == 1 and allocated[0] >= 2 * 4 * (10_000 // p) * (p > 1)
    # a ring sends and receives one chunk in each of its 2(p-1) rounds
    ok &= (out > 0) == (back > 0) == (p > 1) and out <= 2 * (p - 1) * 4 * -(-10_000 // p)
    ok &= device.to_host_bytes == 6 * out and device.to_device_bytes == 6 * back
    assert_everywhere(WORLD, ok, f"allocated {device.allocated}, copied {out} and {back}")


def test_requests_in_flight_each_stage_their_own(path):
    xs = [data(WORLD, n, "f8", "sum", seed=n) for n in (10, 3000, 70_000)]
    refs = [host_result(x, algorithm="ring") for x in xs]
    requests = [mpicoll.iallreduce(x, algorithm="ring") for x in xs]
    outs = mpicoll.waitall(requests)
    assert_everywhere(WORLD, all(o.tobytes() == r.tobytes() for o, r in zip(outs, refs)),
                      "concurrent requests mixed their staging")


def test_request_and_record_name_the_transport(path):
    with timing.recording() as rec:
        request = mpicoll.iallreduce(np.ones(100, "f4"), algorithm="ring")
        request.wait()
    ok = request.transport == path.name == rec.records[-1].transport
    assert_everywhere(WORLD, ok, f"{request.transport!r}, {rec.records[-1].transport!r}")


@pytest.mark.parametrize("which", ["allgather", "reduce_scatter"])
def test_allgather_and_reduce_scatter_same_bits_as_host(path, which):
    """ring through the transport, as a CuPy array's call: the host path's bits; auto runs
    ring where the buffers are staged (MPI's own cannot take them), native refuses them."""
    p, ok = WORLD.Get_size(), True
    call = getattr(mpicoll, which)
    for n in (0, 1, p + 1, 1000):
        x = data(WORLD, n * (p if which == "reduce_scatter" else 1), "f8", "sum")
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(transport, "choose", lambda array: transport.HOST)
            ref = call(x, algorithm="ring")
        request = getattr(mpicoll, "i" + which)(x)
        ok &= np.array_equal(call(x, algorithm="ring"), ref) and \
            np.array_equal(request.wait(), ref) and \
            request.algorithm == ("ring" if path.name == "staged" else "native")
    if path.name == "staged":
        with pytest.raises(ValueError, match="needs host arrays or a CUDA-aware MPI"):
            call(data(WORLD, p, "f8", "sum"), algorithm="native")
    assert_everywhere(WORLD, ok, f"{which} through the {path.name} transport")
