"""failopen.js's page API in Chromium: ``FailOpen.init`` and its callbacks, the one global, the
forms it takes over, and a token that never reaches the console. A loopback page server whose
flag answer each test sets, and the shared fake vendor script."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from _browser_kit import PUBLIC_KEY, Vendor, Visit

from failopen.testing import LoopbackServer
from failopen.testing._server import FakeRequest, Reply
from failopen.web import SNIPPET_PATH

pytestmark = pytest.mark.slow

FORMS = (
    '<form id="a" method="post" action="/login"><input type="hidden" name="enforcement-token">'
    '<button>Log in</button></form>'
    '<form id="b" method="post" action="/search"><button>Search</button></form>'
)
# A deferred page script: what a site writes to add callbacks under a CSP without inline script.
PAGE_JS = (
    "window.calls = [];"
    "FailOpen.init({retries: 0, onToken: t => calls.push(['token', t]),"
    " onBypass: () => calls.push(['bypass']), onFailure: m => calls.push(['failure', m])});"
)


@dataclass
class PageServer:
    url: str = ""
    flag: Reply = field(default_factory=lambda: Reply.json({"enforce": True}))
    tag: str = ""
    page_js: bool = True
    script: str = PAGE_JS
    #: Answers to ``?path=...&confirm=1``, in turn (then ``flag``).
    confirms: list[Reply] = field(default_factory=list)
    #: Answers to ``?path=...&confirm=1&question=N`` (N: the order the page asked in; see
    #: ``number_the_questions``), when the order they reach the server must not matter.
    by_question: dict[str, Reply] = field(default_factory=dict)
    vendor_js: str = ""
    #: When set, the flag's answers wait for it: a test holds the check as long as it needs.
    flag_gate: threading.Event | None = None

    def handler(self, request: FakeRequest) -> Reply:
        if request.path == "/":
            script = "" if not self.tag else (
                f'<script src="/failopen.js" defer {self.tag}></script>'
                + ('<script src="/page.js" defer></script>' if self.page_js else ""))
            return Reply(body=f"<!doctype html><html><head>{script}</head><body>{FORMS}"
                              "</body></html>".encode(), headers=[("Content-Type", "text/html")])
        if request.path == "/failopen.js":
            return Reply(body=SNIPPET_PATH.read_bytes(),
                         headers=[("Content-Type", "text/javascript")])
        if request.path == "/page.js":
            return Reply(body=self.script.encode(), headers=[("Content-Type", "text/javascript")])
        if request.path == "/flag":
            if self.flag_gate is not None:
                self.flag_gate.wait(timeout=30)
            question = request.query.get("question", [""])[0]
            if question in self.by_question:
                return self.by_question[question]
            if "confirm" in request.query and self.confirms:
                return self.confirms.pop(0)
            return self.flag
        if request.path.endswith("/api.js") and self.vendor_js:
            return Reply(body=self.vendor_js.encode(),
                         headers=[("Content-Type", "text/javascript")])
        return Reply.json({"posted": request.path})


@pytest.fixture(scope="module")
def page_server() -> Iterator[PageServer]:
    state = PageServer()
    with LoopbackServer(state.handler) as server:
        state.url = server.url
        yield state


@pytest.fixture
def site(page_server: PageServer, fakes: Vendor) -> PageServer:
    page_server.flag = Reply.json({"enforce": True})
    page_server.page_js = True
    page_server.script = PAGE_JS
    page_server.confirms = []
    page_server.vendor_js = ""
    page_server.tag = (f'data-failopen-flag-url="/flag" data-failopen-public-key="{PUBLIC_KEY}" '
                       f'data-failopen-vendor-url="{fakes.url}" data-failopen-retries="5"')
    return page_server


def calls(visit: Visit) -> list[list[Any]]:
    result: list[list[Any]] = visit.page.evaluate("window.calls")
    return result


def test_init_options_win_and_on_token_gets_the_token_which_is_never_logged(
    site: PageServer, fakes: Vendor, visit: Callable[..., Visit]
) -> None:
    page = visit(site.url, "/login")
    page.wait_for_state("ready")
    page.submit()
    page.wait_for_answer()
    token = page.posts[0]["enforcement-token"][0]
    assert token.startswith("fake-vendor-")
    assert not any(token in line for line in page.console)
    assert any("[failopen] run" in line for line in page.console)


def test_callbacks_on_bypass_and_on_failure(
    site: PageServer, fakes: Vendor, visit: Callable[..., Visit]
) -> None:
    site.flag = Reply.json({"enforce": False})
    page = visit(site.url, "/login")
    page.wait_for_state("bypassed")
    assert calls(page) == [["bypass"]]
    assert fakes.script.script_requests == 0

    site.flag = Reply.json({"enforce": True})
    fakes.script.set_mode("error")
    page = visit(site.url, "/login")
    page.submit()
    page.wait_for_state("failed")
    # retries: 0 from init() won over data-failopen-retries="5": one onError, then the confirm.
    assert calls(page) == [["failure", "The security check could not load. Please try again "
                                       "in a minute."]]
    assert sum("onError" in line or "retry" in line for line in page.console) == 0


def test_only_forms_with_the_token_field_are_taken_over(
    site: PageServer, fakes: Vendor, visit: Callable[..., Visit]
) -> None:
    page = visit(site.url, "/login")
    page.wait_for_state("ready")
    assert page.page.get_attribute("#a", "data-failopen-state") == "ready"
    assert page.page.get_attribute("#b", "data-failopen-state") is None
    with page.page.expect_navigation():
        page.page.click("#b button")  # the search form goes as it always did
    assert json.loads(page.page.inner_text("body")) == {"posted": "/search"}
    assert fakes.script.script_requests == 1


def test_one_global_besides_the_generated_callback(
    site: PageServer, fakes: Vendor, visit: Callable[..., Visit]
) -> None:
    site.page_js = False
    with_snippet = visit(site.url, "/login")
    with_snippet.wait_for_state("ready")
    site.tag = ""
    without = visit(site.url, "/login")
    before = set(without.page.evaluate("Object.keys(window)"))
    added = set(with_snippet.page.evaluate("Object.keys(window)")) - before
    assert "FailOpen" in added
    (callback,) = added - {"FailOpen"}
    assert callback.startswith("failopenVendor")
    tag = with_snippet.page.get_attribute("script[data-callback]", "data-callback")
    assert tag == callback


def test_a_submit_during_the_flag_check_is_held_not_sent(
    site: PageServer, fakes: Vendor, visit: Callable[..., Visit]
) -> None:
    # The flag's answer is held until the test has looked, not for a time a loaded machine
    # might outrun.
    site.flag_gate = threading.Event()
    page = visit(site.url, "/login")
    page.submit()
    page.page.wait_for_timeout(300)
    assert page.state == "checking" and page.posts == []
    site.flag_gate.set()
    page.wait_for_answer()
    assert page.posts[0]["enforcement-token"][0].startswith("fake-vendor-")


@pytest.mark.parametrize("flag", [True, False])
def test_a_callback_that_throws_does_not_hold_the_form(
    site: PageServer, fakes: Vendor, visit: Callable[..., Visit], flag: bool
) -> None:
    site.flag = Reply.json({"enforce": flag})
    site.script = ("FailOpen.init({onToken: () => { throw new Error('page bug'); },"
                   " onBypass: () => { throw new Error('page bug'); }});")
    page = visit(site.url, "/login")
    page.submit()
    page.wait_for_answer()
    assert page.state == ("completed" if flag else "bypassed") and len(page.posts) == 1


def test_unconfigured_it_leaves_the_forms_alone(
    site: PageServer, fakes: Vendor, visit: Callable[..., Visit]
) -> None:
    # No vendor URL (FAILOPEN_VENDOR_URL unset): blocking every log-in would be worse than
    # letting the server refuse token-less ones.
    site.tag = f'data-failopen-flag-url="/flag" data-failopen-public-key="{PUBLIC_KEY}"'
    page = visit(site.url, "/login")
    page.wait_for(lambda v: any("no publicKey/vendorUrl" in line for line in v.console),
                  "the error in the console")
    assert page.page.get_attribute("#a", "data-failopen-state") is None
    page.submit()
    page.wait_for_answer()
    assert page.flag_requests == [] and page.posts[0]["enforcement-token"] == [""]
    assert fakes.script.script_requests == 0


def test_a_flag_answer_redirected_to_another_origin_is_not_a_bypass(
    site: PageServer, fakes: Vendor, visit: Callable[..., Visit]
) -> None:
    """Only the flag endpoint's own answer may turn the challenge off: a redirect (an open
    redirect in front of it, a proxy rule) to an origin that says "enforce": false, with CORS
    allowed, was followed and obeyed."""
    elsewhere = Reply.json({"enforce": False},
                           headers=[("Access-Control-Allow-Origin", "*")])
    with LoopbackServer(lambda request: elsewhere) as other:
        site.flag = Reply(status=302, headers=[("Location", other.url + "/flag")])
        page = visit(site.url, "/login")
        page.wait_for_state("ready")
        page.submit()
        page.wait_for_answer()
    assert page.posts[0]["enforcement-token"][0].startswith("fake-vendor-")
    assert "bypassed" not in page.states and fakes.script.script_requests == 1


# A vendor whose run() reports two errors at once: two outage confirmations go out together.
TWO_ERRORS = """(() => {
  const name = document.currentScript.getAttribute('data-callback');
  let c;
  window[name]({setConfig: x => { c = x; setTimeout(() => c.onReady()); },
                run: () => { c.onError(); c.onError(); }, reset: () => {}});
})();"""


def number_the_questions(page: Any) -> None:
    """Add ``question=N`` to each ``&confirm=1`` the page asks, in the order it asks them."""
    asked: list[str] = []

    def number(route: Any) -> None:
        asked.append(route.request.url)
        route.continue_(url=f"{route.request.url}&question={len(asked)}")

    page.route("**/flag?*confirm=1*", number)


def test_an_older_slower_flag_answer_does_not_overrule_the_latest(
    site: PageServer, fakes: Vendor, visit: Callable[..., Visit]
) -> None:
    """Two confirmations in flight: the first is answered "enforce": false late, after the
    second said "enforce": true. The late one used to win: state bypassed, and the form went
    without a token to a server that enforces (and refused it)."""
    site.vendor_js = TWO_ERRORS
    site.tag = site.tag.replace(fakes.url, site.url)
    # Two identical requests may reach the server in either order: each is numbered as the page
    # asks it (Playwright sees them in that order), and answered by its number.
    site.by_question = {"1": Reply.json({"enforce": False}, delay=0.8),
                        "2": Reply.json({"enforce": True})}
    page = visit(site.url, "/login")
    page.wait_for_state("ready")
    number_the_questions(page.page)
    page.submit()
    page.wait_for_state("failed")
    page.page.wait_for_timeout(1200)  # the late answer has arrived by now
    assert page.state == "failed" and page.posts == []
    assert page.page.evaluate("FailOpen.state") == "failed"


@pytest.mark.parametrize("flag", [True, False])
def test_a_callback_that_throws_is_reported_not_left_as_an_unhandled_rejection(
    site: PageServer, fakes: Vendor, visit: Callable[..., Visit], flag: bool
) -> None:
    """onBypass / onFailure run after the flag's answer: a throw there was an unhandled
    promise rejection, which sites' error trackers count as the snippet's crash."""
    site.flag = Reply.json({"enforce": flag})
    fakes.script.set_mode("http404")
    site.script = ("FailOpen.init({onBypass: () => { throw new Error('page bug'); },"
                   " onFailure: () => { throw new Error('page bug'); }});")
    page = visit(site.url, "/login", go=False)
    page.page.add_init_script("addEventListener('unhandledrejection',"
                              " e => console.error('unhandled rejection:', e.reason));")
    page.page.goto(site.url + "/")
    page.wait_for_state("failed" if flag else "bypassed")
    page.page.wait_for_timeout(200)
    assert not any("unhandled rejection" in line for line in page.console), page.console
    # Still in front of the site's developer, as an error in the console.
    assert any(line.startswith("error:") and "page bug" in line for line in page.console)
