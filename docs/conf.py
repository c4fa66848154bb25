"""Sphinx configuration for mpicoll's documentation (MyST Markdown pages, autodoc reference).

Build, failing on any warning:

    python -m sphinx -W --keep-going -b html docs docs/_build/html
"""

import sys
from pathlib import Path

# Import the package from this checkout even when it is not installed.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import mpicoll  # noqa: E402

project = "mpicoll"
author = "the mpicoll developers"
copyright = "mpicoll developers"
version = release = mpicoll.__version__

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx.ext.viewcode",
]
source_suffix = {".md": "markdown"}
exclude_patterns = ["_build", "data"]  # data/: benchmarks/performance.sh output; its tables are included

myst_heading_anchors = 3  # [text](page.md#a-heading) links work for headings down to ###

napoleon_google_docstring = True
napoleon_numpy_docstring = False
autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_typehints_description_target = "documented"

html_theme = "alabaster"
html_title = f"mpicoll {release}"
