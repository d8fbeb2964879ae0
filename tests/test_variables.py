"""Unknown ``FAILOPEN_*`` variables (issue 18, item 7): the known list comes from the code, and
the CLI names every other one, with the closest known name. The adapters: tests/integrations/
test_config_report.py and tests/integrations/django/test_django_config_report.py."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from failopen._variables import known_variables, unknown_variables
from failopen.config import Config, env_name

ROOT = Path(__file__).resolve().parents[1]
# A variable name in code or docstrings: the prefix and at least one more part.
_NAME = re.compile(r"\bFAILOPEN_[A-Z0-9]+(?:_[A-Z0-9]+)*\b")


def _read_in_code() -> dict[str, str]:
    """Every FAILOPEN_* name the package and the adapters mention, with one file naming it."""
    found: dict[str, str] = {}
    for folder in ("failopen", "integrations"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            for name in _NAME.findall(path.read_text()):
                found.setdefault(name, str(path.relative_to(ROOT)))
    return found


def test_every_variable_the_code_names_is_known() -> None:
    """A variable read somewhere (a Config field, the rai client's, a kit's) must be in the
    known list, or every site setting it would be told it is ignored."""
    mentioned = _read_in_code()
    assert {"FAILOPEN_RAI_CLIENT_SECRET", "FAILOPEN_STORE_PASSWORD"} <= set(mentioned)
    missing = {name: where for name, where in mentioned.items()
               if name not in known_variables()}
    assert missing == {}, "add these to failopen/_variables.py (or fix the name)"


def test_the_known_list_is_every_config_field_and_what_the_code_reads_beside() -> None:
    """Every Config field's variable, and every variable read outside Config (found by the
    configuration table test's scan of environment reads): nothing more, nothing less."""
    import dataclasses

    from test_docs_config import _variables_read

    fields = {env_name(spec.name) for spec in dataclasses.fields(Config)}
    read = set(_variables_read())
    assert {"FAILOPEN_RAI_BASE_URL", "FAILOPEN_RAI_CLIENT_SECRET"} <= read
    assert known_variables() == fields | read


@pytest.mark.parametrize(("variable", "expected"), [
    ("FAILOPEN_PROTECTED_PATH", "did you mean FAILOPEN_PROTECTED_PATHS?"),
    ("FAILOPEN_STATUS_ULR", "did you mean FAILOPEN_STATUS_URL?"),
    ("FAILOPEN_RAI_CLIENTID", "did you mean FAILOPEN_RAI_CLIENT_ID?"),
    ("failopen_store", "did you mean FAILOPEN_STORE?"),
    ("FAILOPEN_SIGNUP", "failopen reads no variable of that name or close to it"),
])
def test_an_unknown_variable_is_named_with_the_closest_known_one(
    variable: str, expected: str
) -> None:
    [line] = unknown_variables({variable: "x", "FAILOPEN_STORE": "memory:",
                                "FAILOPEN_RAI_CLIENT_SECRET": "s", "HOME": "/root"})
    assert line.startswith(f"the environment variable {variable} is ignored; ")
    assert expected in line
    assert "x" not in line.replace(variable, "").replace("exist", "")  # never the value


def test_the_cli_names_an_unknown_variable_before_it_works(
    run: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``FAILOPEN_STATUS_ULR`` set: the command says it is ignored and what was meant, on
    stderr, whatever the verb then does (here: no status URL, exit 2)."""
    monkeypatch.setenv("FAILOPEN_STATUS_ULR", "https://status.vendor.example")
    result = run("status")
    assert result.code == 2
    assert ("failopen: warning: the environment variable FAILOPEN_STATUS_ULR is ignored; did "
            "you mean FAILOPEN_STATUS_URL?") in result.err
    assert result.err.count("FAILOPEN_STATUS_ULR") == 1
    assert "https://status.vendor.example" not in result.err
    # Known variables only: nothing to say.
    monkeypatch.delenv("FAILOPEN_STATUS_ULR")
    monkeypatch.setenv("FAILOPEN_RAI_BASE_URL", "https://api.vendor.example")
    assert "warning" not in run("status").err


def test_a_blank_rai_client_secret_is_unset(run: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A blank secret is a missing one: said at once, without a request to the service."""
    monkeypatch.setenv("FAILOPEN_RAI_BASE_URL", "http://127.0.0.1:9")  # nothing listens there
    monkeypatch.setenv("FAILOPEN_RAI_CLIENT_ID", "export-client")
    monkeypatch.setenv("FAILOPEN_RAI_CLIENT_SECRET", "   ")
    result = run("rai", "cohort", "c1")
    assert result.code == 2
    assert "set FAILOPEN_RAI_CLIENT_SECRET" in result.err
