"""The ASGI override route writes through the Redis store: the whole fleet sees it."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from _asgi_kit import ADMIN_TOKEN, Stack
from _redis_kit import RedisServer, keys_back_since, wait_for

from failopen.engine.flag import EnforcementFlag
from failopen.stores import open_store

pytestmark = pytest.mark.anyio


async def test_override_route_writes_to_redis(
    make_asgi: Callable[..., Stack], redis_server: RedisServer
) -> None:
    stack = make_asgi(admin_token=ADMIN_TOKEN, store=redis_server.url)
    assert wait_for(lambda: len(redis_server.client().keys("failopen:proc:*")) == 1)
    keys_back_since(redis_server, ago=60)  # a fleet up for a minute: its members all counted
    response = await stack.client.post(
        "/failopen/override", headers={"Authorization": f"Bearer {ADMIN_TOKEN}"},
        json={"enforce": False, "ttl": 30, "reason": "INC-11"})
    assert response.status_code == 200, response.text
    assert response.json()["override"]["set_by"] == "admin-token"
    assert "warning" not in response.json()
    other = EnforcementFlag(store=open_store(redis_server.url))
    assert other.state.source == "override" and other.state.enforce is False
    assert 0 < redis_server.client().pttl("failopen:override") <= 30_000
