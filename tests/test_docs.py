"""The documentation site builds without a single warning, and stays true to the code.

The build needs docs/performance.md and the tables benchmarks/performance.sh writes under
docs/data/performance/, which the page includes; the code blocks of the pages
run for real (multi-rank ones under mpiexec), and the options, defaults and names the pages
quote are compared with those of the code.
"""

import re
import subprocess
import sys
from pathlib import Path

import pytest

from mpicoll import algorithms, codecs
from mpicoll._env import CODEC_ENV, DEFAULT_SEGMENT_BYTES
from mpicoll.h5 import LAYOUT_VERSION

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"
TIMEOUT = 300  # seconds; the build takes a few


def page(name: str) -> str:
    return (DOCS / name).read_text()


def python_blocks(name: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", page(name), re.DOTALL)


def run(*argv: str, cwd: Path = REPO) -> str:
    proc = subprocess.run([sys.executable, *argv], cwd=cwd, capture_output=True, text=True,
                          timeout=TIMEOUT)
    assert proc.returncode == 0, f"{' '.join(argv)} failed:\n{proc.stdout[-6000:]}\n{proc.stderr[-6000:]}"
    return proc.stdout


@pytest.mark.docs
def test_site_builds_without_warnings(tmp_path):
    assert (DOCS / "performance.md").exists(), "docs/performance.md is missing: the toctree includes it"
    included = re.findall(r"```\{include\} (\S+)", page("performance.md"))
    assert included, "performance.md includes no tables"
    for path in included:
        assert (DOCS / path).exists(), f"{path} is missing: run benchmarks/performance.sh"
    proc = subprocess.run(
        [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-b", "html", str(DOCS),
         str(tmp_path / "html")],
        cwd=REPO, capture_output=True, text=True, timeout=TIMEOUT)
    assert proc.returncode == 0, f"sphinx failed:\n{proc.stdout[-6000:]}\n{proc.stderr[-6000:]}"
    for name in ("index", "guide", "algorithms", "codecs", "measuring", "hdf5", "cluster", "performance",
                 "api", "design/fast-path", "design/cost-model"):
        assert (tmp_path / "html" / f"{name}.html").exists(), name


def test_every_cli_option_is_documented():
    """Each option in the --help of bench, info, plot, train, emucluster and codec_throughput
    appears in measuring.md."""
    measuring = page("measuring.md")
    helps = [run("-m", "mpicoll", command, "--help")
             for command in ("bench", "info", "plot", "train")]
    helps.append(run(str(REPO / "benchmarks" / "emucluster.py"), "--help"))
    helps.append(run(str(REPO / "benchmarks" / "codec_throughput.py"), "--help"))
    options = {o for text in helps for o in re.findall(r"(?<![\w-])--?[a-z][a-z-]*", text)} - {"-h", "--help"}
    missing = sorted(o for o in options if f"`{o}" not in measuring and f" {o} " not in measuring)
    assert not missing, f"measuring.md does not mention {missing}"


def test_quoted_constants_match_the_code():
    for name in ("guide.md", "algorithms.md"):
        assert f"default {DEFAULT_SEGMENT_BYTES}" in page(name), f"{name}: tree segment default"
    assert f"`{algorithms()}`" in page("guide.md")
    assert f"mpicoll_layout_version = {LAYOUT_VERSION}" in page("hdf5.md"), "HDF5 layout version"
    assert f"`{CODEC_ENV}`" in page("guide.md")
    for name in codecs.available():  # every registered codec is described and offered
        assert f"`{name}`" in page("codecs.md") and f'"{name}"' in page("guide.md"), name


def test_docs_hold_no_scripts_patches_or_dated_folders():
    """docs/ is for users: no scripts or patches beside the pages (they live in benchmarks/ or in
    git history), no folder or file named after an issue or a date."""
    for path in DOCS.rglob("*"):
        relative = path.relative_to(DOCS)
        if relative.parts[0] == "_build" or relative == Path("conf.py"):
            continue
        assert path.suffix not in {".py", ".sh", ".patch", ".diff"}, f"docs/{relative}"
        assert not re.search(r"issue\d|\d{4}-\d{2}-\d{2}", str(relative)), f"docs/{relative}"


def test_no_page_is_orphaned():
    """Every page is in index.md's toctree (an orphan page would build but be unreachable)."""
    toctree = re.search(r"```\{toctree\}\n(.*?)```", page("index.md"), re.DOTALL).group(1).split()
    for path in DOCS.glob("*.md"):
        assert path.stem == "index" or path.stem in toctree, f"{path.name} is not in the toctree"
        assert "orphan:" not in path.read_text(), f"{path.name} is marked orphan"


def test_hdf5_read_examples_run_on_a_bench_file(mpirun, tmp_path):
    mpirun(2, "-m", "mpicoll", "bench", "-m", "8:16", "-i", "1", "-x", "0", "-a", "ring,auto",
           "-c", "none,fp16", "--no-progress", "--output", str(tmp_path / "bench.h5"))
    blocks = python_blocks("hdf5.md")
    assert len(blocks) == 2
    script = tmp_path / "read.py"
    script.write_text("\n".join(blocks))
    out = run(str(script), cwd=tmp_path)
    assert " ring ring - " in out and " ring ring fp16 " in out and "reduce-scatter" in out, out


@pytest.mark.parametrize("name", ["index.md", "guide.md", "codecs.md", "measuring.md"])
def test_code_blocks_run_under_mpiexec(mpirun, tmp_path, name):
    """Each page's Python blocks, joined in order, run on 2 ranks (in tmp_path: they write files)."""
    script = tmp_path / "blocks.py"
    script.write_text(f"import os\nos.chdir({str(tmp_path)!r})\n" + "\n".join(python_blocks(name)))
    mpirun(2, str(script))
