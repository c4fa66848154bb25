"""The emulated cluster (benchmarks/emucluster.py): traffic really crosses the host links, exit
codes come back, and nothing is left behind. Needs root and ip/tc/unshare; skipped otherwise."""

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
NATIVE_ALLREDUCE = REPO / "tests" / "mpi_programs" / "native_allreduce.py"
TIMEOUT = 120


def load_emucluster():
    """benchmarks/ is not a package; load the tool from its file."""
    spec = importlib.util.spec_from_file_location("emucluster", REPO / "benchmarks" / "emucluster.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up here
    spec.loader.exec_module(module)
    return module


emucluster = load_emucluster()


def skip_reason():
    reason = emucluster.missing_prerequisites()
    if reason is None and not Path(emucluster.default_mpiexec()).exists():
        reason = f"no mpiexec at {emucluster.default_mpiexec()}"
    return reason


needs_cluster = pytest.mark.skipif(skip_reason() is not None, reason=skip_reason() or "")


def our_namespaces():
    listing = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout
    return [line.split()[0] for line in listing.splitlines() if line.startswith(emucluster.PREFIX)]


@needs_cluster
@pytest.mark.parametrize("hosts, ranks_per_host", [(2, 1), (2, 2)])
def test_native_allreduce_crosses_every_link(hosts, ranks_per_host):
    mib = 4
    with emucluster.EmulatedCluster(hosts=hosts, rate="1gbit") as cluster:
        argv = [sys.executable, str(NATIVE_ALLREDUCE), "--mib", str(mib), "--iters", "0"]
        result = cluster.run(argv, ranks_per_host=ranks_per_host, timeout=TIMEOUT)
    assert result.returncode == 0, "allreduce failed or gave a wrong sum"
    # With 2 hosts every byte of the reduced vector must leave and enter each host once.
    for host, link in result.traffic.items():
        assert link.tx_bytes >= mib * 2**20, f"{host} sent only {link.tx_bytes} B over eth0"
        assert link.rx_bytes >= mib * 2**20, f"{host} received only {link.rx_bytes} B over eth0"
    assert our_namespaces() == []


@needs_cluster
def test_exit_code_comes_back_and_namespaces_are_gone(tmp_path):
    fail_on_rank_1 = "import sys; from mpi4py import MPI; sys.exit(3 if MPI.COMM_WORLD.rank == 1 else 0)"
    report = tmp_path / "run.json"
    proc = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "emucluster.py"), "--hosts", "2", "--json", str(report),
         "--", sys.executable, "-c", fail_on_rank_1],
        capture_output=True, text=True, timeout=TIMEOUT)
    assert proc.returncode == 3, proc.stderr
    assert "mpicoll-h1 eth0 sent" in proc.stderr
    assert '"returncode": 3' in report.read_text()
    assert our_namespaces() == []


def test_the_launcher_s_mpi_is_detected():
    """The default --mpi: the launcher beside this Python is of the MPI mpi4py loaded."""
    from mpi4py import MPI
    expected = {"MPICH": "mpich", "Open MPI": "openmpi"}[MPI.get_vendor()[0]]
    assert emucluster.detect_mpi(emucluster.default_mpiexec()) == expected
    with pytest.raises(emucluster.ClusterError, match="neither"):
        emucluster.detect_mpi("true")


def test_refuses_without_root(monkeypatch, capsys):
    monkeypatch.setattr(emucluster.os, "geteuid", lambda: 1000)
    assert emucluster.main(["--", "true"]) == 2
    assert "needs root" in capsys.readouterr().err
