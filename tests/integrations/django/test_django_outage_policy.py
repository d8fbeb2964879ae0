"""Outage policies in Django: by path, by view name (OUTAGE_POLICY_ROUTES), by
``@protect(outage=...)``; the challenge URL and the flag's ``?path=``; sync and async clients."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.test import override_settings
from django.urls import clear_url_caches

from failopen.exceptions import ConfigError
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
# issue 20 added outage_policy, issue 21 impaired_regions
# issue 28 added vendor and component (whose status page decides, by which component)
# issue 29 added fallback (which challenge a fallback route wants now) and action (its tokens')
FLAG_KEYS = FLAG_KEYS_BEFORE_ISSUE_20 | {"outage_policy", "impaired_regions", "vendor",
                                         "component", "fallback", "action"}


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


def test_the_flag_endpoint_only_gains_outage_policy_and_impaired_regions(
        use_failopen: Callable[..., FailOpen | None], client: Any,
        fake_status_page: FakeStatusPage) -> None:
    runtime = use_failopen(**POLICIES)
    assert runtime is not None
    for query in ("", "?path=/signup/", "?path=/elsewhere/", "?confirm=1"):
        assert set(client.get("/failopen/flag" + query).json()) == FLAG_KEYS, query
    fake_status_page.set_global("major_outage")
    runtime.poll_now()
    assert set(client.get("/failopen/flag?path=/signup/").json()) == FLAG_KEYS


I18N = {"ROOT_URLCONF": "django_test_urls_outage_i18n", "USE_I18N": True, "LANGUAGE_CODE": "en",
        "LANGUAGES": [("en", "English"), ("fr", "French"), ("pt-br", "Portuguese")]}


@pytest.mark.parametrize("language", ["en", "fr", "pt-br"])
def test_the_flag_endpoint_resolves_a_language_prefixed_path(
        use_failopen: Callable[..., FailOpen | None], client: Any, language: str) -> None:
    # The snippet asks with its form's action, /fr/signup/, while the flag endpoint's own request
    # is not under a language prefix: the active language there is the site's default (en), under
    # which i18n_patterns do not resolve /fr/...: the policy must still be the view's.
    use_failopen(**POLICIES)
    with override_settings(**I18N):
        for path, policy in ((f"/{language}/login/", "open"),
                             (f"/{language}/signup/", "fallback"),
                             (f"/{language}/reset/", "closed"),
                             (f"/{language}/elsewhere/", None)):
            answer = client.get("/failopen/flag", {"path": path})
            assert answer.json()["outage_policy"] == policy, path


def test_a_language_prefixed_fallback_view_needs_a_solution(outage: FailOpen,
                                                            client: Any) -> None:
    from django.conf import settings

    # LocaleMiddleware activates the prefix's language, as a site with i18n_patterns has it.
    # (From the settings: "conftest" may name another folder's conftest in a whole run.)
    middleware = list(settings.MIDDLEWARE)
    locale = [middleware[0], "django.middleware.locale.LocaleMiddleware", *middleware[1:]]
    with override_settings(**I18N, MIDDLEWARE=locale):
        refused = client.post("/fr/signup/", {}, **JSON)
        assert (refused.status_code, code(refused)) == (403, "fallback_required")
        closed = client.post("/fr/reset/", {}, **JSON)
        assert (closed.status_code, code(closed)) == (503, "outage_closed")


@pytest.mark.parametrize("paths", [["/reset/"], ["/signup/"]])
def test_a_path_and_a_view_that_both_claim_a_request_give_the_stricter_policy(
        use_failopen: Callable[..., FailOpen | None], fake_status_page: FakeStatusPage,
        client: Any, paths: list[str]) -> None:
    # /reset/'s view says closed, /signup/'s view is named fallback: listing their paths in
    # PROTECTED_PATHS too (policy open by default) must not loosen either.
    runtime = use_failopen(**{**POLICIES, "PROTECTED_PATHS": paths})
    assert runtime is not None
    fake_status_page.set_global("major_outage")
    runtime.poll_now()
    response = client.post(paths[0], {}, **JSON)
    assert code(response) == {"/reset/": "outage_closed", "/signup/": "fallback_required"}[
        paths[0]]
    assert client.get("/failopen/flag", {"path": paths[0]}).json()["outage_policy"] == {
        "/reset/": "closed", "/signup/": "fallback"}[paths[0]]


def test_a_big_form_to_a_closed_view_is_still_closed(use_failopen: Callable[..., FailOpen | None],
                                                     fake_status_page: FakeStatusPage,
                                                     client: Any) -> None:
    # A form over the body cap to a protected view is judged before Django resolves the view
    # (CSRF would parse it first): the view's own policy must apply all the same.
    runtime = use_failopen(**{**POLICIES, "MAX_BODY_BYTES": 1024})
    assert runtime is not None
    fake_status_page.set_global("major_outage")
    runtime.poll_now()
    response = client.post("/reset/", {"note": "x" * 4096}, **JSON)
    assert (response.status_code, code(response)) == (503, "outage_closed")


def test_a_fresh_worker_applies_a_view_policy_from_its_first_request(
        use_failopen: Callable[..., FailOpen | None], fake_status_page: FakeStatusPage,
        client: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    # A worker that has served nothing has not imported the URLconf, so no view's
    # protect(outage=...) has run yet: the first request, judged by its listed path, must not
    # be waved through as open before Django gets to import the view that says closed.
    import sys

    from failopen.integrations.django import protection

    monkeypatch.delitem(sys.modules, "django_test_urls_outage_fresh", raising=False)
    monkeypatch.setattr(protection, "_outage_marks", [False])
    # No PROTECTED_VIEWS: nothing walks the URLconf at the first request.
    runtime = use_failopen(PROTECTED_PATHS=["/password/"])
    assert runtime is not None
    fake_status_page.set_global("major_outage")
    runtime.poll_now()
    with override_settings(ROOT_URLCONF="django_test_urls_outage_fresh"):
        client.get("/failopen/flag")  # failopen has started: its start-up walk is behind it
        clear_url_caches()  # and a fresh URLconf, as another worker would import it
        monkeypatch.delitem(sys.modules, "django_test_urls_outage_fresh")
        monkeypatch.setattr(protection, "_outage_marks", [False])
        response = client.post("/password/", {}, **JSON)
    assert (response.status_code, code(response)) == (503, "outage_closed")


def test_a_protect_view_takes_its_policy_by_url_name(
        use_failopen: Callable[..., FailOpen | None], fake_status_page: FakeStatusPage,
        client: Any) -> None:
    # Protected by @protect alone, not listed in PROTECTED_VIEWS: naming it in
    # OUTAGE_POLICY_ROUTES is how a site gives it a policy without touching the view's code.
    runtime = use_failopen(PROTECTED_PATHS=["/login/"],
                           OUTAGE_POLICY_ROUTES={"change-email": "closed"})
    assert runtime is not None
    assert client.get("/failopen/flag", {"path": "/email/"}).json()["outage_policy"] == "closed"
    fake_status_page.set_global("major_outage")
    runtime.poll_now()
    response = client.post("/email/", {}, **JSON)
    assert (response.status_code, code(response)) == (503, "outage_closed")


def test_a_policy_for_a_name_no_protected_view_carries_stops_start_up(
        fo_settings: dict[str, Any]) -> None:
    from failopen.integrations.django.conf import config_factory

    for name in ("login", "no-such-view"):  # login: routed, but protected by its path only
        routes = {**fo_settings, "OUTAGE_POLICY_ROUTES": {name: "closed"}}
        with (override_settings(FAILOPEN=routes),
              pytest.raises(ConfigError, match=f"'{name}' is not a protected route.*@protect")):
            config_factory()
