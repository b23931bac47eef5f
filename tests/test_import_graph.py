"""The import graph of ``rltrainer/`` has no circle.

Every ``import`` of every module counts, at module level or inside a function (a function's
import runs too, only later), read from the source with ``ast``; imports under
``if TYPE_CHECKING:`` do not (they never run: an annotation may name a higher layer). An arrow
runs from a module to the ``rltrainer`` module it names: ``from rltrainer.env import registry``
to ``rltrainer/env/registry.py``, ``from rltrainer.env import register_env`` to the package's
``__init__.py``. Loading by name (``importlib.import_module``, the algorithm registry's way of
importing an algorithm only when it is asked for) draws no arrow, and neither does the parent
package that Python runs before a submodule (``rltrainer.env.registry`` runs
``rltrainer/env/__init__.py`` first, which is the package's face, not a dependency).

A new circle fails here naming its files and one loop through them, each arrow with its line:
untie it by moving the shared name into the layer that owns it (a small module both sides
import), not by hiding an import inside a function.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE_DIR = Path(__file__).resolve().parents[1] / "rltrainer"

#: Circles allowed to stand, as sets of module names. Empty: none is.
KNOWN_CIRCLES: list[frozenset[str]] = []


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE_DIR.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def all_modules() -> dict[str, Path]:
    return {module_name(path): path for path in sorted(PACKAGE_DIR.rglob("*.py"))}


def _resolve(name: str, modules: dict[str, Path]) -> str | None:
    """The module ``name`` denotes: itself, or its nearest enclosing module (``a.b.attr`` -> ``a.b``)."""
    while name:
        if name in modules:
            return name
        name = name.rpartition(".")[0]
    return None


def _imported_names(node: ast.Import | ast.ImportFrom, importer: str, is_package: bool) -> list[str]:
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = node.module or ""
    if node.level:  # relative: from the importer's package, one level up per extra dot
        package = importer if is_package else importer.rpartition(".")[0]
        for _ in range(node.level - 1):
            package = package.rpartition(".")[0]
        base = f"{package}.{base}" if base else package
    # ``from pkg import name``: the submodule ``pkg.name`` when there is one, else ``pkg`` itself.
    return [f"{base}.{alias.name}" for alias in node.names] + [base]


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST) -> list[ast.Import | ast.ImportFrom]:
    """Every import statement that can run, at any depth (``if TYPE_CHECKING:`` bodies skipped)."""
    found: list[ast.Import | ast.ImportFrom] = []
    stack: list[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Import | ast.ImportFrom):
            found.append(node)
        elif isinstance(node, ast.If) and _is_type_checking(node.test):
            stack.extend(node.orelse)
            continue
        stack.extend(ast.iter_child_nodes(node))
    return sorted(found, key=lambda node: node.lineno)


def import_graph(modules: dict[str, Path]) -> dict[str, dict[str, int]]:
    """``{module: {imported rltrainer module: line of the first such import}}``."""
    graph: dict[str, dict[str, int]] = {}
    for name, path in modules.items():
        arrows: dict[str, int] = {}
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in _imports(tree):
            names = _imported_names(node, name, path.name == "__init__.py")
            targets = {_resolve(n, modules) for n in names if n.split(".")[0] == "rltrainer"}
            if isinstance(node, ast.ImportFrom) and len(names) > 1:
                # ``from pkg import a, b``: the package only where a name is not a submodule.
                submodules = {n for n in names[:-1] if n in modules}
                if len(submodules) == len(names) - 1:
                    targets = submodules
            for target in targets - {None, name}:
                arrows.setdefault(target, node.lineno)
        graph[name] = arrows
    return graph


def circles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for succ in graph.get(node, {}):
            if succ not in index:
                visit(succ)
                low[node] = min(low[node], low[succ])
            elif succ in on_stack:
                low[node] = min(low[node], index[succ])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def one_loop(graph: dict[str, dict[str, int]], component: list[str]) -> list[str]:
    """A shortest loop through the component's first module, as ``a -> b (line n)`` steps."""
    members, start = set(component), component[0]
    previous: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for succ in sorted(graph[node]):
                if succ not in members:
                    continue
                if succ == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(previous[path[-1]])
                    path.reverse()
                    path.append(start)
                    return [f"{a} -> {b} (line {graph[a][b]})" for a, b in zip(path, path[1:], strict=False)]
                if succ not in previous:
                    previous[succ] = node
                    following.append(succ)
        frontier = following
    return []


def test_no_import_circle() -> None:
    graph = import_graph(all_modules())
    found = [c for c in circles(graph) if frozenset(c) not in KNOWN_CIRCLES]
    report = [
        f"circle of {len(c)} modules: {', '.join(c)}\n    " + "\n    ".join(one_loop(graph, c)) for c in found
    ]
    assert not found, "import circles among rltrainer/ modules:\n" + "\n".join(report)


def test_the_check_sees_function_level_and_relative_imports(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The reader itself: a loop closed only by an import inside a function, or by a relative
    import, or through a package's ``__init__``, is a circle; ``importlib`` loading and
    ``if TYPE_CHECKING:`` imports are not."""
    package = tmp_path / "rltrainer"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "sub" / "__init__.py").write_text("from rltrainer.sub.b import B\n")
    (package / "a.py").write_text("def f():\n    from rltrainer.sub import b\n    return b\n")
    (package / "sub" / "b.py").write_text("from .. import a\nB = 1\n")
    (package / "c.py").write_text("from rltrainer.sub import B\n")
    (package / "sub" / "d.py").write_text("from rltrainer import c\n")
    (package / "e.py").write_text("import importlib\nimportlib.import_module('rltrainer.f')\n")
    (package / "f.py").write_text("import rltrainer.e\n")
    g_lines = ["import typing", "if typing.TYPE_CHECKING:", "    from rltrainer import h", "else:"]
    (package / "g.py").write_text("\n".join([*g_lines, "    from rltrainer import e", ""]))
    h_lines = ["from typing import TYPE_CHECKING", "", "if TYPE_CHECKING:", "    import rltrainer.g", ""]
    (package / "h.py").write_text("\n".join(h_lines))
    monkeypatch.setitem(globals(), "PACKAGE_DIR", package)
    graph = import_graph(all_modules())
    assert graph["rltrainer.a"] == {"rltrainer.sub.b": 2}
    assert graph["rltrainer.sub.b"] == {"rltrainer.a": 1}
    assert graph["rltrainer.c"] == {"rltrainer.sub": 1}
    assert graph["rltrainer.g"] == {"rltrainer.e": 5}
    assert graph["rltrainer.h"] == {}
    assert circles(graph) == [["rltrainer.a", "rltrainer.sub.b"]]
    assert one_loop(graph, ["rltrainer.a", "rltrainer.sub.b"]) == [
        "rltrainer.a -> rltrainer.sub.b (line 2)",
        "rltrainer.sub.b -> rltrainer.a (line 1)",
    ]
    (package / "sub" / "b.py").write_text("from rltrainer.sub import d\nB = 1\n")
    (package / "c.py").write_text("import rltrainer.sub\n")
    assert circles(import_graph(all_modules())) == [
        ["rltrainer.c", "rltrainer.sub", "rltrainer.sub.b", "rltrainer.sub.d"]
    ]
