"""System checks: each id fires on its misconfiguration and stays quiet otherwise."""

from __future__ import annotations

from typing import Any

import pytest
from django.core import checks
from django.test import override_settings
from failopen.integrations.django.checks import check_settings

ADMIN_TOKEN = "an-admin-token-long-enough-to-count"


def ids(settings: dict[str, Any], **django: Any) -> list[str]:
    with override_settings(FAILOPEN=settings, **django):
        return sorted(message.id for message in check_settings())


def test_good_settings_pass(fo_settings: dict[str, Any]) -> None:
    assert ids(fo_settings) == []


def test_checks_are_registered_with_django(fo_settings: dict[str, Any]) -> None:
    with override_settings(FAILOPEN={**fo_settings, "STATUS_URL": None}):
        found = checks.run_checks(tags=["failopen"])
    assert [m.id for m in found] == ["failopen.E002"]


@pytest.mark.parametrize(("changes", "expected"), [
    ({"POLL_INTERVAL": "soon"}, ["failopen.E001"]),
    ({"NOT_A_SETTING": 1}, ["failopen.E001"]),
    ({"STATUS_URL": None}, ["failopen.E002"]),
    ({"STATUS_URL": "http://status.example.com"}, ["failopen.E003"]),
    ({"VERIFY_URL": None, "PRIVATE_KEY": None}, ["failopen.E004"]),
    ({"PRIVATE_KEY": None}, ["failopen.E004"]),
    ({"REJECT_VIEW": "no.such.view"}, ["failopen.E005"]),
    ({"REJECT_VIEW": "django_test_urls.urlpatterns"}, ["failopen.E005"]),
    ({"PROTECTED_PATHS": ["/login/", "/signup/"]}, ["failopen.W001"]),
    ({"OVERRIDE_ENDPOINT": True}, ["failopen.W002"]),
    ({"OVERRIDE_ENDPOINT": True, "STORE": "file:///tmp/failopen-check.json"}, []),
    ({"PROTECTED_PATHS": []}, ["failopen.W005"]),
    ({"PROTECTED_PATHS": [], "PROTECTED_BY_FIELDS": True}, []),  # form fields protect
    # A vendor with no status page, the probe alone as the evidence: it can see an outage.
    ({"STATUS_URL": None, "VENDOR": "recaptcha", "EVIDENCE": "probe"}, []),
    ({"STATUS_URL": None, "VENDOR": "recaptcha"}, ["failopen.E002"]),
])
def test_each_check(fo_settings: dict[str, Any], changes: dict[str, Any],
                    expected: list[str]) -> None:
    assert ids({**fo_settings, **changes}) == expected


def test_settings_not_a_dict() -> None:
    assert ids(["STATUS_URL"]) == ["failopen.E001"]  # type: ignore[arg-type]


def test_middleware_missing(fo_settings: dict[str, Any]) -> None:
    from django.conf import settings

    without = [m for m in settings.MIDDLEWARE if "FailOpen" not in m]
    assert ids(fo_settings, MIDDLEWARE=without) == ["failopen.W003"]


def test_override_endpoint_nobody_can_use(fo_settings: dict[str, Any]) -> None:
    settings = {**fo_settings, "OVERRIDE_ENDPOINT": True, "STORE": "file:///tmp/x.json"}
    with _without_auth():
        assert ids(settings) == ["failopen.W004"]
        assert ids({**settings, "ADMIN_TOKEN": ADMIN_TOKEN}) == []


class _without_auth:  # noqa: N801 - used as a context manager, reads like one
    """django.contrib.auth not installed, for the length of a with block."""

    def __enter__(self) -> None:
        from django.apps import apps

        apps.set_available_apps([a.name for a in apps.get_app_configs()
                                 if a.name != "django.contrib.auth"])

    def __exit__(self, *exc: object) -> None:
        from django.apps import apps

        apps.unset_available_apps()


def test_messages_name_the_setting_and_hide_secrets(fo_settings: dict[str, Any]) -> None:
    with override_settings(FAILOPEN={**fo_settings, "ADMIN_TOKEN": "short-secret-value"}):
        (message,) = check_settings()
    assert message.id == "failopen.E001"
    assert "FAILOPEN['ADMIN_TOKEN']" in message.msg  # as the settings file writes it
    assert "short-secret-value" not in message.msg
    with override_settings(FAILOPEN={**fo_settings, "STATUS_URL": None}):
        (message,) = check_settings()
    assert "STATUS_URL" in message.hint


def test_memory_store_warning_recommends_only_what_is_built(fo_settings: dict[str, Any]) -> None:
    with override_settings(FAILOPEN={**fo_settings, "OVERRIDE_ENDPOINT": True}):
        (message,) = check_settings()
    assert message.id == "failopen.W002"
    assert "file:///" in message.hint
    assert "redis" not in message.hint.lower()  # no redis store exists yet


def test_a_snippet_the_static_finders_cannot_find_is_a_warning(
        fo_settings: dict[str, Any]) -> None:
    # The app left out of INSTALLED_APPS' finders: {% failopen_script %} would link a file that
    # collectstatic never collects, and production answers the script tag with a 404.
    finders_without = ["django.contrib.staticfiles.finders.FileSystemFinder"]
    with override_settings(FAILOPEN=fo_settings, STATICFILES_FINDERS=finders_without,
                           STATICFILES_DIRS=[]):
        found = [m for m in check_settings() if m.id == "failopen.W011"]
    assert len(found) == 1
    assert "failopen/failopen.js" in found[0].msg and "failopen-solver.js" in found[0].msg
    assert "INSTALLED_APPS" in found[0].hint
    app_finder = ["django.contrib.staticfiles.finders.AppDirectoriesFinder"]
    with override_settings(FAILOPEN=fo_settings, STATICFILES_FINDERS=app_finder):
        assert "failopen.W011" not in {m.id for m in check_settings()}
