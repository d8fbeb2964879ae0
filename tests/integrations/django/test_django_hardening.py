"""Ways around the guard or out of failopen's error handling, found in review; each stays shut.

This module is also the URLconf of its i18n tests: the log-in view under ``i18n_patterns``.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterator
from typing import Any

import django_test_urls
import pytest
from django.conf import settings
from django.conf.urls.i18n import i18n_patterns
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.test import override_settings
from django.urls import include, path, re_path

from failopen.testing import FakeVerifyAPI

GOOD = FakeVerifyAPI.GOOD
JSON = {"accept": "application/json"}
ADMIN_TOKEN = "an-admin-token-long-enough-to-count"
# Not imported from conftest: in a run of the whole suite that name is another folder's module.
MIDDLEWARE: list[str] = list(settings.MIDDLEWARE)

urlpatterns = [
    path("failopen/", include("failopen.integrations.django.urls")),
    path("users/<int:pk>/delete/", django_test_urls.open_view),
    re_path(r"^api/v(?P<version>[0-9]+)/token/$", django_test_urls.open_view),
    *i18n_patterns(path("login/", django_test_urls.login), prefix_default_language=False),
]

I18N = {
    "ROOT_URLCONF": __name__,
    "USE_I18N": True,
    "LANGUAGE_CODE": "en",
    "LANGUAGES": [("en", "English"), ("fr", "French"), ("pt-br", "Portuguese")],
    "MIDDLEWARE": ["django.middleware.locale.LocaleMiddleware", *MIDDLEWARE],
}


@pytest.fixture
def client(make_client: Callable[..., Any], client_kind: str) -> Any:
    return make_client()


def template_reject(request: HttpRequest, decision: object) -> HttpResponse:
    """A REJECT_VIEW written the usual Django way: a lazy TemplateResponse."""
    return TemplateResponse(request, "page.html", status=403)


# --- i18n: the same view under a language prefix -----------------------------------------------


@pytest.mark.parametrize("urlconf", [__name__, "django_test_urls_i18n"])
@pytest.mark.parametrize("url", ["/login/", "/en/login/", "/fr/login/", "/pt-br/login/"])
def test_language_prefixes_do_not_route_around_the_guard(
    client: Any, use_failopen: Any, url: str, urlconf: str
) -> None:
    use_failopen()  # PROTECTED_PATHS: ["/login/"]
    with override_settings(**{**I18N, "ROOT_URLCONF": urlconf}):
        refused = client.post(url, headers=JSON)
        assert refused.status_code == 403, url
        admitted = client.post(url, headers={"X-Enforcement-Token": GOOD})
        assert admitted.status_code in (200, 302, 404), url  # past the guard, to Django's routing


def test_a_first_segment_that_is_no_language_adds_nothing(
    client: Any, use_failopen: Any
) -> None:
    use_failopen()
    with override_settings(**I18N):
        assert client.post("/xx/login/").status_code == 404  # not a language: not the view


@pytest.mark.parametrize("urlconf", [__name__, "django_test_urls_i18n"])
def test_protected_path_under_i18n_patterns_is_routed(
    fo_settings: dict[str, Any], urlconf: str
) -> None:
    from failopen.integrations.django.checks import check_settings

    with override_settings(**{**I18N, "ROOT_URLCONF": urlconf, "FAILOPEN": fo_settings}):
        assert "failopen.W001" not in {m.id for m in check_settings()}


# --- W001 and include() prefixes, converters, regexes -----------------------------------------


@pytest.mark.parametrize("prefix", ["/failopen/", "/failopen", "/fail", "/login", "/login/"])
def test_prefix_of_included_urls_is_routed(fo_settings: dict[str, Any], prefix: str) -> None:
    from failopen.integrations.django.checks import check_settings

    with override_settings(FAILOPEN={**fo_settings, "PROTECTED_PATHS": [prefix]}):
        assert "failopen.W001" not in {m.id for m in check_settings()}


@pytest.mark.parametrize("prefix", ["/users/", "/users/7/delete/", "/api/v", "/api/v2/token/"])
def test_prefix_of_converter_and_regex_routes_is_routed(
    fo_settings: dict[str, Any], prefix: str
) -> None:
    from failopen.integrations.django.checks import check_settings

    with override_settings(ROOT_URLCONF=__name__,
                           FAILOPEN={**fo_settings, "PROTECTED_PATHS": [prefix]}):
        assert "failopen.W001" not in {m.id for m in check_settings()}


@pytest.mark.parametrize("prefix", ["/signup/", "/login/x", "/failopen/flags"])
def test_unrouted_prefix_still_warns(fo_settings: dict[str, Any], prefix: str) -> None:
    from failopen.integrations.django.checks import check_settings

    with override_settings(FAILOPEN={**fo_settings, "PROTECTED_PATHS": [prefix]}):
        assert "failopen.W001" in {m.id for m in check_settings()}


# --- REJECT_VIEW ------------------------------------------------------------------------------


def test_reject_view_returning_a_template_response(client: Any, use_failopen: Any) -> None:
    use_failopen(REJECT_VIEW=f"{__name__}.template_reject")
    response = client.post("/login/")
    assert response.status_code == 403
    assert response["Cache-Control"] == "no-store"


# --- the override endpoint never raises into Django -------------------------------------------


@pytest.fixture
def staff(django_db: None) -> Any:
    from django.contrib.auth.models import User

    user, _ = User.objects.get_or_create(username="ops", defaults={"is_staff": True})
    return user


def test_oversized_form_to_the_override_endpoint_is_refused_not_raised(
    make_client: Callable[..., Any], client_kind: str, use_failopen: Any, staff: Any
) -> None:
    runtime = use_failopen(OVERRIDE_ENDPOINT=True)
    client = make_client(enforce_csrf_checks=True)
    client.force_login(staff)
    client.cookies["csrftoken"] = "a" * 32
    with override_settings(DATA_UPLOAD_MAX_MEMORY_SIZE=100):
        response = client.post("/failopen/override", "x=" + "a" * 1000,
                               content_type="application/x-www-form-urlencoded")
    assert response.status_code == 403
    assert runtime.state.enforce


def test_failing_user_lookup_is_refused_not_raised(
    client: Any, use_failopen: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    runtime = use_failopen(OVERRIDE_ENDPOINT=True, ADMIN_TOKEN=ADMIN_TOKEN)

    class BrokenUser:
        @property
        def is_authenticated(self) -> bool:
            raise RuntimeError("the session database is down")

    from django.contrib.auth import middleware

    monkeypatch.setattr(middleware, "get_user", lambda request: BrokenUser())
    monkeypatch.setattr(middleware, "auser", _abroken(BrokenUser()), raising=False)
    response = client.post("/failopen/override", json.dumps({"enforce": False}),
                           content_type="application/json")
    assert response.status_code == 403
    assert runtime.state.enforce


def _abroken(user: object) -> Callable[[Any], Any]:
    async def auser(request: Any) -> object:
        return user

    return auser


# --- the template tag never raises into a page ------------------------------------------------


def test_script_tag_without_the_failopen_urls_renders_the_page(
    use_failopen: Any, caplog: pytest.LogCaptureFixture
) -> None:
    from django.template import Context, Template

    use_failopen()
    with override_settings(ROOT_URLCONF="failopen.integrations.django.checks"):
        rendered = Template("{% load failopen %}[{% failopen_script %}]").render(Context({}))
    assert rendered == "[]"
    assert "failopen" in caplog.text


# --- async: the body is not parsed on the event loop ------------------------------------------


@pytest.fixture
def loop_thread_calls(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[bool]]:
    """Records, per body read for a token, whether it ran on a thread with a running loop."""
    from failopen.integrations.django import middleware

    calls: list[bool] = []
    real = middleware._token_from_body

    def spy(*args: Any) -> Any:
        try:
            asyncio.get_running_loop()
            calls.append(True)
        except RuntimeError:
            calls.append(False)
        return real(*args)

    monkeypatch.setattr(middleware, "_token_from_body", spy)
    yield calls


def test_async_stack_reads_the_body_off_the_event_loop(
    use_failopen: Any, loop_thread_calls: list[bool]
) -> None:
    from django.test import AsyncClient

    use_failopen()
    loop = asyncio.new_event_loop()
    try:
        response = loop.run_until_complete(
            AsyncClient().post("/login/", {"enforcement-token": GOOD}))
        assert response.status_code == 200
        loop.run_until_complete(_aclose())
    finally:
        loop.close()
    assert loop_thread_calls == [False]


async def _aclose() -> None:
    from failopen.integrations.django import conf

    await conf.runtime().aclose()


# --- start-up checks for the failopen URLs ----------------------------------------------------


def test_flag_endpoint_not_routed_warns(fo_settings: dict[str, Any]) -> None:
    from failopen.integrations.django.checks import check_settings

    with override_settings(ROOT_URLCONF="django_test_urls_bare", FAILOPEN={
            **fo_settings, "PROTECTED_PATHS": ["/login/"]}):
        found = {m.id: m for m in check_settings()}
    assert "failopen.W006" in found
    assert "include(" in found["failopen.W006"].hint


@pytest.mark.parametrize("prefix", ["/", "/failopen/", "/failopen/override"])
def test_protected_override_endpoint_warns(fo_settings: dict[str, Any], prefix: str) -> None:
    from failopen.integrations.django.checks import check_settings

    with override_settings(FAILOPEN={**fo_settings, "PROTECTED_PATHS": [prefix],
                                     "OVERRIDE_ENDPOINT": True,
                                     "STORE": "file:///tmp/failopen-check.json"}):
        assert "failopen.W007" in {m.id for m in check_settings()}


def test_protected_paths_clear_of_the_failopen_urls_do_not_warn(
    fo_settings: dict[str, Any]
) -> None:
    from failopen.integrations.django.checks import check_settings

    with override_settings(FAILOPEN={**fo_settings, "OVERRIDE_ENDPOINT": True,
                                     "STORE": "file:///tmp/failopen-check.json"}):
        assert [m.id for m in check_settings()] == []


def test_script_tag_takes_the_nonce_from_the_template_context(use_failopen: Any) -> None:
    """Django 6's own CSP puts ``csp_nonce`` in the context, not on the request."""
    from django.template import Context, Template

    use_failopen()
    html = Template("{% load failopen %}{% failopen_script %}").render(
        Context({"csp_nonce": 'n"1'}))
    assert 'nonce="n&quot;1"' in html


# --- settings changes stop the runtime they replace -------------------------------------------


def test_settings_changes_leave_one_watcher_running(
    make_client: Callable[..., Any], use_failopen: Any
) -> None:
    import threading
    import time

    def watchers() -> list[threading.Thread]:
        return [t for t in threading.enumerate() if t.name == "failopen.status-watcher"]

    before = len(watchers())
    client = make_client()
    for retry_after in range(1, 6):
        use_failopen(RETRY_AFTER=retry_after)
        assert client.get("/failopen/flag").status_code == 200
    deadline = time.monotonic() + 5
    while len(watchers()) > before + 1:
        assert time.monotonic() < deadline, [t.name for t in watchers()]
        time.sleep(0.01)


@pytest.fixture
def inactive_staff(django_db: None) -> Any:
    from django.contrib.auth.models import User

    user, _ = User.objects.get_or_create(username="gone",
                                         defaults={"is_staff": True, "is_active": False})
    return user


def test_inactive_staff_may_not_override(
    make_client: Callable[..., Any], client_kind: str, use_failopen: Any, inactive_staff: Any
) -> None:
    runtime = use_failopen(OVERRIDE_ENDPOINT=True)
    client = make_client()  # CSRF checks off: only the user checks stand in the way
    client.force_login(inactive_staff)
    response = client.post("/failopen/override", json.dumps({"enforce": False}),
                           content_type="application/json")
    assert response.status_code == 403
    assert runtime.state.enforce


# --- mounted under a script prefix: the guard judges path_info, as the resolver routes it ----


@pytest.mark.parametrize("force", [None, "/app"])
def test_script_prefix_does_not_hide_the_protected_path(
    use_failopen: Any, force: str | None
) -> None:
    from django.test import Client

    use_failopen()
    with override_settings(FORCE_SCRIPT_NAME=force):
        client = Client(SCRIPT_NAME="/app")
        assert client.post("/login/", headers=JSON).status_code == 403
        assert client.post("/login/", headers={"X-Enforcement-Token": GOOD}).status_code == 200


def test_override_endpoint_without_authentication_middleware_warns(
    fo_settings: dict[str, Any]
) -> None:
    """Without AuthenticationMiddleware there is no request.user: no staff, only the token."""
    from failopen.integrations.django.checks import check_settings

    without = [m for m in MIDDLEWARE if not m.endswith("AuthenticationMiddleware")]
    changes = {"OVERRIDE_ENDPOINT": True, "STORE": "file:///tmp/failopen-check.json"}
    with override_settings(MIDDLEWARE=without, FAILOPEN={**fo_settings, **changes}):
        assert [m.id for m in check_settings()] == ["failopen.W004"]
    with override_settings(MIDDLEWARE=without, FAILOPEN={**fo_settings, **changes,
                                                          "ADMIN_TOKEN": ADMIN_TOKEN}):
        assert [m.id for m in check_settings()] == []


def test_unusable_languages_setting_guards_the_prefixed_path(
    client: Any, use_failopen: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from failopen.integrations.django import middleware

    def broken(path: str) -> str | None:
        raise ValueError("LANGUAGES is broken")

    use_failopen()
    monkeypatch.setattr(middleware, "get_language_from_path", broken)
    with override_settings(**I18N):
        assert client.post("/fr/login/", headers=JSON).status_code == 403
        assert client.post("/fr/open/").status_code == 404  # /open/ is not protected


# --- the protected view reachable at a route no protected path covers -----------------------


def test_protected_view_under_another_route_warns(fo_settings: dict[str, Any]) -> None:
    from failopen.integrations.django.checks import check_settings

    settings = {**fo_settings, "PROTECTED_PATHS": ["/login/", "/users/"]}
    with override_settings(ROOT_URLCONF="django_test_urls_aliases", FAILOPEN=settings):
        found = [m for m in check_settings() if m.id == "failopen.W008"]
    routes = sorted(m.msg.split("'")[3] for m in found)
    # The (?i) regex's text after its flags: /auth/login/ (every case of it) is the alias.
    assert routes == ["/auth/login/", "/signin/"]


def test_language_prefixed_routes_of_the_protected_view_do_not_warn(
    fo_settings: dict[str, Any]
) -> None:
    from failopen.integrations.django.checks import check_settings

    for urlconf in (__name__, "django_test_urls_i18n"):
        with override_settings(**{**I18N, "ROOT_URLCONF": urlconf, "FAILOPEN": fo_settings}):
            assert "failopen.W008" not in {m.id for m in check_settings()}, urlconf


def test_a_catch_all_view_is_not_an_alias_to_protect(fo_settings: dict[str, Any]) -> None:
    # Wagtail serves /join/ (a form page) through serve, which serves every page: W008 called
    # "/" an alias and said to protect the view, which would protect the whole site. W012 says
    # what it is, and that the path stays protected. A real alias beside it still warns.
    from failopen.integrations.django.checks import check_settings

    settings = {**fo_settings, "PROTECTED_PATHS": ["/login/", "/join/", "/docs/signup/",
                                                   "/blog/signup/"]}
    with override_settings(ROOT_URLCONF="django_test_urls_cms", FAILOPEN=settings):
        found = check_settings()
    w008 = [m.msg for m in found if m.id == "failopen.W008"]
    assert w008 == ["the view of protected path '/login/' is also routed at '/signin/', which no "
                    "protected path covers: requests there reach it unchecked."]
    w012 = sorted(m.msg for m in found if m.id == "failopen.W012")
    assert w012 == [
        f"protected path {path!r} is served by a catch-all view (django_test_urls_cms.{view}), "
        "which answers every path under it: the URLconf cannot show whether another URL "
        "reaches the same page." for path, view in (("/blog/signup/", "document"),
                                                    ("/docs/signup/", "document"),
                                                    ("/join/", "serve"))]
    hint = next(m.hint for m in found if m.id == "failopen.W012")
    assert "Keep the path in FAILOPEN['PROTECTED_PATHS']" in hint
    assert "SILENCED_SYSTEM_CHECKS = ['failopen.W012']" in hint


def test_a_view_listed_by_name_is_no_catch_all_worry(fo_settings: dict[str, Any]) -> None:
    # A site that did protect the CMS's view (every page POST needs a token) hears nothing.
    from failopen.integrations.django.checks import check_settings

    settings = {**fo_settings, "PROTECTED_PATHS": ["/join/"],
                "PROTECTED_VIEWS": ["django_test_urls_cms.serve"]}
    with override_settings(ROOT_URLCONF="django_test_urls_cms", FAILOPEN=settings):
        ids = {m.id for m in check_settings()}
    assert not ids & {"failopen.W008", "failopen.W012"}


def test_a_catch_all_under_language_prefixes_is_one_too(fo_settings: dict[str, Any]) -> None:
    from failopen.integrations.django.checks import check_settings

    settings = {**fo_settings, "PROTECTED_PATHS": ["/join/"]}
    with override_settings(**{**I18N, "ROOT_URLCONF": "django_test_urls_cms_i18n",
                              "FAILOPEN": settings}):
        found = {m.id: m.msg for m in check_settings()}
    assert "failopen.W008" not in found
    assert "(django_test_urls_cms.serve)" in found["failopen.W012"]
