"""The package type-checks: mypy, configured in setup.cfg ([mypy]), finds nothing in mpicoll/."""

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.mpi_free  # no MPI job: run under one MPI only (setup.cfg)

REPO = Path(__file__).resolve().parents[1]
TIMEOUT = 600  # seconds; a run without a cache takes well under a minute


def test_mypy_is_clean():
    pytest.importorskip("mypy")  # installed by the test extra: pip install -e '.[test]'
    proc = subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", str(REPO / "setup.cfg"), "mpicoll"],
        cwd=REPO, capture_output=True, text=True, timeout=TIMEOUT)
    assert proc.returncode == 0, f"mypy found problems:\n{proc.stdout}\n{proc.stderr}"
