"""ALLAUTH_VIEWS against every route the real django-allauth has: the checks, and the ways round.

- Every allauth route is either in ALLAUTH_VIEWS or left open here for a stated reason: a route a
  new allauth release adds fails this test until someone decides.
- failopen.W009 (and the first request's log line) is silent about the names an install does
  not route, and speaks when allauth routes a listed view under a name the list misses.
- Each spelling of a route a client can send (trailing slash, language prefix, percent-encoding,
  case, another method, the token in the query string, a replayed token) is refused or reaches
  nothing.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.core import checks, mail
from django.test import override_settings
from django.urls import get_resolver
from failopen.integrations.django import ALLAUTH_VIEWS
from failopen.integrations.django.checks import check_settings
from failopen.integrations.django.protection import walk

from failopen.runtime import FailOpen
from failopen.testing import FakeVerifyAPI

# django-allauth 65.22 needs Python 3.11: the test extra installs it only there.
pytest.importorskip("allauth", reason="django-allauth is not installed (it needs Python 3.11+)")

URLS = "django_test_urls_allauth"
JSON = "application/json"
PASSWORD = "a-long-enough-password-1"  # noqa: S105 - a test user's

# The routes of allauth that ALLAUTH_VIEWS leaves open, and why (see failopen/integrations/django/
# allauth.py). Headless names stand for both clients.
SECOND_STEPS = {  # behind a listed first step, bounded by allauth (attempts, resend quota)
    "account_confirm_login_code", "account_confirm_reauthentication_code",
    "account_confirm_password_reset_code", "account_complete_password_reset",
    "account_reset_password_from_key", "account_email_verification_sent",
    "account_confirm_email", "account_verify_phone", "mfa_authenticate", "mfa_trust",
    "mfa_signup_webauthn",
    "account:confirm_login_code", "account:resend_login_code",
    "account:confirm_reauthentication_code", "account:resend_reauthentication_code",
    "account:reset_password", "account:verify_email", "account:resend_email_verification_code",
    "account:verify_phone", "account:resend_phone_verification_code", "mfa:authenticate",
    "mfa:trust",
}
PASSKEYS = {  # a signature from the person's device: nothing to guess, no message sent
    "mfa_login_webauthn", "mfa_reauthenticate_webauthn", "mfa:login_webauthn",
    "mfa:reauthenticate_webauthn", "mfa:authenticate_webauthn",
}
PROVIDERS = {  # the provider's own check applies
    "socialaccount_login_cancelled", "socialaccount_login_error",
    "socialaccount:redirect_to_provider", "socialaccount:provider_token",
}
SIGNED_IN = {  # a signed-in person's own account, log-out, pages with no form to send
    "account_logout", "account_inactive", "account_email", "account_change_password",
    "account_set_password", "account_change_phone", "account_reset_password_done",
    "account_reset_password_from_key_done", "account_password_reset_completed",
    "mfa_index", "mfa_activate_totp", "mfa_deactivate_totp", "mfa_view_recovery_codes",
    "mfa_generate_recovery_codes", "mfa_download_recovery_codes", "mfa_list_webauthn",
    "mfa_add_webauthn", "mfa_edit_webauthn", "mfa_remove_webauthn",
    "socialaccount_connections", "usersessions_list",
    "config", "account:current_session", "account:change_password", "account:manage_email",
    "account:manage_phone", "mfa:authenticators", "mfa:manage_totp",
    "mfa:manage_recovery_codes", "mfa:manage_webauthn", "socialaccount:manage_providers",
    "usersessions:sessions", "tokens:refresh",
}
LEFT_OPEN = SECOND_STEPS | PASSKEYS | PROVIDERS | SIGNED_IN


def allauth_route_names(urlconf: str) -> set[str]:
    """The URL names of allauth's routes in ``urlconf`` (instance namespaces, not dotted paths
    or application namespaces)."""
    found: set[str] = set()
    for _, names in walk(get_resolver(urlconf)):
        found |= {n for n in names if "." not in n and not n.startswith(("failopen:",
                                                                          "headless:headless:"))}
    return found


def generic(name: str) -> str:
    """``headless:app:account:login`` -> ``account:login``: one spelling for both clients."""
    parts = name.split(":")
    return ":".join(parts[2:]) if parts[0] == "headless" else name


def test_every_allauth_route_is_protected_or_left_open_for_a_reason() -> None:
    routed = allauth_route_names(URLS)
    assert set(ALLAUTH_VIEWS) <= routed  # the full install routes every listed name
    unclassified = sorted(n for n in routed - set(ALLAUTH_VIEWS) if generic(n) not in LEFT_OPEN)
    assert unclassified == [], "a new allauth route: protect it (ALLAUTH_VIEWS) or say why not"
    assert not {generic(n) for n in ALLAUTH_VIEWS} & LEFT_OPEN


@pytest.fixture
def listed(use_failopen: Callable[..., FailOpen | None],
           django_db: None) -> Iterator[Callable[..., FailOpen | None]]:
    """``listed(urlconf, *extra)``: PROTECTED_VIEWS = ALLAUTH_VIEWS (+ extra) under urlconf."""
    stack: list[Any] = []

    def use(urlconf: str, *extra: str) -> FailOpen | None:
        runtime = use_failopen(PROTECTED_PATHS=[], PROTECTED_VIEWS=[*ALLAUTH_VIEWS, *extra])
        override = override_settings(ROOT_URLCONF=urlconf)
        override.enable()
        stack.append(override)
        return runtime

    yield use
    for override in reversed(stack):
        override.disable()


def w009() -> list[str]:
    return [m.msg for m in check_settings() if m.id == "failopen.W009"]


def test_a_full_allauth_install_raises_no_check_at_all(listed: Callable[..., Any]) -> None:
    listed(URLS)
    # Every check of the site (Django's, allauth's, failopen's), not only failopen's.
    found = [f"{m.id}: {m.msg}" for m in checks.run_checks() if m.level >= checks.WARNING]
    assert found == []


def test_names_the_site_does_not_route_are_not_reported(listed: Callable[..., Any]) -> None:
    # Headless installed but not included: nothing of it is reachable, so nothing to protect.
    listed("django_test_urls_allauth_pages")
    assert w009() == []


def test_a_typo_beside_allauth_views_is_still_reported(listed: Callable[..., Any]) -> None:
    listed("django_test_urls_allauth_pages", "account_logn")
    assert w009() == ["FAILOPEN['PROTECTED_VIEWS'] entry 'account_logn' names no view in the "
                      "URLconf, so it protects nothing; did you mean 'account_login'?"]


def test_allauth_under_another_namespace_is_reported_with_the_name_to_use(
        listed: Callable[..., Any], make_client: Callable[..., Any]) -> None:
    listed("django_test_urls_allauth_renamed")
    found = w009()
    headless = [n for n in ALLAUTH_VIEWS if n.startswith("headless:")]
    assert len(found) == len(headless)
    assert ("FAILOPEN['PROTECTED_VIEWS'] entry 'headless:browser:account:login' names no view in "
            "the URLconf, so it protects nothing; did you mean 'api:browser:account:login'?"
            ) in found
    assert ("FAILOPEN['PROTECTED_VIEWS'] entry 'headless:app:mfa:reauthenticate' names no view "
            "in the URLconf, so it protects nothing; did you mean 'api:app:mfa:reauthenticate'?"
            ) in found
    # What the warning is about: those routes are open.
    answer = make_client().post("/api/app/v1/auth/login", {"username": "x", "password": "y"},
                                content_type=JSON)
    assert answer.status_code == 400 and "status" in answer.json()  # allauth's, unguarded


def test_protecting_the_renamed_routes_too_silences_the_check(
        listed: Callable[..., Any]) -> None:
    renamed = [n.replace("headless:", "api:", 1) for n in ALLAUTH_VIEWS
               if n.startswith("headless:")]
    listed("django_test_urls_allauth_renamed", *renamed)
    assert w009() == []


def test_the_first_request_logs_nothing_for_unrouted_allauth_names(
        listed: Callable[..., Any], make_client: Callable[..., Any],
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="failopen.django")
    listed("django_test_urls_allauth_pages")
    assert make_client().get("/accounts/login/").status_code == 200
    assert [r.getMessage() for r in caplog.records if r.name.startswith("failopen")] == []


# Ways round ---------------------------------------------------------------------------------


@pytest.fixture
def protected(listed: Callable[..., Any]) -> Iterator[None]:
    listed(URLS)
    mail.outbox = []
    yield


@pytest.fixture
def person() -> Any:
    from allauth.account.models import EmailAddress
    from django.contrib.auth import get_user_model

    name = f"eve-{uuid.uuid4().hex[:8]}"
    found = get_user_model().objects.create_user(name, f"{name}@example.com", PASSWORD)
    EmailAddress.objects.create(user=found, email=found.email, primary=True, verified=True)
    return found


def refusal(response: Any) -> str | None:
    try:
        body = json.loads(response.content)
    except ValueError:
        return None
    error = body.get("error") if isinstance(body, dict) else None
    return error.get("code") if isinstance(error, dict) else None


def signed_in(client: Any) -> bool:
    from django.contrib.sessions.backends.db import SessionStore

    cookie = client.cookies.get("sessionid")
    return bool(cookie and cookie.value
                and SessionStore(session_key=cookie.value).get("_auth_user_id"))


@pytest.mark.parametrize("path", ["/accounts/%6cogin/", "/accounts/login/?next=/x",
                                  "/accounts/login/?enforcement-token=" + FakeVerifyAPI.GOOD])
def test_other_spellings_of_the_log_in_page_are_refused(
        protected: None, make_client: Callable[..., Any], client_kind: str, person: Any,
        path: str) -> None:
    client = make_client()
    answer = client.post(path, {"login": person.username, "password": PASSWORD},
                         headers={"accept": JSON})
    assert (answer.status_code, refusal(answer)) == (403, "missing_token")
    assert not signed_in(client)


@pytest.mark.parametrize("path", ["/accounts/login", "/Accounts/Login/", "/accounts//login/",
                                  "/_allauth/app/v1/auth/login/", "/_allauth/APP/v1/auth/login"])
def test_spellings_that_miss_the_route_reach_no_log_in(
        protected: None, make_client: Callable[..., Any], person: Any, path: str) -> None:
    client = make_client()
    answer = client.post(path, {"login": person.username, "username": person.username,
                                "password": PASSWORD})
    # Django's APPEND_SLASH answers a redirect (301) for the first; the rest route nowhere.
    assert answer.status_code in (301, 404), (path, answer.status_code)
    assert not signed_in(client)


I18N = {"ROOT_URLCONF": "django_test_urls_allauth_i18n", "USE_I18N": True,
        "LANGUAGE_CODE": "en", "LANGUAGES": [("en", "English"), ("fr", "French")]}


@pytest.mark.parametrize("path", ["/en/accounts/login/", "/fr/accounts/login/",
                                  "/fr/_allauth/app/v1/auth/login",
                                  "/fr/accounts/password/reset/"])
def test_a_language_prefix_is_refused_too(
        protected: None, make_client: Callable[..., Any], person: Any, path: str) -> None:
    from django.conf import settings

    middleware = list(settings.MIDDLEWARE)
    middleware.insert(1, "django.middleware.locale.LocaleMiddleware")
    with override_settings(**I18N, MIDDLEWARE=middleware):
        client = make_client()
        body = {"login": person.username, "username": person.username, "password": PASSWORD,
                "email": person.email}
        kind: dict[str, Any] = {"content_type": JSON} if "_allauth" in path else {}
        answer = client.post(path, body, headers={"accept": JSON}, **kind)
        assert (answer.status_code, refusal(answer)) == (403, "missing_token"), path
        assert not signed_in(client) and mail.outbox == []


@pytest.mark.parametrize("method", ["put", "patch", "delete"])
def test_other_methods_log_no_one_in(protected: None, make_client: Callable[..., Any],
                                     person: Any, method: str) -> None:
    # PROTECTED_METHODS stays POST: allauth's form views answer PUT as POST, but Django parses
    # no form for a PUT, so the form is empty; the headless API has no such handlers.
    client = make_client()
    form = f"login={person.username}&password={PASSWORD}"
    page = getattr(client, method)("/accounts/login/", form,
                                   content_type="application/x-www-form-urlencoded")
    assert page.status_code in (200, 405) and not signed_in(client)
    for app in ("browser", "app"):
        api = getattr(client, method)(f"/_allauth/{app}/v1/auth/login",
                                      {"username": person.username, "password": PASSWORD},
                                      content_type=JSON)
        assert api.status_code == 405, (app, api.status_code)
        assert not signed_in(client)


def test_get_and_head_on_headless_log_in_do_nothing(
        protected: None, make_client: Callable[..., Any], person: Any) -> None:
    client = make_client()
    for app in ("browser", "app"):
        answer = client.get(f"/_allauth/{app}/v1/auth/login",
                            {"username": person.username, "password": PASSWORD})
        assert answer.status_code == 405 and not signed_in(client)


@pytest.mark.parametrize("path", ["/accounts/login/code/confirm/",
                                  "/_allauth/browser/v1/auth/code/confirm",
                                  "/_allauth/app/v1/auth/code/confirm",
                                  "/_allauth/app/v1/auth/code/resend"])
def test_the_unlisted_code_steps_need_a_listed_first_step(
        protected: None, make_client: Callable[..., Any], path: str) -> None:
    # Left open on purpose: with no code requested through a protected step, they confirm or
    # resend nothing.
    client = make_client()
    kind: dict[str, Any] = {"content_type": JSON} if path.startswith("/_allauth") else {}
    answer = client.post(path, {"code": "ABC123", "action": "resend"}, **kind)
    assert refusal(answer) is None  # allauth answers, not failopen ...
    assert answer.status_code in (302, 409), (path, answer.status_code)  # ... and refuses
    assert not signed_in(client) and mail.outbox == []


def test_a_token_logs_in_once(protected: None, make_client: Callable[..., Any],
                              fake_verify_api: FakeVerifyAPI, person: Any) -> None:
    token = fake_verify_api.issue_token()
    form = {"login": person.username, "password": PASSWORD, "enforcement-token": token}
    first = make_client()
    assert first.post("/accounts/login/", form).status_code == 302 and signed_in(first)
    second = make_client()
    replayed = second.post("/accounts/login/", form, headers={"accept": JSON})
    assert (replayed.status_code, refusal(replayed)) == (403, "invalid_token")
    assert not signed_in(second)
    forged = second.post("/_allauth/app/v1/auth/login",
                         {"username": person.username, "password": PASSWORD},
                         content_type=JSON, headers={"X-Enforcement-Token": FakeVerifyAPI.BAD})
    assert (forged.status_code, refusal(forged)) == (403, "invalid_token")


def test_failopen_check_counts_the_names_this_install_routes(
        listed: Callable[..., Any]) -> None:
    # allauth's pages routed, its headless API not: the check said "finds 27 of 28" (every
    # name but the typo) although 9 route here. Now it says which are routed, which are not.
    import io

    from django.core.management import call_command

    listed("django_test_urls_allauth_pages", "account_logn")
    out = io.StringIO()
    call_command("failopen", "check", "--json", stdout=out, stderr=io.StringIO())  # warnings
    views = {c["name"]: c for c in json.loads(out.getvalue())["checks"]}["django_views"]
    pages = [n for n in ALLAUTH_VIEWS if not n.startswith("headless:")]
    headless = [n for n in ALLAUTH_VIEWS if n.startswith("headless:")]
    assert views["facts"]["routed"] == sorted(pages)
    assert views["facts"]["not_on_this_install"] == sorted(headless)
    assert (f"PROTECTED_VIEWS: {len(pages)} routed, {len(headless)} not on this install, "
            "1 naming no view;") in views["detail"]
