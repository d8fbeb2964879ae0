"""Review of issue 20 in Django: FAILOPEN_TRUSTED_PROXIES reaches the outage rate limit."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.http import HttpRequest, HttpResponse
from django.test import override_settings
from django.urls import include, path
from failopen.integrations.django import protect

from failopen.runtime import FailOpen
from failopen.testing import FakeStatusPage, solve_challenge

JSON = {"headers": {"accept": "application/json"}}


@pytest.fixture(autouse=True)
def _urls() -> Any:
    with override_settings(ROOT_URLCONF="django_test_urls_outage"):
        yield


def test_behind_a_trusted_proxy_each_forwarded_client_has_its_own_limit(
        use_failopen: Callable[..., FailOpen | None], fake_status_page: FakeStatusPage,
        make_client: Callable[..., Any], client_kind: str) -> None:
    runtime = use_failopen(PROTECTED_PATHS=["/login/"], OUTAGE_RATE="1/minute",
                           TRUSTED_PROXIES="127.0.0.1")
    assert runtime is not None
    fake_status_page.set_global("major_outage")
    runtime.poll_now()
    client = make_client()
    first = {"accept": "application/json", "x-forwarded-for": "198.51.100.1"}
    assert client.post("/login/", {}, headers=first).status_code == 200
    assert client.post("/login/", {}, headers=first).status_code == 429
    other = client.post("/login/", {}, headers={"accept": "application/json",
                                                "x-forwarded-for": "198.51.100.2"})
    assert other.status_code == 200


# --- @protect(outage="fallback") as the only fallback route --------------------------------------

@protect(outage="fallback")
def _marked_signup(request: HttpRequest) -> HttpResponse:
    return HttpResponse("signed up")


urlpatterns = [
    path("marked-signup/", _marked_signup),
    path("failopen/", include("failopen.integrations.django.urls")),
]


def test_a_view_marked_fallback_admits_a_solved_challenge_without_any_route_setting(
        use_failopen: Callable[..., FailOpen | None], fake_status_page: FakeStatusPage,
        make_client: Callable[..., Any], client_kind: str) -> None:
    """``@protect(outage="fallback")`` is the only fallback route: no OUTAGE_POLICY_ROUTES names
    one. The secret is set, so the challenge must be served and checked."""
    runtime = use_failopen(PROTECTED_PATHS=[], FALLBACK_SECRET="s" * 40, FALLBACK_COST=2000,
                           OUTAGE_RATE="none")
    assert runtime is not None
    fake_status_page.set_global("major_outage")
    runtime.poll_now()
    client = make_client()
    with override_settings(ROOT_URLCONF=__name__):
        challenge = client.get("/failopen/challenge")
        assert challenge.status_code == 200
        solved = solve_challenge(challenge.json())
        admitted = client.post("/marked-signup/", {"altcha": solved}, **JSON)
        assert admitted.status_code == 200


def test_a_view_marked_fallback_without_the_secret_is_a_system_check_error(
        fo_settings: dict[str, Any]) -> None:
    from failopen.integrations.django.checks import check_settings

    with override_settings(ROOT_URLCONF=__name__, FAILOPEN=fo_settings):
        assert "failopen.E006" in {m.id for m in check_settings()}
    with override_settings(ROOT_URLCONF=__name__,
                           FAILOPEN={**fo_settings, "FALLBACK_SECRET": "s" * 40}):
        assert "failopen.E006" not in {m.id for m in check_settings()}
