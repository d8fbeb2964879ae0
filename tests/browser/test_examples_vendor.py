"""The Flask and Django examples with another vendor than the spec's, in Chromium: Turnstile's
fakes (its verify API, its browser script, Cloudflare's status page), as each example's
docstring says to run them.

The page's form holds no token input of the spec's vendor: the snippet is told which form
(Flask: ``snippet_attributes(..., form="form")``; Django: ``{% failopen_script form="#login" %}``)
and renders Turnstile's widget in it; a log-in goes through with a token Turnstile verifies once,
sent once in its field; during Turnstile's outage the log-in goes through without it.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from _browser_kit import Visit, wait_until

from failopen.testing import FakeCloudflareStatusPage, fake_browser_script, fake_verify_api
from failopen.testing.browser_scripts import BrowserScriptFake
from failopen.testing.providers import CaptchaVerifyFake

pytestmark = pytest.mark.slow

VENDOR = "turnstile"


@dataclass(frozen=True)
class Example:
    command: list[str]
    ready_path: str
    #: Where the log-in form is shown, and where it posts.
    page_path: str
    login_path: str


EXAMPLES = {
    "flask": Example(
        [sys.executable, "-m", "gunicorn", "--preload", "-w", "1", "-k", "sync",
         "-b", "127.0.0.1:{port}", "--graceful-timeout", "2", "examples.flask_app:app"],
        "/health", "/", "/login"),
    "django": Example(
        [sys.executable, "examples/django_site/manage.py", "runserver", "127.0.0.1:{port}",
         "--noreload", "--insecure"], "/static/failopen/failopen.js", "/", "/login/"),
}


@dataclass
class Fakes:
    api: CaptchaVerifyFake
    script: BrowserScriptFake
    page: FakeCloudflareStatusPage


@pytest.fixture(scope="module")
def fakes() -> Iterator[Fakes]:
    """Turnstile's fakes, for every example of the module."""
    api = fake_verify_api(VENDOR)
    found = Fakes(api, fake_browser_script(VENDOR, verify_api=api), FakeCloudflareStatusPage())
    with found.api.serve(), found.script.serve(), found.page.serve():
        yield found


@pytest.fixture(scope="module", params=list(EXAMPLES))
def example(request: pytest.FixtureRequest, fakes: Fakes,
            server_process: Callable[[list[str], dict[str, str], str], str]
            ) -> tuple[Example, str]:
    chosen = EXAMPLES[request.param]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FAILOPEN_", "DJANGO_"))}
    env.update({
        "FAILOPEN_VENDOR": VENDOR, "FAILOPEN_STATUS_URL": fakes.page.url,
        "FAILOPEN_VERIFY_URL": fakes.api.verify_url, "FAILOPEN_PRIVATE_KEY": fakes.api.private_key,
        "FAILOPEN_PUBLIC_KEY": fakes.api.public_key, "FAILOPEN_VENDOR_URL": fakes.script.url,
        "FAILOPEN_POLL_INTERVAL": "0.2", "FAILOPEN_POLL_JITTER": "0",
        "FAILOPEN_CONFIRM_TTL": "0.05", "FAILOPEN_OUTAGE_RATE": "none",
    })
    return chosen, server_process(chosen.command, env, chosen.ready_path)


@pytest.fixture
def site(example: tuple[Example, str], fakes: Fakes) -> Iterator[tuple[Example, str]]:
    fakes.api.reset()
    fakes.script.reset()
    fakes.page.set_global("operational")
    _, url = example
    wait_until(lambda: _enforce(url), 10, "the server to enforce")
    yield example
    fakes.page.set_global("operational")
    wait_until(lambda: _enforce(url), 10, "enforcement back")


def _enforce(url: str) -> bool:
    flag: dict[str, Any] = httpx.get(url + "/failopen/flag?confirm=1", timeout=5).json()
    return bool(flag["enforce"])


def _open(visit: Callable[..., Visit], chosen: Example, url: str) -> Visit:
    record = visit(url, chosen.login_path, go=False)
    record.page.goto(url + chosen.page_path)
    return record


def test_the_page_points_the_snippet_at_the_form_with_no_token_input(
        site: tuple[Example, str], fakes: Fakes) -> None:
    chosen, url = site
    html = httpx.get(url + chosen.page_path, timeout=5).text
    assert 'data-failopen-vendor="turnstile"' in html
    assert "data-failopen-form=" in html
    assert f'data-failopen-vendor-url="{fakes.script.url}"' in html
    assert 'name="enforcement-token"' not in html and 'name="cf-turnstile-response"' not in html


def test_a_log_in_goes_through_with_turnstile_s_token_sent_once(
        site: tuple[Example, str], fakes: Fakes, visit: Callable[..., Visit]) -> None:
    chosen, url = site
    record = _open(visit, chosen, url)
    record.wait_for_state("completed")  # Turnstile's managed widget runs by itself
    record.page.click("form > button")
    status, body = record.wait_for_answer()
    assert (status, body["decision"]["outcome"]) == (200, "valid"), (body, record.console)
    posted = record.posts[-1][fakes.api.token_field]
    assert len(posted) == 1 and posted[0] in fakes.script.tokens, record.posts
    assert [r.sitekey for r in fakes.script.renders] == [fakes.api.public_key]


def test_during_turnstile_s_outage_the_log_in_goes_through_without_it(
        site: tuple[Example, str], fakes: Fakes, visit: Callable[..., Visit]) -> None:
    chosen, url = site
    fakes.page.set_global("major_outage")
    wait_until(lambda: not _enforce(url), 10, "the outage to be seen")
    requests_before = fakes.script.script_requests
    record = _open(visit, chosen, url)
    record.wait_for_state("bypassed")
    record.page.click("form > button")
    status, body = record.wait_for_answer()
    assert status == 200 and body["bypassed"] is True, body
    assert fakes.script.script_requests == requests_before  # Turnstile's script: never asked
