"""The wheel installs integrations as failopen.integrations, and CI runs the README's line."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest
from _manual import page
from _wheel import build_wheel

ROOT = Path(__file__).resolve().parent.parent


def _readme_test_line() -> str:
    lines = [line for line in (ROOT / "README.md").read_text().splitlines()
             if "pytest" in line and line.startswith("python3 -m venv")]
    assert len(lines) == 1, "the README shows exactly one test line"
    return lines[0]


def test_ci_runs_the_readme_test_line_verbatim() -> None:
    assert _readme_test_line() in (ROOT / ".ci" / "run").read_text().splitlines()


def test_readme_first_screen_has_the_demo_line() -> None:
    first_screen = "\n".join((ROOT / "README.md").read_text().splitlines()[:20])
    assert "failopen demo" in first_screen
    assert _readme_test_line() in first_screen


@pytest.mark.slow
def test_wheel_has_no_top_level_integrations(tmp_path_factory: pytest.TempPathFactory) -> None:
    wheel = build_wheel(tmp_path_factory)  # shared with tests/test_examples_installed.py
    names = zipfile.ZipFile(wheel).namelist()
    assert not [n for n in names if n.startswith("integrations/")]
    assert "failopen/integrations/__init__.py" in names
    assert "failopen/py.typed" in names
    assert "failopen/testing/pytest_plugin.py" in names
    # The snippet and its solver: for the adapters (core) and for Django's AppDirectoriesFinder
    # (the app).
    for name in ("failopen.js", "failopen-solver.js"):
        snippet = (ROOT / "failopen" / "static" / "failopen" / name).read_bytes()
        with zipfile.ZipFile(wheel) as archive:  # the one source, as a file at both places
            assert archive.read(f"failopen/static/failopen/{name}") == snippet
            assert archive.read(f"failopen/integrations/django/static/failopen/{name}") == snippet
    # The record schemas users' lakes read (failopen/rai/schema), byte for byte.
    for schema in sorted((ROOT / "failopen" / "rai" / "schema").glob("*.schema.json")):
        with zipfile.ZipFile(wheel) as archive:
            assert archive.read(f"failopen/rai/schema/{schema.name}") == schema.read_bytes()
    sources = {p.relative_to(ROOT).as_posix() for p in (ROOT / "failopen").rglob("*.py")}
    packaged = {n for n in names if n.endswith(".py")}
    missing = {s for s in sources if s not in packaged and "__pycache__" not in s}
    assert not missing, f"modules left out of the wheel (add their package to pyproject): {missing}"


def test_the_test_kit_page_lists_every_fault_of_the_fakes() -> None:
    from failopen.testing import FakeStatusPage, FakeVerifyAPI

    kit = page("testing.md")
    for fake in (FakeStatusPage, FakeVerifyAPI):
        row = next(line for line in kit.splitlines() if line.startswith(f"| `{fake.__name__}`"))
        missing = [fault for fault in fake.FAULTS if f"`{fault}`" not in row]
        assert not missing, f"docs/testing.md's {fake.__name__} row lacks {missing}"


def test_the_configuration_page_documents_every_config_variable() -> None:
    import dataclasses

    from failopen.config import Config, env_name

    reference = page("configuration.md")
    undocumented = [env_name(f.name) for f in dataclasses.fields(Config)
                    if f"`{env_name(f.name)}`" not in reference]
    assert not undocumented, f"add to docs/configuration.md's table: {undocumented}"
