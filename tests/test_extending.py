"""A new algorithm is one module plus one registration line, and the test grid then runs it.

The test does what docs/extending.md tells a contributor to do, in a copy of the package: it
adds a toy "reverse ring" (the ring run the other way round) as ``mpicoll/algorithm/
reverse_ring.py`` and one line in the registration list, and nothing else. The schedule
simulator's tests, the MPI differential grid and ``bench -a`` then exercise it with no edit.
"""

from __future__ import annotations

import difflib
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT

TOY = '''"""Toy: the ring allreduce, run the other way round (receive from the right, send left)."""

from __future__ import annotations

from .base import Algorithm
from . import ring


def plan(b, layout, count, options, src, frames):
    group = list(reversed(range(layout.size)))
    ring.allreduce(b, group, group.index(layout.rank), 0, count, src, frames)


ALGORITHM = Algorithm("reverse-ring", "the ring, the other way round", plan=plan,
                      compresses=frozenset({"dense"}), needs_commutative=True)
'''


@pytest.fixture(scope="module")
def extended(tmp_path_factory) -> Path:
    """A copy of the package and its tests with the toy added as a contributor would."""
    root = tmp_path_factory.mktemp("extended")
    for part in ("mpicoll", "tests"):
        shutil.copytree(ROOT / part, root / part, ignore=shutil.ignore_patterns("__pycache__"))
    (root / "mpicoll/algorithm/reverse_ring.py").write_text(TOY)
    registration = root / "mpicoll/builtin.py"
    before = registration.read_text()
    after = before.replace("from .algorithm import hybrid\n",
                           "from .algorithm import hybrid\nfrom .algorithm import reverse_ring\n")
    after = after.replace("register(hybrid.ALGORITHM)\n",
                          "register(hybrid.ALGORITHM)\nregister(reverse_ring.ALGORITHM)\n")
    registration.write_text(after)
    changed = [d for d in difflib.unified_diff(before.splitlines(), after.splitlines(), n=0)
               if d[:1] in "+-" and not d.startswith(("+++", "---"))]
    # exactly its import and its registration, added
    assert changed == ["+from .algorithm import reverse_ring", "+register(reverse_ring.ALGORITHM)"], changed
    return root


def run(root: Path, *argv: str, timeout: float = 300) -> str:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), str(root / "tests"),
                                                        str(root / "tests/mpi")])}
    proc = subprocess.run([sys.executable, *argv], cwd=root, env=env, capture_output=True,
                          text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    return proc.stdout


def passed(out: str) -> int:
    found = re.search(r"(\d+) passed", out)
    return int(found.group(1)) if found else 0


def test_registered_and_listed(extended):
    out = run(extended, "-c", "import mpicoll; print(mpicoll.algorithms())")
    assert "'reverse-ring'" in out


@pytest.mark.mpi_free
def test_simulator_tests_pick_it_up(extended):
    out = run(extended, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_schedules.py",
              "-k", "reverse-ring", "-rA")
    assert passed(out) > 0
    assert "test_every_layout_and_count[" in out and "test_compressed_schedules_agree" in out


def test_mpi_grid_picks_it_up(extended, run_cases):
    for cases in ("allreduce_cases.py", "compressed_cases.py"):
        out = run_cases(str(extended / "tests/mpi" / cases), 3, select="reverse-ring",
                        root=extended)
        assert passed(out) > 0


def test_bench_runs_it(extended, mpirun):
    out = mpirun(2, "-m", "mpicoll", "bench", "-m", "8:512", "-f", "8", "-i", "2", "-x", "0",
                 "-a", "reverse-ring", "--no-progress", root=extended)
    rows = [line.split() for line in out.splitlines() if "reverse-ring" in line and not line.startswith("#")]
    assert len(rows) == 3 and all(row[-2] == "0" for row in rows), out  # #wrong is 0
