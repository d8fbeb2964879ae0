"""Views protected by ``protect`` or PROTECTED_VIEWS: every route to them is guarded.

The guard decides from the view Django resolved (``process_view``), so an alias, a language
prefix, a namespace or a script prefix reaches the same decision as the route the site meant.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.conf import settings
from django.core.handlers.asgi import ASGIHandler
from django.core.handlers.wsgi import WSGIHandler
from django.test import override_settings
from test_django_handlers import asgi_call, wsgi_call

from failopen.testing import FakeStatusPage, FakeVerifyAPI

GOOD = FakeVerifyAPI.GOOD
JSON = {"accept": "application/json"}
URLS = "django_test_urls_views"
BY_NAME = ["accounts:login", f"{URLS}.dotted"]
PROTECTED = ["/signin/", "/alias/", "/asignin/", "/cbv/", "/cbv/again/", "/cbv-dispatch/",
             "/cbv-sub/", "/cbv-async/", "/accounts/login/", "/other-login/", "/dotted/"]
I18N = {
    "USE_I18N": True, "LANGUAGE_CODE": "en",
    "LANGUAGES": [("en", "English"), ("fr", "French")],
    "MIDDLEWARE": ["django.middleware.locale.LocaleMiddleware", *settings.MIDDLEWARE],
}


@pytest.fixture
def client(make_client: Callable[..., Any], client_kind: str) -> Any:
    return make_client()


@pytest.fixture
def views(use_failopen: Any) -> Iterator[Any]:
    """No protected path at all: only the decorator and the names protect."""
    from django.urls import get_script_prefix, set_script_prefix

    prefix = get_script_prefix()  # the handlers below set it for the thread: put it back
    # FAILOPEN first: override_settings must be left in the reverse order of entering.
    runtime = use_failopen(PROTECTED_PATHS=[], PROTECTED_VIEWS=BY_NAME)
    try:
        with override_settings(ROOT_URLCONF=URLS):
            yield runtime
    finally:
        set_script_prefix(prefix)


@pytest.mark.parametrize("url", PROTECTED)
def test_every_route_to_a_protected_view_needs_a_token(client: Any, views: Any, url: str) -> None:
    refused = client.post(url, headers=JSON)
    assert refused.status_code == 403, url
    assert refused.json()["error"]["code"] == "missing_token"
    admitted = client.post(url, {"username": "ann"}, headers={"X-Enforcement-Token": GOOD})
    assert admitted.status_code == 200, url
    assert admitted.json()["failopen"]["outcome"] == "valid"
    assert admitted.json()["form"] == "ann"


@pytest.mark.parametrize("url", ["/plain/", "/open/"])
def test_other_views_pass_untouched(
    client: Any, views: Any, url: str, fake_verify_api: FakeVerifyAPI
) -> None:
    assert client.post(url).json()["failopen"] is None
    assert fake_verify_api.requests == 0


def test_protected_methods_still_apply(client: Any, use_failopen: Any) -> None:
    use_failopen(PROTECTED_PATHS=[])
    with override_settings(ROOT_URLCONF=URLS):
        assert client.get("/signin/").json()["failopen"] is None  # GET is not protected
    use_failopen(PROTECTED_PATHS=[], PROTECTED_METHODS=["GET"])
    with override_settings(ROOT_URLCONF=URLS):
        assert client.get("/signin/").status_code == 403
        assert client.head("/signin/").status_code == 403  # HEAD runs the GET view
        assert client.post("/signin/").json()["failopen"] is None


@pytest.mark.parametrize("url", ["/login/", "/fr/login/"])
def test_language_prefixed_route_to_a_protected_view(client: Any, views: Any, url: str) -> None:
    with override_settings(**I18N):
        assert client.post(url, headers=JSON).status_code == 403, url
        assert client.post(url, headers={"X-Enforcement-Token": GOOD}).status_code == 200, url


def test_named_view_listed_in_the_environment(
    client: Any, use_failopen: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAILOPEN_PROTECTED_VIEWS", "accounts:login")
    use_failopen(PROTECTED_PATHS=[])
    with override_settings(ROOT_URLCONF=URLS):
        assert client.post("/other-login/").status_code == 403
        assert client.post("/dotted/").status_code == 200


def test_flag_off_admits_the_protected_view(
    client: Any, views: Any, fake_status_page: FakeStatusPage
) -> None:
    fake_status_page.set_global("major_outage")
    views.poll_now()
    response = client.post("/alias/")
    assert response.status_code == 200
    assert response.json()["failopen"]["outcome"] == "bypassed_flag_off"


def test_broken_settings_refuse_the_protected_view(client: Any, use_failopen: Any) -> None:
    use_failopen(PROTECTED_PATHS=[], PROTECTED_VIEWS=BY_NAME, POLL_INTERVAL="soon")
    with override_settings(ROOT_URLCONF=URLS):
        assert client.post("/alias/").status_code == 503
        assert client.post("/other-login/").status_code == 503
        assert client.get("/open/").status_code == 200


def test_path_and_view_protection_decide_once(
    client: Any, use_failopen: Any, fake_verify_api: FakeVerifyAPI
) -> None:
    use_failopen(PROTECTED_PATHS=["/signin/"])
    with override_settings(ROOT_URLCONF=URLS):
        assert client.post("/signin/", headers={"X-Enforcement-Token": GOOD}).status_code == 200
    assert fake_verify_api.requests == 1


def test_protect_refuses_what_is_not_a_view() -> None:
    from failopen.integrations.django import protect

    with pytest.raises(TypeError, match="protect"):
        protect("accounts:login")  # type: ignore[arg-type]


# --- under Django's own handlers, with a script prefix ------------------------------------------


CHAIN = ["django.middleware.common.CommonMiddleware",
         "failopen.integrations.django.middleware.FailOpenMiddleware"]
# True: a freshly solved token (a token is admitted once; a second use is a replay).
HANDLER_REQUESTS = [
    ("/app/alias/", False, 403), ("/app/alias/", True, 200),
    ("/app/asignin/", False, 403), ("/app/asignin/", True, 200),
    ("/app/cbv-async/", False, 403), ("/app/cbv-async/", True, 200),
    ("/app/other-login/", False, 403), ("/app/open/", False, 200),
]


def token_for(fresh: bool, fake: FakeVerifyAPI) -> str | None:
    return fake.issue_token() if fresh else None


def test_wsgi_handler_under_a_script_prefix(views: Any, fake_verify_api: FakeVerifyAPI) -> None:
    with override_settings(MIDDLEWARE=CHAIN, FORCE_SCRIPT_NAME="/app"):
        handler = WSGIHandler()
        got = [wsgi_call(handler, "POST", url.removeprefix("/app"),
                         token_for(fresh, fake_verify_api))
               for url, fresh, _ in HANDLER_REQUESTS]
    assert got == [status for *_, status in HANDLER_REQUESTS]


@pytest.mark.parametrize("force", ["/app", None])
def test_asgi_handler_under_a_script_prefix(
    views: Any, force: str | None, fake_verify_api: FakeVerifyAPI
) -> None:
    """``root_path`` or FORCE_SCRIPT_NAME: Django strips it, the resolved view is the same."""
    from failopen.integrations.django import conf

    async def scenario() -> list[int]:
        handler = ASGIHandler()
        # Our process_view is a coroutine function under ASGI: Django awaits it on the event
        # loop and never moves it to a thread (where the verify call would block a worker).
        ours = [m for m in handler._view_middleware
                if getattr(m, "__self__", None).__class__.__name__ == "FailOpenMiddleware"]
        assert len(ours) == 1 and asyncio.iscoroutinefunction(ours[0])
        try:
            return [await asgi_call(handler, "POST", url, token_for(fresh, fake_verify_api),
                                    root_path="/app")
                    for url, fresh, _ in HANDLER_REQUESTS]
        finally:
            await conf.runtime().aclose()

    with override_settings(MIDDLEWARE=CHAIN, FORCE_SCRIPT_NAME=force):
        got = asyncio.run(scenario())
    assert got == [status for *_, status in HANDLER_REQUESTS]


def test_wsgi_process_view_is_plain(views: Any) -> None:
    with override_settings(MIDDLEWARE=CHAIN):
        handler = WSGIHandler()
    ours = [m for m in handler._view_middleware
            if getattr(m, "__self__", None).__class__.__name__ == "FailOpenMiddleware"]
    assert len(ours) == 1 and not asyncio.iscoroutinefunction(ours[0])


# --- checks -----------------------------------------------------------------------------------


def test_unknown_view_name_warns(fo_settings: dict[str, Any]) -> None:
    from failopen.integrations.django.checks import check_settings

    listed = {**fo_settings, "PROTECTED_PATHS": [], "PROTECTED_VIEWS": [*BY_NAME, "acounts:login"]}
    with override_settings(ROOT_URLCONF=URLS, FAILOPEN=listed):
        found = [m for m in check_settings() if m.id == "failopen.W009"]
    assert len(found) == 1 and "acounts:login" in found[0].msg


def test_decorated_views_count_as_protection(fo_settings: dict[str, Any]) -> None:
    from failopen.integrations.django.checks import check_settings

    with override_settings(ROOT_URLCONF=URLS, FAILOPEN={**fo_settings, "PROTECTED_PATHS": []}):
        assert [m.id for m in check_settings()] == []
    bare = {**fo_settings, "PROTECTED_PATHS": []}
    with override_settings(ROOT_URLCONF="django_test_urls", FAILOPEN=bare):
        assert [m.id for m in check_settings()] == ["failopen.W005"]


def test_protected_views_need_the_verify_settings(fo_settings: dict[str, Any]) -> None:
    from failopen.integrations.django.checks import check_settings

    listed = {**fo_settings, "PROTECTED_PATHS": [], "PROTECTED_VIEWS": BY_NAME,
              "VERIFY_URL": None, "PRIVATE_KEY": None}
    with override_settings(ROOT_URLCONF=URLS, FAILOPEN=listed):
        assert "failopen.E004" in {m.id for m in check_settings()}


def test_alias_warning_points_to_protect(fo_settings: dict[str, Any]) -> None:
    from failopen.integrations.django.checks import check_settings

    with override_settings(ROOT_URLCONF="django_test_urls_aliases", FAILOPEN=fo_settings):
        found = [m for m in check_settings() if m.id == "failopen.W008"]
    assert found and all("protect" in m.hint and "PROTECTED_VIEWS" in m.hint for m in found)



def test_aliases_of_a_protected_view_do_not_warn(fo_settings: dict[str, Any]) -> None:
    from failopen.integrations.django.checks import check_settings

    with override_settings(ROOT_URLCONF=URLS,
                           FAILOPEN={**fo_settings, "PROTECTED_PATHS": ["/signin/", "/dotted/"],
                                     "PROTECTED_VIEWS": [f"{URLS}.dotted"]}):
        assert [m.id for m in check_settings()] == []  # /alias/ reaches a protected view
    with override_settings(ROOT_URLCONF=URLS,
                           FAILOPEN={**fo_settings, "PROTECTED_PATHS": ["/other-login/"]}):
        found = [m.msg for m in check_settings() if m.id == "failopen.W008"]
    assert any("'/accounts/login/'" in msg for msg in found)  # named, but not listed here
