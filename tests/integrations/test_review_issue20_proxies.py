"""Review of issue 20: FAILOPEN_TRUSTED_PROXIES reaches the outage rate limit in every adapter.

Behind a trusted proxy every request has the proxy's peer address: without reading
X-Forwarded-For, one client over the outage rate limit would refuse everyone else on the route.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from _asgi_kit import CLIENT_IP, Stack
from _wsgi_kit import WsgiStack

Make = Callable[..., Stack]
MakeWsgi = Callable[..., WsgiStack]


def _outage(runtime: Any, page: Any) -> None:
    page.set_global("major_outage")
    for _ in range(runtime.config.open_after):
        runtime.poll_now()
    assert not runtime.state.enforce


@pytest.mark.anyio
async def test_asgi_counts_behind_a_trusted_proxy_per_forwarded_client(make_asgi: Make) -> None:
    stack = make_asgi(outage_rate="2/minute", trusted_proxies=CLIENT_IP)
    _outage(stack.runtime, stack.page)
    first = {"X-Forwarded-For": "198.51.100.1"}
    for _ in range(2):
        assert (await stack.client.post("/login", headers=first)).status_code == 200
    assert (await stack.client.post("/login", headers=first)).status_code == 429
    # Another client behind the same proxy is not refused for the first one's requests.
    other = await stack.client.post("/login", headers={"X-Forwarded-For": "198.51.100.2"})
    assert other.status_code == 200
    # Spoofing an address on the left changes nothing: the proxy appended the real one.
    spoofed = await stack.client.post(
        "/login", headers={"X-Forwarded-For": "192.0.2.77, 198.51.100.1"})
    assert spoofed.status_code == 429


@pytest.mark.anyio
async def test_asgi_reads_every_forwarded_for_header(make_asgi: Make) -> None:
    stack = make_asgi(outage_rate="1/minute", trusted_proxies=CLIENT_IP)
    _outage(stack.runtime, stack.page)
    headers = [("X-Forwarded-For", "192.0.2.1"), ("X-Forwarded-For", "198.51.100.1")]
    assert (await stack.client.post("/login", headers=headers)).status_code == 200
    # The right-most entry (in the last header) is the client: a forged first header is not.
    again = [("X-Forwarded-For", "192.0.2.2"), ("X-Forwarded-For", "198.51.100.1")]
    assert (await stack.client.post("/login", headers=again)).status_code == 429


@pytest.mark.anyio
async def test_asgi_ignores_forwarded_for_from_an_untrusted_peer(make_asgi: Make) -> None:
    stack = make_asgi(outage_rate="1/minute", trusted_proxies="10.0.0.0/8")
    _outage(stack.runtime, stack.page)
    assert (await stack.client.post("/login", headers={"X-Forwarded-For": "1.1.1.1"})
            ).status_code == 200
    assert (await stack.client.post("/login", headers={"X-Forwarded-For": "2.2.2.2"})
            ).status_code == 429


def test_wsgi_counts_behind_a_trusted_proxy_per_forwarded_client(make_wsgi: MakeWsgi) -> None:
    stack = make_wsgi(outage_rate="1/minute", trusted_proxies="127.0.0.1")
    _outage(stack.runtime, stack.page)
    peer = {"REMOTE_ADDR": "127.0.0.1"}
    first = {"X-Forwarded-For": "198.51.100.1"}
    assert stack.client.post("/login", headers=first, environ_base=peer).status_code == 200
    assert stack.client.post("/login", headers=first, environ_base=peer).status_code == 429
    other = stack.client.post("/login", headers={"X-Forwarded-For": "198.51.100.2"},
                              environ_base=peer)
    assert other.status_code == 200


# --- the path with and without root_path / SCRIPT_NAME ------------------------------------------


@pytest.mark.anyio
async def test_asgi_a_closed_route_stays_closed_under_root_path(make_asgi: Make) -> None:
    """``/app/`` (the whole mount, open) and ``/login`` (as the app routes it, closed): the
    request ``/app/login`` reaches the closed route, so it is closed, whichever spelling
    matched first."""
    from _asgi_kit import API, drive, http_scope

    stack = make_asgi(protected_paths=("/app/", "/login"), outage_policy_routes="/login=closed")
    _outage(stack.runtime, stack.page)
    reply = await drive(stack.app, http_scope("/app/login", root_path="/app", headers=API))
    assert reply.status == 503 and reply.json()["error"]["code"] == "outage_closed"


def test_wsgi_a_closed_route_stays_closed_under_script_name(make_wsgi: MakeWsgi) -> None:
    from _wsgi_kit import call, environ

    stack = make_wsgi(protected_paths=("/app/", "/login"), outage_policy_routes="/login=closed")
    _outage(stack.runtime, stack.page)
    status, _, body = call(stack.app, environ("/login", SCRIPT_NAME="/app"))
    assert status.startswith("503") and b"outage_closed" in body
