"""What docs/snippet.md tells a site with its own submit handler, and where the tag may go, in
Chromium (issue 31, item 13): a `click` listener sees every press, held or not; a `submit`
listener on `document` that skips `event.defaultPrevented` sees only the submit that leaves, and
none when the snippet refuses it. The tag works in `<head>` with `defer` and after the form
without it. A loopback page server and the shared fake vendor."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator

import pytest
from _browser_kit import PUBLIC_KEY, Vendor, Visit

from failopen.testing import LoopbackServer
from failopen.testing._server import FakeRequest, Reply
from failopen.web import SNIPPET_PATH

pytestmark = pytest.mark.slow

FORM = ('<form method="post" action="/login"><input type="hidden" name="enforcement-token">'
        '<button>Log in</button></form>')
# The documented pattern, and a spinner on the button's click (which runs before any submit
# listener). sessionStorage keeps the record across the form's navigation.
PAGE_JS = """
const note = what => sessionStorage.setItem('calls',
  JSON.stringify([...JSON.parse(sessionStorage.getItem('calls') || '[]'), what]));
document.querySelector('form button').addEventListener('click', () => note('click'));
document.addEventListener('submit', e => note(e.defaultPrevented ? 'held' : 'sent'));
"""


class Site:
    def __init__(self) -> None:
        self.url = ""
        self.flag = Reply.json({"enforce": True})
        self.vendor_url = ""
        self.where = "head"

    def handler(self, request: FakeRequest) -> Reply:
        if request.path in ("/", "/page"):
            tag = (f'<script src="/failopen.js" data-failopen-flag-url="/flag" '
                   f'data-failopen-public-key="{PUBLIC_KEY}" '
                   f'data-failopen-vendor-url="{self.vendor_url}"'
                   + (' defer></script>' if self.where == "head" else "></script>"))
            page_js = '<script src="/page.js" defer></script>'
            head, body = ((tag + page_js, FORM) if self.where == "head"
                          else (page_js, FORM + tag))
            return Reply(body=f"<!doctype html><html><head>{head}</head><body>{body}</body>"
                              "</html>".encode(), headers=[("Content-Type", "text/html")])
        if request.path == "/failopen.js":
            return Reply(body=SNIPPET_PATH.read_bytes(),
                         headers=[("Content-Type", "text/javascript")])
        if request.path == "/page.js":
            return Reply(body=PAGE_JS.encode(), headers=[("Content-Type", "text/javascript")])
        if request.path == "/flag":
            return self.flag
        return Reply.json({"posted": request.path})


@pytest.fixture
def site(fakes: Vendor) -> Iterator[Site]:
    state = Site()
    state.vendor_url = fakes.url
    with LoopbackServer(state.handler) as server:
        state.url = server.url
        yield state


def _calls(visit: Visit) -> list[str]:
    result: list[str] = json.loads(visit.page.evaluate("sessionStorage.getItem('calls')")
                                   or "[]")
    return result


@pytest.mark.parametrize("where", ["head", "after the form"])
def test_a_document_submit_listener_sees_only_the_submit_that_leaves(
    site: Site, visit: Callable[..., Visit], where: str,
) -> None:
    site.where = where
    page = visit(site.url, "/login")
    page.wait_for_state("ready")
    page.submit()
    status, answer = page.wait_for_answer()
    assert (status, answer) == (200, {"posted": "/login"})
    assert page.posts[0]["enforcement-token"][0].startswith("fake-vendor-")
    # The press, the submit the snippet held for the challenge, then the one that left.
    assert _calls(page) == ["click", "held", "sent"]


def test_a_refused_submit_is_never_seen_as_sent(site: Site, visit: Callable[..., Visit],
                                                ) -> None:
    site.flag = Reply.json({"enforce": False, "outage_policy": "closed"})
    page = visit(site.url, "/login")
    page.wait_for_state("closed")
    page.submit()
    page.wait_for(lambda v: len(_calls(v)) >= 2, "the press to be handled")
    page.page.wait_for_timeout(300)
    assert _calls(page) == ["click", "held"]  # a click spinner would spin on; this one would not
    assert page.posts == []
