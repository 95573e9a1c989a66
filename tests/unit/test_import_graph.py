"""No import cycles among the project's modules.

Every module under testbed/, analysis/, controllers/ and topologies/ is parsed (not
imported); every ``import`` statement counts, also those inside functions and under
``if TYPE_CHECKING:``, because a lazy import is still a dependency. An edge goes to
the most specific project module named: ``from a.b import c`` to ``a.b.c`` when that is
a module, else to ``a.b``. Imports by computed name (importlib) are no edges. A strongly
connected component of more than one module is a cycle: the test prints each with the
lines that make it.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("testbed", "analysis", "controllers", "topologies")


def modules() -> dict[str, Path]:
    """Dotted module name -> file, for every .py file of PACKAGES."""
    out = {}
    for pkg in PACKAGES:
        for path in sorted((REPO / pkg).rglob("*.py")):
            parts = list(path.relative_to(REPO).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = path
    return out


def _imported(node: ast.AST, importer: str, is_package: bool) -> Iterator[str]:
    """Dotted names an import statement names (candidates, most specific first)."""
    if isinstance(node, ast.Import):
        for alias in node.names:
            yield alias.name
    elif isinstance(node, ast.ImportFrom):
        if node.level:
            base = importer.split(".")
            base = base if is_package else base[:-1]
            base = base[: len(base) - (node.level - 1)]
            module = ".".join(base + ([node.module] if node.module else []))
        else:
            module = node.module or ""
        for alias in node.names:
            yield f"{module}.{alias.name}"
        yield module


def graph() -> dict[str, dict[str, list[int]]]:
    """importer -> {imported project module: [line numbers]}."""
    mods = modules()
    edges: dict[str, dict[str, list[int]]] = {m: {} for m in mods}
    for name, path in mods.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            if not isinstance(node, (ast.Import, ast.ImportFrom)):
                continue
            if isinstance(node, ast.ImportFrom):
                candidates = list(_imported(node, name, path.name == "__init__.py"))
                targets = {c for c in candidates[:-1] if c in mods} or ({candidates[-1]} & set(mods))
            else:
                targets = {_longest_module(c, mods) for c in _imported(node, name, False)} - {None}
            for t in targets:
                if t != name:
                    edges[name].setdefault(t, []).append(node.lineno)
    return edges


def _longest_module(dotted: str, mods: dict[str, Path]) -> str | None:
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        if ".".join(parts[:i]) in mods:
            return ".".join(parts[:i])
    return None


def strongly_connected(edges: dict[str, dict[str, list[int]]]) -> list[list[str]]:
    """Tarjan's algorithm (iterative); components in no particular order."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    out: list[list[str]] = []
    counter = 0
    for root in edges:
        if root in index:
            continue
        work = [(root, iter(edges[root]))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, it = work[-1]
            for nxt in it:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(edges[nxt])))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    comp = []
                    while True:
                        m = stack.pop()
                        on_stack.discard(m)
                        comp.append(m)
                        if m == node:
                            break
                    out.append(sorted(comp))
    return out


def test_the_graph_sees_lazy_and_relative_imports():
    edges = graph()
    # analysis.report imports pandas at the top and testbed.results; the registry is
    # reached from testbed.definition; a lazy import inside a function counts
    assert "testbed.results" in edges["analysis.report"]
    assert "testbed.families" in edges["testbed.definition"]
    assert "testbed.features" in edges["testbed.runner"]  # imported inside choose_placement


def test_no_import_cycles():
    edges = graph()
    cycles = [c for c in strongly_connected(edges) if len(c) > 1]
    lines = []
    for comp in cycles:
        lines.append("cycle: " + " <-> ".join(comp))
        for a in comp:
            for b, at in sorted(edges[a].items()):
                if b in comp:
                    lines.append(f"    {a} imports {b} (line {', '.join(map(str, at))})")
    assert not cycles, "\n".join(lines)
