"""benchmarks/model_validate.py: its counts, which docs/seed.md cites, from bench
tables made up here where the answer is known, and from the committed runs of the table in
docs/seed.md (docs/data/model-validation/)."""

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.mpi_free  # no MPI job: run under one MPI only (setup.cfg)

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "docs" / "data" / "model-validation"

HEADER = """# mpicoll bench: 2 ranks on 1 node(s); MPICH Version:      5.0.2
# float32 sum; 10 interleaved repetitions after 2 warm-up; ratio = median(mpicoll time / native time)
#    size(B)      count     type redop algorithm              ran     codec   time(us) algbw(GB/s) busbw(GB/s) native(us)  ratio #wrong    error
"""


def table(path: Path, rows: dict[int, tuple[float, float]]) -> Path:
    """A bench table of the ring at these sizes: {bytes: (ring µs, native µs)}."""
    lines = [f"{size:>12} {size // 4:>10}  float32   sum      ring             ring         -"
             f" {ring:>10.1f}       1.000       1.000 {native:>10.1f}   1.00      0  0.0e+00"
             for size, (ring, native) in rows.items()]
    path.write_text(HEADER + "\n".join(lines) + "\n")
    return path


def validate(*args: str) -> list[str]:
    out = subprocess.run([sys.executable, str(REPO / "benchmarks" / "model_validate.py"), *args],
                         capture_output=True, text=True, check=True, cwd=REPO).stdout
    return [line for line in out.splitlines() if line.startswith("# ")]


def test_the_fitted_sweep_is_counted_against_the_runs_median(tmp_path):
    sizes = (65536, 131072, 262144)
    one = table(tmp_path / "one.txt", {s: (100.0, 100.0) for s in sizes})
    two = table(tmp_path / "two.txt", {s: (110.0, 300.0) for s in sizes})  # natives 3x apart
    swept = table(tmp_path / "tune.txt", {65536: (105.0, 200.0),   # both within 20% of median
                                          131072: (140.0, 200.0),  # ring 33% off its 105
                                          262144: (105.0, 120.0)})  # native 40% off its 200
    summary = validate(str(one), str(two), "--fitted-on", str(swept))
    assert summary[-2] == "# the first two runs agree within 20% on 3 of 6 rows"
    assert summary[-1] == ("# the sweep fitted on is within 20% of the runs on 4 of 6 rows "
                           "(a model that matched it exactly)")
    assert validate(str(one), "--fitted-on", str(one))[-1].startswith(
        "# the sweep fitted on is within 20% of the runs on 6 of 6 rows")


@pytest.mark.parametrize("name, rows", [("p2", "75 of 77"), ("p4", "80 of 88"),
                                        ("e2x2", "76 of 77")])
def test_the_figures_of_the_committed_runs(name, rows):
    """The counts docs/seed.md gives for the table's runs (RESULTS/ceiling.txt)."""
    summary = validate(str(RESULTS / f"{name}-1.txt"), str(RESULTS / f"{name}-2.txt"),
                       "--model", str(RESULTS / f"tuning-{name}.json"),
                       "--fitted-on", str(RESULTS / f"tune-{name}.txt"))
    assert summary[-1].startswith(f"# the sweep fitted on is within 20% of the runs on {rows} ")
