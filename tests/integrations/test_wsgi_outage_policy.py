"""Outage policies through the WSGI middleware under Flask, as raw HTTP (werkzeug's Client)."""

from __future__ import annotations

import time
from collections.abc import Callable

from _wsgi_kit import WsgiStack

from failopen.testing import solve_challenge

Make = Callable[..., WsgiStack]
POLICIES = {"outage_policy_routes": "/login=fallback,/raw=closed", "fallback_secret": "s" * 40,
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


def outage(stack: WsgiStack) -> None:
    stack.page.set_global("major_outage")
    for _ in range(stack.runtime.config.open_after):
        stack.runtime.poll_now()
    assert not stack.runtime.state.enforce


def solution(stack: WsgiStack) -> str:
    answer = stack.client.get("/failopen/challenge")
    assert answer.status_code == 200 and answer.headers["Cache-Control"] == "no-store"
    return solve_challenge(answer.get_json())


def test_a_fallback_route_admits_a_solved_challenge_once(make_wsgi: Make) -> None:
    stack = make_wsgi(**POLICIES)
    outage(stack)
    solved = solution(stack)
    admitted = stack.post(data={"altcha": solved, "user": "ada"})
    assert admitted.status_code == 200
    assert admitted.get_json()["decision"]["outcome"] == "bypassed_fallback"
    assert admitted.get_json()["form"] == {"altcha": solved, "user": "ada"}  # the body replayed
    replayed = stack.post(data={"altcha": solved})
    assert (replayed.status_code, replayed.get_json()["error"]["code"]) == (403,
                                                                           "fallback_invalid")
    in_header = stack.post(headers={"X-Altcha": solution(stack)})
    assert in_header.get_json()["decision"]["outcome"] == "bypassed_fallback"


def test_a_fallback_route_without_a_solution_is_403(make_wsgi: Make) -> None:
    stack = make_wsgi(**POLICIES)
    outage(stack)
    refused = stack.post(data={"user": "ada"})
    assert (refused.status_code, refused.get_json()["error"]["code"]) == (403,
                                                                          "fallback_required")


def test_a_closed_route_is_503_and_browsers_get_a_briefly_unavailable_page(
        make_wsgi: Make) -> None:
    stack = make_wsgi(**POLICIES)
    outage(stack)
    as_json = stack.post("/raw")
    assert (as_json.status_code, as_json.get_json()["error"]["code"]) == (503, "outage_closed")
    assert as_json.headers["Retry-After"] == "7"
    page = stack.post("/raw", headers={"Accept": "text/html"})
    assert page.status_code == 503 and "Briefly unavailable" in page.get_data(as_text=True)
    assert stack.recorder.calls == []


def test_the_challenge_endpoint_is_409_while_enforcing_and_404_without_a_fallback(
        make_wsgi: Make) -> None:
    assert make_wsgi(**POLICIES).client.get("/failopen/challenge").status_code == 409
    assert make_wsgi().client.get("/failopen/challenge").status_code == 404


def test_the_flag_endpoint_names_the_policy_of_the_asked_path(make_wsgi: Make) -> None:
    stack = make_wsgi(**POLICIES)
    answer = stack.client.get("/failopen/flag?path=/raw/deep")
    assert answer.get_json()["outage_policy"] == "closed"


def test_the_flag_endpoint_only_gains_outage_policy_and_impaired_regions(make_wsgi: Make) -> None:
    stack = make_wsgi(**POLICIES)
    for query in ("", "?path=/login", "?path=/elsewhere", "?confirm=1"):
        assert set(stack.client.get("/failopen/flag" + query).get_json()) == FLAG_KEYS, query
    outage(stack)
    assert set(stack.client.get("/failopen/flag").get_json()) == FLAG_KEYS
    shadow = make_wsgi(mode="shadow", **POLICIES).client.get("/failopen/flag?path=/login")
    assert set(shadow.get_json()) == FLAG_KEYS | {"would_bypass", "shadow"}


def test_the_outage_rate_limit_answers_429(make_wsgi: Make) -> None:
    stack = make_wsgi(outage_rate="1/minute")
    outage(stack)
    assert stack.post().status_code == 200
    limited = stack.post()
    assert (limited.status_code, limited.get_json()["error"]["code"]) == (429,
                                                                         "outage_rate_limited")
    assert int(limited.headers["Retry-After"]) >= 1


def _next_millisecond() -> None:
    """Wait for the clock to pass into the next millisecond (the precision a challenge's times
    carry): an operator's flap within one would be one moment."""
    start = int(time.time() * 1000)
    while int(time.time() * 1000) == start:
        time.sleep(0.001)


def test_a_challenge_from_the_previous_outage_is_refused_in_the_next(make_wsgi: Make) -> None:
    """Issue 31, item A3, over HTTP: an operator's override off, lifted, and placed again at
    once (far within the 35 s a challenge may predate an outage by)."""
    stack = make_wsgi(**POLICIES)
    flag = stack.runtime.flag
    flag.force_off("outage 1", ttl=60)
    old = solution(stack)
    _next_millisecond()
    flag.automatic("recovered")
    assert stack.client.get("/failopen/challenge").status_code == 409, "enforcing"
    _next_millisecond()
    flag.force_off("outage 2", ttl=60)
    refused = stack.post(data={"altcha": old})
    assert (refused.status_code, refused.get_json()["error"]["code"]) == (403,
                                                                          "fallback_invalid")
    admitted = stack.post(data={"altcha": solution(stack)})
    assert admitted.get_json()["decision"]["outcome"] == "bypassed_fallback"
