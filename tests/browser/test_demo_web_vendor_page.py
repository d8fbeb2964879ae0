"""``failopen demo --web --vendor NAME`` in Chromium: the real command, the vendor's own widget
in the demo's forms, a log-in that goes through with it, and the global-outage scene letting the
log-in through without it; screenshots under ``test-artifacts/demo-web/``.

Turnstile's managed widget completes by itself; hCaptcha's shows a checkbox the visitor ticks
(the submit before it is held). The spec's vendor's page is tests/browser/test_demo_web.py.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections import deque
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from _browser_kit import ROOT, loopback_only, wait_until

from failopen.testing import free_port

pytestmark = pytest.mark.slow

FAILOPEN = Path(sys.executable).with_name("failopen")
SHOTS = ROOT / "test-artifacts" / "demo-web"
WAIT = 20.0
#: vendor -> whether its widget waits for a tick of its checkbox. reCAPTCHA has no status page:
#: its global outage is the verify probe's to see.
VENDORS = {"turnstile": False, "hcaptcha": True, "recaptcha": True}
CHECKBOX = "[data-fake-captcha]"


@pytest.fixture(scope="module", params=list(VENDORS))
def demo(request: pytest.FixtureRequest) -> Iterator[tuple[str, str, str]]:
    """``failopen demo --web --vendor NAME --port N``, as a user starts it: (vendor, url,
    the startup lines)."""
    vendor, port = request.param, free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAILOPEN_")}
    proc = subprocess.Popen(
        [str(FAILOPEN), "demo", "--web", "--vendor", vendor, "--port", str(port)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd="/")
    assert proc.stdout is not None
    lines = [proc.stdout.readline() for _ in range(2)]
    assert lines[0].startswith(f"failopen demo --web: open http://127.0.0.1:{port}/"), (
        "".join(lines) + (proc.stderr.read() if proc.stderr and proc.poll() is not None else ""))
    # Read what the demo writes from now on: a pipe nobody reads fills (64 KiB) and then
    # blocks the demo's next log line, freezing its server mid-test.
    drains = [threading.Thread(target=_drain, args=(stream, DEMO_LOG), daemon=True)
              for stream in (proc.stdout, proc.stderr)]
    for drain in drains:
        drain.start()
    try:
        yield vendor, f"http://127.0.0.1:{port}", "".join(lines)
    finally:
        proc.kill()
        proc.wait(timeout=10)
        for drain in drains:
            drain.join(timeout=10)  # the pipes end with the process
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()


#: The demo's last lines, shown when a wait times out.
DEMO_LOG: deque[str] = deque(maxlen=40)


def _drain(stream: Any, into: deque[str]) -> None:
    for line in stream:
        into.append(line)


def until(condition: Callable[[], bool], what: str, page: Any = None) -> None:
    """wait_until, with the demo's last log lines (and what the page said of the last button
    pressed) in the message when it times out."""
    try:
        wait_until(condition, WAIT, what)
    except AssertionError as exc:
        said = f"; the page said: {page.text_content('#action-note')!r}" if page else ""
        raise AssertionError(
            f"{exc}{said}; the demo's last lines:\n{''.join(DEMO_LOG)}") from None


def flag(base: str) -> dict[str, Any]:
    answer: dict[str, Any] = httpx.get(base + "/failopen/flag", timeout=5).json()
    return answer


class Login:
    """The demo page's log-in frame, as a visitor uses it."""

    def __init__(self, page: Any) -> None:
        self.page = page
        self.frame = page.frame_locator("#frame-login")

    def state(self) -> str:
        return str(self.page.get_attribute("#state-login", "data-state") or "")

    def until_state(self, *states: str) -> None:
        wait_until(lambda: (self.page.wait_for_timeout(25), self.state() in states)[1], WAIT,
                   f"the log-in's security check to be one of {states}")

    def submit(self, *, tick: bool) -> tuple[str, str]:
        """Press "Log in" (and tick the vendor's checkbox when it has one); the verdict."""
        result = "#result-login"
        seq = int(self.page.get_attribute(result, "data-seq") or 0)
        self.frame.locator("form > button").click()
        if tick:
            self.frame.locator(CHECKBOX).click()
        wait_until(lambda: (self.page.wait_for_timeout(25),
                            int(self.page.get_attribute(result, "data-seq") or 0) > seq)[1],
                   WAIT, "the log-in to be answered")
        return (str(self.page.get_attribute(result, "data-kind")),
                str(self.page.get_attribute(result, "data-outcome")))


def test_a_vendor_s_widget_logs_in_and_the_global_outage_lets_it_through(
        browser: Any, demo: tuple[str, str, str]) -> None:
    vendor, base, startup = demo
    assert f"FAILOPEN_VENDOR={vendor}" in startup  # the startup lines name the vendor
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    loopback_only(context)
    try:
        page = context.new_page()
        page.goto(base + "/")
        assert page.get_attribute("#vendor", "data-vendor") == vendor
        login = Login(page)

        # Enforcing: the vendor's widget is in the form (its checkbox, for hCaptcha), and its
        # token, verified once, admits the log-in.
        wait_until(lambda: flag(base)["enforce"] is True and flag(base)["vendor"] == vendor,
                   WAIT, "the flag to enforce")
        login.until_state("ready", "completed")
        frame = page.frame(name="frame-login")
        assert frame is not None
        assert frame.locator(f"input[name={_token_field(vendor)}]").count() <= 1
        if VENDORS[vendor]:
            frame.wait_for_selector(CHECKBOX)
        assert login.submit(tick=VENDORS[vendor]) == ("admitted", "valid")
        SHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SHOTS / f"vendor-{vendor}-1-admitted.png"), full_page=True)

        # The vendor's global outage: its status page says so; the log-in (outage policy open)
        # goes through without the vendor, whose script the form no longer loads.
        page.click("button[data-scene=global]")
        until(lambda: flag(base)["enforce"] is False, "enforcement off", page)
        login.until_state("bypassed")
        assert login.submit(tick=False) == ("bypassed", "bypassed_flag_off")
        page.screenshot(path=str(SHOTS / f"vendor-{vendor}-2-outage.png"), full_page=True)

        # Recovery: the vendor's challenge again.
        page.click("button[data-scene=recovery]")
        until(lambda: flag(base)["enforce"] is True, "enforcement back", page)
        login.until_state("ready", "completed")
    finally:
        context.close()


def _token_field(vendor: str) -> str:
    from failopen.providers.registry import provider_named

    return provider_named(vendor).token_field
