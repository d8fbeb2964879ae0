"""The vendor adapters under a strict page, in Chromium: a nonce-only ``Content-Security-Policy``
(no ``'self'``, no vendor origin: the page's nonce is passed on to the adapter and to the
vendor's script), and a flag answer whose ``fallback.vendor`` is hostile (the snippet loads no file
but an adapter of its own folder, whatever the name says).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import pytest
from _browser_kit import Visit

from failopen.testing import LoopbackServer, fake_browser_script, fake_verify_api
from failopen.testing._server import FakeRequest, Reply
from failopen.testing.browser_scripts import BrowserScriptFake
from failopen.web import COMPANION_FILES, SNIPPET_PATH

pytestmark = pytest.mark.slow

NONCE = "n0nce-for-this-page"


@dataclass
class StrictPage:
    script: BrowserScriptFake
    url: str = ""
    flag: dict[str, object] = field(default_factory=lambda: {"enforce": True})
    requested: list[str] = field(default_factory=list)

    def handler(self, request: FakeRequest) -> Reply:
        self.requested.append(request.path)
        if request.path == "/":
            tag = (f'<script src="/static/failopen.js" nonce="{NONCE}" defer '
                   'data-failopen-flag-url="/flag" data-failopen-public-key="site-key" '
                   'data-failopen-token-field="cf-turnstile-response" '
                   f'data-failopen-vendor-url="{self.script.url}" '
                   'data-failopen-vendor="turnstile" data-failopen-widget="visible" '
                   'data-failopen-form="form"></script>')
            body = (f"<!doctype html><html><head>{tag}</head><body><form method=post "
                    "action=/signup><button>Sign up</button></form></body></html>")
            return Reply(body=body.encode(), headers=[
                ("Content-Type", "text/html"),
                ("Content-Security-Policy", f"script-src 'nonce-{NONCE}'")])
        name = request.path.removeprefix("/static/")
        if name == SNIPPET_PATH.name or name in COMPANION_FILES:
            path = SNIPPET_PATH if name == SNIPPET_PATH.name else COMPANION_FILES[name]
            return Reply(body=path.read_bytes(), headers=[("Content-Type", "text/javascript")])
        if request.path == "/flag":
            return Reply.json(self.flag)
        return Reply(status=404, body=b"not here")


@pytest.fixture(scope="module")
def strict() -> Iterator[StrictPage]:
    api = fake_verify_api("turnstile")
    script = fake_browser_script("turnstile", verify_api=api)
    with api.serve(), script.serve():
        state = StrictPage(script)
        with LoopbackServer(state.handler) as server:
            state.url = server.url
            yield state


def test_a_nonce_only_csp_passes_the_nonce_to_the_adapter_and_the_vendor_script(
        strict: StrictPage, visit: Callable[..., Visit]) -> None:
    strict.flag = {"enforce": True}
    record = visit(strict.url, "/signup")
    record.wait_for_state("completed")  # Turnstile's managed widget completes by itself
    assert not [line for line in record.console if "Content Security Policy" in line]


def test_a_hostile_fallback_vendor_name_loads_nothing_outside_the_adapters_folder(
        strict: StrictPage, visit: Callable[..., Visit]) -> None:
    strict.requested.clear()
    strict.flag = {"enforce": False, "outage_policy": "fallback", "fallback": {
        "vendor": "/../../uploads/evil", "public_key": "k", "vendor_url": strict.script.url,
        "token_field": "x"}}
    record = visit(strict.url, "/signup")
    record.page.click("form > button")
    record.wait_for_state("failed")  # no such adapter: the watchdog, then failed
    loaded = [path for path in strict.requested if path.endswith(".js")]
    assert loaded and all(path.startswith("/static/failopen") for path in loaded), loaded
    assert "/static/failopen-uploadsevil.js" in loaded, json.dumps(loaded)
