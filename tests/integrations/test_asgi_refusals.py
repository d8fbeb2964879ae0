"""The ASGI middleware's refusals: a small HTML page for browsers, JSON for API clients, chosen
as the WSGI and Django adapters choose (``failopen.web.prefers_json``), for every refusal kind.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from _asgi_kit import Stack, drive, http_scope
from _refusal_kit import BROWSER, REFUSALS, Refusal
from _wsgi_kit import WsgiStack

pytestmark = pytest.mark.anyio

Make = Callable[..., Stack]
MakeWsgi = Callable[..., WsgiStack]
FORM = "application/x-www-form-urlencoded"


async def refuse(stack: Stack, refusal: Refusal, headers: dict[str, str],
                 **kwargs: Any) -> httpx.Response:
    """The request that meets ``refusal`` (after any the route admits first)."""
    sent = dict(headers)
    if refusal.token is not None:
        sent["X-Enforcement-Token"] = refusal.token
    for _ in range(refusal.ready(stack)):
        assert (await stack.client.post("/login", headers=sent, **kwargs)).status_code == 200
    return await stack.client.post("/login", headers=sent, **kwargs)


@pytest.mark.parametrize("outcome", REFUSALS)
async def test_a_browser_gets_the_html_page_for_every_refusal(make_asgi: Make,
                                                              outcome: str) -> None:
    refusal = REFUSALS[outcome]
    stack = make_asgi(**refusal.changes)
    response = await refuse(stack, refusal, {"Accept": BROWSER}, data={"username": "ann"})
    assert response.status_code == refusal.status
    assert response.headers["content-type"] == "text/html; charset=utf-8"
    assert response.text.startswith("<!doctype html>")
    assert f"<h1>{refusal.title}</h1>" in response.text
    assert response.headers["cache-control"] == "no-store"
    assert int(response.headers["content-length"]) == len(response.content)
    if refusal.status == 403:
        assert "retry-after" not in response.headers
    else:  # 429 and 503 say when to come back, in HTML as in JSON
        assert int(response.headers["retry-after"]) >= 1
    assert stack.verify.tokens_seen == ([refusal.token] if refusal.token else [])


@pytest.mark.parametrize("outcome", REFUSALS)
async def test_an_api_client_still_gets_json_of_the_same_shape(make_asgi: Make,
                                                               outcome: str) -> None:
    refusal = REFUSALS[outcome]
    stack = make_asgi(**refusal.changes)
    response = await refuse(stack, refusal, {"Accept": "application/json"},
                            data={"username": "ann"})
    assert response.status_code == refusal.status
    assert response.headers["content-type"] == "application/json"
    body = response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message"}
    assert body["error"]["code"] == outcome
    assert response.headers["cache-control"] == "no-store"


# What a refusal is for each Accept and body; WSGI is asked the same questions below.
NEGOTIATION = [
    pytest.param([("Accept", BROWSER)], FORM, "html", id="browser form post"),
    pytest.param([("Accept", "*/*")], FORM, "html", id="*/* form post"),
    pytest.param([], FORM, "html", id="no Accept, form post"),
    pytest.param([], None, "html", id="no Accept, no body"),
    pytest.param([("Accept", "application/json")], FORM, "json", id="JSON asked for"),
    pytest.param([("Accept", "text/html;q=0.9, application/json;q=1")], FORM, "json",
                 id="JSON preferred over HTML"),
    pytest.param([("Accept", "application/problem+json")], FORM, "json", id="a +json type"),
    pytest.param([("Accept", "*/*")], "application/json", "json", id="*/* JSON post"),
    pytest.param([("Accept", "text/html")], "application/json", "html",
                 id="JSON post asking for HTML"),
    pytest.param([("Accept", "text/html"), ("Accept", "application/json")], FORM, "json",
                 id="two Accept headers, joined"),
]


def _body(content_type: str | None) -> bytes:
    if content_type == "application/json":
        return json.dumps({"username": "ann"}).encode()
    return b"username=ann" if content_type else b""


@pytest.mark.parametrize(("accept", "content_type", "kind"), NEGOTIATION)
async def test_asgi_chooses_html_or_json_exactly_as_wsgi_does(
    make_asgi: Make, make_wsgi: MakeWsgi, accept: list[tuple[str, str]],
    content_type: str | None, kind: str,
) -> None:
    headers = [*accept, *([("Content-Type", content_type)] if content_type else [])]
    body = _body(content_type)
    # A raw scope: exactly these headers, none that httpx would add.
    reply = await drive(make_asgi().app, http_scope("/login", headers=headers),
                        [{"type": "http.request", "body": body}])
    wsgi = make_wsgi().client.post("/login", headers=headers, data=body)
    assert reply.status == wsgi.status_code == 403
    assert reply.headers["content-type"] == wsgi.headers["Content-Type"]
    assert reply.body == wsgi.data
    assert reply.headers["content-type"] == (
        "application/json" if kind == "json" else "text/html; charset=utf-8")


async def test_head_gets_the_pages_headers_without_its_body(make_asgi: Make) -> None:
    stack = make_asgi(protected_methods=("GET",))
    reply = await drive(stack.app, http_scope("/raw", method="HEAD", headers=[("Accept", BROWSER)]),
                        [{"type": "http.request", "body": b""}])
    assert reply.status == 403 and reply.body == b""
    assert reply.headers["content-type"] == "text/html; charset=utf-8"
    assert int(reply.headers["content-length"]) > 0  # the GET's page, as HEAD describes it
    assert stack.recorder.calls == []


async def test_failopen_s_own_failure_is_answered_to_a_browser_in_html(
    make_asgi: Make, caplog: pytest.LogCaptureFixture
) -> None:
    stack = make_asgi()
    stack.runtime.flag.force_off("even with the flag off, a failure never admits")
    scope = http_scope("/raw", headers=[("Accept", BROWSER)], client=4711)  # a server bug
    reply = await drive(stack.app, scope, [{"type": "http.request", "body": b""}])
    assert reply.status == 503 and b"<h1>Please retry shortly</h1>" in reply.body
    assert reply.headers["retry-after"] == "7"
    assert stack.recorder.calls == []
