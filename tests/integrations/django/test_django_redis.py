"""Django's override view and management command write through the Redis store: every process of
the fleet sees the override, recorded with who placed it (``django:<user id>``, ``admin-token``)."""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from typing import Any

import pytest
from _redis_kit import RedisServer
from django.core.management import call_command
from django.test import override_settings

from failopen.engine.flag import EnforcementFlag
from failopen.stores import open_store

ADMIN_TOKEN = "an-admin-token-long-enough-to-count"


def override(client: Any, body: Any, **headers: str) -> Any:
    return client.post("/failopen/override", json.dumps(body), content_type="application/json",
                       headers=headers)


def elsewhere(redis_server: RedisServer) -> EnforcementFlag:
    """Another process of the fleet, reading the same Redis."""
    return EnforcementFlag(store=open_store(redis_server.url))


@pytest.fixture
def staff(django_db: None) -> Any:
    from django.contrib.auth.models import User

    user, _ = User.objects.get_or_create(username="ops", defaults={"is_staff": True})
    return user


def test_staff_override_reaches_the_fleet_with_the_user_id(
    make_client: Callable[..., Any], use_failopen: Any, staff: Any, redis_server: RedisServer
) -> None:
    use_failopen(OVERRIDE_ENDPOINT=True, STORE=redis_server.url)
    client = make_client()
    client.force_login(staff)
    response = override(client, {"enforce": False, "ttl": 90, "reason": "INC-11", "wait": 0.3})
    # Stored, but no process of the fleet runs here to apply it: 202, never a plain 200.
    assert response.status_code == 202, response.content
    assert response.json()["reached"] == 0 and response.json()["processes"] == 0
    assert "no live process" in response.json()["warning"]
    assert response.json()["override"]["set_by"] == f"django:{staff.pk}"
    other = elsewhere(redis_server)
    assert other.override is not None and other.override.set_by == f"django:{staff.pk}"
    assert 80_000 < redis_server.client().pttl("failopen:override") <= 90_000


def test_admin_token_override_and_lift(
    make_client: Callable[..., Any], use_failopen: Any, redis_server: RedisServer
) -> None:
    use_failopen(OVERRIDE_ENDPOINT=True, ADMIN_TOKEN=ADMIN_TOKEN, STORE=redis_server.url)
    client = make_client()
    response = override(client, {"enforce": True, "wait": 0},
                        Authorization=f"Bearer {ADMIN_TOKEN}")
    assert response.status_code == 200 and response.json()["reach"] == "not_waited"
    assert elsewhere(redis_server).state.source == "override"
    assert elsewhere(redis_server).override.set_by == "admin-token"  # type: ignore[union-attr]
    response = override(client, {"enforce": None, "wait": 0},
                        Authorization=f"Bearer {ADMIN_TOKEN}")
    assert response.status_code == 200
    assert elsewhere(redis_server).override is None


def test_the_management_command_writes_through_redis(
    fo_settings: dict[str, Any], redis_server: RedisServer
) -> None:
    out, err = io.StringIO(), io.StringIO()
    with override_settings(FAILOPEN={**fo_settings, "STORE": redis_server.url}):
        call_command("failopen", "override", "off", "--ttl", "10m", "--reason", "INC-11",
                     "--wait", "0", stdout=out, stderr=err)
    shown = elsewhere(redis_server).override
    assert shown is not None and shown.set_by == "cli" and shown.reason == "INC-11"
    assert 590_000 < redis_server.client().pttl("failopen:override") <= 600_000
