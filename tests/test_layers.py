"""The library's imports form layers (mpicoll/_layers.py): no cycle, no import pointing up.

Every import counts: module level, inside functions, under ``TYPE_CHECKING``, and the implicit
import of a submodule's package (``import mpicoll.algorithm.ring`` runs
``mpicoll/algorithm/__init__.py`` first). The root package is the façade above every layer.
"""

from __future__ import annotations

import ast
import fnmatch
import importlib.util
from pathlib import Path

import pytest

pytestmark = pytest.mark.mpi_free

ROOT = Path(__file__).resolve().parent.parent / "mpicoll"


def _modules() -> dict[str, Path]:
    found = {}
    for path in ROOT.rglob("*.py"):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


MODULES = _modules()


def _layers() -> dict[str, tuple[int, str]]:
    spec = importlib.util.spec_from_file_location("_layers", ROOT / "_layers.py")
    assert spec is not None and spec.loader is not None
    table = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(table)  # (not imported as part of mpicoll: it declares, it is data)
    where = {}
    for index, (layer, patterns) in enumerate(table.LAYERS):
        for name in MODULES:
            if any(fnmatch.fnmatchcase(name, pattern) for pattern in patterns):
                where.setdefault(name, (index, layer))
    return where


def _imports(name: str, path: Path) -> dict[str, int]:
    """The library modules ``name`` imports, each with a line that does."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: dict[str, int] = {}

    def add(target: str, line: int) -> None:
        while target and target not in MODULES:
            target = target.rpartition(".")[0]
        if target != name and (target or name):
            found.setdefault(target, line)

    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".") if package else []
                base = base[:len(base) - (node.level - 1)] if node.level > 1 else base
                module = ".".join(base + ([node.module] if node.module else []))
            elif node.module == "mpicoll" or (node.module or "").startswith("mpicoll."):
                module = node.module[len("mpicoll."):] if node.module != "mpicoll" else ""
            else:
                continue
            for alias in node.names:
                sub = f"{module}.{alias.name}" if module else alias.name
                add(sub if sub in MODULES else module, node.lineno)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == "mpicoll" or alias.name.startswith("mpicoll."):
                    add(alias.name[len("mpicoll."):] if alias.name != "mpicoll" else "",
                        node.lineno)
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) \
                in ("import_module", "__import__"):
            found.setdefault("<dynamic import>", node.lineno)
    return found


def _graph() -> dict[str, dict[str, int]]:
    """Every module's imports, and what its packages import outside themselves: a submodule
    runs its package's ``__init__`` first, which may import any other module (a package's own
    submodules are only its façade; the root package, the library's, is above every layer)."""
    direct = {name: _imports(name, path) for name, path in MODULES.items()}
    graph = {}
    for name, targets in direct.items():
        edges = dict(targets)
        package = name.rpartition(".")[0]
        while package:
            for target, line in direct[package].items():
                if target != package and not target.startswith(package + "."):
                    edges.setdefault(target, line)
            package = package.rpartition(".")[0]
        graph[name] = edges
    return graph


GRAPH = _graph()


def _cycles() -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in GRAPH.get(v, {}):
            if w not in GRAPH:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in GRAPH:
        if v not in index:
            visit(v)
    return found


def test_the_analysis_sees_function_level_and_type_checking_imports():
    # fastpath imports the session at module level, native_blocking the engine in a function
    # (if it still does) and everything counts: the graph is not empty, and it knows packages
    assert "context" in GRAPH["fastpath"]
    assert "inflight" in GRAPH["algorithm.native_blocking"]
    assert "schedule" in GRAPH["execution"] or "local" in GRAPH["execution"]
    assert len(MODULES) > 60


def test_no_import_cycle():
    assert _cycles() == []


def test_no_dynamic_import():
    assert [name for name, targets in GRAPH.items() if "<dynamic import>" in targets] == []


def test_every_module_has_a_layer():
    assert sorted(set(MODULES) - set(_layers())) == []


def test_every_import_points_down_or_across():
    where = _layers()
    upward = [f"mpicoll.{name} ({where[name][1]}) imports mpicoll.{target} "
              f"({where[target][1]}), line {line}"
              for name, targets in GRAPH.items() for target, line in targets.items()
              if target in where and where[target][0] > where[name][0]]
    assert upward == []


def _private_reads() -> list[str]:
    """``x._name`` where ``x`` is not ``self`` or ``cls`` and this module defines no ``_name``
    (as an attribute of its own objects, a method or a slot): another module's private."""
    found = []
    for name, path in MODULES.items():
        tree = ast.parse(path.read_text(), str(path))
        own = set()
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                own.add(node.name)
            elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
                    and node.value.id in ("self", "cls"):
                own.add(node.attr)
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                own.add(node.value)  # __slots__
            elif isinstance(node, ast.Name):
                own.add(node.id)  # module-level names
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr.startswith("_") \
                    and not node.attr.startswith("__") and node.attr not in own \
                    and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")) \
                    and not (isinstance(node.value, ast.Name) and node.value.id == "os"
                             and node.attr == "_exit"):  # (the stdlib's, public)
                found.append(f"mpicoll.{name}:{node.lineno}: .{node.attr}")
    return found


def test_no_module_reads_another_modules_private_name():
    assert _private_reads() == []
