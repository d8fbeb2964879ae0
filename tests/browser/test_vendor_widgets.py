"""The browser half for every vendor, in headless Chromium under a real server: ``uvicorn``
serving examples/asgi_app.py with ``FAILOPEN_VENDOR`` set, the vendor's verify fake, the fake of
its browser script (``failopen.testing.fake_browser_script``) and, where it has one, the fake of
its status page.

The page's form has no token field; the tag is ``snippet_attributes(config, flag_url=...,
form="form")``. For Turnstile (managed), hCaptcha (checkbox), reCAPTCHA v2 (checkbox) and v3 (a
score, with the route's action): a log-in goes through with a token the vendor verifies once, sent
once in the vendor's field; a widget that errors once is retried and goes through; a script that
404s admits nothing while enforcing; during the captcha's outage the vendor's script is not loaded
and the log-in goes through. Only the configured vendor's adapter is fetched.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from _browser_kit import Visit, wait_until

from failopen.testing import (
    FakeCloudflareStatusPage,
    FakeHCaptchaStatusPage,
    FakeStatusPage,
    fake_browser_script,
    fake_verify_api,
)
from failopen.testing.browser_scripts import BrowserScriptFake
from failopen.testing.providers import CaptchaVerifyFake

pytestmark = pytest.mark.slow

#: (vendor, FAILOPEN_WIDGET): Turnstile, hCaptcha, reCAPTCHA v2 and v3, and Friendly Captcha.
CASES = [("turnstile", "visible"), ("hcaptcha", "visible"), ("recaptcha", "visible"),
         ("recaptcha", "score"), ("friendly-captcha", "visible")]
PAGES: dict[str, Callable[[], FakeStatusPage]] = {
    "turnstile": FakeCloudflareStatusPage, "hcaptcha": FakeHCaptchaStatusPage}
#: The example's submit button: a direct child of the form (a fake checkbox is a button too).
SUBMIT = "form > button"
CHECKBOX = "[data-fake-captcha]"


@dataclass
class WidgetSite:
    vendor: str
    widget: str
    url: str
    api: CaptchaVerifyFake
    script: BrowserScriptFake
    page: FakeStatusPage | None
    adapters: list[str] = field(default_factory=list)

    @property
    def needs_click(self) -> bool:
        return self.widget == "visible" and self.vendor in ("hcaptcha", "recaptcha")

    def flag(self, *, confirm: bool = False) -> dict[str, Any]:
        answer = httpx.get(self.url + "/failopen/flag" + ("?confirm=1" if confirm else ""),
                           timeout=10)
        return dict(answer.json())

    def outage(self) -> None:
        """The captcha's own outage: its status page component, or (no page) the vendor down
        for everyone, which the verify probe sees."""
        if self.page is not None:
            self.page.set_global("major_outage")
        else:
            self.api.set_fault("503")
        wait_until(lambda: not self.flag(confirm=True)["enforce"], 20, "the outage to be seen")

    def recover(self) -> None:
        self.api.set_fault(None)
        if self.page is not None:
            self.page.set_global("operational")
        wait_until(lambda: self.flag(confirm=True)["enforce"], 20, "enforcement back")


@pytest.fixture(scope="module", params=CASES, ids=lambda case: "-".join(case))
def site(request: pytest.FixtureRequest,
         server_process: Callable[[list[str], dict[str, str], str], str]) -> Iterator[WidgetSite]:
    vendor, widget = request.param
    api = fake_verify_api(vendor)
    script = fake_browser_script(vendor, verify_api=api, score=0.9)
    page = PAGES[vendor]() if vendor in PAGES else None
    api.serve()
    script.serve()
    if page is not None:
        page.serve()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FAILOPEN_", "DJANGO_"))}
    env.update({
        "FAILOPEN_VENDOR": vendor, "FAILOPEN_WIDGET": widget,
        "FAILOPEN_VERIFY_URL": api.verify_url, "FAILOPEN_PRIVATE_KEY": api.private_key,
        "FAILOPEN_PUBLIC_KEY": api.public_key, "FAILOPEN_VENDOR_URL": script.url,
        "FAILOPEN_POLL_INTERVAL": "0.2", "FAILOPEN_POLL_JITTER": "0",
        "FAILOPEN_CONFIRM_TTL": "0.05", "FAILOPEN_CLOSE_AFTER": "1",
        "FAILOPEN_VERIFY_TIMEOUT": "0.5", "FAILOPEN_OUTAGE_RATE": "none",
        "FAILOPEN_PROTECTED_PATHS": "/login,/signup,/password-reset",
        "SNIPPET_READY_TIMEOUT_MS": "3000", "SNIPPET_RETRIES": "2",
        "SNIPPET_RETRY_DELAY_MS": "100",
    })
    if widget == "score":
        env["FAILOPEN_EXPECTED_ACTIONS"] = "/login=login"
    if page is None:
        env.update({"FAILOPEN_EVIDENCE": "probe", "FAILOPEN_PROBE_INTERVAL": "0.2"})
    else:
        env["FAILOPEN_STATUS_URL"] = page.url
    url = server_process(
        [sys.executable, "-m", "uvicorn", "--app-dir", "examples", "asgi_app:app", "--host",
         "127.0.0.1", "--port", "{port}", "--log-level", "warning"], env, "/health")
    try:
        yield WidgetSite(vendor, widget, url, api, script, page)
    finally:
        for fake in (api, script, page):
            server = getattr(fake, "server", None)
            if server is not None:
                server.stop()


@pytest.fixture
def fresh(site: WidgetSite) -> Iterator[WidgetSite]:
    site.script.reset()
    site.api.reset()
    site.adapters.clear()
    assert site.flag(confirm=True)["enforce"] is True
    yield site
    site.recover()


def open_login(visit: Callable[..., Visit], site: WidgetSite) -> Visit:
    record = visit(site.url, go=False)
    record.page.on("request", lambda request: site.adapters.append(request.url)
                   if "/failopen/failopen-" in request.url else None)
    record.page.goto(site.url + "/")
    return record


def log_in(record: Visit, site: WidgetSite, *, clicks: int = 1) -> tuple[int, Any]:
    """Submit as a person would: tick a checkbox where there is one (the submit before it is
    held), and the form goes once the token is in."""
    record.page.click(SUBMIT)
    for _ in range(clicks if site.needs_click else 0):
        record.page.wait_for_selector(CHECKBOX)
        record.page.click(CHECKBOX)
        record.page.wait_for_timeout(300)
    return record.wait_for_answer()


def test_a_log_in_goes_through_with_one_token_sent_once(
        fresh: WidgetSite, visit: Callable[..., Visit]) -> None:
    site = fresh
    record = open_login(visit, site)
    record.wait_for_state("ready", "completed")
    status, body = log_in(record, site)
    assert (status, body["decision"]["outcome"]) == (200, "valid"), (body, record.console)
    # One field of the vendor's name, holding the token the vendor handed out: the widget's
    # own (empty, or a duplicate) never goes.
    posted = record.posts[-1][site.api.token_field]
    tokens = [c.token for c in site.script.challenges if c.outcome == "token"]
    assert len(posted) == 1 and posted[0] in tokens, record.posts
    assert site.script.script_requests == 1
    expected = "failopen-recaptcha.js" if site.vendor == "recaptcha" else \
        f"failopen-{site.vendor}.js"
    assert [u.rsplit("/", 1)[1] for u in site.adapters] == [expected]  # the configured one only
    if site.widget == "score":
        assert [c.action for c in site.script.challenges] == ["login"]  # the route's action
        assert site.script.renders == []  # v3 renders no widget
    else:
        assert [r.sitekey for r in site.script.renders] == [site.api.public_key]
    # The vendor verified it once: a replay of the same form is refused.
    replay = httpx.post(site.url + "/login", data={site.api.token_field: posted[0]},
                        headers={"Accept": "application/json"}, timeout=10)
    assert replay.status_code == 403


def test_a_widget_that_errors_once_is_retried_and_goes_through(
        fresh: WidgetSite, visit: Callable[..., Visit]) -> None:
    site = fresh
    site.script.set_mode("error_then_ok:1")
    record = open_login(visit, site)
    status, body = log_in(record, site, clicks=2)
    assert (status, body["decision"]["outcome"]) == (200, "valid"), (body, record.console)
    outcomes = [c.outcome for c in site.script.challenges]
    assert outcomes[0] == "error" and outcomes[-1] == "token", outcomes
    assert any("retry" in line for line in record.console), record.console


def test_a_script_that_404s_admits_nothing_while_enforcing(
        fresh: WidgetSite, visit: Callable[..., Visit]) -> None:
    site = fresh
    site.script.set_mode("http404")
    record = open_login(visit, site)
    record.wait_for_state("failed")
    record.page.click(SUBMIT)
    record.page.wait_for_timeout(300)
    assert record.posts == [] and record.state == "failed"
    assert "could not load" in record.page.inner_text("[data-failopen-message]")
    assert site.flag()["enforce"] is True


def test_during_the_outage_the_script_is_not_loaded_and_the_log_in_goes_through(
        fresh: WidgetSite, visit: Callable[..., Visit]) -> None:
    site = fresh
    site.outage()
    requests_before = site.script.script_requests
    record = open_login(visit, site)
    record.wait_for_state("bypassed")
    status, body = record_submit(record)
    assert status == 200 and body["bypassed"] is True, body
    assert site.script.script_requests == requests_before  # the vendor's script: never asked
    assert site.adapters == []  # nor its adapter
    assert site.api.token_field not in record.posts[-1]


def record_submit(record: Visit) -> tuple[int, Any]:
    record.page.click(SUBMIT)
    return record.wait_for_answer()


def test_the_page_holds_the_widget_in_the_form_and_nothing_of_the_vendor_s_otherwise(
        fresh: WidgetSite, visit: Callable[..., Visit]) -> None:
    site = fresh
    record = open_login(visit, site)
    record.wait_for_state("ready", "completed")
    form = record.page.inner_html("form")
    if site.widget == "score":
        assert "data-fake-captcha" not in form
    else:
        # The widget is rendered inside the form, before its submit button.
        assert record.page.eval_on_selector(
            "form > button", "b => !!b.previousElementSibling.querySelector('iframe')")
