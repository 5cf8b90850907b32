"""The import graph of core (the ``trm`` package without its plugins): no cycle among its
modules when imports inside functions count as well as those at the top of a file.
import-linter sees only packages and top-level edges; this walks every module's syntax tree.
Imports under ``if TYPE_CHECKING:`` are left out: they never run."""

from __future__ import annotations

import ast
from pathlib import Path

CORE = Path(__file__).resolve().parents[1] / "core"


def _module_names() -> dict[str, Path]:
    names = {}
    for path in CORE.rglob("*.py"):
        parts = ["trm", *path.relative_to(CORE).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        names[".".join(parts)] = path
    return names


def _runtime_nodes(tree: ast.AST) -> list[ast.AST]:
    """Every node of ``tree`` except those inside an ``if TYPE_CHECKING:`` block."""
    nodes, pending = [], [tree]
    while pending:
        node = pending.pop()
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            pending.extend(node.orelse)
            continue
        nodes.append(node)
        pending.extend(ast.iter_child_nodes(node))
    return nodes


def import_edges(modules: dict[str, Path]) -> dict[str, set[str]]:
    """Module -> the core modules it imports anywhere in its file (a name imported from a
    package counts as the submodule when there is one of that name)."""
    edges: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        for node in _runtime_nodes(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                edges[name] |= {alias.name for alias in node.names if alias.name in modules}
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - node.level + 1]
                    source = ".".join([*base, *([node.module] if node.module else [])])
                else:
                    source = node.module or ""
                for alias in node.names:
                    target = f"{source}.{alias.name}"
                    if target in modules:
                        edges[name].add(target)
                    elif source in modules:
                        edges[name].add(source)
    return edges


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in edges[node]:
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return found


def test_core_has_no_import_cycle_counting_imports_inside_functions() -> None:
    assert cycles(import_edges(_module_names())) == []


def test_the_cycle_finder_sees_a_cycle_through_a_function_level_import() -> None:
    edges = {"trm": {"trm.api"}, "trm.api": {"trm.loop"}, "trm.loop": {"trm"}, "trm.x": set()}
    assert cycles(edges) == [["trm", "trm.api", "trm.loop"]]


def test_no_module_of_core_imports_the_package_root() -> None:
    edges = import_edges(_module_names())
    importers = sorted(name for name, targets in edges.items() if "trm" in targets)
    assert importers == []
