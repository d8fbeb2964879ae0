"""Security review, session 5: a web page the developer visits cannot steer a running fake.

Real Chromium, a fake verify API served with its control route (as ``failopen emulate verify``
serves it) and an attacker's page on another origin, ``evil.test``, which Chromium resolves to
127.0.0.1 (``--host-resolver-rules``): what a rebinding DNS name gives an attacker. Every way a
page can send a request without the target's consent is tried; the fake's fault stays unset.
"""

from __future__ import annotations

from typing import Any

import pytest

from failopen.testing import FakeVerifyAPI, LoopbackServer
from failopen.testing._server import Reply

pytestmark = pytest.mark.slow

EVIL_PAGE = """<!doctype html><html><body>
<iframe name="sink"></iframe>
<form id="f" method="post" enctype="text/plain" target="sink" action="CONTROL">
<input name='{"fault": "503", "x": "' value='"}'></form>
<script>
window.attacks = (async () => {
  const url = "CONTROL", body = '{"fault": "503"}', tried = [];
  const attempt = async (name, f) => { try { await f(); tried.push(name + ":sent"); }
                                       catch (e) { tried.push(name + ":" + e.name); } };
  await attempt("no-cors text/plain", () => fetch(url, {method: "POST", mode: "no-cors", body}));
  await attempt("no-cors json header", () => fetch(url, {method: "POST", mode: "no-cors", body,
                                            headers: {"Content-Type": "application/json"}}));
  await attempt("cors json", () => fetch(url, {method: "POST", body,
                                   headers: {"Content-Type": "application/json"}}));
  await attempt("beacon json", async () => navigator.sendBeacon(url,
                                   new Blob([body], {type: "application/json"})));
  await attempt("beacon text", async () => navigator.sendBeacon(url, body));
  document.getElementById("f").submit();
  await new Promise(r => setTimeout(r, 500));
  return tried;
})();
</script></body></html>"""


def test_a_web_page_cannot_set_a_fault_on_a_served_fake(browser: Any) -> None:
    """One session-wide Chromium (a second sync Playwright cannot start inside the first);
    it resolves evil.test to 127.0.0.1 (tests/browser/_browser_kit.py)."""
    api = FakeVerifyAPI()
    server = api.serve(control=True)
    port = server.url.rsplit(":", 1)[1]
    control = f"http://127.0.0.1:{port}/_control"
    page_html = EVIL_PAGE.replace("CONTROL", control).encode()
    evil = LoopbackServer(lambda request: Reply(body=page_html,
                                                headers=[("Content-Type", "text/html")])).start()
    context = browser.new_context()
    try:
        page = context.new_page()
        evil_port = evil.url.rsplit(":", 1)[1]
        # Another site the developer visits.
        page.goto(f"http://evil.test:{evil_port}/")
        tried = page.evaluate("window.attacks")
        assert len(tried) == 5, tried
        assert api.fault is None, f"a cross-origin page set the fake's fault ({tried})"
        # DNS rebinding: evil.test now resolves to the fake itself; the page is same-origin with
        # it and may send anything, but its requests name evil.test as their Host.
        page.goto(f"http://evil.test:{port}/anything")
        status = page.evaluate("""async () => (await fetch("/_control", {method: "POST",
            headers: {"Content-Type": "application/json"}, body: '{"fault": "503"}'})).status""")
        assert status == 403 and api.fault is None
        # The same request from the developer's own loopback name is applied: the route works.
        page.goto(f"http://127.0.0.1:{port}/anything")
        status = page.evaluate("""async () => (await fetch("/_control", {method: "POST",
            headers: {"Content-Type": "application/json"}, body: '{"fault": "503"}'})).status""")
        assert status == 200 and api.fault == "503"
    finally:
        context.close()
        evil.stop()
        server.stop()


