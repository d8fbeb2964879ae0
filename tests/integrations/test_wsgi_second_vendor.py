"""A second vendor as the fallback challenge through the WSGI middleware (issue 29): the sync
path, where the gate's hCaptcha verify call is a blocking one between the rate test and the
count. Turnstile is the vendor, hCaptcha the second, ``/signup`` a ``fallback`` route."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from _second_vendor_kit import HCAPTCHA_FIELD, TURNSTILE_FIELD, Site, build_site
from failopen.integrations.wsgi import FailOpenMiddleware
from werkzeug.test import Client, TestResponse


def app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
    """The site: answers 200 with the decision failopen left on the request."""
    environ["wsgi.input"].read()
    start_response("200 OK", [("Content-Type", "application/json")])
    return [json.dumps({"outcome": environ["failopen.decision"].outcome}).encode()]


@pytest.fixture
def make() -> Iterator[Callable[..., tuple[Site, Client]]]:
    made: list[Site] = []

    def build(**changes: Any) -> tuple[Site, Client]:
        site = build_site(**changes)
        made.append(site)
        return site, Client(FailOpenMiddleware(app, runtime=site.runtime))

    yield build
    for site in made:
        site.runtime.stop()


def post(client: Client, path: str, **kwargs: Any) -> TestResponse:
    return client.post(path, headers={"Accept": "application/json"}, **kwargs)


def code(response: TestResponse) -> str:
    body = response.get_json()
    return str(body["outcome"] if "outcome" in body else body["error"]["code"])


def test_only_a_fresh_hcaptcha_token_opens_the_fallback_route_during_the_outage(
        make: Callable[..., tuple[Site, Client]]) -> None:
    site, client = make()
    site.outage()
    assert (post(client, "/signup").status_code, code(post(client, "/signup"))) == \
        (403, "fallback_required")
    turnstile = post(client, "/signup", data={TURNSTILE_FIELD: site.turnstile.issue_token()})
    assert (turnstile.status_code, code(turnstile)) == (403, "fallback_required")
    junk = post(client, "/signup", data={HCAPTCHA_FIELD: "junk"})
    assert (junk.status_code, code(junk)) == (403, "fallback_invalid")
    token = site.hcaptcha.issue_token()
    admitted = post(client, "/signup", data={HCAPTCHA_FIELD: token})
    assert (admitted.status_code, code(admitted)) == (200, "bypassed_fallback")
    replayed = post(client, "/signup", data={HCAPTCHA_FIELD: token})
    assert (replayed.status_code, code(replayed)) == (403, "fallback_invalid")


def test_while_turnstile_is_healthy_an_hcaptcha_token_is_a_missing_token(
        make: Callable[..., tuple[Site, Client]]) -> None:
    site, client = make()
    alone = post(client, "/signup", data={HCAPTCHA_FIELD: site.hcaptcha.issue_token()})
    assert (alone.status_code, code(alone)) == (403, "missing_token")
    assert site.hcaptcha.requests == 0


def test_a_flood_over_the_outage_rate_limit_costs_no_hcaptcha_call(
        make: Callable[..., tuple[Site, Client]]) -> None:
    site, client = make(outage_rate="1/minute")
    site.outage()
    assert code(post(client, "/signup", data={HCAPTCHA_FIELD: site.hcaptcha.issue_token()})) \
        == "bypassed_fallback"
    calls = site.hcaptcha.requests
    for _ in range(3):
        flood = post(client, "/signup", data={HCAPTCHA_FIELD: site.hcaptcha.issue_token()})
        assert (flood.status_code, code(flood)) == (429, "outage_rate_limited")
    assert site.hcaptcha.requests == calls


def test_hcaptcha_unavailable_is_503_not_a_bypass(
        make: Callable[..., tuple[Site, Client]]) -> None:
    site, client = make()
    site.outage()
    site.hcaptcha.set_fault("502")
    refused = post(client, "/signup", data={HCAPTCHA_FIELD: site.hcaptcha.issue_token()})
    assert (refused.status_code, code(refused)) == (503, "fallback_unavailable")
    assert refused.headers["Retry-After"] == "7"


def test_an_hcaptcha_token_on_open_and_closed_routes_changes_nothing(
        make: Callable[..., tuple[Site, Client]]) -> None:
    site, client = make()
    site.outage()
    token = site.hcaptcha.issue_token()
    assert code(post(client, "/login", data={HCAPTCHA_FIELD: token})) == "bypassed_flag_off"
    closed = post(client, "/raw", data={HCAPTCHA_FIELD: token})
    assert (closed.status_code, code(closed)) == (503, "outage_closed")
    assert site.hcaptcha.requests == 0


def test_the_flag_endpoint_names_the_second_vendor_during_the_outage(
        make: Callable[..., tuple[Site, Client]]) -> None:
    site, client = make()
    assert client.get("/failopen/flag?path=/signup").get_json()["fallback"] is None
    site.outage()
    fallback = client.get("/failopen/flag?path=/signup").get_json()["fallback"]
    assert fallback["vendor"] == "hcaptcha" and fallback["token_field"] == HCAPTCHA_FIELD
    assert set(fallback) == {"vendor", "public_key", "vendor_url", "token_field"}
    assert client.get("/failopen/flag?path=/login").get_json()["fallback"] is None
