"""``manage.py failopen check``: the preflight with ``settings.FAILOPEN`` as the configuration,
and Django's own line, ``django_views``: the protected views the URLconf holds."""

from __future__ import annotations

import io
import json
from typing import Any

import pytest
from django.core.management import call_command
from django.test import override_settings
from django.urls import path

from failopen.testing import FakeVerifyAPI

MIDDLEWARE = "failopen.integrations.django.middleware.FailOpenMiddleware"


def run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    try:
        call_command("failopen", "check", *argv, stdout=out, stderr=err)
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    return code, out.getvalue(), err.getvalue()


def checks(out: str) -> dict[str, dict[str, Any]]:
    return {c["name"]: c for c in json.loads(out)["checks"]}


def test_all_good_with_the_django_settings(fo_settings: dict[str, Any],
                                           fake_verify_api: FakeVerifyAPI) -> None:
    with override_settings(FAILOPEN=fo_settings):
        code, out, err = run()
    assert code == 0, out + err
    rows = out.splitlines()
    assert [row.split(":")[0].split(None, 1)[1] for row in rows[:-1]] == [
        "configuration", "status page", "verify API", "fallback verify API", "store",
        "fleet identity",
        "outage policies", "django views"]
    assert rows[-2] == "ok       django views: @protect marks 0 views"
    assert rows[-1] == "failopen check passed"
    assert fake_verify_api.tokens_seen[-1].startswith("failopen-check-")


def test_json_has_the_django_line(fo_settings: dict[str, Any]) -> None:
    with override_settings(FAILOPEN={**fo_settings, "PROTECTED_VIEWS": ["signup", "logn"]},
                           ROOT_URLCONF="django_test_urls_outage"):
        code, out, _ = run("--json")
    assert code == 0  # warnings only
    views = checks(out)["django_views"]
    assert views["status"] == "warning" and views["ok"] is True
    assert views["facts"]["middleware"] is True
    assert views["facts"]["marked"] == [{"view": "change-email", "outage": None},
                                        {"view": "reset", "outage": "closed"}]
    assert views["facts"]["unmatched"] == [{"name": "logn", "did_you_mean": "login"}]
    assert views["detail"] == (
        "@protect marks 2 views: change-email (default policy), reset (closed); "
        "PROTECTED_VIEWS: 1 routed, 1 naming no view; PROTECTED_VIEWS entry 'logn' names no "
        "view in the "
        "URLconf (did you mean 'login'?)")


def test_a_rejected_key_in_the_settings(fo_settings: dict[str, Any]) -> None:
    key = "django-private-key-recognisable-0123"
    with override_settings(FAILOPEN={**fo_settings, "PRIVATE_KEY": key}):
        code, out, err = run()
    assert code == 1
    # The key is in the FAILOPEN dict: named there, not as the variable nobody set.
    assert "problem  verify API: " in out and "check FAILOPEN['PRIVATE_KEY']" in out
    assert "FAILOPEN_PRIVATE_KEY" not in out
    assert key not in out + err


def test_what_the_urlconf_lacks(fo_settings: dict[str, Any]) -> None:
    settings = {**fo_settings, "PROTECTED_PATHS": ["/logon/"]}
    with override_settings(FAILOPEN=settings, MIDDLEWARE=[]):
        code, out, _ = run("--json", "--strict")
    assert code == 1  # --strict: the warnings fail
    views = checks(out)["django_views"]
    assert views["status"] == "warning" and views["ok"] is False
    assert "protected path '/logon/' matches no URL pattern" in views["detail"]
    assert f"{MIDDLEWARE} is not in MIDDLEWARE: no request is checked" in views["detail"]


def test_a_fallback_view_without_its_secret_is_a_problem(
    fo_settings: dict[str, Any], monkeypatch: pytest.MonkeyPatch,
) -> None:
    import django_test_urls
    from failopen.integrations.django import protect, protection

    monkeypatch.setattr(protection, "_outage_marks", [protection.any_outage_marks()])

    @protect(outage="fallback")  # a view of this test's own: marks stay out of the others'
    def join(request: Any) -> Any:
        return django_test_urls.login(request)

    urls = type("urls", (), {"urlpatterns": [path("login/", django_test_urls.login),
                                             path("join/", join, name="join")]})
    with override_settings(FAILOPEN=fo_settings, ROOT_URLCONF=urls):
        code, out, _ = run("--json")
    assert code == 1
    views = checks(out)["django_views"]
    assert views["status"] == "problem"
    assert 'marked @protect(outage="fallback") but FALLBACK_SECRET is not set' in views["detail"]
    assert views["facts"]["marked"] == [{"view": "join", "outage": "fallback"}]


def test_nothing_protected_is_a_problem(fo_settings: dict[str, Any],
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    # Issue 31, item 12: it was a warning, and `check` passed with nothing protected.
    monkeypatch.setenv("FAILOPEN_PROTECTED_PATH", "/login/")  # the S left out
    with override_settings(FAILOPEN={**fo_settings, "PROTECTED_PATHS": []}):
        code, out, _ = run("--json")
    assert code == 1
    found = checks(out)
    views = found["django_views"]
    assert views["status"] == "problem" and views["detail"].startswith(
        "@protect marks 0 views; nothing is protected: every request reaches the app unchecked "
        "(FAILOPEN_PROTECTED_PATH is set: did you mean FAILOPEN_PROTECTED_PATHS?). Decorate the "
        'log-in and sign-up views with @protect, or name them in FAILOPEN["PROTECTED_VIEWS"]')
    assert 'FAILOPEN["PROTECTED_BY_FIELDS"] = True' in views["detail"]
    # Judged once, here, where @protect views are seen: the settings' line does not.
    assert found["outage_policies"]["status"] == "ok"


def test_a_site_protected_by_form_fields_says_so(fo_settings: dict[str, Any]) -> None:
    with override_settings(FAILOPEN={**fo_settings, "PROTECTED_PATHS": [],
                                     "PROTECTED_BY_FIELDS": True}):
        code, out, _ = run("--json")
    assert code == 0, out
    assert checks(out)["django_views"]["status"] == "ok"


DJANGO_SECRETS = {
    "ADMIN_TOKEN": "django-admin-token-recognisable-0123456789",
    "FALLBACK_SECRET": "django-fallback-secret-recognisable-0123456789",
    "STORE_PASSWORD": "django-store-password-recognisable",
}


@pytest.mark.parametrize("broken", [False, True])
def test_no_django_secret_in_the_output(fo_settings: dict[str, Any], broken: bool) -> None:
    settings = {**fo_settings, **DJANGO_SECRETS, "PRIVATE_KEY": "wrong-key-recognisable-42",
                "STORE": "redis://127.0.0.1:1/0"}
    if broken:  # too short: the configuration line, and nothing else builds the whole Config
        settings["ADMIN_TOKEN"] = "short-recognisable"
        settings["STORE"] = "redis://:url-password-recognisable@/0"
    with override_settings(FAILOPEN=settings):
        for argv in ((), ("--json",), ("-v",)):
            code, out, err = run(*argv)
            assert code == 1
            assert "recognisable" not in out + err
    if broken:
        assert "FAILOPEN['ADMIN_TOKEN']: must be at least 24 characters" in out


@pytest.mark.slow
def test_manage_py_failopen_check_of_the_example(fake_status_page: Any,
                                                 fake_verify_api: FakeVerifyAPI) -> None:
    # The real manage.py in a process of its own: the example site's @protect views and its
    # settings from the environment, as in the manual's steps.
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[3]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FAILOPEN_", "DJANGO_"))}
    env.update(FAILOPEN_STATUS_URL=fake_status_page.url,
               FAILOPEN_VERIFY_URL=fake_verify_api.verify_url,
               FAILOPEN_PRIVATE_KEY=fake_verify_api.private_key)
    done = subprocess.run([sys.executable, str(root / "examples" / "django_site" / "manage.py"),
                           "failopen", "check", "--json"], env=env, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    found = checks(done.stdout)
    assert found["verify_api"]["facts"]["answer"] == "key_accepted"
    assert found["django_views"]["status"] == "ok"
    assert found["django_views"]["facts"]["marked"], "the example's @protect views"
