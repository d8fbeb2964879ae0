"""``{% failopen_script %}`` and the staticfiles finder for the snippet."""

from __future__ import annotations

import io
import logging
from pathlib import Path
from typing import Any

import pytest
from django.contrib.staticfiles import finders
from django.core.management import call_command
from django.template import Context, Template
from django.test import RequestFactory, override_settings

from failopen.web import SNIPPET_PATH, SOLVER_PATH

TEMPLATE = Template("{% load failopen %}{% failopen_script %}")
EXPECTED = (
    '<script src="/static/failopen/failopen.js" defer '
    'data-failopen-flag-url="/failopen/flag" data-failopen-public-key="test-public-key" '
    'data-failopen-token-field="enforcement-token" data-failopen-vendor-url=""{nonce}></script>'
)


def render(request: Any = None) -> str:
    return TEMPLATE.render(Context({"request": request} if request is not None else {}))


def test_script_tag_without_nonce(use_failopen: Any) -> None:
    use_failopen()
    assert render(RequestFactory().get("/")) == EXPECTED.format(nonce="")
    assert render() == EXPECTED.format(nonce="")


def test_script_tag_carries_the_requests_csp_nonce(use_failopen: Any) -> None:
    use_failopen()
    request = RequestFactory().get("/")
    request.csp_nonce = "n0nce"
    assert render(request) == EXPECTED.format(nonce=' nonce="n0nce"')


def test_attribute_values_are_escaped(use_failopen: Any) -> None:
    use_failopen(PUBLIC_KEY='"><script>alert(1)</script>', TOKEN_FIELD="a&b")
    request = RequestFactory().get("/")
    request.csp_nonce = '"x'
    html = render(request)
    assert "<script>alert" not in html
    assert 'data-failopen-public-key="&quot;&gt;&lt;script&gt;alert(1)&lt;/script&gt;"' in html
    assert 'data-failopen-token-field="a&amp;b"' in html
    assert 'nonce="&quot;x"' in html


def test_through_a_view_and_a_template_file(make_client: Any, use_failopen: Any) -> None:
    use_failopen()
    response = make_client().get("/page/")
    assert response.status_code == 200
    assert response.content.decode().strip() == EXPECTED.format(nonce="")


ONLY_PROTECTED = Template("{% load failopen %}{% failopen_script only_protected=True %}")


@pytest.mark.parametrize(("path", "shown"), [
    ("/login/", True),  # a protected path
    ("/fr/login/", True),  # the same under a language prefix: protected too
    ("/auth/login/", True),  # a view named in PROTECTED_VIEWS, whatever its path
    ("/open/", False), ("/nowhere/", False),
])
def test_only_protected_renders_on_the_pages_of_protected_routes(
        use_failopen: Any, path: str, shown: bool) -> None:
    # A layout shared by protected and unprotected pages (django-allauth's): a form the snippet
    # holds must not wait for the vendor on a page that needs no token.
    use_failopen(PROTECTED_PATHS=["/login/"], PROTECTED_VIEWS=["account_login"])
    i18n = {"USE_I18N": True, "LANGUAGES": [("en", "English"), ("fr", "French")]}
    with override_settings(ROOT_URLCONF="django_test_urls_bodies", **i18n):
        html = ONLY_PROTECTED.render(Context({"request": RequestFactory().get(path)}))
    assert (html == EXPECTED.format(nonce="")) is shown, html


def test_only_protected_renders_when_the_page_cannot_be_told(use_failopen: Any) -> None:
    # No request in the context: a protected page without the snippet could never send its form.
    use_failopen()
    assert ONLY_PROTECTED.render(Context({})) == EXPECTED.format(nonce="")


def test_broken_settings_leave_the_tag_out(use_failopen: Any) -> None:
    use_failopen(POLL_INTERVAL="soon")
    assert render() == ""


def test_snippet_finder_looks_where_the_snippet_ships() -> None:
    from failopen.integrations.django.finders import SnippetFinder

    finder = SnippetFinder()
    assert Path(finder.storage.location) / "failopen" / "failopen.js" == SNIPPET_PATH
    assert finder.find("other/file.js") == []


def test_every_attribute_of_the_snippet_can_be_rendered(use_failopen: Any) -> None:
    use_failopen(VENDOR_URL="https://client.vendor.example/")
    html = Template(
        "{% load failopen %}{% failopen_script form='#login' ready_timeout_ms=5000 retries=2 "
        "retry_delay_ms=250 %}").render(Context({}))
    for attribute in ('data-failopen-flag-url="/failopen/flag"',
                      'data-failopen-public-key="test-public-key"',
                      'data-failopen-token-field="enforcement-token"',
                      'data-failopen-vendor-url="https://client.vendor.example"',
                      'data-failopen-form="#login"', 'data-failopen-ready-timeout-ms="5000"',
                      'data-failopen-retries="2"', 'data-failopen-retry-delay-ms="250"'):
        assert attribute in html, attribute


def test_a_bad_tuning_option_falls_back_to_the_snippets_defaults(
    use_failopen: Any, caplog: pytest.LogCaptureFixture
) -> None:
    use_failopen()
    with caplog.at_level(logging.ERROR, logger="failopen.django"):
        html = Template("{% load failopen %}{% failopen_script retries='many' colour=1 %}"
                        ).render(Context({}))
    assert html == EXPECTED.format(nonce="")
    assert "failopen_script" in caplog.text


APP_COPY = Path(__file__).resolve().parents[3] / "integrations" / "django" / "static" / \
    "failopen" / "failopen.js"


def test_the_django_apps_copy_of_the_snippet_is_the_snippet() -> None:
    # Edit failopen/static/failopen/failopen.js, then copy it here: this test says when not.
    assert APP_COPY.read_bytes() == SNIPPET_PATH.read_bytes()


@override_settings(STATICFILES_FINDERS=[
    "django.contrib.staticfiles.finders.FileSystemFinder",
    "django.contrib.staticfiles.finders.AppDirectoriesFinder",
])
def test_djangos_default_finders_find_the_snippet_without_extra_settings(tmp_path: Path) -> None:
    finders.get_finder.cache_clear()
    try:
        with override_settings(STATIC_ROOT=str(tmp_path)):
            out = io.StringIO()
            call_command("collectstatic", interactive=False, stdout=out)
        # The snippet and its fallback solver, which it finds beside itself.
        for path in (SNIPPET_PATH, SOLVER_PATH):
            found = finders.find(f"failopen/{path.name}")
            assert found and Path(found).read_bytes() == path.read_bytes()
            assert (tmp_path / "failopen" / path.name).read_bytes() == path.read_bytes()
    finally:
        finders.get_finder.cache_clear()


@override_settings(STATICFILES_FINDERS=[
    "django.contrib.staticfiles.finders.AppDirectoriesFinder",
    "failopen.integrations.django.finders.SnippetFinder",
])
def test_a_site_that_kept_the_snippet_finder_collects_the_file_once(tmp_path: Path) -> None:
    finders.get_finder.cache_clear()
    try:
        with override_settings(STATIC_ROOT=str(tmp_path)):
            out = io.StringIO()
            call_command("collectstatic", interactive=False, stdout=out)
        assert "Found another file" not in out.getvalue()
        assert (tmp_path / "failopen" / "failopen.js").read_bytes() == SNIPPET_PATH.read_bytes()
        assert (tmp_path / "failopen" / SOLVER_PATH.name).read_bytes() == SOLVER_PATH.read_bytes()
    finally:
        finders.get_finder.cache_clear()


@pytest.mark.parametrize("static_url", ["https://cdn.example.net/static/", "//cdn.example.net/s/"])
def test_static_files_on_another_origin_take_the_solver_from_the_site(
        use_failopen: Any, static_url: str) -> None:
    # A Web Worker only starts from the page's own origin: failopen-solver.js next to a CDN's
    # failopen.js could never run, and a fallback route could never be solved.
    use_failopen()
    with override_settings(STATIC_URL=static_url):
        html = render()
    assert f'src="{static_url}failopen/failopen.js"' in html
    assert 'data-failopen-solver-url="/failopen/failopen-solver.js"' in html


def test_same_origin_static_files_keep_the_solver_beside_the_snippet(use_failopen: Any) -> None:
    use_failopen()
    assert "solver" not in render()


def test_the_site_serves_the_solver_and_revalidates_it(make_client: Any,
                                                      use_failopen: Any) -> None:
    use_failopen()
    client = make_client()
    served = client.get("/failopen/failopen-solver.js")
    assert served.status_code == 200
    assert served["Content-Type"].startswith("text/javascript")
    assert served.content == SOLVER_PATH.read_bytes()
    again = client.get("/failopen/failopen-solver.js", headers={"If-None-Match": served["ETag"]})
    assert (again.status_code, again.content) == (304, b"")
    assert client.post("/failopen/failopen-solver.js").status_code == 405
