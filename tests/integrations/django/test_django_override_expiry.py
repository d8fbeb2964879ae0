"""Forcing enforcement off always ends, through Django's paths: the override view and
``manage.py failopen override`` (which runs the failopen command with Django's settings)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from django.test import override_settings
from test_django_command import run

from failopen.engine.flag import rfc3339
from failopen.stores import open_store

ADMIN_TOKEN = "an-admin-token-long-enough-to-count"
HOUR, WEEK = 3600, 7 * 86400


@pytest.fixture
def client(make_client: Callable[..., Any], client_kind: str) -> Any:
    return make_client()


def override(client: Any, body: dict[str, Any]) -> Any:
    return client.post("/failopen/override", json.dumps(body), content_type="application/json",
                       headers={"Authorization": f"Bearer {ADMIN_TOKEN}"})


def shared_store(tmp_path: Path) -> str:
    # The override view refuses a memory: store (it would reach one process only).
    return f"file://{tmp_path / 'override.json'}"


def test_view_forcing_off_without_ttl_lapses_in_an_hour(
    client: Any, use_failopen: Any, tmp_path: Path
) -> None:
    runtime = use_failopen(OVERRIDE_ENDPOINT=True, ADMIN_TOKEN=ADMIN_TOKEN,
                           STORE=shared_store(tmp_path))
    response = override(client, {"enforce": False, "reason": "vendor down"})
    assert response.status_code == 200
    placed = runtime.flag.override
    assert placed is not None and placed.expires_at == placed.set_at + HOUR
    data = response.json()
    assert data["override"]["expires_at"] == rfc3339(placed.expires_at)
    assert data["flag"]["expires_at"] == rfc3339(placed.expires_at)


def test_view_refuses_forcing_off_beyond_seven_days(
    client: Any, use_failopen: Any, tmp_path: Path
) -> None:
    runtime = use_failopen(OVERRIDE_ENDPOINT=True, ADMIN_TOKEN=ADMIN_TOKEN,
                           STORE=shared_store(tmp_path))
    response = override(client, {"enforce": False, "ttl": WEEK + 1})
    assert response.status_code == 400
    assert "at most 7 days (604800 s)" in response.json()["error"]["message"]
    assert runtime.state.enforce is True and runtime.flag.override is None
    assert override(client, {"enforce": True}).json()["override"]["expires_at"] is None


def test_command_forcing_off_lapses_and_is_capped(
    fo_settings: dict[str, Any], tmp_path: Path
) -> None:
    store = f"file://{tmp_path / 'override.json'}"
    with override_settings(FAILOPEN={**fo_settings, "STORE": store}):
        code, out, _ = run("override", "off", "--json")
        assert code == 0
        shown = json.loads(out)["override"]
        placed = open_store(store).load()
        assert placed is not None and placed.expires_at == placed.set_at + HOUR
        assert shown["expires_at"] == rfc3339(placed.expires_at)
        code, _, err = run("override", "off", "--ttl", "8d")
    assert code == 2
    assert "at most 7 days (604800 s)" in err


def test_command_show_exits_2_on_a_corrupt_store(
    fo_settings: dict[str, Any], tmp_path: Path
) -> None:
    path = tmp_path / "override.json"
    path.write_text("{broken")
    with override_settings(FAILOPEN={**fo_settings, "STORE": path.as_uri()}):
        code, out, err = run("override", "show")
    assert code == 2
    assert "not valid JSON" in err and "no override" not in out
