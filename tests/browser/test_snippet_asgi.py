"""failopen.js in Chromium against ``examples/asgi_app.py`` under uvicorn and the test kit's fakes.

Every vendor mode x {flag on, flag off from the start, outage only seen by ``?confirm=1``}: the
snippet's final state, what the form sent, what the server decided. The rule under test: while
the status page shows no global outage, nothing reaches the protected view without a valid
token; the browser never bypasses on its own.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from _browser_kit import FINAL, PUBLIC_KEY, Vendor, Visit, enforcing, vendor_env, wait_until

pytestmark = pytest.mark.slow

FIELD = "enforcement-token"
READY_TIMEOUT_MS = 1500


@pytest.fixture(scope="module")
def site(vendor: Vendor, server_process: Callable[..., str]) -> Iterator[str]:
    """The ASGI example under uvicorn, with a snippet tuned to give up fast."""
    env = vendor_env(vendor, SNIPPET_READY_TIMEOUT_MS=str(READY_TIMEOUT_MS), SNIPPET_RETRIES="3",
                     SNIPPET_RETRY_DELAY_MS="100")
    yield server_process(
        [sys.executable, "-m", "uvicorn", "examples.asgi_app:app", "--host", "127.0.0.1", "--port",
         "{port}", "--lifespan", "on", "--log-level", "warning"], env, "/health")


@pytest.fixture
def asgi(site: str, fakes: Vendor) -> str:
    """The site, enforcing (the watcher has seen the operational page) before the test starts."""
    wait_until(lambda: enforcing(site), 10, "the server to enforce")
    return site


def outage_from_the_start(site: str, fakes: Vendor) -> None:
    fakes.page.set_global("major_outage")
    wait_until(lambda: not enforcing(site), 10, "the watcher to see the outage")


def token_sent(visit: Visit) -> str:
    assert len(visit.posts) == 1, visit.posts
    return visit.posts[0].get(FIELD, [""])[0]


MODES = ["ok", "http404", "silent", "error_then_ok:2", "error", "slow:300", "failed"]
# The challenge works in these modes (slow:300 answers well inside the ready time-out).
WORKS = {"ok", "error_then_ok:2", "slow:300"}


@pytest.mark.parametrize("mode", MODES)
def test_flag_on_no_outage_nothing_passes_without_a_valid_token(
    asgi: str, fakes: Vendor, visit: Callable[..., Visit], mode: str
) -> None:
    fakes.script.set_mode(mode)
    page = visit(asgi)
    page.submit()  # at once: the snippet holds it while it checks and loads
    if mode in WORKS:
        status, body = page.wait_for_answer()
        assert page.state == "completed"
        token = token_sent(page)
        assert token.startswith("fake-vendor-") and token in fakes.verify.tokens_seen
        assert status == 200 and body["decision"]["outcome"] == "valid"
        assert body["bypassed"] is False
    elif mode == "failed":
        # The person failed the challenge: no outage, no bypass, nothing sent; they may retry.
        page.wait_for(lambda v: any("onFailed" in line for line in v.console), "onFailed")
        page.page.wait_for_timeout(200)
        assert page.state == "ready" and page.posts == []
    else:
        page.wait_for_state(*FINAL)
        assert page.state == "failed"
        assert page.flag_requests[-1].endswith("/failopen/flag?path=%2Flogin&confirm=1")
        message = page.page.text_content("[data-failopen-message]")
        assert message == "The security check could not load. Please try again in a minute."
        page.page.evaluate("document.querySelector('[data-failopen-message]').remove()")
        page.submit()  # again: still nothing is sent, and the failure is shown again
        page.page.wait_for_selector("[data-failopen-message]")
        page.page.wait_for_timeout(200)
        assert page.posts == [] and page.state == "failed"
    # Two loads (the watchdog's retry) only when the script never answers or never calls back.
    expected_loads = 2 if mode in ("http404", "silent") else 1
    assert fakes.script.script_requests == expected_loads
    assert fakes.script.public_keys[0] == PUBLIC_KEY
    form_state = page.page.get_attribute("form", "data-failopen-state") if not page.posts else None
    assert form_state in (None, page.state)


@pytest.mark.parametrize("mode", MODES)
def test_flag_off_from_the_start_the_vendor_script_is_never_requested(
    asgi: str, fakes: Vendor, visit: Callable[..., Visit], mode: str
) -> None:
    fakes.script.set_mode(mode)
    outage_from_the_start(asgi, fakes)
    page = visit(asgi)
    page.wait_for_state(*FINAL)
    assert page.state == "bypassed"
    assert page.page.evaluate("FailOpen.state") == "bypassed"
    assert page.page.get_attribute("form", "data-failopen-state") == "bypassed"
    page.submit()
    status, body = page.wait_for_answer()
    assert token_sent(page) == ""
    assert status == 200 and body["bypassed"] is True
    assert fakes.script.script_requests == 0


@pytest.mark.parametrize("mode", MODES)
def test_outage_seen_only_by_the_confirm_check(
    asgi: str, fakes: Vendor, visit: Callable[..., Visit], mode: str
) -> None:
    fakes.script.set_mode(mode)
    fakes.outage_on_script_request = True
    page = visit(asgi)
    page.submit()
    if mode == "failed":
        page.wait_for(lambda v: any("onFailed" in line for line in v.console), "onFailed")
        page.page.wait_for_timeout(200)
        assert page.state == "ready" and page.posts == []  # a failed challenge is no outage
        return
    status, body = page.wait_for_answer()
    assert page.flag_requests[0].endswith("/failopen/flag?path=%2Flogin")
    if mode in WORKS:
        # The challenge worked: the token goes along. The server skips checking it once its
        # watcher has seen the outage (0.1 s polls), or checks it and finds it valid.
        assert page.state == "completed" and token_sent(page).startswith("fake-vendor-")
        assert status == 200
        assert body["bypassed"] is True or body["decision"]["outcome"] == "valid"
    else:
        assert page.state == "bypassed" and token_sent(page) == ""
        assert page.flag_requests[-1].endswith("/failopen/flag?path=%2Flogin&confirm=1")
        assert status == 200 and body["bypassed"] is True


@pytest.mark.parametrize("failure", ["500", "not_json", "unreachable", "enforce_missing"])
def test_an_unusable_flag_endpoint_means_enforce(
    asgi: str, fakes: Vendor, visit: Callable[..., Visit], failure: str
) -> None:
    def broken(route: Any) -> None:
        if failure == "500":
            route.fulfill(status=500, json={"enforce": False})
        elif failure == "not_json":
            route.fulfill(status=200, body="<html>enforce: false</html>",
                          content_type="text/html")
        elif failure == "enforce_missing":
            route.fulfill(status=200, json={"enforce": "false", "source": "override"})
        else:
            route.abort("connectionrefused")

    page = visit(asgi, go=False)
    page.page.route("**/failopen/flag*", broken)
    page.page.goto(asgi + "/")
    page.submit()
    status, body = page.wait_for_answer()
    assert page.state == "completed" and fakes.script.script_requests == 1
    assert status == 200 and body["decision"]["outcome"] == "valid"


def test_stale_bypass_runs_the_challenge_when_enforcement_is_back(
    asgi: str, fakes: Vendor, visit: Callable[..., Visit]
) -> None:
    outage_from_the_start(asgi, fakes)
    page = visit(asgi, clock=True)
    page.wait_for_state("bypassed")
    fakes.page.set_global("operational")
    wait_until(lambda: enforcing(asgi), 10, "the server to enforce again")
    page.page.clock.fast_forward("00:31")  # the page has been open for over 30 s
    page.submit()
    status, body = page.wait_for_answer()
    assert page.states[page.states.index("bypassed"):] == [
        "bypassed", "checking", "loading", "ready", "completed"]
    assert fakes.script.script_requests == 1 and token_sent(page).startswith("fake-vendor-")
    assert status == 200 and body["decision"]["outcome"] == "valid"


def test_a_fresh_bypass_is_not_asked_again(
    asgi: str, fakes: Vendor, visit: Callable[..., Visit]
) -> None:
    outage_from_the_start(asgi, fakes)
    page = visit(asgi)
    page.wait_for_state("bypassed")
    asked = len(page.flag_requests)
    page.submit()
    status, body = page.wait_for_answer()
    assert len(page.flag_requests) == asked and body["bypassed"] is True and status == 200


def test_works_under_a_strict_content_security_policy(
    asgi: str, fakes: Vendor, visit: Callable[..., Visit]
) -> None:
    page = visit(asgi, go=False)
    page.page.add_init_script(
        "window.__violations = [];"
        "document.addEventListener('securitypolicyviolation',"
        " e => window.__violations.push(e.violatedDirective + ' ' + e.blockedURI));")
    answer = page.page.goto(asgi + "/")
    assert answer.headers["content-security-policy"] == f"script-src 'self' {fakes.url}"
    page.submit()
    status, body = page.wait_for_answer()
    assert page.state == "completed" and body["decision"]["outcome"] == "valid"
    # The recorder works: an inline script on that page is refused.
    page.page.go_back()
    page.page.evaluate("document.body.appendChild(document.createElement('script'))"
                       ".textContent = 'window.inline = 1'")
    violations = page.page.evaluate("window.__violations")
    assert violations and all(v.startswith("script-src") for v in violations), violations
    assert page.page.evaluate("window.inline") is None


def test_screenshots_of_completed_bypassed_and_failed(
    asgi: str, fakes: Vendor, visit: Callable[..., Visit]
) -> None:
    completed = visit(asgi, go=False)
    # A 204 answer leaves the page where it is: the screenshot shows the completed form.
    completed.page.route("**/login", lambda route: route.fulfill(status=204))
    completed.page.goto(asgi + "/")
    completed.submit()
    completed.wait_for_state("completed")
    assert completed.page.input_value(f"input[name={FIELD}]").startswith("fake-vendor-")
    paths = [completed.screenshot("login-completed")]

    fakes.script.set_mode("http404")
    failed = visit(asgi)
    failed.wait_for_state("failed")
    paths.append(failed.screenshot("login-failed"))

    outage_from_the_start(asgi, fakes)
    bypassed = visit(asgi)
    bypassed.wait_for_state("bypassed")
    paths.append(bypassed.screenshot("login-bypassed"))
    assert all(path.stat().st_size > 1000 for path in paths)
