"""The package's import graph has no circles (issue 12 G): the write path and the read path are
two places, and imports run one way. Every import counts, also those under ``TYPE_CHECKING`` and
inside functions: a circle hidden in a function is still a circle for a reader of the code."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src" / "egopool"


def _module_name(path: Path) -> str:
    parts = path.relative_to(SRC.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _graph() -> dict[str, set[str]]:
    modules = {_module_name(p): p for p in SRC.rglob("*.py")}
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for mod, path in modules.items():
        package = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            targets: list[str] = []
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - node.level + 1]
                    origin = ".".join(base + ([node.module] if node.module else []))
                else:
                    origin = node.module or ""
                targets = [f"{origin}.{a.name}" if f"{origin}.{a.name}" in modules else origin for a in node.names]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            for target in targets:
                while target and target not in modules:
                    target = target.rpartition(".")[0]
                # a package's own __init__ re-exporting its submodules is not a circle of the code
                if target and target != mod and not (path.name == "__init__.py" and target.startswith(mod + ".")):
                    graph[mod].add(target)
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_graph_sees_the_package() -> None:
    graph = _graph()
    assert "egopool.write.task_writer" in graph and "egopool.read.reader" in graph
    assert "egopool.write.episode_writer" in graph["egopool.write.task_writer"]
    assert "egopool.read.forces" in graph["egopool.read.episode"]
    assert "egopool.read.episode" in graph["egopool.read.reader"]


def test_no_import_circles() -> None:
    assert _cycles(_graph()) == []


def test_write_and_read_paths_do_not_import_each_other() -> None:
    graph = _graph()
    for mod, deps in graph.items():
        if mod.startswith("egopool.write"):
            assert not [d for d in deps if d.startswith("egopool.read")], mod
        if mod.startswith("egopool.read"):
            assert not [d for d in deps if d.startswith("egopool.write")], mod


def test_the_detector_finds_a_circle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
