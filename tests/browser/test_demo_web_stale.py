"""``failopen demo --web`` in Chromium: what the page shows belongs to the state it was made in
(issue 31, item 13). A verdict from before the flag flipped ("Admitted" under the password
reset, whose route is closed during the outage) and the proof-of-work box of a sign-up solved
during the outage go when the state changes; the scene lives in the server, so a reload keeps
it, and "Reset the demo" starts over (the vendor healthy, no override, empty timelines).
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from _browser_kit import loopback_only, wait_until
from test_demo_web import FAILOPEN, WAIT, DemoPage

from failopen.testing import free_port

pytestmark = pytest.mark.slow


@pytest.fixture
def demo() -> Iterator[str]:
    """``failopen demo --web --port N`` of this test alone (its scene is the test's)."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAILOPEN_")}
    proc = subprocess.Popen([str(FAILOPEN), "demo", "--web", "--port", str(port)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            cwd="/")
    assert proc.stdout is not None
    first = proc.stdout.readline()
    assert first.startswith(f"failopen demo --web: open http://127.0.0.1:{port}/"), first
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.kill()
        proc.communicate(timeout=10)


def test_old_verdicts_and_the_solving_box_go_when_the_state_changes(browser: Any,
                                                                    demo: str) -> None:
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    loopback_only(context)
    try:
        page = context.new_page()
        page.goto(demo + "/")
        ui = DemoPage(page, demo)
        ui.flag("on", "watcher")

        # Healthy: the password reset is admitted with a challenge.
        ui.form("password-reset", "ready")
        assert ui.submit("password-reset") == ("admitted", "valid")
        assert "Admitted" in ui.text("#result-password-reset")

        # The global outage: the route is closed now; the old "Admitted" must not stand under it.
        ui.press("scene", "global")
        ui.flag("off", "watcher")
        ui.form("password-reset", "closed")
        shown = ui.text("#result-password-reset")
        assert "Admitted" not in shown and shown.startswith("Nothing sent since"), shown
        assert ui.attribute("#result-password-reset", "data-kind") == ""

        # A sign-up solves the proof of work during the outage; the page times it.
        ui.form("signup", "bypassed")
        assert ui.submit("signup") == ("bypassed", "bypassed_fallback")
        assert ui.attribute("#solve-signup", "data-state") == "done"
        assert page.is_visible("#solve-signup")

        # Recovery: the box belonged to the outage; it goes, and so does the old verdict.
        ui.press("scene", "recovery")
        ui.flag("on", "watcher")
        ui.form("signup", "ready")
        ui.until(lambda: not page.is_visible("#solve-signup"), "the solving box to go")
        assert ui.attribute("#solve-signup", "data-state") == ""
        assert ui.attribute("#result-signup", "data-kind") == ""

        # The scene is the server's: a reload keeps it. The reset button starts over.
        ui.press("scene", "vendor_down")
        ui.press("override", "off")
        ui.flag("off", "override")
        page.reload()
        ui.flag("off", "override")
        assert ui.text("#fake-vendor").startswith("down")
        assert ui.decisions() > 0
        page.click("#reset")
        ui.until(lambda: "reset applied" in ui.text("#action-note"), "the reset to be applied")
        ui.flag("on", "watcher")
        assert ui.text("#fake-vendor") == "up"
        state = httpx.get(demo + "/demo/state", timeout=5).json()
        assert state["decisions"] == [] and state["fakes"]["vendor"]["down"] is False
        assert state["fakes"]["status"]["global"] == "operational"
        wait_until(lambda: ui.decisions() == 0, WAIT, "the decision log to be empty")
        for name in ("login", "signup", "password-reset"):
            assert ui.attribute(f"#result-{name}", "data-seq") == "0"
            assert ui.text(f"#result-{name}").startswith("Nothing sent yet")
        ui.form("login", "ready")
        assert ui.submit("login") == ("admitted", "valid")
    finally:
        context.close()
