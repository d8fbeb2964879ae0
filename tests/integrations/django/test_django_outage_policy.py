"""Outage policies in Django: by path, by view name (OUTAGE_POLICY_ROUTES), by
``@protect(outage=...)``; the challenge URL and the flag's ``?path=``; sync and async clients."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.test import override_settings

from failopen.runtime import FailOpen
from failopen.testing import FakeStatusPage, solve_challenge

JSON = {"headers": {"accept": "application/json"}}
POLICIES = {"PROTECTED_PATHS": ["/login/"], "PROTECTED_VIEWS": ["signup"],
            "OUTAGE_POLICY_ROUTES": {"signup": "fallback"},
            "FALLBACK_SECRET": "s" * 40, "FALLBACK_COST": 2000}

# The flag endpoint's keys before issue 20 (6ab2766), and the one issue 20 added: a contract the
# browser snippet and operators' scripts read; anything else added here must be on purpose.
FLAG_KEYS_BEFORE_ISSUE_20 = {"enforce", "source", "reason", "since", "expires_at", "global_status",
                             "stale", "error", "mode", "probe"}
FLAG_KEYS = FLAG_KEYS_BEFORE_ISSUE_20 | {"outage_policy"}


@pytest.fixture(autouse=True)
def _urls() -> Any:
    with override_settings(ROOT_URLCONF="django_test_urls_outage"):
        yield


@pytest.fixture
def outage(use_failopen: Callable[..., FailOpen | None],
           fake_status_page: FakeStatusPage) -> FailOpen:
    runtime = use_failopen(**POLICIES)
    assert runtime is not None
    fake_status_page.set_global("major_outage")
    runtime.poll_now()
    assert not runtime.state.enforce
    return runtime


@pytest.fixture
def client(make_client: Callable[..., Any], client_kind: str) -> Any:
    return make_client()


def code(response: Any) -> str:
    return str(response.json()["error"]["code"])


def test_a_named_fallback_view_admits_a_solved_challenge_once(outage: FailOpen,
                                                              client: Any) -> None:
    challenge = client.get("/failopen/challenge")
    assert challenge.status_code == 200 and challenge["Cache-Control"] == "no-store"
    solved = solve_challenge(challenge.json())
    admitted = client.post("/signup/", {"altcha": solved}, **JSON)
    assert admitted.status_code == 200
    assert admitted.json()["failopen"]["outcome"] == "bypassed_fallback"
    replayed = client.post("/accounts/signup/", {"altcha": solved}, **JSON)  # another route
    assert (replayed.status_code, code(replayed)) == (403, "fallback_invalid")
    missing = client.post("/signup/", {"username": "ada"}, **JSON)
    assert (missing.status_code, code(missing)) == (403, "fallback_required")


def test_protect_outage_closed_refuses_with_503(outage: FailOpen, client: Any) -> None:
    response = client.post("/reset/", {}, **JSON)
    assert (response.status_code, code(response)) == (503, "outage_closed")
    assert response["Retry-After"]
    page = client.post("/reset/", {}, headers={"accept": "text/html"})
    assert page.status_code == 503 and b"Briefly unavailable" in page.content


def test_a_path_protected_route_keeps_the_default_open_policy(outage: FailOpen,
                                                              client: Any) -> None:
    response = client.post("/login/", {}, **JSON)
    assert response.json()["failopen"]["outcome"] == "bypassed_flag_off"


def test_the_flag_endpoint_resolves_the_asked_path_to_its_policy(
        use_failopen: Callable[..., FailOpen | None], client: Any) -> None:
    use_failopen(**POLICIES)
    for path, policy in (("/login/", "open"), ("/signup/", "fallback"),
                         ("/accounts/signup/", "fallback"), ("/reset/", "closed"),
                         ("/elsewhere/", None), ("not-a-path", None)):
        answer = client.get("/failopen/flag", {"path": path})
        assert answer.json()["outage_policy"] == policy, path


def test_the_challenge_url_is_409_while_enforcing(
        use_failopen: Callable[..., FailOpen | None], client: Any) -> None:
    use_failopen(**POLICIES)
    response = client.get("/failopen/challenge")
    assert (response.status_code, code(response)) == (409, "enforcing")


def test_protect_refuses_an_unknown_outage_policy() -> None:
    from failopen.integrations.django import protect

    with pytest.raises(ValueError, match="open, fallback, closed"):
        protect(outage="shut")


def test_the_flag_endpoint_shape_is_unchanged_but_outage_policy(
        use_failopen: Callable[..., FailOpen | None], client: Any,
        fake_status_page: FakeStatusPage) -> None:
    runtime = use_failopen(**POLICIES)
    assert runtime is not None
    for query in ("", "?path=/signup/", "?path=/elsewhere/", "?confirm=1"):
        assert set(client.get("/failopen/flag" + query).json()) == FLAG_KEYS, query
    fake_status_page.set_global("major_outage")
    runtime.poll_now()
    assert set(client.get("/failopen/flag?path=/signup/").json()) == FLAG_KEYS
