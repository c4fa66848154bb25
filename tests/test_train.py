"""`python -m mpicoll train` on scikit-learn's digits, under mpiexec as a user runs it: the deep
MLP learns, and its replicas end bitwise identical whatever codec, buckets and policy carry the
gradients. Each run takes a few seconds."""

import json
import math
import sys

import pytest
from mpi4py import MPI

from mpicoll import demo

LIBRARY = MPI.get_vendor()[0]


def train(mpirun, tmp_path, nprocs, *options):
    """Run the training on ``nprocs`` ranks; return its JSON result and what rank 0 printed."""
    path = tmp_path / "train.json"
    out = mpirun(nprocs, "-m", "mpicoll", "train", "--dataset", "digits", *options,
                 "--json", str(path), timeout=120)
    return json.loads(path.read_text()), out


@pytest.mark.parametrize("nprocs", [2, 4])
def test_digits_loss_falls_and_replicas_stay_identical(mpirun, tmp_path, nprocs):
    result, out = train(mpirun, tmp_path, nprocs, "--steps", "12")
    assert result["replicas_identical"] and "replicas identical: yes" in out
    assert result["parameters"] >= 1_000_000 and result["widths"] == [64, 640, 640, 640, 640, 10]
    assert result["ranks"] == nprocs and result["mpi_library"].split()[0] in LIBRARY
    losses = result["losses"]
    assert len(losses) == 12 and all(math.isfinite(x) for x in losses)
    assert sum(losses[-4:]) < 0.7 * sum(losses[:4]) and losses[-1] < losses[0]
    assert result["dataset"]["global_batch"] == 32 * nprocs
    assert result["timing"]["warmup_steps"] == 3 and result["timing"]["measured_steps"] == 9
    assert result["timing"]["step_s"]["median"] >= result["timing"]["compute_s"]["median"] > 0


@pytest.mark.parametrize("nprocs, options, buckets", [
    (4, ("-c", "int8+ef", "--bucket-layers", "1", "--policy", "test"), [[5], [4], [3], [2], [1]]),
    (2, ("-c", "threshold+ef", "--bucket-layers", "2", "--policy", "thread"),
     [[5, 4], [3, 2], [1]]),
])
def test_compressed_overlapped_run_keeps_replicas_identical(mpirun, tmp_path, nprocs, options,
                                                            buckets):
    result, _ = train(mpirun, tmp_path, nprocs, "--steps", "8", *options)
    assert result["replicas_identical"]
    assert result["buckets"] == buckets
    losses = result["losses"]
    assert all(math.isfinite(x) for x in losses) and losses[-1] < losses[0]
    if "threshold+ef" in options:  # the density it held, near its 1% target
        assert 0.002 < result["threshold_kept"] < 0.05
    else:
        assert result["threshold_kept"] is None


def test_three_epochs_beat_chance_by_far(mpirun, tmp_path):
    result, out = train(mpirun, tmp_path, 2, "--epochs", "3", "--bucket-layers", "2")
    assert result["steps"] == 3 * result["dataset"]["steps_per_epoch"] == 66
    assert [e["step"] for e in result["epochs"]] == [22, 44, 66]
    assert result["test_accuracy"] >= 0.8 and result["train_accuracy"] >= 0.8  # chance: 0.1
    assert f"test accuracy {result['test_accuracy']:.3f}" in out


def test_digits_without_scikit_learn_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "sklearn", None)
    monkeypatch.setitem(sys.modules, "sklearn.datasets", None)
    with pytest.raises(ValueError, match=r"pip install 'mpicoll\[demo\]'"):
        demo.load("digits")


def test_buckets_of_layers_that_bytes_cannot_express_are_refused():
    model = demo.MLP([64, 16, 16, 16, 10], seed=0)  # the input layer outweighs two hidden ones
    with pytest.raises(ValueError, match="--bucket-layers 1"):
        demo.bucket_manager(model, demo.Settings(bucket_layers=1), MPI.COMM_SELF)
    manager = demo.bucket_manager(model, demo.Settings(bucket_layers=2), MPI.COMM_SELF)
    assert [len(b.members) for b in manager.buckets] == [2, 2]
