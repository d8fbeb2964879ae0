"""The package's shape: wings a reader can see, layers that point down, and no import cycle.

``lint-imports`` (contracts in pyproject.toml) checks the layers and the cycles between siblings;
these tests check what its contracts cannot say: a package and its own submodules in a circle,
imports of ``failopen.integrations`` by that name, and the size of the top level and of modules.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

import grimp
import pytest

ROOT = Path(__file__).parent.parent
CORE = ROOT / "failopen"
WINGS = {"_internal", "providers", "engine", "observe", "stores", "fallback", "web", "cli", "rai",
         "testing"}


def cycles(edges: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """Every group of modules that import each other in a circle (Tarjan's strongly connected
    components of more than one module, or one that imports itself)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in edges.get(node, ()):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1 or node in edges.get(node, ()):
                found.append(sorted(group))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return found


def test_cycles_finds_a_circle_through_a_package_and_its_submodule() -> None:
    edges = {"a": {"a.b"}, "a.b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(edges) == [["a", "a.b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


@pytest.fixture(scope="module")
def graph() -> grimp.ImportGraph:
    # Every import counts: at module level, inside functions and under TYPE_CHECKING.
    sys.path.insert(0, str(ROOT))  # integrations/ is read from the tree, as lint-imports does
    try:
        return grimp.build_graph("failopen", "integrations", cache_dir=None)
    finally:
        sys.path.remove(str(ROOT))


def test_no_module_imports_itself_through_others(graph: grimp.ImportGraph) -> None:
    edges = {m: graph.find_modules_directly_imported_by(m) for m in graph.modules}
    found = cycles(edges)
    details = [
        f"{importer} -> {imported} (line {d['line_number']})"
        for group in found
        for importer in group
        for imported in edges[importer] & set(group)
        for d in graph.get_import_details(importer=importer, imported=imported)
    ]
    assert found == [], "import cycles:\n" + "\n".join(details)


def test_the_core_never_imports_the_adapters() -> None:
    """``failopen.integrations`` is not under failopen/, so lint-imports cannot see this name."""
    found = []
    for path in sorted(CORE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            found += [f"{path.relative_to(ROOT)}:{node.lineno}" for name in names
                      if (name + ".").startswith("failopen.integrations.")]
    assert found == []


def test_the_top_level_shows_the_wings() -> None:
    modules = sorted(p.name for p in CORE.glob("*.py"))
    assert len(modules) <= 12, modules
    packages = {p.name for p in CORE.iterdir() if (p / "__init__.py").exists()}
    assert packages == WINGS


def test_no_module_holds_two_ideas() -> None:
    # ~400 lines: past that a module holds two ideas (the house style); a little slack for a
    # docstring that grows.
    long = {
        str(p.relative_to(ROOT)): n
        for base in (CORE, ROOT / "integrations")
        for p in base.rglob("*.py")
        if (n := len(p.read_text().splitlines())) > 420
    }
    assert long == {}


def test_the_layer_contracts_hold() -> None:
    """What CI runs through the README's test line, here too so a local pytest run says it."""
    lint = Path(sys.executable).parent / "lint-imports"
    if not lint.exists():
        pytest.skip("lint-imports is not installed (pip install -e '.[test]')")
    done = subprocess.run([str(lint), "--no-cache"], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stdout[-3000:]
