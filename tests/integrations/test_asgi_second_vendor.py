"""A second vendor as the fallback challenge through the ASGI middleware, as raw HTTP (issue 29).

Turnstile is the vendor, hCaptcha the second vendor, ``/signup`` a ``fallback`` route. The server
pins the challenge: an hCaptcha token counts only on a fallback route while Turnstile is out, is
verified with hCaptcha's secret (awaited, never a blocking call on the loop), once; the outage
rate limit is tested before that call; hCaptcha failing is 503, never a bypass.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest
from _second_vendor_kit import HCAPTCHA_FIELD, TURNSTILE_FIELD, Site, build_site
from failopen.integrations.asgi import FailOpenMiddleware

pytestmark = pytest.mark.anyio

Client = Callable[..., Any]


async def app(scope: Any, receive: Any, send: Any) -> None:
    """The site: answers 200 with the decision failopen left on the request."""
    while (await receive()).get("more_body"):
        pass
    decision = scope["state"]["failopen"]
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"application/json")]})
    await send({"type": "http.response.body",
                "body": json.dumps({"outcome": decision.outcome}).encode()})


@pytest.fixture
async def make(anyio_backend: str) -> AsyncIterator[Callable[..., tuple[Site, httpx.AsyncClient]]]:
    made: list[tuple[Site, httpx.AsyncClient]] = []

    def build(**changes: Any) -> tuple[Site, httpx.AsyncClient]:
        site = build_site(**changes)
        middleware = FailOpenMiddleware(app, runtime=site.runtime)
        client = httpx.AsyncClient(
            transport=httpx.ASGITransport(middleware, client=("203.0.113.9", 4711)),
            base_url="http://testserver", headers={"Accept": "application/json"})
        made.append((site, client))
        return site, client

    yield build
    for site, client in made:
        await client.aclose()
        await site.runtime.aclose()


def code(response: httpx.Response) -> str:
    body = response.json()
    return str(body["outcome"] if "outcome" in body else body["error"]["code"])


async def test_during_the_outage_only_a_fresh_hcaptcha_token_opens_the_fallback_route(
        make: Callable[..., tuple[Site, httpx.AsyncClient]]) -> None:
    site, client = make()
    site.outage()
    nothing = await client.post("/signup", data={"email": "a@example.com"})
    assert (nothing.status_code, code(nothing)) == (403, "fallback_required")
    turnstile = await client.post("/signup", data={TURNSTILE_FIELD: site.turnstile.issue_token()})
    assert (turnstile.status_code, code(turnstile)) == (403, "fallback_required")
    junk = await client.post("/signup", data={HCAPTCHA_FIELD: "junk"})
    assert (junk.status_code, code(junk)) == (403, "fallback_invalid")
    # A Turnstile token in hCaptcha's field is checked with hCaptcha's secret: refused.
    switched = await client.post("/signup",
                                 data={HCAPTCHA_FIELD: site.turnstile.issue_token()})
    assert (switched.status_code, code(switched)) == (403, "fallback_invalid")
    token = site.hcaptcha.issue_token()
    admitted = await client.post("/signup", data={HCAPTCHA_FIELD: token})
    assert (admitted.status_code, code(admitted)) == (200, "bypassed_fallback")
    replayed = await client.post("/signup", data={HCAPTCHA_FIELD: token})
    assert (replayed.status_code, code(replayed)) == (403, "fallback_invalid")
    assert site.turnstile.requests == 0  # Turnstile is out: never asked


async def test_the_answer_may_come_in_json_or_the_header_and_is_awaited_not_blocking(
        make: Callable[..., tuple[Site, httpx.AsyncClient]],
        monkeypatch: pytest.MonkeyPatch) -> None:
    site, client = make()
    assert site.runtime.second_vendor is not None
    verifier = site.runtime.second_vendor.verifier

    def blocking(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a blocking verify call on the event loop")

    monkeypatch.setattr(verifier, "verify", blocking)
    site.outage()
    in_json = await client.post("/signup", json={HCAPTCHA_FIELD: site.hcaptcha.issue_token()})
    assert code(in_json) == "bypassed_fallback"
    in_header = await client.post("/signup", headers={"X-Altcha": site.hcaptcha.issue_token()})
    assert code(in_header) == "bypassed_fallback"


async def test_while_turnstile_is_healthy_an_hcaptcha_token_is_a_missing_token(
        make: Callable[..., tuple[Site, httpx.AsyncClient]]) -> None:
    site, client = make()
    for path in ("/signup", "/login"):
        alone = await client.post(path, data={HCAPTCHA_FIELD: site.hcaptcha.issue_token()})
        assert (alone.status_code, code(alone)) == (403, "missing_token"), path
        header = await client.post(path, headers={"X-Altcha": site.hcaptcha.issue_token()})
        assert code(header) == "missing_token", path
    ok = await client.post("/signup", data={TURNSTILE_FIELD: site.turnstile.issue_token()})
    assert (ok.status_code, code(ok)) == (200, "valid")
    assert site.hcaptcha.requests == 0


async def test_a_flood_over_the_outage_rate_limit_costs_no_hcaptcha_call(
        make: Callable[..., tuple[Site, httpx.AsyncClient]]) -> None:
    site, client = make(outage_rate="2/minute")
    site.outage()
    for _ in range(2):
        ok = await client.post("/signup", data={HCAPTCHA_FIELD: site.hcaptcha.issue_token()})
        assert code(ok) == "bypassed_fallback"
    calls = site.hcaptcha.requests
    for _ in range(5):
        flood = await client.post("/signup", data={HCAPTCHA_FIELD: site.hcaptcha.issue_token()})
        assert (flood.status_code, code(flood)) == (429, "outage_rate_limited")
        assert "retry-after" in flood.headers
    assert site.hcaptcha.requests == calls


async def test_each_hcaptcha_attempt_spends_the_allowance_so_junk_costs_bounded_calls(
        make: Callable[..., tuple[Site, httpx.AsyncClient]]) -> None:
    # Each answer costs the vendor a call (and our bounded pool a slot): counting admissions
    # alone let one client make unbounded verify calls with junk, and starve the pool for
    # everyone else. Counted before the call, one client's junk stops at its allowance.
    site, client = make(outage_rate="2/minute")
    site.outage()
    for _ in range(2):
        junk = await client.post("/signup", data={HCAPTCHA_FIELD: "junk-" + "x" * 30})
        assert code(junk) == "fallback_invalid"
    calls = site.hcaptcha.requests
    for _ in range(20):
        flood = await client.post("/signup", data={HCAPTCHA_FIELD: "junk-" + "y" * 30})
        assert (flood.status_code, code(flood)) == (429, "outage_rate_limited")
    assert site.hcaptcha.requests == calls
    late = await client.post("/signup", data={HCAPTCHA_FIELD: site.hcaptcha.issue_token()})
    assert code(late) == "outage_rate_limited"  # the client's window, spent by its own junk


@pytest.mark.parametrize("fault", ["503", "timeout", "429", "not_json"])
async def test_hcaptcha_failing_too_is_503_never_a_bypass_nor_evidence(
        make: Callable[..., tuple[Site, httpx.AsyncClient]], fault: str) -> None:
    site, client = make(verify_timeout=0.5)
    site.outage()
    site.hcaptcha.set_fault(fault)
    state = site.runtime.state.to_dict()
    refused = await client.post("/signup", data={HCAPTCHA_FIELD: site.hcaptcha.issue_token()})
    assert (refused.status_code, code(refused)) == (503, "fallback_unavailable")
    assert refused.headers["retry-after"] == "7"
    # Nothing reached the flag (the watcher's own first turn may publish an equal state).
    assert site.runtime.state.to_dict() == state
    # Healthy again: the same kind of request is admitted (the refusal used nothing up).
    site.hcaptcha.set_fault(None)
    ok = await client.post("/signup", data={HCAPTCHA_FIELD: site.hcaptcha.issue_token()})
    assert code(ok) == "bypassed_fallback"


async def test_hcaptcha_down_while_turnstile_is_healthy_changes_nothing(
        make: Callable[..., tuple[Site, httpx.AsyncClient]]) -> None:
    site, client = make()
    site.hcaptcha.set_fault("503")
    ok = await client.post("/signup", data={TURNSTILE_FIELD: site.turnstile.issue_token()})
    assert code(ok) == "valid"
    assert site.runtime.state.enforce


async def test_an_hcaptcha_token_on_open_and_closed_routes_changes_nothing(
        make: Callable[..., tuple[Site, httpx.AsyncClient]]) -> None:
    site, client = make()
    site.outage()
    for data in ({}, {HCAPTCHA_FIELD: site.hcaptcha.issue_token()}, {HCAPTCHA_FIELD: "junk"}):
        opened = await client.post("/login", data=data)
        assert (opened.status_code, code(opened)) == (200, "bypassed_flag_off"), data
        closed = await client.post("/raw", data=data)
        assert (closed.status_code, code(closed)) == (503, "outage_closed"), data
    assert site.hcaptcha.requests == 0


async def test_the_route_s_action_goes_only_to_a_vendor_that_checks_actions(
        make: Callable[..., tuple[Site, httpx.AsyncClient]]) -> None:
    # Turnstile checks actions, hCaptcha's answers name none: the action is not sent to it (an
    # hCaptcha token would otherwise never pass), and Turnstile's tokens still need it.
    site, client = make(expected_actions="/signup=signup")
    wrong = await client.post("/signup", data={TURNSTILE_FIELD: site.turnstile.issue_token(
        action="login")})
    assert code(wrong) == "invalid_token"
    site.outage()
    ok = await client.post("/signup", data={HCAPTCHA_FIELD: site.hcaptcha.issue_token()})
    assert code(ok) == "bypassed_fallback"


async def test_the_flag_endpoint_names_the_second_vendor_only_where_and_when_it_counts(
        make: Callable[..., tuple[Site, httpx.AsyncClient]]) -> None:
    site, client = make(expected_actions="/signup=signup")

    async def flag(path: str) -> dict[str, Any]:
        answer = await client.get("/failopen/flag", params={"path": path})
        assert answer.headers["cache-control"] == "no-store"
        return dict(answer.json())

    enforcing = await flag("/signup")
    assert (enforcing["fallback"], enforcing["action"]) == (None, "signup")
    site.outage()
    assert (await flag("/signup"))["fallback"] == {
        "vendor": "hcaptcha", "public_key": site.hcaptcha.public_key,
        "vendor_url": "https://js.hcaptcha.com", "token_field": HCAPTCHA_FIELD}
    for path in ("/login", "/raw", "/elsewhere"):
        answer = await flag(path)
        assert (answer["fallback"], answer["action"]) == (None, None), path
    # The ALTCHA challenge endpoint has nothing to issue with only a second vendor.
    assert (await client.get("/failopen/challenge")).status_code == 404


async def test_shadow_mode_names_no_fallback_and_logs_the_challenge(
        make: Callable[..., tuple[Site, httpx.AsyncClient]],
        caplog: pytest.LogCaptureFixture) -> None:
    site, client = make(mode="shadow")
    site.outage()
    answer = (await client.get("/failopen/flag", params={"path": "/signup"})).json()
    assert answer["fallback"] is None and answer["enforce"] is True
    with caplog.at_level(logging.WARNING, logger="failopen.audit"):
        refused = await client.post("/signup", data={HCAPTCHA_FIELD: site.hcaptcha.issue_token()})
    assert code(refused) == "missing_token"
    lines = [r for r in caplog.records if getattr(r, "event", "") ==
             "failopen.shadow_outage_policy"]
    assert lines and lines[0].challenge == "hcaptcha"  # type: ignore[attr-defined]
    assert site.hcaptcha.requests == 0  # shadow mode never asks the gate


async def test_no_secret_appears_in_logs_reprs_or_answers(
        make: Callable[..., tuple[Site, httpx.AsyncClient]],
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    site, client = make(audit="each")
    secret = site.hcaptcha.private_key
    site.outage()
    answers = [await client.post("/signup", data={HCAPTCHA_FIELD: site.hcaptcha.issue_token()}),
               await client.post("/signup", data={HCAPTCHA_FIELD: "junk"}),
               await client.get("/failopen/flag", params={"path": "/signup"})]
    site.hcaptcha.set_fault("503")
    answers.append(await client.post("/signup",
                                     data={HCAPTCHA_FIELD: site.hcaptcha.issue_token()}))
    site.hcaptcha.private_key = "another-key-now"  # our key refused: misconfigured, logged
    site.hcaptcha.set_fault(None)
    answers.append(await client.post("/signup",
                                     data={HCAPTCHA_FIELD: site.hcaptcha.issue_token()}))
    assert code(answers[-1]) == "fallback_unavailable"
    config = site.runtime.config
    shown = [caplog.text, repr(config), str(config.describe()), repr(site.runtime.second_vendor),
             repr(site.runtime.guard.gate), *(a.text for a in answers)]
    assert all(secret not in text for text in shown)
    assert config.describe()["fallback_private_key"] == "***"


async def test_an_answer_in_the_header_is_never_a_blocking_verify_call_on_the_loop(
        make: Callable[..., tuple[Site, httpx.AsyncClient]]) -> None:
    # Review of issue 29: the X-Altcha header reaches the guard before the body is read
    # (runtime.bypass, which is sync). With a second vendor that answer needs a verify call over
    # the network, which must be awaited: a blocking call there stalls every request the worker
    # serves for up to FAILOPEN_VERIFY_TIMEOUT, once per request an outsider sends. Recorded,
    # not raised: a raise would be swallowed by bypass's own guard and hide the call.
    site, client = make()
    assert site.runtime.second_vendor is not None
    verifier = site.runtime.second_vendor.verifier
    blocking: list[str] = []
    real_verify = verifier.verify

    def recording(token: str, **kwargs: Any) -> Any:
        blocking.append(token)
        return real_verify(token, **kwargs)

    setattr(verifier, "verify", recording)  # noqa: B010  # the instance's, not the class's
    site.outage()
    for answer in ("junk", site.hcaptcha.issue_token()):
        await client.post("/signup", headers={"X-Altcha": answer})
    assert blocking == []
    # And the awaited call still decides: a fresh token is admitted once.
    token = site.hcaptcha.issue_token()
    admitted = await client.post("/signup", headers={"X-Altcha": token})
    assert (admitted.status_code, code(admitted)) == (200, "bypassed_fallback")
    replayed = await client.post("/signup", headers={"X-Altcha": token})
    assert (replayed.status_code, code(replayed)) == (403, "fallback_invalid")
