"""Ways around the guard found in the review of issue 31's fixes; each stays shut.

This module is also the URLconf of its tests: a log-in view behind a case-insensitive regex,
and a CMS catch-all whose page lookup ignores case (Wagtail's slug on MySQL).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import django_test_urls
import pytest
from django.http import HttpRequest, HttpResponse
from django.test import override_settings
from django.urls import include, path, re_path

from failopen.testing import FakeVerifyAPI

GOOD = FakeVerifyAPI.GOOD
JSON = {"accept": "application/json"}


def page(request: HttpRequest, slug: str) -> HttpResponse:
    """A CMS page looked up by slug as MySQL compares it (case-insensitive collation)."""
    if slug.lower() == "join/":
        return HttpResponse("the join form's page, its POST handled")
    return HttpResponse(status=404)


urlpatterns = [
    path("failopen/", include("failopen.integrations.django.urls")),
    re_path(r"(?i)^login/$", django_test_urls.login),
    re_path(r"^((?:[\w\-]+/)*)$", page),
]


@pytest.fixture
def client(make_client: Callable[..., Any], client_kind: str) -> Any:
    return make_client()


@pytest.mark.parametrize("url", ["/LOGIN/", "/Login/", "/JOIN/", "/Join/"])
def test_another_case_of_a_protected_path_is_protected(
    client: Any, use_failopen: Any, url: str
) -> None:
    # Django routes /LOGIN/ to the (?i) route of /login/, and the CMS serves /JOIN/ as /join/:
    # the guard compared paths case by case and let both through without a token.
    use_failopen(PROTECTED_PATHS=["/login/", "/join/"])
    with override_settings(ROOT_URLCONF=__name__):
        assert client.post(url, headers=JSON).status_code == 403, url
        admitted = client.post(url, headers={"X-Enforcement-Token": GOOD})
        assert admitted.status_code == 200, url


def test_a_setting_beside_the_dict_is_no_way_to_serve_unprotected(
    client: Any, fo_settings: dict[str, Any]
) -> None:
    # settings.FAILOPEN_PROTECTED_PATHS is not read: ready() refuses to start a server on it, but
    # not under manage.py (runserver --skip-checks, testserver, a command serving without the
    # checks), where protected requests must be refused (503) as for any broken setting. The
    # middleware loaded the settings without it: nothing protected, the log-in admitted.
    from failopen.integrations.django.startup import report

    unread = {k: v for k, v in fo_settings.items() if k != "PROTECTED_PATHS"}
    with override_settings(FAILOPEN=unread, FAILOPEN_PROTECTED_PATHS=["/login/"]):
        with pytest.raises(Exception, match="FAILOPEN_PROTECTED_PATHS is not read"):
            report()  # what a server is told at start-up
        assert client.post("/login/", headers=JSON).status_code == 503
        assert client.post("/login/", headers={"X-Enforcement-Token": GOOD}).status_code == 503


def test_a_misspelled_protection_key_is_no_way_to_serve_unprotected(
    client: Any, fo_settings: dict[str, Any]
) -> None:
    # FAILOPEN['PROTECTED_PATH'] (no S) stops a server at start-up; under manage.py with the
    # checks skipped, the broken settings' fallback read only the keys spelled right: nothing
    # protected. Unknown keys may be meant to protect anything: every write is refused.
    typo = {**{k: v for k, v in fo_settings.items() if k != "PROTECTED_PATHS"},
            "PROTECTED_PATH": ["/login/"]}
    with override_settings(FAILOPEN=typo):
        assert client.post("/login/", headers=JSON).status_code == 503
        assert client.get("/login/").status_code == 200  # reading stays open


def test_a_case_insensitive_route_is_no_alias_now_that_paths_ignore_case(
    fo_settings: dict[str, Any]
) -> None:
    # W008 read re_path(r"(?i)^login/$") as a route at "/" (its flags hid the text) and told
    # the site to protect the view; the protected path covers every case of it now.
    from failopen.integrations.django.checks import check_settings

    with override_settings(ROOT_URLCONF=__name__,
                           FAILOPEN={**fo_settings, "PROTECTED_PATHS": ["/login/", "/join/"]}):
        assert "failopen.W008" not in {m.id for m in check_settings()}
