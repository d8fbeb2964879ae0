"""No silent misconfiguration in Django, and no secret on its debug page (issue 18, items 7, 8,
10 and 12).

* Every ``FAILOPEN_*`` variable failopen does not read is a WARNING at start-up, even with the
  settings in ``FAILOPEN = {...}`` (a key missing there falls back to its variable).
* Each process's runtime logs one INFO line (what it protects, evidence, store, mode) when its
  first request builds it, and a WARNING when it protects nothing.
* ``"ADMIN_TOKEN": os.environ.get("X", "")`` is unset, not "too short".
* The DEBUG page and the error e-mail (AdminEmailHandler) show neither the private key, the
  admin token nor the store password, with FAILOPEN["STORE_PASSWORD"]; a password inside
  FAILOPEN["STORE"], which Django shows as written, is warned about (failopen.W010).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from django.apps import apps
from django.core import checks, mail
from django.http import HttpRequest, HttpResponse
from django.test import Client, override_settings
from django.urls import include, path
from django.utils.log import AdminEmailHandler

from failopen.runtime import FailOpen

PASSWORD = "Redis-Pa55-on-debug-page"
TOKEN = "adm-Debug-Page-Token-0123456789"


def boom(request: HttpRequest) -> HttpResponse:
    """A view with a bug, holding what a site's code may hold: the Config and its fields."""
    from failopen.integrations.django import conf

    config = conf.config()
    fields = {spec.name: getattr(config, spec.name) for spec in dataclasses.fields(config)}
    as_dict = dataclasses.asdict(config)
    raise RuntimeError(f"the site's own bug ({len(fields)} fields, {len(as_dict)} keys)")


def ok(request: HttpRequest) -> HttpResponse:
    return HttpResponse("ok")


urlpatterns = [
    path("boom/", boom),
    path("login/", ok),
    path("failopen/", include("failopen.integrations.django.urls")),
]


def ready() -> None:
    apps.get_app_config("failopen").ready()


def _messages(caplog: pytest.LogCaptureFixture, level: int) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.levelno == level and r.name.startswith("failopen")]


# --- item 7: unknown variables ---------------------------------------------------------------


def test_every_unknown_variable_is_named_once_even_with_a_failopen_dict(
    fo_settings: dict[str, Any], caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    caplog.set_level(logging.WARNING, logger="failopen")
    monkeypatch.setenv("FAILOPEN_PROTECTED_PATH", "/signup/")  # close to a name
    monkeypatch.setenv("FAILOPEN_SIGNUP", "on")                 # close to nothing
    monkeypatch.setenv("FAILOPEN_RAI_CLIENTID", "x")            # a typo of a rai variable
    monkeypatch.setenv("FAILOPEN_RAI_CLIENT_ID", "x")           # read by failopen rai: known
    with override_settings(FAILOPEN=fo_settings):
        ready()
        ready()  # once per process, however often the app is readied
    warnings = [m for m in _messages(caplog, logging.WARNING) if "environment variable" in m]
    assert warnings == [
        "failopen: the environment variable FAILOPEN_PROTECTED_PATH is ignored; did you mean "
        "FAILOPEN_PROTECTED_PATHS?",
        "failopen: the environment variable FAILOPEN_RAI_CLIENTID is ignored; did you mean "
        "FAILOPEN_RAI_CLIENT_ID?",
        "failopen: the environment variable FAILOPEN_SIGNUP is ignored; failopen reads no "
        "variable of that name or close to it (see the configuration reference, "
        "docs/configuration.md)",
    ]


def test_a_variable_the_failopen_dict_overrides_with_another_value_is_named(
    fo_settings: dict[str, Any], caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """FAILOPEN['STATUS_URL'] wins over FAILOPEN_STATUS_URL: an operator changing the variable
    would wait for a change that never comes. The same value in both (a settings file that
    reads the variable) is no news."""
    caplog.set_level(logging.WARNING, logger="failopen")
    monkeypatch.setenv("FAILOPEN_STATUS_URL", fo_settings["STATUS_URL"])
    monkeypatch.setenv("FAILOPEN_PROTECTED_PATHS", "/login/")  # ["/login/"] in the dict
    monkeypatch.setenv("FAILOPEN_POLL_INTERVAL", "0.05")         # 0.05 in the dict
    monkeypatch.setenv("FAILOPEN_PRIVATE_KEY", "another-private-key")
    with override_settings(FAILOPEN=fo_settings):
        ready()
    shadowed = [m for m in _messages(caplog, logging.WARNING) if "wins over it" in m]
    assert shadowed == [
        "failopen: the environment variable FAILOPEN_PRIVATE_KEY is ignored: "
        "FAILOPEN['PRIVATE_KEY'] in the settings wins over it; remove one of the two"]
    assert "another-private-key" not in caplog.text
    assert fo_settings["PRIVATE_KEY"] not in caplog.text


# --- item 8: the start-up line ---------------------------------------------------------------


def test_the_first_request_logs_what_this_process_protects(
    use_failopen: Callable[..., FailOpen | None], caplog: pytest.LogCaptureFixture,
    fo_settings: dict[str, Any],
) -> None:
    caplog.set_level(logging.INFO, logger="failopen")
    runtime = use_failopen(PROTECTED_VIEWS=["login"], ADMIN_TOKEN=TOKEN)
    assert runtime is not None
    [line] = [m for m in _messages(caplog, logging.INFO) if m.startswith("failopen (Django)")]
    assert line == (
        "failopen (Django) protects POST on /login/; views login; evidence: status page "
        f"{fo_settings['STATUS_URL']} (global component: guessed from the page's shape); store: "
        "memory: (this process only); mode: enforce")
    assert "protects nothing" not in caplog.text
    assert fo_settings["PRIVATE_KEY"] not in caplog.text and TOKEN not in caplog.text


@contextmanager
def _site(urlconf: str, failopen: dict[str, Any]) -> Iterator[FailOpen]:
    """Both settings in one override (two nested ones, left out of order, would leak one)."""
    from failopen.integrations.django import conf

    with override_settings(ROOT_URLCONF=urlconf, FAILOPEN=failopen):
        try:
            yield conf.runtime()
        finally:
            conf.reset()


def test_views_marked_protect_count_as_protected(
    fo_settings: dict[str, Any], caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="failopen")
    with _site("django_test_urls_views", {**fo_settings, "PROTECTED_PATHS": []}):
        pass
    [line] = [m for m in _messages(caplog, logging.INFO) if m.startswith("failopen (Django)")]
    assert "view(s) marked @protect" in line
    assert "protects nothing" not in caplog.text


def test_a_runtime_that_protects_nothing_says_so_once(
    fo_settings: dict[str, Any], caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="failopen")
    with _site(__name__, {**fo_settings, "PROTECTED_PATHS": []}):
        client = Client()
        for _ in range(3):
            assert client.post("/login/").status_code == 200
    nothing = [m for m in _messages(caplog, logging.WARNING) if "protects nothing" in m]
    assert len(nothing) == 1 and "FAILOPEN['PROTECTED_VIEWS']" in nothing[0]


# --- item 10: an empty secret is unset --------------------------------------------------------


def test_an_empty_secret_setting_is_unset_not_too_short(
    use_failopen: Callable[..., FailOpen | None], fo_settings: dict[str, Any],
) -> None:
    # "ADMIN_TOKEN": os.environ.get("FAILOPEN_ADMIN", ""), with the variable not set.
    with override_settings(FAILOPEN={**fo_settings, "ADMIN_TOKEN": "", "STORE_PASSWORD": ""}):
        ready()  # no ImproperlyConfigured
        assert [m for m in checks.run_checks() if m.id == "failopen.E001"] == []
    runtime = use_failopen(ADMIN_TOKEN="")
    assert runtime is not None and runtime.config.admin_token is None


# --- item 12: the debug page and the error e-mail ---------------------------------------------


@pytest.fixture
def debug_site(fo_settings: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """DEBUG on, this module's URLconf, a Redis store whose password is FAILOPEN_STORE_PASSWORD
    (nothing listens there: the store is never reached), and an admin token."""
    from failopen.testing import free_port

    settings = {**fo_settings, "STORE": f"redis://127.0.0.1:{free_port()}/0",
                "STORE_PASSWORD": PASSWORD, "ADMIN_TOKEN": TOKEN}
    with override_settings(DEBUG=True, ROOT_URLCONF=__name__, FAILOPEN=settings):
        yield settings
    from failopen.integrations.django import conf

    conf.reset()


def _secrets(settings: dict[str, Any]) -> tuple[str, ...]:
    return (PASSWORD, TOKEN, settings["PRIVATE_KEY"])


def test_the_debug_page_shows_no_secret(debug_site: dict[str, Any]) -> None:
    response = Client(raise_request_exception=False).get("/boom/",
                                                         HTTP_ACCEPT="text/html")
    assert response.status_code == 500
    page = response.content.decode()
    assert "the site&#x27;s own bug" in page and "STORE_PASSWORD" in page  # the real page
    for secret in _secrets(debug_site):
        assert secret not in page
    # The plain-text report (curl, API clients) as well.
    text = Client(raise_request_exception=False).get("/boom/", HTTP_ACCEPT="text/plain")
    assert "the site's own bug" in text.content.decode()
    for secret in _secrets(debug_site):
        assert secret not in text.content.decode()


def test_the_error_email_shows_no_secret(debug_site: dict[str, Any]) -> None:
    handler = AdminEmailHandler(include_html=True)
    request_logger = logging.getLogger("django.request")
    request_logger.addHandler(handler)
    try:
        with override_settings(
                DEBUG=False, ADMINS=[("ops", "ops@example.com")],
                EMAIL_BACKEND="django.core.mail.backends.locmem.EmailBackend"):
            mail.outbox = []
            response = Client(raise_request_exception=False).get("/boom/")
            assert response.status_code == 500
            sent = list(mail.outbox)
    finally:
        request_logger.removeHandler(handler)
    # Django's own mail_admins handler (plain text) and ours (with the HTML report).
    assert any(message.alternatives for message in sent)
    for message in sent:
        assert "the site's own bug" in message.body
        parts = [message.subject, message.body, *(str(a[0]) for a in message.alternatives)]
        for secret in _secrets(debug_site):
            assert not any(secret in part for part in parts)


def test_a_password_inside_store_is_warned_about(
    fo_settings: dict[str, Any], caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Django shows FAILOPEN['STORE'] as written (no secret-sounding name): failopen.W010 and a
    start-up WARNING (checks do not run under gunicorn) say where the password belongs."""
    caplog.set_level(logging.WARNING, logger="failopen")
    settings = {**fo_settings, "STORE": f"redis://:{PASSWORD}@127.0.0.1:6379/0"}
    with override_settings(FAILOPEN=settings):
        [found] = [m for m in checks.run_checks() if m.id == "failopen.W010"]
        ready()
    assert "FAILOPEN['STORE_PASSWORD']" in found.msg and PASSWORD not in found.msg
    assert "FAILOPEN['STORE'] carries the Redis password" in caplog.text
    assert PASSWORD not in caplog.text
    # The way out: the password beside the URL; no warning.
    with override_settings(FAILOPEN={**fo_settings, "STORE": "redis://127.0.0.1:6379/0",
                                     "STORE_PASSWORD": PASSWORD}):
        assert [m for m in checks.run_checks() if m.id == "failopen.W010"] == []
    # The variable, which runserver copies into request.META: warned as well.
    monkeypatch.setenv("FAILOPEN_STORE", f"redis://:{PASSWORD}@127.0.0.1:6379/0")
    with override_settings(FAILOPEN=fo_settings):
        [found] = [m for m in checks.run_checks() if m.id == "failopen.W010"]
    assert "FAILOPEN_STORE_PASSWORD" in found.msg and PASSWORD not in found.msg
