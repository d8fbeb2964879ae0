"""Outage policies through the ASGI middleware, as raw HTTP: every refusal and admission.

The status page and the verify API are the test kit's fakes; the fallback challenge, the used
solution record and the rate limit are failopen's own, in memory.
"""

from __future__ import annotations

import base64
import json
import logging
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from _asgi_kit import CLIENT_IP, Stack

from failopen.fallback import FallbackChallenges
from failopen.secret import Secret
from failopen.testing import FakeVerifyAPI, solve_challenge

pytestmark = pytest.mark.anyio

Make = Callable[..., Stack]
SECRET = "s" * 40
POLICIES = {"outage_policy_routes": "/login=fallback,/raw=closed", "fallback_secret": SECRET,
            "fallback_cost": 2000}

# The flag endpoint's keys before issue 20 (6ab2766), and the one issue 20 added: a contract the
# browser snippet and operators' scripts read; anything else added here must be on purpose.
FLAG_KEYS_BEFORE_ISSUE_20 = {"enforce", "source", "reason", "since", "expires_at", "global_status",
                             "stale", "error", "mode", "probe"}
# issue 20 added outage_policy, issue 21 impaired_regions
# issue 28 added vendor and component (whose status page decides, by which component)
# issue 29 added fallback (which challenge a fallback route wants now) and action (its tokens')
FLAG_KEYS = FLAG_KEYS_BEFORE_ISSUE_20 | {"outage_policy", "impaired_regions", "vendor",
                                         "component", "fallback", "action"}


def outage(stack: Stack) -> None:
    stack.page.set_global("major_outage")
    for _ in range(stack.runtime.config.open_after):
        stack.runtime.poll_now()
    assert not stack.runtime.state.enforce


async def solution(stack: Stack) -> str:
    answer = await stack.client.get("/failopen/challenge")
    assert answer.status_code == 200 and answer.headers["cache-control"] == "no-store"
    return solve_challenge(answer.json())


def code(response: httpx.Response) -> str:
    return str(response.json()["error"]["code"])


async def test_a_fallback_route_admits_a_solved_challenge_once(make_asgi: Make) -> None:
    stack = make_asgi(**POLICIES)
    outage(stack)
    solved = await solution(stack)
    admitted = await stack.client.post("/login", data={"altcha": solved})
    assert admitted.status_code == 200
    assert admitted.json()["decision"]["outcome"] == "bypassed_fallback"
    replayed = await stack.client.post("/login", data={"altcha": solved})
    assert (replayed.status_code, code(replayed)) == (403, "fallback_invalid")


async def test_the_solution_may_come_in_a_header_or_a_json_body(make_asgi: Make) -> None:
    stack = make_asgi(**POLICIES)
    outage(stack)
    in_header = await stack.client.post("/login", headers={"X-Altcha": await solution(stack)})
    assert in_header.json()["decision"]["outcome"] == "bypassed_fallback"
    in_json = await stack.client.post("/login", json={"altcha": await solution(stack)})
    assert in_json.json()["decision"]["outcome"] == "bypassed_fallback"


async def test_a_fallback_route_without_a_solution_is_403(make_asgi: Make) -> None:
    stack = make_asgi(**POLICIES)
    outage(stack)
    response = await stack.client.post("/login", data={"user": "x"})
    assert (response.status_code, code(response)) == (403, "fallback_required")
    # The vendor's token means nothing while enforcement is off: it is not checked at all.
    token = await stack.client.post("/login", headers={"X-Enforcement-Token": FakeVerifyAPI.GOOD})
    assert code(token) == "fallback_required"


def forged(challenge: dict[str, Any], **changes: Any) -> str:
    payload = json.loads(base64.b64decode(solve_challenge(challenge)))
    payload.update(changes)
    return base64.b64encode(json.dumps(payload).encode()).decode()


async def test_forged_solutions_are_refused(make_asgi: Make) -> None:
    stack = make_asgi(**POLICIES)
    outage(stack)
    challenge = (await stack.client.get("/failopen/challenge")).json()
    other_secret = FallbackChallenges(Secret("o" * 40), cost=2000, ttl=300).issue()
    for payload in (forged(challenge, number=-1), forged(challenge, signature="0" * 64),
                    solve_challenge(other_secret), "not base64 at all", "e30=", "x" * 10_000):
        response = await stack.client.post("/login", data={"altcha": payload})
        assert (response.status_code, code(response)) == (403, "fallback_invalid"), payload[:40]


async def test_a_closed_route_is_503_with_retry_after(
        make_asgi: Make) -> None:
    stack = make_asgi(**POLICIES)
    outage(stack)
    response = await stack.client.post("/raw", headers={"Accept": "application/json"})
    assert (response.status_code, code(response)) == (503, "outage_closed")
    assert response.headers["retry-after"] == "7"
    assert stack.recorder.calls == []  # the app never saw it
    assert "briefly unavailable" in response.json()["error"]["message"]


async def test_the_challenge_endpoint_is_409_while_enforcing(make_asgi: Make) -> None:
    stack = make_asgi(**POLICIES)
    response = await stack.client.get("/failopen/challenge")
    assert (response.status_code, code(response)) == (409, "enforcing")


async def test_a_challenge_fetched_before_the_outage_is_refused_during_it(
        make_asgi: Make) -> None:
    stack = make_asgi(**POLICIES)
    outage(stack)
    old = await solution(stack)
    # Enforcement comes back, then a new outage begins well after the challenge was issued.
    stack.page.set_global("operational")
    for _ in range(stack.runtime.config.close_after):
        stack.runtime.poll_now()
    assert stack.runtime.state.enforce
    refused = await stack.client.post("/login", data={"altcha": old})
    assert code(refused) == "missing_token"  # enforcing: a solution never stands in for a token


async def test_the_flag_endpoint_names_the_policy_of_the_asked_path(make_asgi: Make) -> None:
    stack = make_asgi(**POLICIES)
    for path, policy in (("/login", "fallback"), ("/raw/x", "closed"), ("/boom", "open"),
                         ("/elsewhere", None)):
        answer = await stack.client.get("/failopen/flag", params={"path": path})
        assert answer.json()["outage_policy"] == policy, path


async def test_the_flag_endpoint_only_gains_outage_policy_and_impaired_regions(
        make_asgi: Make) -> None:
    stack = make_asgi(**POLICIES)
    for query in ({}, {"path": "/login"}, {"path": "/elsewhere"}, {"confirm": "1"}):
        answer = await stack.client.get("/failopen/flag", params=query)
        assert set(answer.json()) == FLAG_KEYS, query
    outage(stack)
    assert set((await stack.client.get("/failopen/flag")).json()) == FLAG_KEYS
    shadow = make_asgi(mode="shadow", **POLICIES)
    answer = (await shadow.client.get("/failopen/flag", params={"path": "/login"})).json()
    assert set(answer) == FLAG_KEYS | {"would_bypass", "shadow"}


async def test_the_outage_rate_limit_answers_429_per_client_and_route(make_asgi: Make) -> None:
    stack = make_asgi(outage_rate="2/minute")
    outage(stack)
    for _ in range(2):
        assert (await stack.client.post("/login")).status_code == 200
    limited = await stack.client.post("/login")
    assert (limited.status_code, code(limited)) == (429, "outage_rate_limited")
    assert 1 <= int(limited.headers["retry-after"]) <= 60
    # Another spelling of the route counts under the same route, and a forged X-Forwarded-For
    # from a client that is not a trusted proxy changes nothing.
    spelled = await stack.client.post("/login//", headers={"X-Forwarded-For": "198.51.100.1"})
    assert spelled.status_code == 429
    assert CLIENT_IP  # the one client every request here comes from


@pytest.mark.parametrize(("policy", "instead"), [
    ("fallback", "would ask for the fallback challenge (altcha)"), ("closed", "would refuse")])
async def test_shadow_mode_logs_the_route_s_outage_policy_not_a_bypass(
        make_asgi: Make, caplog: pytest.LogCaptureFixture, policy: str, instead: str) -> None:
    caplog.set_level(logging.INFO, logger="failopen")
    stack = make_asgi(mode="shadow", **{**POLICIES, "outage_policy_routes": f"/login={policy}"})
    outage(stack)
    response = await stack.client.post("/login",
                                       headers={"X-Enforcement-Token": FakeVerifyAPI.GOOD})
    # Enforced: the vendor's token was checked and let it through.
    assert response.status_code == 200
    assert response.json()["decision"]["outcome"] == "valid"
    assert response.json()["decision"]["shadow"] is True
    shadow = [r for r in caplog.records
              if str(getattr(r, "event", "")).startswith("failopen.shadow")]
    assert [(r.event, r.path, r.policy) for r in shadow] == [  # type: ignore[attr-defined]
        ("failopen.shadow_outage_policy", "/login", policy)]
    assert f"shadow: {instead} (outage policy {policy})" in shadow[0].getMessage()
