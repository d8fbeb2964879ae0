"""Django's override view and management command say where the override arrived: the view's
answer gains ``reached`` and ``processes`` of this deployment, and the command exits 3 with a
warning when no live process applied it."""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from typing import Any

import pytest
from _redis_kit import RedisServer, keys_back_since, wait_for
from django.core.management import call_command
from django.test import override_settings

pytestmark = pytest.mark.timeout(60)

ADMIN_TOKEN = "an-admin-token-long-enough-to-count"


def test_the_view_counts_the_running_process(
    make_client: Callable[..., Any], use_failopen: Any, redis_server: RedisServer
) -> None:
    runtime = use_failopen(OVERRIDE_ENDPOINT=True, ADMIN_TOKEN=ADMIN_TOKEN, STORE=redis_server.url)
    runtime.start()  # this worker's watcher: a member of the fleet
    try:
        assert wait_for(lambda: len(redis_server.client().keys("failopen:proc:*")) == 1)
        keys_back_since(redis_server, ago=60)  # a fleet up for a minute: its members all counted
        response = make_client().post(
            "/failopen/override", json.dumps({"enforce": False, "ttl": 60, "wait": 5}),
            content_type="application/json", headers={"Authorization": f"Bearer {ADMIN_TOKEN}"})
        assert response.status_code == 200, response.content
        data = response.json()
        assert data["override"]["set_by"] == "admin-token"
        assert (data["reached"], data["processes"], data["reach"]) == (1, 1, "measured")
        assert "warning" not in data
        assert not runtime.state.enforce
    finally:
        runtime.stop()


def test_the_command_exits_3_when_no_process_applied_it(
    fo_settings: dict[str, Any], redis_server: RedisServer
) -> None:
    out, err = io.StringIO(), io.StringIO()
    with override_settings(FAILOPEN={**fo_settings, "STORE": redis_server.url}), \
            pytest.raises(SystemExit) as exited:
        call_command("failopen", "override", "off", "--ttl", "10m", "--wait", "0.3s",
                     stdout=out, stderr=err)
    assert exited.value.code == 3
    assert "reached 0 of 0 processes" in out.getvalue()
    assert "warning: no live process of this deployment was seen" in err.getvalue()
