"""mpi4py's own collective tests, run through ``mpicoll.Comm`` (under mpiexec).

Takes the test suite of the installed mpi4py's release (its source distribution, fetched with
``pip download`` into ``build/``, unless ``--source`` names its ``test`` directory), makes the
communicator of every test case an ``mpicoll.Comm`` on the same handle (after the case's
``setUp``: ``COMM_WORLD``, ``COMM_SELF`` and their duplicates), runs the chosen modules with
unittest, and reports on rank 0 how many calls of each collective mpicoll ran and how many fell
back to mpi4py, by reason (from the timing records). Exits 1 if a test failed on any rank.

    mpiexec -n 3 python benchmarks/mpi4py_tests.py
"""

from __future__ import annotations

import argparse
import collections
import importlib
import io
import pathlib
import subprocess
import sys
import tarfile
import unittest

import mpi4py
from mpi4py import MPI

import mpicoll
from mpicoll import timing

MODULES = ("test_cco_buf", "test_cco_nb_buf", "test_cco_pr_buf",
           "test_cco_vec", "test_cco_nb_vec", "test_cco_pr_vec")
ROOT = pathlib.Path(__file__).resolve().parents[1]


def fetch(version: str) -> pathlib.Path:
    """mpi4py's ``test`` directory of ``version``, from its source distribution (rank 0
    fetches it once into build/, the others wait)."""
    where = ROOT / "build" / f"mpi4py-{version}"
    if MPI.COMM_WORLD.Get_rank() == 0 and not (where / "test").is_dir():
        where.parent.mkdir(exist_ok=True)
        subprocess.run([sys.executable, "-m", "pip", "download", f"mpi4py=={version}",
                        "--no-binary", ":all:", "--no-deps", "-q", "-d", str(where.parent)],
                       check=True)
        with tarfile.open(where.parent / f"mpi4py-{version}.tar.gz") as sdist:
            sdist.extractall(where.parent, members=[m for m in sdist.getmembers()
                                                    if m.name.startswith(f"mpi4py-{version}/test/")],
                             filter="data")
    MPI.COMM_WORLD.Barrier()
    return where / "test"


def through_mpicoll(case: type) -> None:
    """After ``case``'s setUp, its plain intra-communicator becomes an ``mpicoll.Comm``."""
    set_up = case.setUp

    def setUp(self: unittest.TestCase) -> None:
        set_up(self)
        comm = getattr(self, "COMM", None)
        if type(comm) is MPI.Intracomm and comm != MPI.COMM_NULL:
            self.COMM = mpicoll.Comm(comm)

    case.setUp = setUp  # type: ignore[method-assign]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--source", type=pathlib.Path, help="mpi4py's test directory "
                        "(default: fetched for the installed mpi4py)")
    parser.add_argument("--modules", default=",".join(MODULES),
                        help="comma-separated test modules (default: %(default)s)")
    args = parser.parse_args()
    source = args.source or fetch(mpi4py.__version__)
    sys.path.insert(0, str(source))
    suite = unittest.TestSuite()
    for name in args.modules.split(","):
        module = importlib.import_module(name)
        for value in vars(module).values():
            if isinstance(value, type) and issubclass(value, unittest.TestCase):
                through_mpicoll(value)
        suite.addTests(unittest.defaultTestLoader.loadTestsFromModule(module))
    world = MPI.COMM_WORLD
    out = sys.stdout if world.Get_rank() == 0 else io.StringIO()
    with timing.recording() as recorder:
        result = unittest.TextTestRunner(stream=out, verbosity=0).run(suite)
    failed = world.allreduce(len(result.failures) + len(result.errors))
    ran: collections.Counter = collections.Counter()
    reasons: collections.Counter = collections.Counter()
    for record in recorder.records:
        by = "mpi4py" if record.algorithm == "mpi" else "mpicoll"
        ran[record.collective, by] += 1
        for phase in record.phases if by == "mpi4py" else ():
            reasons[record.collective, phase.removeprefix("fallback: ")] += 1
    if world.Get_rank() == 0:
        print(f"\nmpi4py {mpi4py.__version__}'s {args.modules} through mpicoll.Comm on "
              f"{world.Get_size()} ranks ({MPI.Get_library_version().splitlines()[0]}): "
              f"{result.testsRun} tests, {failed} failed on some rank")
        print("calls on rank 0 | by mpicoll | by mpi4py")
        for collective in sorted({c for c, _ in ran}):
            print(f"{collective} | {ran[collective, 'mpicoll']} | {ran[collective, 'mpi4py']}")
        print("fell back (rank 0) | calls")
        for (collective, reason), count in reasons.most_common():
            print(f"{collective}: {reason} | {count}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
