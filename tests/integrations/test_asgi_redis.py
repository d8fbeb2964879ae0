"""The ASGI override route writes through the Redis store: the whole fleet sees it."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from _asgi_kit import ADMIN_TOKEN, Stack
from _redis_kit import RedisServer

from failopen.engine.flag import EnforcementFlag
from failopen.stores import open_store

pytestmark = pytest.mark.anyio


async def test_override_route_writes_to_redis(
    make_asgi: Callable[..., Stack], redis_server: RedisServer
) -> None:
    stack = make_asgi(admin_token=ADMIN_TOKEN, store=redis_server.url)
    response = await stack.client.post(
        "/failopen/override", headers={"Authorization": f"Bearer {ADMIN_TOKEN}"},
        json={"enforce": False, "ttl": 30, "reason": "INC-11"})
    assert response.status_code == 200, response.text
    assert response.json()["override"]["set_by"] == "admin-token"
    other = EnforcementFlag(store=open_store(redis_server.url))
    assert other.state.source == "override" and other.state.enforce is False
    assert 0 < redis_server.client().pttl("failopen:override") <= 30_000
