"""Every problem of ``settings.FAILOPEN`` in one list, named as the site writes it.

A misspelled key used to hide every other problem, and made ``manage.py`` commands a traceback
(``AppConfig.ready`` raised inside Django's management utility); a setting given in the FAILOPEN
dict was named as the environment variable nobody set.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from django.apps import apps
from django.core.exceptions import ImproperlyConfigured
from django.core.management import call_command
from django.test import override_settings

from failopen.exceptions import ConfigError

SITE = Path(__file__).resolve().parents[3] / "examples" / "django_site"
TYPO = "'STATUS_ULR' (did you mean 'STATUS_URL'?)"
BAD_VALUE = "FAILOPEN['POLL_INTERVAL']: must be greater than 0"
OTHER_BAD_VALUE = "FAILOPEN['RETRY_AFTER']: must be greater than 0"


def broken(fo_settings: dict[str, Any]) -> dict[str, Any]:
    """A misspelled key and two bad values."""
    return {**fo_settings, "STATUS_ULR": "https://status.example.com", "POLL_INTERVAL": -1,
            "RETRY_AFTER": 0}


def run_check(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    try:
        call_command("failopen", "check", *argv, stdout=out, stderr=err)
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    return code, out.getvalue(), err.getvalue()


def test_failopen_check_lists_the_unknown_key_and_every_bad_value(
        fo_settings: dict[str, Any]) -> None:
    with override_settings(FAILOPEN=broken(fo_settings)):
        code, out, err = run_check()
    assert code == 1, out + err
    lines = out.splitlines()
    configuration = [line for line in lines if line.startswith("problem  configuration: ")]
    assert len(configuration) == 3, out
    assert TYPO in configuration[0]
    assert any(BAD_VALUE in line for line in configuration)
    assert any(OTHER_BAD_VALUE in line for line in configuration)
    # The other lines still check what their own settings say: the status page is good.
    assert any(line.startswith("ok       status page: ") for line in lines), out
    assert "Traceback" not in out + err


def test_the_system_checks_list_every_problem(fo_settings: dict[str, Any]) -> None:
    from failopen.integrations.django.checks import check_settings

    with override_settings(FAILOPEN=broken(fo_settings),
                           FAILOPEN_STATUS_URL="https://status.example.com"):
        found = check_settings()
    messages = [m.msg for m in found if m.id == "failopen.E001"]
    assert any(TYPO in m for m in messages), messages
    assert any(BAD_VALUE in m for m in messages), messages
    assert any(OTHER_BAD_VALUE in m for m in messages), messages
    # A setting outside the dict: ready() says so to a server; the checks say it to manage.py.
    assert any("settings.FAILOPEN_STATUS_URL is not read by failopen" in m for m in messages)


def test_a_server_refuses_to_start_naming_every_problem(fo_settings: dict[str, Any]) -> None:
    with override_settings(FAILOPEN=broken(fo_settings)), \
            pytest.raises(ImproperlyConfigured, match="failopen cannot start") as raised:
        apps.get_app_config("failopen").ready()
    text = str(raised.value)
    assert TYPO in text and BAD_VALUE in text and OTHER_BAD_VALUE in text
    assert fo_settings["PRIVATE_KEY"] not in text


def test_a_start_up_error_names_the_keys_of_the_dict(fo_settings: dict[str, Any]) -> None:
    # Protected paths without a verify URL: the runtime cannot start. The site wrote
    # FAILOPEN["PROTECTED_PATHS"] and FAILOPEN["VERIFY_URL"]; that is what it must read.
    from failopen.integrations.django import conf

    with override_settings(FAILOPEN={**fo_settings, "VERIFY_URL": None, "PRIVATE_KEY": None}), \
            pytest.raises(ConfigError) as raised:
        conf.runtime()
    text = str(raised.value)
    assert "FAILOPEN['VERIFY_URL']: required when FAILOPEN['PROTECTED_PATHS']" in text, text
    assert "FAILOPEN_VERIFY_URL" not in text and "FAILOPEN_PROTECTED_PATHS" not in text


def test_a_variable_keeps_its_name_beside_a_key(fo_settings: dict[str, Any],
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    from failopen.integrations.django.conf import as_written

    monkeypatch.setenv("FAILOPEN_RETRY_AFTER", "7")
    with override_settings(FAILOPEN=fo_settings):
        assert as_written("FAILOPEN_POLL_INTERVAL and FAILOPEN_RETRY_AFTER; "
                          "FAILOPEN_POLL_INTERVALL") == (
            "FAILOPEN['POLL_INTERVAL'] and FAILOPEN_RETRY_AFTER; FAILOPEN_POLL_INTERVALL")


def test_a_name_meant_as_a_variable_stays_one(fo_settings: dict[str, Any]) -> None:
    # STATUS_URL is a key of the dict; these texts are about the variable or the top-level
    # setting of that name, which the dict's key must not rename.
    from failopen.integrations.django.conf import as_written

    texts = ["settings.FAILOPEN_STATUS_URL is not read by failopen; move it into the FAILOPEN "
             "dict as FAILOPEN['STATUS_URL'] (or set the FAILOPEN_STATUS_URL environment "
             "variable)",
             "the environment variable FAILOPEN_STATUS_URLL is ignored; did you mean "
             "FAILOPEN_STATUS_URL?"]
    with override_settings(FAILOPEN=fo_settings):
        assert [as_written(text) for text in texts] == texts


def test_failopen_check_names_a_top_level_setting(fo_settings: dict[str, Any]) -> None:
    # ready() raises this for a server; under manage.py it is the check's to say.
    with override_settings(FAILOPEN=fo_settings, FAILOPEN_STATUS_URL="https://x.example"):
        code, out, err = run_check()
    assert code == 1, out + err
    assert ("problem  configuration: settings.FAILOPEN_STATUS_URL is not read by failopen; move "
            "it into the FAILOPEN dict as FAILOPEN['STATUS_URL'] (or set the "
            "FAILOPEN_STATUS_URL environment variable)") in out


# --- manage.py in a process of its own -------------------------------------------------------


def manage(tmp_path: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "typo_settings.py").write_text(
        "from django_site.settings import *  # noqa: F403\n"
        "FAILOPEN = {'STATUS_ULR': 'http://127.0.0.1:9', 'POLL_INTERVAL': -1,\n"
        "            'PROTECTED_PATHS': ['/login/']}\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FAILOPEN_", "DJANGO_"))}
    env.update({"DJANGO_SETTINGS_MODULE": "typo_settings",
                "PYTHONPATH": os.pathsep.join([str(tmp_path), str(SITE)])})
    return subprocess.run([sys.executable, "-m", "django", *argv], env=env, cwd=SITE,
                          capture_output=True, text=True, timeout=60)


@pytest.mark.slow
def test_manage_py_failopen_check_lists_a_typo_instead_of_a_traceback(tmp_path: Path) -> None:
    done = manage(tmp_path, "failopen", "check")
    output = done.stdout + done.stderr
    assert done.returncode == 1, output
    assert "Traceback" not in output and "ImproperlyConfigured" not in output, output
    assert f"problem  configuration: settings.FAILOPEN: unknown failopen setting(s): {TYPO}" \
        in done.stdout
    assert "problem  configuration: FAILOPEN['POLL_INTERVAL']: must be greater than 0" \
        in done.stdout
    assert done.stdout.splitlines()[-1].startswith("failopen check failed: ")


@pytest.mark.slow
def test_manage_py_check_lists_a_typo_instead_of_a_traceback(tmp_path: Path) -> None:
    done = manage(tmp_path, "check")
    assert done.returncode == 1
    assert "Traceback" not in done.stderr, done.stderr
    assert f"(failopen.E001) failopen settings are invalid: settings.FAILOPEN: unknown " \
           f"failopen setting(s): {TYPO}" in done.stderr
    assert "(failopen.E001) failopen settings are invalid: FAILOPEN['POLL_INTERVAL']" \
        in done.stderr
