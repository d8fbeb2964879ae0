"""failopen.js after a failure, in Chromium against the ASGI example under uvicorn (its strict
``script-src 'self' <vendor>`` CSP) and the test kit's fakes.

The vendor script fails (a load error, no ``onReady``, ``onError`` every time), the server
confirms no outage, and the form shows "try again in a minute". The person did as told, the
vendor was back, and the form stayed dead until the page was reloaded. What must hold: a submit
during the cool-down says how long to wait and sends nothing anywhere; a submit after it starts
over (flag, script, challenge) and, once the vendor is back, goes through once with a valid
token; no unhandled promise rejection, no CSP violation on the way.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from _browser_kit import Vendor, Visit, enforcing, vendor_env, wait_until
from test_snippet_asgi import READY_TIMEOUT_MS, asgi, site, token_sent

pytestmark = pytest.mark.slow

__all__ = ["asgi", "site"]  # the ASGI example's fixtures, shared with test_snippet_asgi

MESSAGE = "[data-failopen-message]"
FIRST = "The security check could not load. Please try again in a minute."
# Whatever a page did that it should not have: unhandled rejections, errors, CSP violations.
# They go to the console, which the test reads across the form's navigation.
RECORDER = """
addEventListener('unhandledrejection', e => console.error('trouble: rejection', e.reason));
addEventListener('error', e => console.error('trouble: error', e.message));
document.addEventListener('securitypolicyviolation',
  e => console.error('trouble: csp', e.violatedDirective, e.blockedURI));
"""
# The three ways the vendor's script fails: a load error, never calling back, onError each time.
FAILURES = ["http404", "silent", "error"]
FAILOPEN = Path(sys.executable).with_name("failopen")


def open_failing_login(asgi: str, visit: Callable[..., Visit]) -> Visit:
    """The log-in page on a clock the test moves, with the recorder installed first, opened
    while the vendor script fails, until the snippet says so: at page load when the script
    does not load or never calls back, at the person's submit when it errs on the challenge.
    The caller breaks the script before, not after: the page checks the flag and loads the
    script on its own, however fast the machine."""
    page = visit(asgi, clock=True, go=False)
    page.page.add_init_script(RECORDER)
    page.page.on("pageerror", lambda error: page.console.append(f"pageerror: {error}"))
    answer = page.page.goto(asgi + "/")
    assert answer.headers["content-security-policy"].startswith("script-src 'self' ")
    page.wait_for_state("failed", "ready")
    if page.state == "ready":
        page.submit()
    _says_it_failed(page, 0)
    return page


def fail_once(page: Visit, fakes: Vendor, mode: str) -> None:
    """The person submits (after the cool-down) while the vendor script fails: the snippet
    starts over, and the form says it failed again and sends nothing."""
    fakes.script.set_mode(mode)
    failures = page.states.count("failed")
    page.submit()
    _says_it_failed(page, failures)


def _says_it_failed(page: Visit, failures: int) -> None:
    page.wait_for(lambda v: v.states.count("failed") > failures, "the snippet to fail")
    assert page.page.text_content(MESSAGE) == FIRST
    assert page.page.get_attribute(MESSAGE, "role") == "alert"
    # The server was asked.
    assert page.flag_requests[-1].endswith("/failopen/flag?path=%2Flogin&confirm=1")
    assert page.posts == [] and page.page.evaluate("FailOpen.state") == "failed"


def trouble(page: Visit) -> list[str]:
    """What the recorder and Playwright saw go wrong on the page (not a vendor's 404)."""
    return [line for line in page.console if "trouble:" in line or line.startswith("pageerror")]


@pytest.mark.parametrize("mode", FAILURES)
def test_after_the_cool_down_a_submit_starts_over_and_goes_through_once_the_vendor_is_back(
    asgi: str, fakes: Vendor, visit: Callable[..., Visit], mode: str
) -> None:
    fakes.script.set_mode(mode)
    page = open_failing_login(asgi, visit)
    loads = fakes.script.script_requests

    # Still down after the cool-down: the submit starts over (the script is asked for again)
    # and fails again, with a new cool-down; still nothing sent.
    page.page.clock.fast_forward("01:01")
    fail_once(page, fakes, mode)
    assert fakes.script.script_requests > loads

    # The vendor is back, but the person is early: told how long to wait, nothing asked or sent.
    fakes.script.set_mode("ok")
    asked, loads = len(page.flag_requests), fakes.script.script_requests
    page.page.clock.fast_forward("00:20")
    page.submit()
    page.wait_for(lambda v: page.page.text_content(MESSAGE) != FIRST, "the wait to be shown")
    wait = re.fullmatch(r"The security check could not load\. Please try again in (\d+) "
                        r"seconds\.", page.page.text_content(MESSAGE) or "")
    assert wait and 30 <= int(wait[1]) <= 40, page.page.text_content(MESSAGE)
    page.page.wait_for_timeout(300)
    assert (len(page.flag_requests), fakes.script.script_requests) == (asked, loads)
    assert page.posts == [] and page.state == "failed"

    # After the cool-down: flag, script, challenge, and the form goes, once, with a valid token,
    # though the person clicked twice.
    failed = len(page.states)
    page.page.clock.fast_forward("00:41")
    page.page.dblclick("form button")
    status, body = page.wait_for_answer()
    assert page.states[failed:] == ["checking", "loading", "ready", "completed"]
    assert page.flag_requests[asked:] == [asgi + "/failopen/flag?path=%2Flogin"]
    assert fakes.script.script_requests == loads + 1
    page.page.wait_for_timeout(300)
    assert len(page.posts) == 1, page.posts
    token = token_sent(page)
    assert token.startswith("fake-vendor-") and token in fakes.verify.tokens_seen
    assert status == 200 and body["decision"]["outcome"] == "valid" and body["bypassed"] is False
    assert trouble(page) == []


def test_a_failure_at_page_load_recovers_on_the_first_submit_after_the_cool_down(
    asgi: str, fakes: Vendor, visit: Callable[..., Visit]
) -> None:
    """The script failed before the person touched the form; they read the message, wait."""
    fakes.script.set_mode("http404")
    page = open_failing_login(asgi, visit)
    fakes.script.set_mode("ok")
    page.page.clock.fast_forward("01:01")
    page.submit()
    status, body = page.wait_for_answer()
    assert page.state == "completed" and token_sent(page).startswith("fake-vendor-")
    assert status == 200 and body["decision"]["outcome"] == "valid"
    assert trouble(page) == []


def test_starting_over_clears_the_message_while_it_works(
    asgi: str, fakes: Vendor, visit: Callable[..., Visit]
) -> None:
    """A stale "could not load" next to a check that is running again would be a lie."""
    fakes.script.set_mode("http404")
    page = open_failing_login(asgi, visit)
    page.page.route("**/login", lambda route: route.fulfill(status=204))  # stay on the page
    fakes.script.set_mode("slow:500")
    page.page.clock.fast_forward("01:01")
    page.submit()
    page.wait_for_state("loading")
    assert page.page.text_content(MESSAGE) == ""
    page.wait_for_state("completed")
    assert page.page.text_content(MESSAGE) == ""
    assert page.page.get_attribute("form", "data-failopen-state") == "completed"


def test_the_readme_recipe_failopen_emulate_vendor_down_then_back(
    fakes: Vendor, visit: Callable[..., Visit], server_process: Callable[..., str]
) -> None:
    """docs/testing.md, "Testing an outage locally": ``failopen emulate vendor`` in one terminal,
    the site, ``--set down=true`` and ``--set down=false`` in another; the open page recovers."""
    emulator = server_process([str(FAILOPEN), "emulate", "vendor", "--port", "{port}"], {},
                              "/_control")
    env = vendor_env(fakes, FAILOPEN_VENDOR_URL=emulator,
                     SNIPPET_READY_TIMEOUT_MS=str(READY_TIMEOUT_MS), SNIPPET_RETRY_DELAY_MS="100")
    site = server_process(
        [sys.executable, "-m", "uvicorn", "examples.asgi_app:app", "--host", "127.0.0.1",
         "--port", "{port}", "--log-level", "warning"], env, "/health")
    wait_until(lambda: enforcing(site), 10, "the server to enforce")

    def control(setting: str) -> None:
        subprocess.run([str(FAILOPEN), "emulate", "vendor", "--url", emulator, "--set", setting],
                       check=True, capture_output=True, timeout=30)

    control("down=true")
    page = open_failing_login(site, visit)
    control("down=false")
    page.page.clock.fast_forward("01:01")
    page.submit()
    status, body = page.wait_for_answer()
    # A token the emulator signed, which the verify fake accepted: a real solve, not a bypass.
    assert page.state == "completed" and len(page.posts) == 1
    assert status == 200 and body["decision"]["outcome"] == "valid" and body["bypassed"] is False
    assert trouble(page) == []
