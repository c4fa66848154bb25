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


PLUGIN = '''"""An installed package's plugin: an algorithm and a codec mpicoll finds by entry point."""

from mpicoll.algorithm import Algorithm, ring
from mpicoll.codecs.fp16 import FP16


def plan(b, layout, count, options, src, frames):
    group = list(reversed(range(layout.size)))
    ring.allreduce(b, group, group.index(layout.rank), 0, count, src, frames)


ALGORITHM = Algorithm("plugin-ring", "the ring the other way round, from a plugin", plan=plan,
                      compresses=frozenset({"dense"}), needs_commutative=True)


class Half(FP16):
    name = "plugin-half"
    codec_id = 200
'''

USES_IT = '''
import numpy as np
from mpi4py import MPI
import mpicoll

x = np.arange(10.0) + MPI.COMM_WORLD.Get_rank()
ref = np.empty_like(x)
MPI.COMM_WORLD.Allreduce(x, ref)
exact = mpicoll.allreduce(x, algorithm="plugin-ring")
half = mpicoll.allreduce(x, algorithm="plugin-ring", codec="plugin-half")
mine = ("plugin-ring" in mpicoll.algorithms(), "plugin-half" in mpicoll.codecs.available(),
        bool(np.array_equal(exact, ref)), bool(np.allclose(half, ref, rtol=1e-3)))
every = MPI.COMM_WORLD.gather(mine)
if MPI.COMM_WORLD.Get_rank() == 0:
    print("listed and equal on", sum(all(r) for r in every), "of", len(every), "ranks:", every)
'''


def installed(tmp_path: Path, entry_points: str) -> Path:
    """A directory that holds a distribution as pip installs one: its module and metadata
    (``*.dist-info`` with ``entry_points.txt``), to put on sys.path."""
    site = tmp_path / "site"
    info = site / "mpicoll_toy_plugin-1.0.dist-info"
    info.mkdir(parents=True)
    (site / "mpicoll_toy_plugin.py").write_text(PLUGIN)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: mpicoll-toy-plugin\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(entry_points)
    return site


def test_a_plugin_registers_through_entry_points(tmp_path, mpirun, monkeypatch):
    """An installed package declares an algorithm and a codec (entry point groups
    ``mpicoll.algorithms`` and ``mpicoll.codecs``): they are listed and run on 3 ranks, the
    algorithm's sum equal to MPI's, with no line of mpicoll changed."""
    site = installed(tmp_path, "[mpicoll.algorithms]\nplugin-ring = mpicoll_toy_plugin:ALGORITHM\n"
                               "[mpicoll.codecs]\nplugin-half = mpicoll_toy_plugin:Half\n")
    (tmp_path / "uses_it.py").write_text(USES_IT)
    monkeypatch.setenv("PYTHONPATH", str(site))
    out = mpirun(3, str(tmp_path / "uses_it.py"))
    assert "listed and equal on 3 of 3 ranks" in out, out


@pytest.mark.mpi_free
def test_a_broken_plugin_is_named(tmp_path):
    site = installed(tmp_path, "[mpicoll.algorithms]\nbroken = no_such_module:ALGORITHM\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(site)])}
    proc = subprocess.run([sys.executable, "-c", "import mpicoll; mpicoll.algorithms()"],
                          env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0 and "plugin 'broken' (no_such_module:ALGORITHM" in proc.stderr, \
        proc.stderr[-2000:]
