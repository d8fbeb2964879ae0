"""``manage.py failopen status|watch|override``: the failopen command, with Django's settings."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import override_settings

from failopen.engine.flag import EnforcementFlag
from failopen.stores import open_store
from failopen.testing import FakeStatusPage

ROOT = Path(__file__).resolve().parents[3]


def run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    try:
        call_command("failopen", *argv, stdout=out, stderr=err)
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    return code, out.getvalue(), err.getvalue()


def test_status_reads_the_status_url_from_the_settings(
    fo_settings: dict[str, Any], fake_status_page: FakeStatusPage
) -> None:
    with override_settings(FAILOPEN=fo_settings):
        code, out, _ = run("status", "--json")
        assert code == 0
        assert json.loads(out)["global_status"] == "operational"
        fake_status_page.set_global("major_outage")
        code, out, _ = run("status")
    assert code == 1  # the failopen command's "outage" exit code
    assert out.startswith("global: major_outage  (would bypass)")


def test_status_without_a_status_url_is_exit_2(fo_settings: dict[str, Any]) -> None:
    with override_settings(FAILOPEN={**fo_settings, "STATUS_URL": None}):
        code, _, err = run("status")
    assert code == 2
    assert "set FAILOPEN['STATUS_URL']" in err  # the key the settings hold (as None)


def test_watch_polls_with_the_settings(
    fo_settings: dict[str, Any], fake_status_page: FakeStatusPage
) -> None:
    fake_status_page.set_global("major_outage")
    with override_settings(FAILOPEN=fo_settings):
        code, out, _ = run("watch", "--json", "--count", "2")
    assert code == 0
    polls = [json.loads(line) for line in out.splitlines()]
    assert len(polls) == 2
    assert polls[-1]["enforce"] is False
    assert polls[-1]["global_status"] == "major_outage"


def test_watch_json_says_the_outage_policies_from_the_settings(
    fo_settings: dict[str, Any], fake_status_page: FakeStatusPage
) -> None:
    # Django names routes by view as well as by path; the secret stays out of every line.
    secret = "django-fallback-secret-never-shown-012345"
    policies = {"PROTECTED_PATHS": ["/login/", "/reset/"], "PROTECTED_VIEWS": ["signup"],
                "OUTAGE_POLICY_ROUTES": {"signup": "fallback", "/reset/": "closed"},
                "FALLBACK_SECRET": secret}
    with override_settings(FAILOPEN={**fo_settings, **policies}):
        code, out, err = run("watch", "--json", "--count", "1")
    assert code == 0, err
    (line,) = [json.loads(text) for text in out.splitlines()]
    assert line["outage_policy"] == "open"
    assert line["outage_policy_routes"] == {"signup": "fallback", "/reset/": "closed"}
    assert secret not in out + err


def test_override_writes_the_store_named_in_the_settings(
    fo_settings: dict[str, Any], tmp_path: Path
) -> None:
    store = f"file://{tmp_path / 'override.json'}"
    with override_settings(FAILOPEN={**fo_settings, "STORE": store}):
        code, out, _ = run("override", "off", "--ttl", "30m", "--reason", "vendor down",
                           "--json")
        assert code == 0
        assert json.loads(out)["override"]["enforce"] is False
        assert EnforcementFlag(store=open_store(store)).state.enforce is False
        code, out, _ = run("override", "show")
        assert out.startswith("override: enforce=False")
        run("override", "auto")
    assert EnforcementFlag(store=open_store(store)).state.enforce is True


def test_override_refuses_the_memory_store(fo_settings: dict[str, Any]) -> None:
    with override_settings(FAILOPEN=fo_settings):
        code, _, err = run("override", "off")
    assert code == 2
    assert "memory: store" in err


def test_only_the_three_verbs(fo_settings: dict[str, Any]) -> None:
    with override_settings(FAILOPEN=fo_settings), pytest.raises(CommandError):
        call_command("failopen", "demo")


def test_verb_help_is_the_failopen_commands(fo_settings: dict[str, Any]) -> None:
    code, out, _ = run("override", "--help")
    assert code == 0
    assert "lapse after this long" in out


@pytest.mark.slow
def test_manage_py_of_the_example(fake_status_page: FakeStatusPage) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FAILOPEN_", "DJANGO_"))}
    env["FAILOPEN_STATUS_URL"] = fake_status_page.url
    fake_status_page.set_global("partial_outage")
    result = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "django_site" / "manage.py"), "failopen",
         "status", "--json"], env=env, capture_output=True, text=True, timeout=60,
    )
    assert result.returncode == 1, result.stderr
    assert json.loads(result.stdout)["would_bypass"] is True


def test_management_commands_start_no_watcher(
    fo_settings: dict[str, Any], fake_status_page: FakeStatusPage
) -> None:
    import threading

    from failopen.integrations.django import conf

    def watchers() -> set[threading.Thread]:
        return {t for t in threading.enumerate() if t.name == "failopen.status-watcher"}

    before = watchers()
    with override_settings(FAILOPEN=fo_settings):
        call_command("check", stdout=io.StringIO())
        assert run("status")[0] == 0
        # The template tag and the checks read the settings; neither builds the runtime.
        conf.config()
        assert conf._runtime is None
        assert watchers() == before
    assert fake_status_page.requests == 1  # the status verb's own request, nothing else
