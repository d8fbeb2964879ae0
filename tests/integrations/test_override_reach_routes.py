"""The ASGI and WSGI override routes say where the override arrived: ``reached`` and
``processes`` of this deployment beside the override, a ``warning`` when some did not, 202 when
none did, and a ``wait`` that is bounded because a worker waits meanwhile."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from _asgi_kit import ADMIN_TOKEN, Stack
from _redis_kit import RedisServer, keys_back_since, same_deployment, wait_for

pytestmark = pytest.mark.timeout(60)

AUTH = {"Authorization": f"Bearer {ADMIN_TOKEN}"}


def plant(redis_server: RedisServer, name: str, page: Any, override: Any) -> None:
    value = {"id": name, "pid": 1, "leader": False, "seen": 0, "polls": 0, "page": page,
             "beat": 1.0, "override": override}
    redis_server.client().set(f"failopen:proc:{name}", json.dumps(value), px=60_000)


@pytest.mark.anyio
async def test_the_answer_counts_the_processes_that_applied_it(
    make_asgi: Callable[..., Stack], redis_server: RedisServer
) -> None:
    stack = make_asgi(admin_token=ADMIN_TOKEN, store=redis_server.url)
    assert wait_for(lambda: len(redis_server.client().keys("failopen:proc:*")) == 1)
    keys_back_since(redis_server, ago=60)  # a fleet up for a minute: its members all counted
    page = same_deployment(stack.runtime.config)["page"]
    # Another deployment's process says it applied the lift: never counted.
    plant(redis_server, "staging", "0123456789abcdef", None)
    response = await stack.client.post("/failopen/override", headers=AUTH,
                                       json={"enforce": False, "ttl": 60, "wait": 5})
    assert response.status_code == 200, response.text
    data = response.json()
    assert data["override"]["enforce"] is False and "flag" in data  # existing fields kept
    assert (data["reached"], data["processes"], data["reach"]) == (1, 1, "measured")
    assert "warning" not in data
    # One of ours is stuck on another override: the answer says so, still a 200.
    plant(redis_server, "stuck", page, "ffffffffffffffff")
    response = await stack.client.post("/failopen/override", headers=AUTH,
                                       json={"enforce": None, "wait": 0.5})
    assert response.status_code == 200
    data = response.json()
    assert (data["reached"], data["processes"]) == (1, 2)
    assert "had not applied it" in data["warning"]


@pytest.mark.anyio
async def test_none_reached_is_202_with_a_warning(
    make_asgi: Callable[..., Stack], redis_server: RedisServer
) -> None:
    stack = make_asgi(admin_token=ADMIN_TOKEN, store=redis_server.url, started=False)
    page = same_deployment(stack.runtime.config)["page"]
    plant(redis_server, "stuck", page, "ffffffffffffffff")
    response = await stack.client.post("/failopen/override", headers=AUTH,
                                       json={"enforce": False, "ttl": 60, "wait": 0.3})
    assert response.status_code == 202, response.text
    data = response.json()
    assert (data["reached"], data["processes"]) == (0, 1)
    assert data["warning"].startswith("no process applied the override")
    assert redis_server.client().get("failopen:override") is not None  # stored all the same


@pytest.mark.anyio
@pytest.mark.parametrize("wait", [True, -1, 31, "5", None, 1e400])
async def test_a_bad_wait_is_400_and_changes_nothing(
    make_asgi: Callable[..., Stack], redis_server: RedisServer, wait: Any
) -> None:
    stack = make_asgi(admin_token=ADMIN_TOKEN, store=redis_server.url, started=False)
    body = json.dumps({"enforce": False, "ttl": 60, "wait": wait}).replace("Infinity", "1e400")
    response = await stack.client.post("/failopen/override", headers={
        **AUTH, "Content-Type": "application/json"}, content=body)
    assert response.status_code == 400
    assert '"wait"' in response.json()["error"]["message"]
    assert redis_server.client().get("failopen:override") is None


@pytest.mark.anyio
async def test_wait_0_answers_at_once_without_a_count(
    make_asgi: Callable[..., Stack], redis_server: RedisServer
) -> None:
    stack = make_asgi(admin_token=ADMIN_TOKEN, store=redis_server.url, started=False)
    response = await stack.client.post("/failopen/override", headers=AUTH,
                                       json={"enforce": True, "wait": 0})
    assert response.status_code == 200
    data = response.json()
    assert (data["reached"], data["processes"], data["reach"]) == (None, None, "not_waited")


def test_the_wsgi_route_answers_the_reach_too(
    make_wsgi: Callable[..., Any], redis_server: RedisServer
) -> None:
    stack = make_wsgi(admin_token=ADMIN_TOKEN, store=redis_server.url)
    assert wait_for(lambda: len(redis_server.client().keys("failopen:proc:*")) == 1)
    keys_back_since(redis_server, ago=60)
    response = stack.client.post("/failopen/override", headers=AUTH,
                                 json={"enforce": False, "ttl": 60, "wait": 5})
    assert response.status_code == 200, response.text
    assert (response.json["reached"], response.json["processes"]) == (1, 1)
    assert "warning" not in response.json
