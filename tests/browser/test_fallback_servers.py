"""Sign-up through an outage on a ``fallback`` route, in Chromium, on each example under its real
server: ``examples/django_site`` (``runserver``), ``examples/asgi_app.py`` (uvicorn) and
``examples/flask_app.py`` (gunicorn), against the test kit's fakes.

The fake status page reports a major outage of the global component, so each server stops
enforcing; sign-up's outage policy is ``fallback`` and password reset's ``closed``. The browser
must solve the server's own challenge in failopen-solver.js and be admitted
(``bypassed_fallback``, in the answer and in the audit file); password reset must say it is
briefly unavailable and send nothing. Raw HTTP against the same server then shows every refusal,
and that a solution never stands in for the vendor's token once the server enforces again.
test_snippet_fallback.py covers the snippet's corner cases against a site this module plays; here
the servers, adapters and examples are the real ones.
"""

from __future__ import annotations

import base64
import json
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from _browser_kit import Vendor, Visit, enforcing, vendor_env, wait_until

from failopen.observe.audit_file import hash_user_agent
from failopen.testing import solve_challenge

pytest.importorskip("altcha", reason='pip install "failopen[fallback]"')

pytestmark = pytest.mark.slow

# Test-only: it signs the challenges of servers that live as long as this module.
SECRET = "e2e-fallback-secret-of-at-least-32-characters"
CLOSED = "This action is briefly unavailable. Please try again in a few minutes."
# Records every value the form's data-failopen-state takes, as the page saw it (the snippet's own
# log says what it meant to set). An init script: the examples' CSP allows no inline script, and
# Playwright's init scripts are not subject to it. Its DOMContentLoaded listener is registered
# before failopen.js (deferred) registers its own, so no change is missed.
RECORD_STATES = """
addEventListener('DOMContentLoaded', () => {
  for (const form of document.forms) {
    new MutationObserver(records => {
      // The value after each change: the next record's old value, then the current one.
      const after = records.slice(1).map(r => r.oldValue);
      after.push(form.getAttribute('data-failopen-state'));
      for (const value of after) console.log('form-state', value);
    }).observe(form, {attributes: true, attributeFilter: ['data-failopen-state'],
                      attributeOldValue: true});
  }
});
"""


@dataclass(frozen=True)
class Example:
    """An example under its server, and the settings that give its routes their policies."""

    command: list[str]
    ready_path: str
    signup: str
    reset: str
    policies: dict[str, str]
    #: Django keeps its CSRF protection on: raw POSTs carry the cookie's token.
    csrf: bool = False


EXAMPLES = {
    # The reset view is closed by its mark, @protect(outage="closed"); log-in and sign-up follow
    # the default policy. (OUTAGE_POLICY_ROUTES cannot name a view that only @protect protects.)
    "django": Example(
        [sys.executable, "examples/django_site/manage.py", "runserver", "127.0.0.1:{port}",
         "--noreload", "--insecure"], "/static/failopen/failopen.js", "/signup/",
        "/password-reset/", {"FAILOPEN_OUTAGE_POLICY": "fallback"}, csrf=True),
    "asgi": Example(
        [sys.executable, "-m", "uvicorn", "examples.asgi_app:app", "--host", "127.0.0.1",
         "--port", "{port}", "--lifespan", "on", "--log-level", "warning"], "/health", "/signup",
        "/password-reset",
        {"FAILOPEN_OUTAGE_POLICY_ROUTES": "/signup=fallback,/password-reset=closed"}),
    # One worker: without a shared Redis each worker remembers its own used solutions, so a
    # replay would be refused or not depending on which worker answers (two processes sharing a
    # real redis-server are tests/fallback/test_two_processes.py's subject).
    "wsgi": Example(
        [sys.executable, "-m", "gunicorn", "--preload", "-w", "1", "-k", "sync",
         "-b", "127.0.0.1:{port}", "--graceful-timeout", "2", "examples.flask_app:app"],
        "/health", "/signup", "/password-reset",
        {"FAILOPEN_OUTAGE_POLICY_ROUTES": "/signup=fallback,/password-reset=closed"}),
}


@dataclass
class Site:
    """One example, running."""

    name: str
    example: Example
    url: str
    audit: Path

    def post(self, path: str, data: dict[str, str] | None = None,
             headers: dict[str, str] | None = None) -> httpx.Response:
        """A form POST as an API client sends it (JSON refusals), with Django's CSRF token."""
        form = dict(data or {})
        with httpx.Client(base_url=self.url, timeout=10) as client:
            if self.example.csrf:
                client.get(path)  # the form's page sets the CSRF cookie
                form["csrfmiddlewaretoken"] = client.cookies["csrftoken"]
            return client.post(path, data=form,
                               headers={"Accept": "application/json", **(headers or {})})

    def audit_lines(self) -> list[dict[str, Any]]:
        """The audit file's request lines so far (a background thread appends them; the
        flag's own lines, with an ``event``, are left out)."""
        if not self.audit.exists():
            return []
        return [line for line in map(json.loads, self.audit.read_text().splitlines())
                if "event" not in line]


@pytest.fixture(scope="module", params=sorted(EXAMPLES))
def site(request: pytest.FixtureRequest, vendor: Vendor, server_process: Callable[..., str],
         tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    """The example under its server: a fallback secret, the cheapest cost (the solve is not what
    is measured here; the benchmark measures the default's), an audit file."""
    name = request.param
    example = EXAMPLES[name]
    audit = tmp_path_factory.mktemp(f"audit-{name}") / "audit.jsonl"
    env = vendor_env(vendor, FAILOPEN_FALLBACK_SECRET=SECRET, FAILOPEN_FALLBACK_COST="1000",
                     FAILOPEN_AUDIT_FILE=str(audit), **example.policies)
    yield Site(name, example, server_process(example.command, env, example.ready_path), audit)


@pytest.fixture
def outage(site: Site, fakes: Vendor) -> Site:
    """The site after it saw the global component in a major outage and stopped enforcing.

    It is seen enforcing first: ``fakes`` just set the page operational, and an outage left over
    from the previous test would otherwise end (and a new one begin) in the middle of this one.
    """
    wait_until(lambda: enforcing(site.url), 10, f"{site.name} to enforce")
    fakes.page.set_global("major_outage")
    wait_until(lambda: not enforcing(site.url), 10, f"{site.name} to see the outage")
    return site


def form_states(page: Visit) -> list[str]:
    """Every value the page saw its form's data-failopen-state take (RECORD_STATES)."""
    return [line.split(" ", 2)[2] for line in page.console if line.startswith("log: form-state ")]


def refusal(answer: httpx.Response) -> tuple[int, str]:
    """The status and failopen's refusal code (an admitted request's whole answer instead)."""
    body = answer.json()
    return answer.status_code, body["error"]["code"] if "error" in body else f"admitted: {body}"


def challenge(site: Site) -> dict[str, Any]:
    """A fallback challenge from the site's endpoint, as the solver fetches it."""
    answer = httpx.get(site.url + "/failopen/challenge", timeout=5)
    assert answer.status_code == 200, answer.text
    assert answer.headers["Cache-Control"] == "no-store"
    challenged: dict[str, Any] = answer.json()
    return challenged


def open_form(site: Site, visit: Callable[..., Visit], path: str) -> Visit:
    page = visit(site.url, path, go=False)
    page.page.add_init_script(RECORD_STATES)
    page.page.goto(site.url + path)
    return page


def test_sign_up_solves_the_fallback_challenge_and_is_admitted(
    outage: Site, visit: Callable[..., Visit]
) -> None:
    site = outage
    page = open_form(site, visit, site.example.signup)
    page.wait_for_state("bypassed")  # the flag answered: enforcement off on this route
    page.page.fill("input[name=email]", "person@example.test")
    page.submit()
    status, body = page.wait_for_answer()

    assert form_states(page) == ["checking", "bypassed", "solving", "bypassed"], page.console
    assert len(page.posts) == 1, page.posts
    sent = page.posts[0]["altcha"][0]
    # The payload an ALTCHA widget sends, for a challenge this server issued.
    assert set(json.loads(base64.b64decode(sent))) == {
        "algorithm", "challenge", "number", "salt", "signature"}
    assert page.posts[0]["email"] == ["person@example.test"]
    # No vendor token: the vendor is down (Django's form gets the field only with a token).
    assert page.posts[0].get("enforcement-token", [""]) == [""]
    # The server checked it: only a good solution makes this outcome.
    assert status == 200, body
    assert body["ok"] is True and body["bypassed"] is True
    assert body["decision"]["outcome"] == "bypassed_fallback"
    # The browser shows the view's answer (Chromium puts a JSON document in a <pre>): the form
    # was submitted by a navigation, not replaced by a script's request.
    assert page.page.url == site.url + site.example.signup
    assert json.loads(page.page.inner_text("pre"))["decision"]["outcome"] == "bypassed_fallback"

    # The audit file's line for this browser (its User-Agent's hash; raw clients send another).
    browser = hash_user_agent(page.page.evaluate("navigator.userAgent"))

    def audited() -> list[dict[str, Any]]:
        return [line for line in site.audit_lines() if line["ua"] == browser]

    wait_until(audited, 5, "the audit line")
    [line] = audited()
    assert line["outcome"] == "bypassed_fallback" and line["path"] == site.example.signup
    assert line["client"] == "127.0.0.1"
    assert SECRET not in site.audit.read_text() and sent not in site.audit.read_text()

    # The same solution again, from anyone: used once, refused now.
    replayed = site.post(site.example.signup, {"altcha": sent})
    assert refusal(replayed) == (403, "fallback_invalid")


def test_password_reset_says_briefly_unavailable_and_sends_nothing(
    outage: Site, visit: Callable[..., Visit]
) -> None:
    site = outage
    page = open_form(site, visit, site.example.reset)
    page.wait_for_state("closed")
    # Said on arrival, before the person types in vain.
    assert page.page.text_content("[data-failopen-message]") == CLOSED
    page.submit()
    # The submit asks the server again (the route may have reopened) and is told the same.
    page.wait_for(lambda v: v.states.count("closed") == 2, "the second closed answer")
    assert page.page.text_content("[data-failopen-message]") == CLOSED
    assert page.page.evaluate("FailOpen.state") == "closed"
    assert form_states(page) == ["checking", "closed", "checking", "closed"]
    assert page.posts == [] and page.responses == []
    assert page.page.url == site.url + site.example.reset
    assert all(f"path={site.example.reset.replace('/', '%2F')}" in url
               for url in page.flag_requests), page.flag_requests


def test_raw_http_refusals_and_no_solution_once_enforcing_again(
    outage: Site, fakes: Vendor
) -> None:
    site, signup = outage, outage.example.signup

    assert refusal(site.post(signup, {"email": "bot@example.test"})) == (403, "fallback_required")
    assert refusal(site.post(signup, {"altcha": "garbage"})) == (403, "fallback_invalid")
    assert refusal(site.post(signup, headers={"X-Altcha": "garbage"})) == (403,
                                                                           "fallback_invalid")
    closed = site.post(site.example.reset, {"email": "person@example.test"})
    assert refusal(closed) == (503, "outage_closed")
    assert int(closed.headers["Retry-After"]) >= 1

    # Two good solutions: one admitted now (so the other's refusal below is not its own fault),
    # the other kept unused until the vendor is back.
    used, fresh = (solve_challenge(challenge(site)) for _ in range(2))
    admitted = site.post(signup, {"altcha": used})
    assert admitted.status_code == 200, admitted.text
    assert admitted.json()["decision"]["outcome"] == "bypassed_fallback"

    fakes.page.set_global("operational")
    wait_until(lambda: enforcing(site.url), 10, f"{site.name} to enforce again")
    assert httpx.get(site.url + "/failopen/challenge", timeout=5).status_code == 409

    # Enforcing: the route wants the vendor's token, whatever else the request carries.
    assert refusal(site.post(signup, {"altcha": fresh})) == (403, "missing_token")
    assert refusal(site.post(signup, headers={"X-Altcha": fresh})) == (403, "missing_token")
    token = {"X-Enforcement-Token": fakes.verify.issue_token()}
    admitted = site.post(signup, {"altcha": fresh}, headers=token)
    assert admitted.status_code == 200, admitted.text
    assert admitted.json()["decision"]["outcome"] == "valid"
    assert admitted.json()["bypassed"] is False
