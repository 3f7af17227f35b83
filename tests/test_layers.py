"""Imports run one way (docs/ARCHITECTURE.md "Layout"): tray -> hasrctl -> hasrd, and no module imports one that
imports it back, not even inside a function. Read from the source with ast, so an import that only runs on one
path counts too; those under ``if TYPE_CHECKING:`` do not (they never run)."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PACKAGES = ("hasrd", "hasrctl", "tray")


def _modules() -> dict[str, Path]:
    out = {}
    for package in PACKAGES:
        for path in (REPO / package).rglob("*.py"):
            parts = path.relative_to(REPO).with_suffix("").parts
            out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def _imported(module: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The project's modules ``module`` imports (a package's own submodules importing it do not count)."""
    tree = ast.parse(path.read_text())
    typing_only = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If) and "TYPE_CHECKING" in
                   ast.unparse(node.test) for stmt in node.body for n in ast.walk(stmt)}
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    names: list[str] = []
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package[:len(package) - node.level + 1] + ([base] if base else []))
            names += [base] + [f"{base}.{a.name}" for a in node.names]
    out = set()
    for name in names:
        while name and name not in known:
            name = name.rpartition(".")[0]
        if name and name != module and not module.startswith(name + "."):
            out.add(name)
    return out


MODULES = _modules()
GRAPH = {m: _imported(m, p, MODULES) for m, p in MODULES.items()}


def test_no_module_imports_a_package_above_it() -> None:
    upward = {(m, i) for m, imports in GRAPH.items() for i in imports
              if PACKAGES.index(i.split(".")[0]) > PACKAGES.index(m.split(".")[0])}
    assert not upward, f"imports against tray -> hasrctl -> hasrd: {sorted(upward)}"


def test_no_import_circle() -> None:
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles = []

    def visit(m: str) -> None:  # Tarjan's strongly connected components
        index[m] = low[m] = len(index)
        stack.append(m)
        for i in GRAPH[m]:
            if i not in index:
                visit(i)
                low[m] = min(low[m], low[i])
            elif i in stack:
                low[m] = min(low[m], index[i])
        if low[m] == index[m]:
            circle = stack[stack.index(m):]
            del stack[stack.index(m):]
            if len(circle) > 1:
                circles.append(sorted(circle))

    for m in GRAPH:
        if m not in index:
            visit(m)
    assert not circles, f"modules that import each other: {circles}"
