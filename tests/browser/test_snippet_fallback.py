"""failopen.js during an outage, per route: ``open`` submits, ``closed`` says "briefly unavailable"
and sends nothing, ``fallback`` solves the server's ALTCHA challenge in a Web Worker
(failopen-solver.js) and sends the answer in the field ``altcha``. In Chromium, on a loopback site
that serves every file under ``script-src 'self'; worker-src 'self'``, whose flag and challenge
endpoints this module plays (real challenges from the ``altcha`` package), and which verifies
what each form sent with ``altcha.verify_solution_v1``.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any
from urllib.parse import parse_qs

import pytest
from _browser_kit import PUBLIC_KEY, Vendor, Visit

from failopen.testing import LoopbackServer
from failopen.testing._server import FakeRequest, Reply
from failopen.web import SNIPPET_PATH, SOLVER_PATH

altcha = pytest.importorskip("altcha", reason='pip install "failopen[fallback]"')

pytestmark = pytest.mark.slow

SECRET = "a-test-secret-of-at-least-32-characters"
CSP = "script-src 'self'; worker-src 'self'"
CLOSED = "This action is briefly unavailable. Please try again in a few minutes."
MESSAGE = "[data-failopen-message]"
# The page's own script (a file: the CSP allows no inline script). It records every value of the
# form's data-failopen-state, anything the CSP refused, and keeps two clocks running on the main
# thread: a long solve on that thread would stop both.
PAGE_JS = """
window.ticks = 0; window.frames = 0; window.longest = 0;
let last = performance.now();
setInterval(() => {
  const now = performance.now();
  window.longest = Math.max(window.longest, now - last);
  last = now;
  window.ticks++;
}, 10);
(function frame() { window.frames++; requestAnimationFrame(frame); })();
document.addEventListener('securitypolicyviolation',
  e => console.error('trouble: csp', e.violatedDirective, e.blockedURI));
addEventListener('unhandledrejection', e => console.error('trouble: rejection', e.reason));
document.addEventListener('DOMContentLoaded', () => {
  for (const form of document.forms) {
    new MutationObserver(() => console.log('attribute', form.id,
      form.getAttribute('data-failopen-state')))
      .observe(form, {attributes: true, attributeFilter: ['data-failopen-state']});
  }
});
"""


@dataclass
class Site:
    """The site: its page, the snippet's two files, the flag and challenge endpoints, the view."""

    vendor: Vendor
    url: str = ""
    enforce: bool = False
    #: The outage policy the flag endpoint gives each path (absent: null, not protected).
    policies: dict[str, str] = field(default_factory=dict)
    cost: int = 2000
    #: Answers the challenge endpoint gives before real ones, in turn.
    challenges: list[Reply] = field(default_factory=list)
    #: The number the next real challenges hide (default: a random one up to ``cost``).
    number: int | None = None
    tag: str = ""
    forms: str = ""
    flag_queries: list[str] = field(default_factory=list)
    challenge_requests: int = 0
    #: What each form POST carried, and whether its altcha payload verified.
    posts: list[dict[str, Any]] = field(default_factory=list)

    def challenge(self, *, expires_in: float = 300, issued: bool = True) -> dict[str, Any]:
        """A real ALTCHA v1 challenge as the contract spells it (``maxnumber``)."""
        now = time.time()
        made = altcha.create_challenge_v1(
            hmac_key=SECRET, max_number=self.cost, number=self.number,
            expires=_utc(now + expires_in),
            params={"issued": str(int(now))} if issued else None)
        answer = made.to_dict()
        answer["maxnumber"] = answer.pop("maxNumber")
        return answer

    def handler(self, request: FakeRequest) -> Reply:
        path = request.path
        if path == "/":
            page = (f'<!doctype html><html><head><script src="/static/failopen.js" defer '
                    f'{self.tag}></script><script src="/static/page.js" defer></script>'
                    # Proof that the CSP is enforced: this must never run.
                    "<script>window.inline = 1</script></head>"
                    f"<body>{self.forms}</body></html>")
            return Reply(body=page.encode(), headers=[("Content-Type", "text/html"),
                                                      ("Content-Security-Policy", CSP)])
        files = {"/static/failopen.js": SNIPPET_PATH.read_bytes(),
                 "/static/failopen-solver.js": SOLVER_PATH.read_bytes(),
                 "/static/page.js": PAGE_JS.encode()}
        if path in files:
            return Reply(body=files[path], headers=[("Content-Type", "text/javascript")])
        if path == "/failopen/flag":
            self.flag_queries.append(_query(request))
            where = request.query.get("path", [""])[0]
            return Reply.json({"enforce": self.enforce, "outage_policy": self.policies.get(where)},
                              headers=[("Cache-Control", "no-store")])
        if path == "/failopen/challenge":
            self.challenge_requests += 1
            if self.challenges:
                return self.challenges.pop(0)
            if self.enforce:
                return Reply.json({"error": {"code": "enforcing"}}, status=409)
            return Reply.json(self.challenge(), headers=[("Cache-Control", "no-store")])
        if path.startswith("/v2/"):  # the vendor's script, same origin: 'self' allows it
            return self.vendor.script.handler(request)
        if request.method == "POST":
            form = parse_qs(request.body.decode(), keep_blank_values=True)
            payloads = form.get("altcha", [])
            verified = [altcha.verify_solution_v1(p, SECRET)[0] for p in payloads]
            self.posts.append({"path": path, "form": form, "verified": verified})
            return Reply.json({"posted": path, "verified": verified})
        return Reply(status=404)


def _utc(timestamp: float) -> datetime:
    return datetime.fromtimestamp(timestamp, tz=timezone.utc)


def _query(request: FakeRequest) -> str:
    return "&".join(f"{k}={v}" for k, values in request.query.items() for v in values)


FORM = ('<form id="{id}" method="post" action="{action}">'
        '<input type="hidden" name="enforcement-token">{extra}'
        '<input name="email" value="person@example.test"><button>{label}</button></form>')


@pytest.fixture(scope="module")
def served(vendor: Vendor) -> Iterator[Site]:
    site = Site(vendor)
    with LoopbackServer(site.handler) as server:
        site.url = server.url
        yield site


@pytest.fixture
def site(served: Site, fakes: Vendor) -> Site:
    """The site in an outage, ``/signup`` on ``fallback``; each test changes what it needs."""
    served.enforce = False
    served.policies = {"/signup": "fallback", "/login": "open", "/reset": "closed"}
    served.cost, served.number, served.challenges = 2000, None, []
    served.flag_queries, served.challenge_requests, served.posts = [], 0, []
    served.tag = (f'data-failopen-flag-url="/failopen/flag" data-failopen-public-key="{PUBLIC_KEY}"'
                  f' data-failopen-vendor-url="{served.url}" data-failopen-retry-delay-ms="50"')
    served.forms = FORM.format(id="signup", action="/signup", extra="", label="Sign up")
    return served


def states(page: Visit) -> list[str]:
    """Every state the snippet logged."""
    words = ("checking", "loading", "ready", "completed", "bypassed", "failed", "solving",
             "closed")
    found = [line.split(" ", 2)[2] for line in page.console
             if line.startswith("debug: [failopen] ")]
    return [word for word in found if word in words]


def attribute_values(page: Visit, form: str = "signup") -> list[str]:
    """Every value the page saw the form's data-failopen-state take."""
    prefix = f"log: attribute {form} "
    return [line[len(prefix):] for line in page.console if line.startswith(prefix)]


def sent_payload(post: dict[str, Any]) -> dict[str, Any]:
    """The altcha field the form sent, decoded."""
    decoded: dict[str, Any] = json.loads(base64.b64decode(post["form"]["altcha"][0]))
    return decoded


def trouble(page: Visit) -> list[str]:
    return [line for line in page.console if "trouble:" in line or line.startswith("pageerror")]


def open_page(site: Site, visit: Callable[..., Visit], path: str = "/signup") -> Visit:
    page = visit(site.url, path, go=False)
    page.page.on("pageerror", lambda error: page.console.append(f"pageerror: {error}"))
    answer = page.page.goto(site.url + "/")
    assert answer.headers["content-security-policy"] == CSP
    return page


def wait_for_post(site: Site, page: Visit, timeout: float = 20) -> dict[str, Any]:
    page.wait_for(lambda v: site.posts, "the form's POST", timeout=timeout)
    return site.posts[-1]


def test_fallback_solves_in_a_worker_and_sends_an_answer_that_verifies(
    site: Site, visit: Callable[..., Visit]
) -> None:
    page = open_page(site, visit)
    page.wait_for(lambda v: "bypassed" in states(v), "the flag's answer")
    # Nothing is solved until the person submits: a visitor who never does costs nothing.
    page.page.wait_for_timeout(200)
    assert site.challenge_requests == 0 and site.posts == []
    # Before the submit navigates away (the page's context is gone after it).
    assert page.page.evaluate("window.inline") is None  # the CSP held
    page.submit()
    post = wait_for_post(site, page)
    assert post["path"] == "/signup" and post["verified"] == [True]
    assert post["form"]["enforcement-token"] == [""]
    assert post["form"]["email"] == ["person@example.test"]
    payload = sent_payload(post)
    assert set(payload) == {"algorithm", "challenge", "number", "salt", "signature"}
    assert site.challenge_requests == 1
    assert states(page) == ["checking", "bypassed", "solving", "bypassed"]
    assert attribute_values(page) == ["checking", "bypassed", "solving", "bypassed"]
    # The flag was asked about the form's route, once.
    assert site.flag_queries == ["path=/signup"]
    assert trouble(page) == []


def test_an_altcha_field_already_in_the_form_is_the_one_filled(
    site: Site, visit: Callable[..., Visit]
) -> None:
    site.forms = FORM.format(id="signup", action="/signup", label="Sign up",
                             extra='<input type="hidden" name="altcha" value="stale">')
    page = open_page(site, visit)
    page.submit()
    post = wait_for_post(site, page)
    assert post["verified"] == [True] and len(post["form"]["altcha"]) == 1
    assert trouble(page) == []


def test_closed_says_so_and_sends_nothing(site: Site, visit: Callable[..., Visit]) -> None:
    site.forms = FORM.format(id="reset", action="/reset", extra="", label="Reset")
    page = open_page(site, visit, "/reset")
    page.wait_for(lambda v: "closed" in states(v), "the closed state")
    assert page.page.text_content(MESSAGE) == CLOSED  # said before the person types in vain
    assert page.page.get_attribute(MESSAGE, "role") == "alert"
    page.submit()
    page.page.wait_for_timeout(200)
    page.submit()
    page.page.wait_for_timeout(500)
    assert site.posts == [] and site.challenge_requests == 0
    assert page.page.text_content(MESSAGE) == CLOSED
    assert page.page.evaluate("FailOpen.state") == "closed"
    # Each submit asked the server again: the route may be open again, or enforcement back.
    assert site.flag_queries == ["path=/reset"] * 3
    assert trouble(page) == []


def test_closed_then_open_again_the_submit_goes(site: Site, visit: Callable[..., Visit]) -> None:
    site.forms = FORM.format(id="reset", action="/reset", extra="", label="Reset")
    page = open_page(site, visit, "/reset")
    page.wait_for(lambda v: "closed" in states(v), "the closed state")
    site.policies["/reset"] = "open"
    page.submit()
    post = wait_for_post(site, page)
    assert post["path"] == "/reset" and "altcha" not in post["form"]
    assert trouble(page) == []


def test_open_submits_without_solving(site: Site, visit: Callable[..., Visit]) -> None:
    site.forms = FORM.format(id="login", action="/login", extra="", label="Log in")
    page = open_page(site, visit, "/login")
    page.wait_for(lambda v: "bypassed" in states(v), "the flag's answer")
    page.submit()
    post = wait_for_post(site, page)
    assert post["path"] == "/login" and "altcha" not in post["form"]
    assert site.challenge_requests == 0 and "solving" not in states(page)
    assert site.flag_queries == ["path=/login"]
    assert trouble(page) == []


def test_a_route_without_a_policy_is_treated_as_before(
    site: Site, visit: Callable[..., Visit]
) -> None:
    site.forms = FORM.format(id="other", action="/other?next=%2F", extra="", label="Go")
    page = open_page(site, visit, "/other")
    page.submit()
    post = wait_for_post(site, page)
    assert post["path"] == "/other" and site.challenge_requests == 0
    assert site.flag_queries == ["path=/other"]  # the path, not the query


def test_a_409_from_the_challenge_means_enforcing_again(
    site: Site, fakes: Vendor, visit: Callable[..., Visit]
) -> None:
    page = open_page(site, visit)
    page.wait_for(lambda v: "bypassed" in states(v), "the flag's answer")
    site.enforce = True  # enforcement came back between the flag and the challenge
    page.submit()
    post = wait_for_post(site, page)
    assert site.challenge_requests == 1 and fakes.script.script_requests == 1
    assert post["form"]["enforcement-token"][0].startswith("fake-vendor-")
    assert "altcha" not in post["form"]
    assert states(page)[-4:] == ["solving", "loading", "ready", "completed"]
    assert trouble(page) == []


@pytest.mark.parametrize("issued", [True, False], ids=["issued", "expires-only"])
def test_an_expired_challenge_is_not_sent_another_is_asked_for(
    site: Site, visit: Callable[..., Visit], issued: bool
) -> None:
    expired = site.challenge(expires_in=-10, issued=issued)
    site.challenges = [Reply.json(expired)]
    page = open_page(site, visit)
    page.submit()
    post = wait_for_post(site, page)
    assert site.challenge_requests == 2 and post["verified"] == [True]
    sent = sent_payload(post)
    assert sent["salt"] != expired["salt"]
    assert trouble(page) == []


def test_a_challenge_that_expires_while_solving_is_not_sent(
    site: Site, visit: Callable[..., Visit]
) -> None:
    # Its lifetime (expires - issued) ends before any browser could try 300,000 numbers.
    site.cost, site.number = 300_000, 300_000
    slow = site.challenge(expires_in=0.3)
    site.number = None
    site.challenges = [Reply.json(slow)]
    page = open_page(site, visit)
    page.submit()
    post = wait_for_post(site, page, timeout=60)
    assert site.challenge_requests == 2 and post["verified"] == [True]
    assert sent_payload(post)["salt"] != slow["salt"]


def test_no_answer_after_the_retries_is_the_failed_state(
    site: Site, visit: Callable[..., Visit]
) -> None:
    site.tag += ' data-failopen-retries="2"'
    site.challenges = [Reply.json({"error": "boom"}, status=500)] * 3 + [
        Reply.json({"algorithm": "SHA-256", "challenge": "00" * 32, "maxnumber": 50,
                    "salt": "nothing-hashes-to-zeros?", "signature": "00"})]
    page = open_page(site, visit)
    page.submit()
    page.wait_for(lambda v: "failed" in states(v), "the failed state")
    assert site.challenge_requests == 3 and site.posts == []
    assert page.page.text_content(MESSAGE) == ("The security check could not load. Please try "
                                               "again in a minute.")
    assert trouble(page) == []


def test_the_page_stays_responsive_while_solving(site: Site, visit: Callable[..., Visit]) -> None:
    # The answer is the last number tried: seconds of work, none of it on the page's thread.
    site.cost = site.number = 400_000
    page = open_page(site, visit)
    page.submit()
    page.wait_for(lambda v: "solving" in states(v), "the solve to start")
    page.page.wait_for_timeout(200)
    before = page.page.evaluate("[ticks, frames, longest = 0]")
    page.page.wait_for_timeout(700)
    after = page.page.evaluate("[ticks, frames, longest, FailOpen.state]")
    assert after[3] == "solving", "the solve ended too soon to show anything"
    ticks, frames = after[0] - before[0], after[1] - before[1]
    # The page's own timer and frames ran on through the solve: the work is in a Worker. (How
    # long one stall lasted is the machine's load, not the snippet's: not asserted.)
    assert ticks >= 30 and frames >= 10, (ticks, frames, f"longest stall {after[2]:.0f} ms")
    post = wait_for_post(site, page, timeout=60)
    assert post["verified"] == [True]
    assert trouble(page) == []


def test_each_form_asks_about_its_own_route(site: Site, visit: Callable[..., Visit]) -> None:
    site.forms = (FORM.format(id="login", action="/login", extra="", label="Log in")
                  + FORM.format(id="signup", action="/signup", extra="", label="Sign up"))
    page = open_page(site, visit)
    page.wait_for(lambda v: "bypassed" in states(v), "the flag's answer")
    assert site.flag_queries == ["path=/login"]  # the first form's, at load
    page.page.click("#signup button")
    post = wait_for_post(site, page)
    assert post["path"] == "/signup" and post["verified"] == [True]
    assert site.flag_queries == ["path=/login", "path=/signup"]
    assert trouble(page) == []


def test_a_solver_the_csp_refuses_fails_safe(site: Site, visit: Callable[..., Visit]) -> None:
    """A solver of another origin (a CDN): no worker, no bypass; the failed state says so."""
    site.tag += ' data-failopen-solver-url="http://localhost:9/failopen-solver.js"'
    page = open_page(site, visit)
    page.submit()
    page.wait_for(lambda v: "failed" in states(v), "the failed state")
    page.page.wait_for_timeout(300)
    assert site.posts == [] and site.challenge_requests == 0
