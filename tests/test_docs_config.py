"""The manual's configuration table (docs/configuration.md) lists every setting: each Config
field and each FAILOPEN_* variable the code reads from the environment, and nothing else.

Config fields come from the dataclass itself (through ``env_name``, the one function that names
their variables). Variables read outside Config (the ``rai`` commands' credentials, and any a
later change adds) are found by reading the source's syntax trees for environment reads:
``os.environ.get(X)``, ``os.getenv(X)``, ``environ[X]``, ``X in os.environ``, where ``X`` is a
``"FAILOPEN_..."`` literal or a module-level name bound to one.
"""

from __future__ import annotations

import ast
import dataclasses
import re

from _manual import ROOT, page, section

from failopen.config import Config, env_name

SOURCES = ("failopen", "integrations")


def _configuration_table() -> list[str]:
    """The first cell of each row of the one table on the configuration reference page (the
    text under its title, before its first section)."""
    reference = section(page("configuration.md"), "# Configuration reference")
    reference = reference.split("\n## ", 1)[0]
    rows = [line for line in reference.splitlines() if line.startswith("|")]
    assert rows, "the configuration reference has a table"
    assert rows[0].startswith("| Variable | Default | Meaning |"), rows[0]
    return [row.split("|")[1] for row in rows[2:]]  # past the header and its rule


def _documented() -> set[str]:
    return {name for cell in _configuration_table()
            for name in re.findall(r"`(FAILOPEN_[A-Z0-9_]+)`", cell)}


def _literal(node: ast.AST, constants: dict[str, str]) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.Name):
        return constants.get(node.id)
    return None


def _is_environ(node: ast.AST) -> bool:
    """``os.environ``, ``environ`` or any ``*.environ``: what holds environment variables."""
    return (isinstance(node, ast.Name) and node.id in {"environ", "env"}) or (
        isinstance(node, ast.Attribute) and node.attr == "environ")


def environment_reads(tree: ast.Module) -> set[str]:
    """FAILOPEN_* names this module reads from the environment."""
    constants = {target.id: stmt.value.value
                 for stmt in tree.body if isinstance(stmt, ast.Assign)
                 and isinstance(stmt.value, ast.Constant) and isinstance(stmt.value.value, str)
                 for target in stmt.targets if isinstance(target, ast.Name)}
    keys: list[ast.AST] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and node.args:
            func = node.func
            mapping_read = isinstance(func, ast.Attribute) and _is_environ(func.value) \
                and func.attr in {"get", "pop", "setdefault"}
            getenv = (isinstance(func, ast.Attribute) and func.attr == "getenv") or (
                isinstance(func, ast.Name) and func.id == "getenv")
            if mapping_read or getenv:
                keys.append(node.args[0])
        elif isinstance(node, ast.Subscript) and _is_environ(node.value):
            keys.append(node.slice)
        elif isinstance(node, ast.Compare) and any(_is_environ(c) for c in node.comparators):
            keys.append(node.left)
    names = {_literal(key, constants) for key in keys}
    return {name for name in names if name and re.fullmatch(r"FAILOPEN_[A-Z0-9_]+", name)}


def _variables_read() -> dict[str, str]:
    found: dict[str, str] = {}
    for folder in SOURCES:
        for path in sorted((ROOT / folder).rglob("*.py")):
            for name in environment_reads(ast.parse(path.read_text(), str(path))):
                found.setdefault(name, path.relative_to(ROOT).as_posix())
    return found


def test_every_config_field_is_in_the_configuration_table() -> None:
    documented = _documented()
    missing = [env_name(f.name) for f in dataclasses.fields(Config)
               if env_name(f.name) not in documented]
    assert not missing, (
        f"add a row to the configuration table (docs/configuration.md) for: {', '.join(missing)}")


def test_every_variable_the_code_reads_is_in_the_configuration_table() -> None:
    read = _variables_read()
    # The scan must see the reads it exists for, or it proves nothing.
    assert {"FAILOPEN_RAI_BASE_URL", "FAILOPEN_RAI_CLIENT_SECRET"} <= set(read), read
    missing = sorted(f"{name} (read in {where})" for name, where in read.items()
                     if name not in _documented())
    assert not missing, (
        f"add a row to the configuration table (docs/configuration.md) for: {', '.join(missing)}")


def test_the_table_names_no_setting_that_does_not_exist() -> None:
    known = {env_name(f.name) for f in dataclasses.fields(Config)} | set(_variables_read())
    stale = sorted(_documented() - known)
    assert not stale, (
        f"the configuration table (docs/configuration.md) documents unknown settings: {stale}")


def test_the_scan_finds_each_way_of_reading_the_environment() -> None:
    source = (
        "import os\n"
        "from os import environ, getenv\n"
        "NAME = 'FAILOPEN_A'\n"
        "os.environ.get(NAME)\n"
        "os.getenv('FAILOPEN_B', '')\n"
        "environ['FAILOPEN_C']\n"
        "'FAILOPEN_D' in os.environ\n"
        "getenv('FAILOPEN_E')\n"
        "print('FAILOPEN_NOT_READ')\n"
    )
    assert environment_reads(ast.parse(source)) == {f"FAILOPEN_{c}" for c in "ABCDE"}
