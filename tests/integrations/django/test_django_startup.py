"""Settings failopen cannot use stop the server at start: checks never run under gunicorn/uvicorn.

``AppConfig.ready`` runs in every server process; these tests run it under real settings
overrides, and start the example site under gunicorn and uvicorn with a broken setting.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from django.apps import apps
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.test import override_settings

from failopen.testing import free_port

SITE = Path(__file__).resolve().parents[3] / "examples" / "django_site"


def ready() -> None:
    apps.get_app_config("failopen").ready()


@pytest.mark.parametrize(("changes", "message"), [
    ({"status_url": "https://status.example.com"}, "'status_url' (did you mean 'STATUS_URL'?)"),
    ({"STATUS_ULR": "https://status.example.com"}, "'STATUS_ULR' (did you mean 'STATUS_URL'?)"),
    ({"PROTECTED_VIEW": ["accounts:login"]}, "did you mean 'PROTECTED_VIEWS'?"),
    ({"POLL_INTERVAL": "soon"}, "FAILOPEN['POLL_INTERVAL']: 'soon' is not a duration"),
    ({"reject_view": "django_test_urls.site_reject"}, "did you mean 'REJECT_VIEW'?"),
    ({"REJECT_VEIW": "django_test_urls.site_reject"}, "did you mean 'REJECT_VIEW'?"),
])
def test_unusable_failopen_setting_stops_the_start(
    fo_settings: dict[str, Any], changes: dict[str, Any], message: str
) -> None:
    with override_settings(FAILOPEN={**fo_settings, **changes}), \
            pytest.raises(ImproperlyConfigured, match="failopen cannot start") as raised:
        ready()
    assert message in str(raised.value)
    assert fo_settings["PRIVATE_KEY"] not in str(raised.value)


@pytest.mark.parametrize(("name", "meant"), [
    ("FAILOPEN_STATUS_URL", "STATUS_URL"),  # a real name, in the wrong place
    ("FAILOPEN_STATUS_ULR", "STATUS_URL"),
])
def test_top_level_failopen_setting_says_where_it_belongs(
    fo_settings: dict[str, Any], name: str, meant: str
) -> None:
    with override_settings(FAILOPEN=fo_settings, **{name: "https://status.example.com"}), \
            pytest.raises(ImproperlyConfigured) as raised:
        ready()
    assert f"settings.{name} is not read by failopen" in str(raised.value)
    assert f"FAILOPEN[{meant!r}]" in str(raised.value)


def test_misspelled_failopen_dict_is_named(fo_settings: dict[str, Any]) -> None:
    with override_settings(FAILOPN=fo_settings):
        del settings.FAILOPEN
        with pytest.raises(ImproperlyConfigured, match="settings.FAILOPN .* did you mean FAILOPEN"):
            ready()


def test_usable_settings_start_and_warn_about_what_weakens_them(
    fo_settings: dict[str, Any], caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    caplog.set_level(logging.WARNING, logger="failopen.django")
    with override_settings(FAILOPEN=fo_settings, FAILOPEN_MY_OWN_THING=1):
        ready()
    assert caplog.records == []
    monkeypatch.setenv("FAILOPEN_POLL_INTERVALL", "5")
    monkeypatch.setenv("FAILOPEN_RAI_CLIENT_ID", "not ours")
    with override_settings(FAILOPEN={**fo_settings, "STATUS_URL": None}):
        ready()
    with override_settings(FAILOPEN={**fo_settings, "VERIFY_URL": None, "PRIVATE_KEY": None}):
        ready()  # a build step without the secrets still runs; the site would refuse (503)
    text = caplog.text
    assert "every protected request is refused (503)" in text
    assert "no status URL" in text and "FAILOPEN['STATUS_URL']" in text
    assert "FAILOPEN_POLL_INTERVALL is ignored; did you mean FAILOPEN_POLL_INTERVAL?" in text
    assert "RAI" not in text


# --- a real server process -------------------------------------------------------------------


@pytest.mark.parametrize("server", ["gunicorn", "uvicorn"])
def test_server_refuses_to_start_with_a_lower_case_key(tmp_path: Path, server: str) -> None:
    (tmp_path / "broken_settings.py").write_text(
        "from django_site.settings import *  # noqa: F403\n"
        "FAILOPEN = {'status_url': 'http://127.0.0.1:9', 'PROTECTED_PATHS': ['/login/']}\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FAILOPEN_", "DJANGO_"))}
    env.update({"DJANGO_SETTINGS_MODULE": "broken_settings",
                "PYTHONPATH": os.pathsep.join([str(tmp_path), str(SITE)])})
    port = str(free_port())
    command = {
        "gunicorn": ["-m", "gunicorn", "--preload", "-w", "1", "-b", f"127.0.0.1:{port}",
                     "django_site.wsgi:application"],
        "uvicorn": ["-m", "uvicorn", "--port", port, "django_site.asgi:application"],
    }[server]
    proc = subprocess.Popen([sys.executable, *command], env=env, cwd=SITE,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        output, _ = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        output, _ = proc.communicate()
        pytest.fail(f"{server} started with a settings key failopen drops: {output.decode()}")
    assert proc.returncode != 0
    assert "'status_url' (did you mean 'STATUS_URL'?)" in output.decode()


@pytest.mark.parametrize(("settings_given", "named"), [
    ({"POLL_INTERVAL": -5}, "FAILOPEN['POLL_INTERVAL']: must be greater than 0"),
    ({"POLL_INTERVAL": "soon"}, "FAILOPEN['POLL_INTERVAL']: 'soon' is not a duration"),
    # Not written in the settings: named as either place would hold it, the variable's way.
    ({"OUTAGE_POLICY": "fallback"}, "FAILOPEN_FALLBACK_SECRET: required"),
    ({"FALLBACK_SECRET": "short", "OUTAGE_POLICY": "fallback"},
     "FAILOPEN['FALLBACK_SECRET']: must be at least 32 characters"),
])
def test_errors_name_a_setting_as_the_django_user_wrote_it(
        fo_settings: dict[str, Any], settings_given: dict[str, Any], named: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    # A Django user wrote FAILOPEN["POLL_INTERVAL"], not the environment variable: the message
    # names what they can find in their settings file.
    from django.test import override_settings
    from failopen.integrations.django.conf import config_factory

    from failopen.exceptions import ConfigError

    monkeypatch.delenv("FAILOPEN_FALLBACK_SECRET", raising=False)
    with override_settings(FAILOPEN={**fo_settings, **settings_given}), \
            pytest.raises(ConfigError) as raised:
        config_factory()
    assert named in str(raised.value)
    assert "FAILOPEN_POLL_INTERVAL" not in str(raised.value)


def test_a_variable_from_the_environment_keeps_its_name(
        fo_settings: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    from django.test import override_settings
    from failopen.integrations.django.conf import config_factory

    from failopen.exceptions import ConfigError

    monkeypatch.setenv("FAILOPEN_POLL_INTERVAL", "-3")
    settings_without = {k: v for k, v in fo_settings.items() if k != "POLL_INTERVAL"}
    with override_settings(FAILOPEN=settings_without), pytest.raises(ConfigError) as raised:
        config_factory()
    assert str(raised.value).startswith("FAILOPEN_POLL_INTERVAL: ")
