"""A PROTECTED_VIEWS name that no route carries is logged by the running site, once.

``manage.py check`` says so (failopen.W009), but gunicorn and uvicorn never run the checks: the
middleware logs a WARNING when it first meets the URLconf (the first request of the process),
with the name the entry probably meant. Never per request, never raising into one.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import Any

import django_test_urls_bodies
import pytest
from django.test import override_settings
from django.urls import URLPattern, path

from failopen.testing import FakeVerifyAPI

URLS = "django_test_urls_bodies"
LISTED = ["account_login", "allauth:account_signup", "nowhere_near_anything"]


@pytest.fixture
def misnamed(use_failopen: Any, caplog: pytest.LogCaptureFixture) -> Iterator[None]:
    caplog.set_level(logging.WARNING, logger="failopen.django")
    use_failopen(PROTECTED_PATHS=[], PROTECTED_VIEWS=LISTED)
    with override_settings(ROOT_URLCONF=URLS):
        yield


def failopen_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name.startswith("failopen")]


def test_a_name_no_route_carries_is_logged_once_with_what_it_meant(
    make_client: Callable[..., Any], client_kind: str, misnamed: None,
    caplog: pytest.LogCaptureFixture, fake_verify_api: FakeVerifyAPI,
) -> None:
    client = make_client()
    assert client.get("/open/").status_code == 200  # any first request: an unprotected GET
    first = failopen_lines(caplog)
    assert first == [
        "failopen: FAILOPEN['PROTECTED_VIEWS'] entry 'allauth:account_signup' names no view in "
        "the URLconf, so it protects nothing; did you mean 'account_signup'?",
        "failopen: FAILOPEN['PROTECTED_VIEWS'] entry 'nowhere_near_anything' names no view in "
        "the URLconf, so it protects nothing",
    ]
    assert all(r.levelno == logging.WARNING for r in caplog.records if r.name == "failopen.django")
    token = fake_verify_api.issue_token()
    answers = [client.post("/open/"), client.get("/open/"),
               client.post("/auth/login/", headers={"X-Enforcement-Token": token}),
               client.post("/auth/login/", headers={"accept": "application/json"})]
    assert [a.status_code for a in answers] == [200, 200, 200, 403]  # the good name protects
    assert failopen_lines(caplog) == first  # nothing per request


def test_names_every_route_carries_log_nothing(
    make_client: Callable[..., Any], client_kind: str, use_failopen: Any,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="failopen.django")
    use_failopen(PROTECTED_PATHS=[], PROTECTED_VIEWS=["account_login", f"{URLS}.unprotected"])
    with override_settings(ROOT_URLCONF=URLS):
        client = make_client()
        assert client.get("/open/").status_code == 200
        assert client.post("/open/", headers={"accept": "application/json"}).status_code == 403
    assert failopen_lines(caplog) == []


def test_system_check_names_what_the_entry_meant(misnamed: None) -> None:
    from failopen.integrations.django.checks import check_settings

    found = [m for m in check_settings() if m.id == "failopen.W009"]
    assert [m.msg for m in found] == [
        "FAILOPEN['PROTECTED_VIEWS'] entry 'allauth:account_signup' names no view in the "
        "URLconf, so it protects nothing; did you mean 'account_signup'?",
        "FAILOPEN['PROTECTED_VIEWS'] entry 'nowhere_near_anything' names no view in the "
        "URLconf, so it protects nothing",
    ]


class NoDottedPath(URLPattern):
    """A route whose dotted path cannot be worked out (a third-party pattern class, a callable
    object whose attributes raise): the view is still routed, and by its name still found."""

    @property
    def lookup_str(self) -> str:
        raise RuntimeError("this pattern has no dotted path")


urlpatterns = [
    *django_test_urls_bodies.urlpatterns,
    NoDottedPath(path("odd/", django_test_urls_bodies.unprotected).pattern,
                 django_test_urls_bodies.unprotected, name="odd"),
]


def test_a_route_without_a_dotted_path_raises_into_no_request(
    make_client: Callable[..., Any], client_kind: str, use_failopen: Any,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="failopen.django")
    use_failopen(PROTECTED_PATHS=[], PROTECTED_VIEWS=["account_login", "allauth:odd"])
    with override_settings(ROOT_URLCONF=__name__):
        client = make_client()
        assert client.get("/open/").status_code == 200
        assert client.post("/open/").status_code == 200
        assert client.post("/odd/").status_code == 200
        assert client.post("/auth/login/", headers={"accept": "application/json"}).status_code == (
            403)
    assert failopen_lines(caplog) == [
        "failopen: FAILOPEN['PROTECTED_VIEWS'] entry 'allauth:odd' names no view in the URLconf, "
        "so it protects nothing; did you mean 'odd'?"]
