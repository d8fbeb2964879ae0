"""A store URL with a password that cannot be used (a Redis URL naming no server), under Django:
refused when the settings are read, and its password shows nowhere (``manage.py check``, the log,
the protected route, the command)."""

from __future__ import annotations

import io
import logging
from collections.abc import Callable
from typing import Any

import pytest
from django.core.management import call_command
from django.test import override_settings
from failopen.integrations.django.checks import check_settings

SECRET = "s3cret-Pa55"
STORE = f"redis://:{SECRET}@/0"  # no host: refused before any connection


@pytest.fixture
def client(make_client: Callable[..., Any], client_kind: str) -> Any:
    return make_client()


def test_check_reports_the_store_without_its_password(fo_settings: dict[str, Any]) -> None:
    with override_settings(FAILOPEN={**fo_settings, "STORE": STORE}):
        (message,) = check_settings()
    assert message.id == "failopen.E001"
    assert "FAILOPEN['STORE']" in message.msg and "redis://:***@/0" in message.msg
    assert SECRET not in message.msg and SECRET not in (message.hint or "")


def test_the_route_and_the_log_never_show_the_password(
    client: Any, use_failopen: Any, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.DEBUG):
        use_failopen(STORE=STORE)
        response = client.post("/login/")
    assert response.status_code == 503  # fail closed, as for any unusable setting
    assert SECRET not in response.content.decode()
    assert "FAILOPEN['STORE']" in caplog.text
    assert SECRET not in caplog.text


def test_the_command_never_shows_the_password(fo_settings: dict[str, Any]) -> None:
    out, err = io.StringIO(), io.StringIO()
    with override_settings(FAILOPEN={**fo_settings, "STORE": STORE}), \
            pytest.raises(SystemExit) as exited:
        call_command("failopen", "override", "show", stdout=out, stderr=err)
    assert exited.value.code == 2
    assert "FAILOPEN['STORE']" in err.getvalue()
    assert SECRET not in out.getvalue() + err.getvalue()
