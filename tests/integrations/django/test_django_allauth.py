"""``PROTECTED_VIEWS = ALLAUTH_VIEWS`` in front of the real django-allauth, pages and headless API.

Only the vendor is fake. The entry points are listed here by path, as a person or a bot reaches
them, not by URL name: if ALLAUTH_VIEWS missed one, its path would admit a request without a
token and these tests would fail. allauth's apps and settings are the Django tests' own
(conftest.py: every entry point switched on); the URLconf includes allauth as its documentation
does.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from _docs_allauth import allauth_blocks
from django.core import mail
from django.test import override_settings
from django.urls import resolve
from failopen.integrations.django import ALLAUTH_VIEWS

from failopen.runtime import FailOpen
from failopen.testing import FakeStatusPage, FakeVerifyAPI, solve_challenge

# django-allauth 65.22 needs Python 3.11: the test extra installs it only there.
pytest.importorskip("allauth", reason="django-allauth is not installed (it needs Python 3.11+)")

URLS = "django_test_urls_allauth"
JSON = "application/json"

#: allauth's pages that start a log-in, a sign-up, a code or reset e-mail, a reauthentication.
PAGES = [
    "/accounts/login/",
    "/accounts/signup/",
    "/accounts/signup/passkey/",
    "/accounts/login/code/",
    "/accounts/password/reset/",
    "/accounts/reauthenticate/",
    "/accounts/reauthenticate/code/",
    "/accounts/2fa/reauthenticate/",
    "/accounts/3rdparty/signup/",
]
#: The same entry points in the headless API, for each client.
HEADLESS = [
    f"/_allauth/{client}/v1/auth/{endpoint}"
    for client in ("browser", "app")
    for endpoint in ("login", "signup", "code/request", "password/request", "reauthenticate",
                     "reauthenticate/code/request", "2fa/reauthenticate", "webauthn/signup",
                     "provider/signup")
]
PASSWORD = "a-long-enough-password-1"  # noqa: S105 - a test user's


@pytest.fixture(autouse=True)
def _allauth(django_db: None) -> Iterator[None]:
    with override_settings(ROOT_URLCONF=URLS):
        mail.outbox = []
        yield


@pytest.fixture
def protected(use_failopen: Callable[..., FailOpen | None]) -> FailOpen:
    """failopen in front of allauth, as the manual's recipe sets it: PROTECTED_VIEWS only."""
    runtime = use_failopen(PROTECTED_PATHS=[], PROTECTED_VIEWS=ALLAUTH_VIEWS)
    assert runtime is not None
    return runtime


@pytest.fixture
def client(make_client: Callable[..., Any], client_kind: str) -> Any:
    return make_client()


def refusal(response: Any) -> str | None:
    """failopen's refusal code when failopen refused (its JSON), else None: allauth answered."""
    try:
        body = json.loads(response.content)
    except ValueError:
        return None
    error = body.get("error") if isinstance(body, dict) else None
    return error.get("code") if isinstance(error, dict) else None


def user(*, verified: bool = True) -> Any:
    """A new allauth user with a (verified) primary e-mail address; its username is unique."""
    from allauth.account.models import EmailAddress
    from django.contrib.auth import get_user_model

    name = f"ann-{uuid.uuid4().hex[:8]}"
    person = get_user_model().objects.create_user(name, f"{name}@example.com", PASSWORD)
    EmailAddress.objects.create(user=person, email=person.email, primary=True, verified=verified)
    return person


def signed_in(client: Any) -> str | None:
    """The id of the user the client's session is signed in as, or None."""
    from django.contrib.sessions.backends.db import SessionStore

    cookie = client.cookies.get("sessionid")
    if cookie is None or not cookie.value:
        return None
    value = SessionStore(session_key=cookie.value).get("_auth_user_id")
    return None if value is None else str(value)


def test_the_listed_paths_are_the_entry_points_allauth_names() -> None:
    # The paths above, resolved by the real allauth, are exactly ALLAUTH_VIEWS: a name the list
    # gains or loses without a path here (or the other way round) fails this test.
    names = {resolve(path).view_name for path in PAGES + HEADLESS}
    assert names == set(ALLAUTH_VIEWS)
    assert len(ALLAUTH_VIEWS) == len(set(ALLAUTH_VIEWS)) == len(PAGES) + len(HEADLESS)


@pytest.mark.parametrize("path", PAGES)
def test_every_page_refuses_a_post_without_a_token_and_admits_one_with(
        protected: FailOpen, client: Any, fake_verify_api: FakeVerifyAPI, path: str) -> None:
    person = user()
    client.force_login(person)  # the reauthentication pages need a signed-in person
    refused = client.post(path, {"login": person.username, "password": PASSWORD},
                          headers={"accept": JSON})
    assert (refused.status_code, refusal(refused)) == (403, "missing_token")
    token = fake_verify_api.issue_token()
    admitted = client.post(path, {"login": person.username, "password": PASSWORD,
                                  "enforcement-token": token}, headers={"accept": JSON})
    assert refusal(admitted) is None, (path, admitted.status_code, admitted.content[:200])
    assert token in fake_verify_api.tokens_seen


@pytest.mark.parametrize("carrier", ["header", "json_body"])
@pytest.mark.parametrize("path", HEADLESS)
def test_every_headless_endpoint_takes_the_token_in_the_header_or_the_json_body(
        protected: FailOpen, client: Any, fake_verify_api: FakeVerifyAPI, path: str,
        carrier: str) -> None:
    body = {"username": "nobody", "password": PASSWORD, "email": "nobody@example.com"}
    refused = client.post(path, body, content_type=JSON)
    assert (refused.status_code, refusal(refused)) == (403, "missing_token")
    token = fake_verify_api.issue_token()
    if carrier == "header":
        admitted = client.post(path, body, content_type=JSON,
                               headers={"X-Enforcement-Token": token})
    else:
        admitted = client.post(path, {**body, "enforcement-token": token}, content_type=JSON)
    assert refusal(admitted) is None, (path, admitted.status_code, admitted.content[:200])
    assert "status" in admitted.json()  # allauth's own envelope: allauth answered
    assert token in fake_verify_api.tokens_seen


def test_a_person_logs_in_on_allauths_page_with_a_token(
        protected: FailOpen, client: Any, fake_verify_api: FakeVerifyAPI) -> None:
    person = user()
    form = {"login": person.username, "password": PASSWORD}
    assert client.get("/accounts/login/").status_code == 200  # the page itself is not guarded
    refused = client.post("/accounts/login/", form)
    assert refused.status_code == 403 and b"Request refused" in refused.content
    assert signed_in(client) is None
    admitted = client.post("/accounts/login/",
                           {**form, "enforcement-token": fake_verify_api.issue_token()})
    assert (admitted.status_code, admitted["Location"]) == (302, "/accounts/profile/")
    assert signed_in(client) == str(person.pk)


@pytest.mark.parametrize("app", ["browser", "app"])
def test_a_headless_client_logs_in_with_the_token_in_its_header(
        protected: FailOpen, client: Any, fake_verify_api: FakeVerifyAPI, app: str) -> None:
    person = user()
    login = f"/_allauth/{app}/v1/auth/login"
    body = {"username": person.username, "password": PASSWORD}
    assert refusal(client.post(login, body, content_type=JSON)) == "missing_token"
    answer = client.post(login, body, content_type=JSON,
                         headers={"X-Enforcement-Token": fake_verify_api.issue_token()})
    assert answer.status_code == 200, answer.content
    assert answer.json()["meta"]["is_authenticated"] is True
    if app == "app":
        assert answer.json()["meta"]["session_token"]  # what the app sends from now on
    else:
        assert signed_in(client) == str(person.pk)


def test_a_sign_up_without_a_token_creates_nothing_and_sends_nothing(
        protected: FailOpen, client: Any, fake_verify_api: FakeVerifyAPI) -> None:
    from django.contrib.auth import get_user_model

    name = f"bob-{uuid.uuid4().hex[:8]}"
    form = {"username": name, "email": f"{name}@example.com", "password1": PASSWORD,
            "password2": PASSWORD}
    assert client.post("/accounts/signup/", form).status_code == 403
    assert not get_user_model().objects.filter(username=name).exists()
    assert mail.outbox == []
    admitted = client.post("/accounts/signup/",
                           {**form, "enforcement-token": fake_verify_api.issue_token()})
    assert admitted.status_code == 302  # to allauth's "enter the code we sent" page
    assert get_user_model().objects.filter(username=name).exists()
    assert [m.to for m in mail.outbox] == [[f"{name}@example.com"]]


@pytest.mark.parametrize("path", ["/accounts/login/code/", "/accounts/password/reset/",
                                  "/_allauth/browser/v1/auth/code/request",
                                  "/_allauth/app/v1/auth/password/request"])
def test_no_code_or_reset_mail_leaves_without_a_token(
        protected: FailOpen, client: Any, fake_verify_api: FakeVerifyAPI, path: str) -> None:
    person = user()
    data: dict[str, Any] = {"email": person.email}
    kind: dict[str, Any] = {"content_type": JSON} if path.startswith("/_allauth") else {}
    assert client.post(path, data, **kind).status_code == 403
    assert mail.outbox == []
    client.post(path, {**data, "enforcement-token": fake_verify_api.issue_token()}, **kind)
    assert [m.to for m in mail.outbox] == [[person.email]]


POLICIES = {
    "OUTAGE_POLICY_ROUTES": {"account_signup": "fallback", "account_reset_password": "closed"},
    "FALLBACK_SECRET": "s" * 40, "FALLBACK_COST": 2000,
}


@pytest.fixture
def outage(use_failopen: Callable[..., FailOpen | None],
           fake_status_page: FakeStatusPage) -> FailOpen:
    """A confirmed outage, with the manual's policies: sign-up fallback, reset closed."""
    runtime = use_failopen(PROTECTED_PATHS=[], PROTECTED_VIEWS=ALLAUTH_VIEWS, **POLICIES)
    assert runtime is not None
    fake_status_page.set_global("major_outage")
    runtime.poll_now()
    assert not runtime.state.enforce
    return runtime


def test_during_an_outage_each_allauth_route_follows_its_policy(outage: FailOpen,
                                                                client: Any) -> None:
    from django.contrib.auth import get_user_model

    person = user()
    # Log-in: open (the default), admitted without a token, and really signed in.
    login = client.post("/accounts/login/", {"login": person.username, "password": PASSWORD})
    assert login.status_code == 302 and signed_in(client) == str(person.pk)
    client.post("/accounts/logout/")
    # Sign-up: fallback; without a solved challenge refused, with one admitted.
    name = f"cid-{uuid.uuid4().hex[:8]}"
    form = {"username": name, "email": f"{name}@example.com", "password1": PASSWORD,
            "password2": PASSWORD}
    refused = client.post("/accounts/signup/", form, headers={"accept": JSON})
    assert (refused.status_code, refusal(refused)) == (403, "fallback_required")
    solved = solve_challenge(client.get("/failopen/challenge").json())
    assert client.post("/accounts/signup/", {**form, "altcha": solved}).status_code == 302
    assert get_user_model().objects.filter(username=name).exists()
    # Password reset: closed.
    reset = client.post("/accounts/password/reset/", {"email": person.email},
                        headers={"accept": JSON})
    assert (reset.status_code, refusal(reset)) == (503, "outage_closed")
    assert [m.subject for m in mail.outbox if person.email in m.to] == []
    # What the snippet asks before sending allauth's forms: the same policies.
    for path, policy in (("/accounts/login/", "open"), ("/accounts/signup/", "fallback"),
                         ("/accounts/password/reset/", "closed"),
                         ("/_allauth/app/v1/auth/login", "open"),
                         ("/accounts/login/code/confirm/", None)):
        assert client.get("/failopen/flag", {"path": path}).json()["outage_policy"] == policy


@pytest.fixture
def recipe_template(tmp_path: Path) -> Iterator[None]:
    """The manual's template override, in a templates folder searched before allauth's."""
    from django.conf import settings

    layout = tmp_path / "allauth" / "layouts" / "entrance.html"
    layout.parent.mkdir(parents=True)
    layout.write_text(allauth_blocks()["django"])
    engine = {**settings.TEMPLATES[0], "DIRS": [tmp_path, *settings.TEMPLATES[0]["DIRS"]]}
    with override_settings(TEMPLATES=[engine]):
        yield


SCRIPT = '<script src="/static/failopen/failopen.js" defer'


def test_the_recipes_template_puts_the_snippet_on_allauths_protected_pages(
        protected: FailOpen, recipe_template: None, client: Any) -> None:
    for path in ("/accounts/login/", "/accounts/signup/", "/accounts/password/reset/",
                 "/accounts/login/code/"):
        page = client.get(path).content.decode()
        assert page.count(SCRIPT) == 1, path
        assert 'data-failopen-form="form[method=post]"' in page
        head, _, body = page.partition("</head>")
        assert SCRIPT in head and '<form method="post"' in body  # what the selector finds
    # The same layout on a page whose form needs no token: no snippet, so no wait for the vendor.
    for path in ("/accounts/inactive/", "/accounts/password/reset/done/"):
        page = client.get(path)
        assert page.status_code == 200 and SCRIPT not in page.content.decode(), path


def test_the_recipes_template_leaves_allauth_alone_when_nothing_is_protected(
        use_failopen: Callable[..., FailOpen | None], recipe_template: None,
        client: Any) -> None:
    use_failopen(PROTECTED_PATHS=[])
    page = client.get("/accounts/login/")
    assert page.status_code == 200 and SCRIPT not in page.content.decode()
