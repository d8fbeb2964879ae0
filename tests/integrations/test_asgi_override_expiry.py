"""Forcing enforcement off always ends, through the ASGI ``POST <prefix>/override`` route."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from _asgi_kit import ADMIN_TOKEN, Stack

from failopen.engine.flag import rfc3339

pytestmark = pytest.mark.anyio

Make = Callable[..., Stack]
BEARER = {"Authorization": f"Bearer {ADMIN_TOKEN}"}


async def test_forcing_off_without_ttl_lapses_in_an_hour(make_asgi: Make, tmp_path: Path) -> None:
    # A shared store: the route refuses memory: (it would reach one worker only).
    stack = make_asgi(admin_token=ADMIN_TOKEN, store=f"file://{tmp_path / 'override.json'}")
    response = await stack.client.post("/failopen/override", headers=BEARER,
                                       json={"enforce": False})
    assert response.status_code == 200
    placed = stack.runtime.flag.override
    assert placed is not None and placed.expires_at == placed.set_at + 3600
    body = response.json()
    assert body["override"]["expires_at"] == rfc3339(placed.expires_at)
    assert body["flag"]["expires_at"] == rfc3339(placed.expires_at)


async def test_forcing_off_beyond_seven_days_is_400(make_asgi: Make, tmp_path: Path) -> None:
    # A shared store: the route refuses memory: (it would reach one worker only).
    stack = make_asgi(admin_token=ADMIN_TOKEN, store=f"file://{tmp_path / 'override.json'}")
    response = await stack.client.post("/failopen/override", headers=BEARER,
                                       json={"enforce": False, "ttl": 30 * 86400})
    assert response.status_code == 400
    assert "at most 7 days (604800 s)" in response.json()["error"]["message"]
    assert stack.runtime.state.enforce is True and stack.runtime.flag.override is None
