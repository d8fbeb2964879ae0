"""No module of failopen.rai imports another in a circle, counting imports inside functions and
under TYPE_CHECKING: a cycle hidden in a function still ties the two modules together."""

from __future__ import annotations

import ast
from pathlib import Path

import failopen.rai

PACKAGE = Path(failopen.rai.__file__).parent


def _module(path: Path) -> str:
    return "failopen.rai" if path.stem == "__init__" else f"failopen.rai.{path.stem}"


def imports_of(source: str, modules: set[str]) -> set[str]:
    """The modules of ``modules`` that ``source`` imports anywhere in its text."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if alias.name in modules}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            if node.module in modules:
                found.add(node.module)
            found |= {f"{node.module}.{a.name}" for a in node.names} & modules
    return found


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Each circle found by a depth-first walk, as the modules along it."""
    found: list[list[str]] = []
    state: dict[str, str] = {}

    def walk(module: str, path: list[str]) -> None:
        state[module] = "open"
        for imported in sorted(graph[module]):
            if state.get(imported) == "open":
                found.append([*path[path.index(imported):], module, imported])
            elif imported not in state:
                walk(imported, [*path, module])
        state[module] = "done"

    for module in sorted(graph):
        if module not in state:
            walk(module, [])
    return found


def test_no_module_of_the_package_imports_another_in_a_circle() -> None:
    paths = {_module(path): path for path in PACKAGE.glob("*.py")}
    modules = set(paths)
    graph = {name: imports_of(path.read_text(), modules) - {name} for name, path in paths.items()}
    assert "failopen.rai._sync_cli" in graph["failopen.rai.cli"]  # the walk sees real imports
    assert cycles(graph) == []


def test_the_walk_finds_a_circle_through_a_function() -> None:
    modules = {"failopen.rai.a", "failopen.rai.b"}
    a = "from failopen.rai import b\n"
    b = "def f():\n    from failopen.rai.a import x\n"
    graph = {"failopen.rai.a": imports_of(a, modules), "failopen.rai.b": imports_of(b, modules)}
    assert cycles(graph) == [["failopen.rai.a", "failopen.rai.b", "failopen.rai.a"]]
