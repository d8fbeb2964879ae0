"""The browser tests' kit: real headless Chromium (Debian's, through Playwright), the examples
under their servers, and the test kit's fakes. conftest.py registers its fixtures and hook.

One browser for the session, a new context per test; the fakes are served once and switched at
run time. Traffic goes to 127.0.0.1 only. Every test here is skipped, with the reason, when
/usr/bin/chromium is not installed (``.ci/run`` installs it: ``apt-get install chromium``).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

import httpx
import pytest

from failopen.testing import (
    FakeStatusPage,
    FakeVendorScript,
    FakeVerifyAPI,
    LoopbackServer,
    free_port,
)
from failopen.testing._server import FakeRequest, Reply

CHROMIUM = Path("/usr/bin/chromium")
ROOT = Path(__file__).resolve().parents[2]
#: Where the screenshots go; docs/snippet.md names this path.
ARTEFACTS = ROOT / "test-artifacts" / "browser"
PUBLIC_KEY = "test-public-key"
FINAL = ("completed", "bypassed", "failed")
# Without the background-networking flags Chromium's own outbound connections are refused here
# and slow everything down; no test needs anything but loopback.
#: A name the session's Chromium resolves to 127.0.0.1: a cross-origin page on this machine.
EVIL_HOST = "evil.test"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update",
                 "--disable-sync",
                 # A hostile site on loopback, for the tests where another origin (or a DNS
                 # rebinding one) attacks a local server; every other name resolves as usual.
                 f"--host-resolver-rules=MAP {EVIL_HOST} 127.0.0.1"]

HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Run this folder's tests last; skip them, saying why, when there is no Chromium.

    Last, because while the session's browser is open, sync Playwright's event loop counts as
    running on the main thread: an async test after it would fail to start its own loop.
    """
    ours = [item for item in items if HERE in item.path.parents]
    items[:] = [item for item in items if HERE not in item.path.parents] + ours
    # One worker runs them all (pytest -n 2 --dist loadgroup): two Chromiums at once on two
    # cores made their timing-sensitive pages (a stalled main thread, a state seen mid-check)
    # fail under the load of the suite beside them.
    for item in ours:
        item.add_marker(pytest.mark.xdist_group("browser"))
    if CHROMIUM.exists():
        return
    skip = pytest.mark.skip(reason=f"no Chromium at {CHROMIUM}: apt-get install chromium "
                                   "(.ci/run does)")
    for item in ours:
        item.add_marker(skip)


#: Every address but loopback. A pattern, not a Python predicate: Playwright matches a pattern in
#: the browser, but sends every request to this process to run a predicate, and a sync-API test
#: answers those only while it is inside a Playwright call. A page's request made while the test
#: polls a server with httpx (a scene button's POST a moment after its click, on a loaded machine)
#: then waited, unsent, for the whole poll.
NOT_LOOPBACK = re.compile(r"^(?!http://127\.0\.0\.1:)")


def loopback_only(context: Any) -> None:
    """Abort whatever a page in ``context`` asks of anything but 127.0.0.1: a test (or the
    snippet) talking to the world would be a bug."""
    context.route(NOT_LOOPBACK, lambda route: route.abort())


def wait_until(predicate: Callable[[], object], timeout: float, what: str) -> None:
    """Poll ``predicate`` until true; fail naming ``what``."""
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


@dataclass
class Vendor:
    """The fakes every browser test shares, and the hook that starts an outage mid-page."""

    page: FakeStatusPage
    verify: FakeVerifyAPI
    script: FakeVendorScript
    url: str
    outage_on_script_request: bool = False

    def handler(self, request: FakeRequest) -> Reply:
        if self.outage_on_script_request:
            # The snippet has read the flag ("on") and now loads the challenge: the outage
            # begins, so only a later ?confirm=1 can see it.
            self.page.set_global("major_outage")
        return self.script.handler(request)


@pytest.fixture(scope="session")
def vendor() -> Iterator[Vendor]:
    """Status page, verify API and vendor script on loopback, for the whole session."""
    page, verify = FakeStatusPage(), FakeVerifyAPI()
    script = FakeVendorScript(verify_api=verify)
    holder: list[Vendor] = []
    server = LoopbackServer(lambda request: holder[0].handler(request))
    with page.serve(), verify.serve(), server:
        holder.append(Vendor(page, verify, script, server.url))
        yield holder[0]


@pytest.fixture
def fakes(vendor: Vendor) -> Vendor:
    """The shared fakes, back to normal: page operational, vendor ``ok``, counters cleared."""
    vendor.outage_on_script_request = False
    vendor.page.set_fault(None)
    vendor.page.set_global("operational")
    vendor.script.reset()
    vendor.verify.reset()
    return vendor


def vendor_env(vendor: Vendor, **extra: str) -> dict[str, str]:
    """The environment of a server under test: the fakes, a fast watcher, nothing inherited."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FAILOPEN_", "DJANGO_"))}
    env.update({
        "FAILOPEN_STATUS_URL": vendor.page.url, "FAILOPEN_VERIFY_URL": vendor.verify.verify_url,
        "FAILOPEN_PRIVATE_KEY": vendor.verify.private_key, "FAILOPEN_PUBLIC_KEY": PUBLIC_KEY,
        "FAILOPEN_VENDOR_URL": vendor.url, "FAILOPEN_POLL_INTERVAL": "0.1",
        "FAILOPEN_POLL_JITTER": "0", "FAILOPEN_CONFIRM_TTL": "0.05",
    })
    env.update(extra)
    return env


@pytest.fixture(scope="session")
def server_process(tmp_path_factory: pytest.TempPathFactory) -> Iterator[
        Callable[[list[str], dict[str, str], str], str]]:
    """Start a server command; it answers ``ready_path`` before the test goes on."""
    processes: list[subprocess.Popen[bytes]] = []

    def start(command: list[str], env: dict[str, str], ready_path: str) -> str:
        port = free_port()
        log = tmp_path_factory.mktemp("server") / "server.log"
        with log.open("wb") as out:
            process = subprocess.Popen([part.replace("{port}", str(port)) for part in command],
                                       cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
                                       start_new_session=True)
        processes.append(process)
        url = f"http://127.0.0.1:{port}"

        def ready() -> bool:
            assert process.poll() is None, log.read_text()
            try:
                return httpx.get(url + ready_path, timeout=1).status_code == 200
            except httpx.TransportError:
                return False

        wait_until(ready, 30, f"{command[:3]} to answer")
        return url

    yield start
    for process in processes:
        process.terminate()
    for process in processes:
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)


def enforcing(url: str, flag_path: str = "/failopen/flag") -> bool:
    """What the server's flag endpoint says right now."""
    return bool(httpx.get(url + flag_path, timeout=5).json()["enforce"])


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    """One headless Chromium for the whole session."""
    sync_api = pytest.importorskip("playwright.sync_api", reason="pip install playwright")
    with sync_api.sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


@dataclass
class Visit:
    """One page in a fresh context, and everything it did on the wire and in the console."""

    page: Any
    base: str
    states: list[str] = field(default_factory=list)
    flag_requests: list[str] = field(default_factory=list)
    posts: list[dict[str, list[str]]] = field(default_factory=list)
    responses: list[Any] = field(default_factory=list)
    console: list[str] = field(default_factory=list)

    @property
    def state(self) -> str | None:
        """The last state the snippet logged (it logs every one)."""
        return self.states[-1] if self.states else None

    def submit(self) -> None:
        """Click the form's button, as a person would."""
        self.page.click("form button")

    def wait_for(self, predicate: Callable[[Visit], object], what: str,
                 timeout: float = 15) -> None:
        """Let the browser run until ``predicate(self)``."""
        deadline = time.monotonic() + timeout
        while not predicate(self):
            assert time.monotonic() < deadline, (
                f"timed out waiting for {what}; states {self.states}, console {self.console}")
            self.page.wait_for_timeout(25)

    def wait_for_state(self, *states: str) -> None:
        """Until the snippet's last state is one of ``states``."""
        self.wait_for(lambda visit: visit.state in states, f"state in {states}")

    def wait_for_answer(self) -> tuple[int, Any]:
        """Until the protected view (or failopen's refusal) answered the form's POST: the
        status and the JSON body (the text when it is not JSON)."""
        self.wait_for(lambda visit: visit.responses, "the form's POST to be answered")
        self.page.wait_for_load_state()
        response = self.responses[-1]
        text = response.text()
        try:
            return response.status, json.loads(text)
        except ValueError:
            return response.status, text

    def screenshot(self, name: str) -> Path:
        """A screenshot under ARTEFACTS (docs/snippet.md names the folder)."""
        ARTEFACTS.mkdir(parents=True, exist_ok=True)
        path = ARTEFACTS / f"{name}.png"
        self.page.screenshot(path=str(path), full_page=True)
        return path


@pytest.fixture
def visit(browser: Any) -> Iterator[Callable[..., Visit]]:
    """``visit(url, login_path)``: a new context and page that records what the snippet does."""
    contexts: list[Any] = []

    def open_page(url: str, login_path: str = "/login", *, go: bool = True,
                  clock: bool = False) -> Visit:
        context = browser.new_context()
        contexts.append(context)
        loopback_only(context)
        if clock:
            context.clock.install()
        page = context.new_page()
        record = Visit(page, url)

        def on_console(message: Any) -> None:
            text = message.text
            record.console.append(f"{message.type}: {text}")
            if text.startswith("[failopen] "):
                word = text.split(" ", 2)[1]
                if word in ("checking", "loading", "ready", "solving", "closed", *FINAL):
                    record.states.append(word)

        def on_request(request: Any) -> None:
            if "/failopen/flag" in request.url:
                record.flag_requests.append(request.url)
            elif request.method == "POST" and request.url.endswith(login_path):
                record.posts.append(parse_qs(request.post_data or "", keep_blank_values=True))

        def on_response(response: Any) -> None:
            request = response.request
            if request.method == "POST" and request.url.endswith(login_path):
                record.responses.append(response)

        page.on("console", on_console)
        page.on("request", on_request)
        page.on("response", on_response)
        if go:
            page.goto(url + "/")
        return record

    yield open_page
    for context in contexts:
        context.close()
