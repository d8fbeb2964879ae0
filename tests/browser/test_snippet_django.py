"""failopen.js in Chromium against ``examples/django_site`` under Django's own server.

``runserver --insecure`` serves static files through staticfiles' finders, as ``collectstatic``
would collect them: the snippet is found with the example's (default) finders alone. The
happy path, and one outage that only the ``?confirm=1`` check sees.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator

import pytest
from _browser_kit import Vendor, Visit, enforcing, vendor_env, wait_until

pytestmark = pytest.mark.slow

FIELD = "enforcement-token"


@pytest.fixture(scope="module")
def site(vendor: Vendor, server_process: Callable[..., str]) -> Iterator[str]:
    """The Django example site under ``manage.py runserver --noreload --insecure``."""
    yield server_process(
        [sys.executable, "examples/django_site/manage.py", "runserver", "127.0.0.1:{port}",
         "--noreload", "--insecure"], vendor_env(vendor), "/static/failopen/failopen.js")


@pytest.fixture
def django_site(site: str, fakes: Vendor) -> str:
    wait_until(lambda: enforcing(site), 10, "the server to enforce")
    return site


def test_happy_path_the_token_reaches_the_view(
    django_site: str, fakes: Vendor, visit: Callable[..., Visit]
) -> None:
    page = visit(django_site, "/login/")
    script = page.page.get_attribute("script[src$='failopen.js']", "src")
    assert script == "/static/failopen/failopen.js"
    page.submit()
    status, body = page.wait_for_answer()
    assert page.state == "completed"
    # The snippet added the hidden field to the form it was pointed at (data-failopen-form).
    token = page.posts[0][FIELD][0]
    assert token.startswith("fake-vendor-") and token in fakes.verify.tokens_seen
    assert page.posts[0]["csrfmiddlewaretoken"][0]  # a normal browser POST of the form
    assert status == 200 and body["decision"]["outcome"] == "valid" and body["bypassed"] is False


def test_outage_confirmed_when_the_vendor_script_cannot_load(
    django_site: str, fakes: Vendor, visit: Callable[..., Visit]
) -> None:
    fakes.script.set_mode("http404")
    fakes.outage_on_script_request = True  # the flag read "on"; the outage starts right after
    page = visit(django_site, "/login/")
    page.submit()
    status, body = page.wait_for_answer()
    assert page.state == "bypassed" and fakes.script.script_requests == 2
    assert page.flag_requests[-1].endswith("/failopen/flag?path=%2Flogin%2F&confirm=1")
    assert page.posts[0].get(FIELD, [""])[0] == ""
    assert status == 200 and body["bypassed"] is True
