"""``failopen demo --web --vendor NAME`` without a browser: the arguments, the startup lines, the
form pages (the vendor's widget, no token input of the spec's) and the scenes in the vendor's
terms, over HTTP against the demo's own app. Chromium drives the page in
tests/browser/test_demo_web_vendor_page.py.
"""

from __future__ import annotations

import io
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import anyio
import httpx
import pytest

from failopen.cli.command import main
from failopen.cli.demo_web import run_web_demo
from failopen.cli.demo_web._app import build_app
from failopen.cli.demo_web._site import SCENES, DemoSite
from failopen.cli.demo_web._stages import VendorStage, stage_for
from failopen.providers.registry import PROVIDERS
from failopen.testing import free_port

WAIT = 20.0


# --- the arguments --------------------------------------------------------------------------


@pytest.fixture
def web_calls(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """What ``failopen demo --web`` would serve, without serving it."""
    calls: list[dict[str, Any]] = []
    import failopen.cli.demo_web as demo_web

    monkeypatch.setattr(demo_web, "run_web_demo", lambda **kwargs: calls.append(kwargs) or 0)
    return calls


def test_web_takes_vendor(web_calls: list[dict[str, Any]]) -> None:
    assert main(["demo", "--web", "--vendor", "hcaptcha", "--port", "0"]) == 0
    assert web_calls == [{"port": 0, "vendor": "hcaptcha"}]


def test_web_without_vendor_is_the_spec_s_vendor_on_the_default_port(
        web_calls: list[dict[str, Any]]) -> None:
    assert main(["demo", "--web"]) == 0
    assert web_calls == [{"port": 8400, "vendor": "enforcement"}]


def test_an_unknown_vendor_is_a_usage_error(web_calls: list[dict[str, Any]],
                                            capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["demo", "--web", "--vendor", "nobody"])
    assert exited.value.code == 2
    assert "invalid choice: 'nobody'" in capsys.readouterr().err
    assert web_calls == []


def test_step_with_web_is_still_refused_with_a_vendor(
        web_calls: list[dict[str, Any]], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--web", "--vendor", "turnstile", "--step", "1"]) == 2
    assert "--step goes with the terminal story" in capsys.readouterr().err
    assert web_calls == []


def test_every_vendor_has_a_stage_and_the_spec_s_keeps_its_scenes() -> None:
    assert stage_for("enforcement") is None
    for name in PROVIDERS:
        if name != "enforcement":
            stage = stage_for(name)
            assert isinstance(stage, VendorStage) and stage.script.vendor == name
            assert stage.verify.vendor == name
            assert {"global", "vendor_down", "recovery"} <= set(stage.scenes())
    with pytest.raises(ValueError, match="no web demo for vendor 'nobody'"):
        stage_for("nobody")
    assert DemoSite().scenes is SCENES


# --- the served demo --------------------------------------------------------------------------


def test_the_startup_lines_name_the_vendor_and_its_fakes() -> None:
    port, stop, out = free_port(), threading.Event(), io.StringIO()
    codes: list[int] = []
    thread = threading.Thread(target=lambda: codes.append(run_web_demo(
        port=port, out=out, stop=stop, vendor="recaptcha")))
    thread.start()
    try:
        deadline = time.monotonic() + WAIT
        while "forms and their" not in out.getvalue() and not codes:
            assert time.monotonic() < deadline, out.getvalue()
            time.sleep(0.05)
        text = out.getvalue()
    finally:
        stop.set()
        thread.join(timeout=20)
    assert codes == [0], text
    assert "vendor: reCAPTCHA (FAILOPEN_VENDOR=recaptcha, FAILOPEN_WIDGET=visible)" in text
    assert "outage evidence: the verify probe" in text
    assert "/recaptcha/api.js (no status page" in text
    assert "--set fault=503` too" in text


class Served:
    """One vendor's demo app in this process, its site, and one client (one event loop: the
    runtime's async verify client lives in it and is closed with it)."""

    def __init__(self, vendor: str) -> None:
        self.site = DemoSite(poll_interval=0.2, vendor=vendor)
        self.runtime = self.site.start()
        self.app = build_app(self.site)
        self.client: httpx.AsyncClient | None = None

    def run(self, scenario: Callable[[Served], Awaitable[None]]) -> None:
        """Play ``scenario`` with a client of the app, then close the runtime's clients."""
        async def go() -> None:
            transport = httpx.ASGITransport(self.app, client=("127.0.0.1", 4711))
            async with httpx.AsyncClient(transport=transport,
                                         base_url="http://127.0.0.1") as self.client:
                try:
                    await scenario(self)
                finally:
                    await self.runtime.aclose()

        anyio.run(go)

    async def request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        assert self.client is not None
        return await self.client.request(method, path, **kwargs)

    async def log_in(self, token: str | None) -> httpx.Response:
        data = {"username": "demo"}
        if token is not None:
            data[self.runtime.config.token_field] = token
        return await self.request("POST", "/login", data=data,
                                  headers={"Accept": "application/json"})

    async def enforce(self) -> bool:
        return bool((await self.request("GET", "/failopen/flag")).json()["enforce"])

    async def until(self, enforce: bool) -> None:
        deadline = time.monotonic() + WAIT
        while await self.enforce() is not enforce:
            assert time.monotonic() < deadline, f"timed out waiting for enforce={enforce}"
            await anyio.sleep(0.05)


@pytest.fixture(params=["turnstile", "hcaptcha", "recaptcha"])
def served(request: pytest.FixtureRequest) -> Iterator[Served]:
    demo = Served(request.param)
    try:
        yield demo
    finally:
        demo.runtime.stop()
        demo.site.stop()


def test_the_form_renders_the_vendor_s_widget_and_no_token_input(served: Served) -> None:
    config = served.runtime.config

    async def scenario(demo: Served) -> None:
        page = await demo.request("GET", "/form/login")
        assert page.status_code == 200
        assert f'data-failopen-vendor="{config.vendor}"' in page.text
        assert 'data-failopen-form="form"' in page.text
        assert f'data-failopen-vendor-url="{demo.site.script.url}"' in page.text
        assert 'name="enforcement-token"' not in page.text  # the widget brings its own field
        assert f'name="{config.token_field}"' not in page.text
        assert demo.site.script.url in page.headers["Content-Security-Policy"]
        index = (await demo.request("GET", "/")).text
        assert f'id="vendor" data-vendor="{config.vendor}"' in index

    served.run(scenario)


def test_a_vendor_token_logs_in_once_and_the_global_outage_bypasses(served: Served) -> None:
    site = served.site

    async def scenario(demo: Served) -> None:
        await demo.until(True)
        assert (await demo.log_in(None)).status_code == 403
        token = site.verify.issue_token()
        first = await demo.log_in(token)
        assert first.status_code == 200 and first.json()["decision"]["outcome"] == "valid"
        assert (await demo.log_in(token)).status_code == 403  # verified once, as the vendor does

        site.play("global")
        await demo.until(False)
        answer = await demo.log_in(None)
        assert answer.status_code == 200 and answer.json()["bypassed"] is True
        state = (await demo.request("GET", "/demo/state")).json()
        assert state["vendor"]["name"] == site.vendor
        assert state["fakes"]["vendor"]["down"] is True
        assert state["fakes"]["verify"]["fault"] == "503"
        assert (state["fakes"]["status"] is None) is (site.page is None)

        site.play("recovery")
        await demo.until(True)
        assert (await demo.log_in(None)).status_code == 403

    served.run(scenario)


def test_a_vendor_scene_that_is_not_an_outage_never_bypasses(served: Served) -> None:
    site = served.site

    async def scenario(demo: Served) -> None:
        await demo.until(True)
        site.play("vendor_down")
        await anyio.sleep(1.0)  # several polls (or probes): a script down is no outage evidence
        assert await demo.enforce() is True
        assert (await demo.log_in(None)).status_code == 403
        if site.page is not None:
            site.play("regional")  # the rest of the vendor's page, never the deciding component
            await anyio.sleep(1.0)
            assert await demo.enforce() is True

    served.run(scenario)
