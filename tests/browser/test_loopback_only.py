"""The browser kit's ``loopback_only``: pages reach 127.0.0.1 and nothing else, and a page's
request to loopback goes out while the test is busy elsewhere (polling a server with httpx).

With a Python predicate as the route's matcher, every request waited for the test's next
Playwright call: the web demo's scene button posted nothing while its test polled the flag, and
the test timed out on a loaded CI machine.
"""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from _browser_kit import loopback_only

pytestmark = pytest.mark.slow

#: How long the test waits for a request it expects; only a failure takes this long.
PATIENCE = 15.0


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.release_first = threading.Event()
        self.second_seen = threading.Event()

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _Handler(http.server.BaseHTTPRequestHandler):
    server: _Server

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        if self.path == "/first":
            self.server.release_first.wait(PATIENCE)  # answered once the test has moved on
        elif self.path == "/second":
            self.server.second_seen.set()
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Access-Control-Allow-Origin", "*")
        self.end_headers()
        self.wfile.write(b"<p>loopback</p>")

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base's name
        pass


@pytest.fixture
def server() -> Iterator[_Server]:
    served = _Server()
    thread = threading.Thread(target=served.serve_forever, daemon=True)
    thread.start()
    try:
        yield served
    finally:
        served.release_first.set()
        served.shutdown()
        served.server_close()


def test_a_page_s_request_goes_out_while_the_test_makes_no_playwright_call(
        browser: Any, server: _Server) -> None:
    context = browser.new_context()
    loopback_only(context)
    try:
        page = context.new_page()
        page.goto(server.base + "/")
        # The second request starts only after the first is answered, which is after the
        # evaluate call has returned: from then on this test calls nothing of Playwright's.
        page.evaluate("() => { fetch('/first').then(() => fetch('/second')); }")
        server.release_first.set()
        assert server.second_seen.wait(PATIENCE), (
            "the page's request to 127.0.0.1 was held until the test's next Playwright call")
    finally:
        context.close()


def test_anything_but_loopback_is_aborted(browser: Any, server: _Server) -> None:
    context = browser.new_context()
    loopback_only(context)
    try:
        page = context.new_page()
        page.goto(server.base + "/")
        # Aborted here, the request fails as ERR_FAILED; let through, it would fail on the name.
        with page.expect_event("requestfailed") as failed:
            page.evaluate("fetch('http://example.invalid/').catch(() => null)")
        assert failed.value.failure == "net::ERR_FAILED", failed.value.failure
    finally:
        context.close()
