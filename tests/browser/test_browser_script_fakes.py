"""The captcha vendors' browser-script fakes in real Chromium: a bare page (not failopen.js) uses
each vendor's public API directly, as a site would, and the token its form carries verifies once
with the vendor's verify fake. The modes do to that page what an outage would."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from _browser_kit import Visit
from _widget_kit import accepted

from failopen.testing import BrowserScriptFake, LoopbackServer, fake_browser_script, fake_verify_api
from failopen.testing._server import FakeRequest, Reply
from failopen.testing.providers import CaptchaVerifyFake

_CALLBACKS = """callback: function () { log.push("token"); },
    "error-callback": function (code) { log.push("error:" + code); return true; },
    "expired-callback": function () { log.push("expired"); }"""


@dataclass(frozen=True)
class Variant:
    """One way a site uses a vendor: its script tag, the page's JavaScript, what a person does."""

    vendor: str
    src: str  # after the fake's origin
    script: str  # defines onVendor (the API is ready) and again (reset, then a new attempt)
    fields: tuple[str, ...]  # the form fields that carry the token
    click: bool = False  # a checkbox a person clicks
    module: bool = False
    token_field_is_pages: bool = False  # v3: the page writes the token into its own field
    action: str | None = None
    #: What the page's error handler receives, when not the fake's error code: reCAPTCHA v2's
    #: error-callback gets no argument, v3's promise rejects with Google's bare "Timeout".
    error: str | None = None


VARIANTS = {
    "turnstile": Variant("turnstile", "/turnstile/v0/api.js?render=explicit&onload=onVendor", """
  window.onVendor = function () {
    log.push("ready");
    window.wid = turnstile.render("#box", {sitekey: SITEKEY, action: "login", retry: "never",
      "refresh-expired": "manual", CALLBACKS});
  };
  window.again = function () { turnstile.reset(wid); };""".replace("CALLBACKS", _CALLBACKS),
        ("cf-turnstile-response",), action="login"),
    "hcaptcha": Variant("hcaptcha", "/1/api.js?render=explicit&onload=onVendor", """
  window.onVendor = function () {
    log.push("ready");
    window.wid = hcaptcha.render("box", {sitekey: SITEKEY, CALLBACKS});
  };
  window.again = function () { hcaptcha.reset(wid); };""".replace("CALLBACKS", _CALLBACKS),
        ("h-captcha-response", "g-recaptcha-response"), click=True),
    "recaptcha-v2": Variant("recaptcha", "/recaptcha/api.js?render=explicit&onload=onVendor", """
  window.onVendor = function () {
    log.push("ready");
    window.wid = grecaptcha.render("box", {sitekey: SITEKEY, CALLBACKS});
  };
  window.again = function () { grecaptcha.reset(wid); };""".replace("CALLBACKS", _CALLBACKS),
        ("g-recaptcha-response",), click=True, error="undefined"),
    "recaptcha-v3": Variant("recaptcha", "/recaptcha/api.js?render={sitekey}", """
  window.onVendor = function () { grecaptcha.ready(function () { log.push("ready"); again(); }); };
  window.again = function () {
    grecaptcha.execute(SITEKEY, {action: "login"}).then(function (token) {
      document.getElementById("tok").value = token; log.push("token");
    }, function (error) { log.push("error:" + error); });
  };""", ("g-recaptcha-response",), token_field_is_pages=True, action="login", error="Timeout"),
    "recaptcha-enterprise": Variant(
        "recaptcha-enterprise", "/recaptcha/enterprise.js?render={sitekey}", """
  window.onVendor = function () {
    grecaptcha.enterprise.ready(function () { log.push("ready"); again(); });
  };
  window.again = function () {
    grecaptcha.enterprise.execute(SITEKEY, {action: "login"}).then(function (token) {
      document.getElementById("tok").value = token; log.push("token");
    }, function (error) { log.push("error:" + error); });
  };""", ("g-recaptcha-response",), token_field_is_pages=True, action="login", error="Timeout"),
    "friendly-captcha": Variant(
        "friendly-captcha", "/npm/@friendlycaptcha/sdk@0.1.27/site.min.js", """
  window.onVendor = function () {
    log.push("ready");
    var box = document.getElementById("box");
    box.addEventListener("frc:widget.complete", function () { log.push("token"); });
    box.addEventListener("frc:widget.error", function (e) {
      log.push("error:" + e.detail.error.code);
    });
    box.addEventListener("frc:widget.expire", function () { log.push("expired"); });
    window.widget = frcaptcha.createWidget({element: box, sitekey: SITEKEY, startMode: "auto"});
  };
  window.again = function () { widget.reset(); };""", ("frc-captcha-response",), module=True),
}


def page_html(variant: Variant, origin: str, sitekey: str) -> str:
    src = origin + variant.src.replace("{sitekey}", sitekey)
    own = '<input type="hidden" name="g-recaptcha-response" id="tok">' \
        if variant.token_field_is_pages else ""
    # The script's own onload attribute tells the page the file ran; for the vendors with an
    # onload= parameter the API itself calls onVendor.
    ready = ' onload="window.frcaptcha && onVendor()"' if variant.module else (
        ' onload="window.grecaptcha && onVendor()"' if variant.token_field_is_pages else "")
    kind = ' type="module"' if variant.module else ""
    return f"""<!doctype html><meta charset="utf-8"><title>bare {variant.vendor} page</title>
<form id="f" method="post" action="/submit"><input name="user" value="alice">
<div id="box"></div>{own}<button type="submit">Log in</button></form>
<script>
  window.log = [];
  var SITEKEY = {json.dumps(sitekey)};
{variant.script}
</script>
<script{kind} src="{src}" async defer{ready} onerror="log.push('load-error')"></script>
"""


@dataclass
class Bare:
    """A bare page for one variant, the vendor's fakes behind it, and the page in Chromium."""

    variant: Variant
    verify: CaptchaVerifyFake
    script: BrowserScriptFake
    open: Callable[[], Visit]
    visit: Visit | None = None

    @property
    def log(self) -> list[str]:
        assert self.visit is not None
        entries: list[str] = self.visit.page.evaluate("window.log")
        return entries

    def wait(self, entry: str, timeout: float = 10) -> None:
        assert self.visit is not None
        self.visit.wait_for(lambda _: entry in self.log, f"{entry!r} in the page's log {self.log}",
                            timeout=timeout)

    def solve(self) -> None:
        """Do what a person does to get a token (clicking the checkbox), if anything."""
        assert self.visit is not None
        if self.variant.click:
            self.visit.page.click("[data-fake-captcha]")

    def form(self) -> list[tuple[str, str]]:
        """The fields the form would submit, as the browser builds them."""
        assert self.visit is not None
        pairs: list[list[str]] = self.visit.page.evaluate(
            "Array.from(new FormData(document.getElementById('f')).entries())")
        return [(name, value) for name, value in pairs]

    def token(self) -> str:
        """The token the form carries: once in each of the vendor's fields, never empty."""
        fields = self.form()
        values = {value for name, value in fields if name in self.variant.fields}
        names = [name for name, _ in fields if name in self.variant.fields]
        assert sorted(names) == sorted(self.variant.fields), fields  # one field of each name
        assert len(values) == 1 and "" not in values, fields
        return values.pop()


@pytest.fixture(scope="module")
def page_server() -> Iterator[tuple[str, dict[str, str]]]:
    """Serves whatever page the test puts in the dict, at ``/``."""
    pages: dict[str, str] = {}

    def handler(request: FakeRequest) -> Reply:
        if request.path != "/":
            return Reply(status=404)
        return Reply(body=pages["/"].encode(), headers=[("Content-Type", "text/html")])

    with LoopbackServer(handler) as server:
        yield server.url, pages


@pytest.fixture(params=sorted(VARIANTS))
def bare(request: pytest.FixtureRequest, page_server: tuple[str, dict[str, str]],
         visit: Callable[..., Visit]) -> Iterator[Bare]:
    variant = VARIANTS[request.param]
    verify = fake_verify_api(variant.vendor)
    script = fake_browser_script(variant.vendor, verify_api=verify)
    url, pages = page_server
    with script.serve():
        pages["/"] = page_html(variant, script.url, verify.public_key)
        holder = Bare(variant, verify, script, lambda: visit(url))

        def open_page() -> Visit:
            holder.visit = visit(url)
            return holder.visit

        holder.open = open_page
        yield holder


def test_a_token_from_the_fake_verifies_once(bare: Bare) -> None:
    bare.open()
    bare.wait("ready")
    bare.solve()
    bare.wait("token")
    token = bare.token()
    assert accepted(bare.verify, token) and not accepted(bare.verify, token)
    attempt = bare.script.challenges[-1]
    assert (attempt.outcome, attempt.token, attempt.sitekey, attempt.action) == (
        "token", token, bare.verify.public_key, bare.variant.action)
    if not bare.variant.token_field_is_pages:  # v3 renders no widget
        assert [r.sitekey for r in bare.script.renders] == [bare.verify.public_key]
    assert bare.script.script_requests == 1


def test_an_error_then_a_new_attempt_goes_through(bare: Bare) -> None:
    bare.script.set_mode("error_then_ok:1")
    bare.open()
    bare.wait("ready")
    bare.solve()
    bare.wait("error:" + (bare.variant.error or bare.script.error_code))
    assert "token" not in bare.log
    bare.visit.page.evaluate("again()")  # type: ignore[union-attr]
    bare.solve()
    bare.wait("token")
    assert accepted(bare.verify, bare.token())
    assert [c.outcome for c in bare.script.challenges] == ["error", "token"]


def test_a_script_that_404s_is_a_load_error(bare: Bare) -> None:
    bare.script.set_mode("http404")
    bare.open()
    bare.wait("load-error")
    assert "ready" not in bare.log and bare.script.challenges == []


def test_a_silent_script_never_says_it_is_ready(bare: Bare) -> None:
    bare.script.set_mode("silent")
    visit = bare.open()
    visit.wait_for(lambda _: bare.script.script_requests == 1, "the script request")
    visit.page.wait_for_timeout(500)
    assert bare.log == [] and bare.script.renders == []


def test_a_token_expires_and_the_page_hears_of_it(bare: Bare) -> None:
    if bare.variant.token_field_is_pages:
        pytest.skip("reCAPTCHA v3 has no expiry callback: the page owns its token")
    bare.script.set_mode("expire:300")
    bare.open()
    bare.wait("ready")
    bare.solve()
    bare.wait("token")
    bare.wait("expired")
    values = [value for name, value in bare.form() if name in bare.variant.fields]
    assert all(value == "" or value.startswith(".") for value in values), values


def test_recaptcha_v3_that_errors_rejects_with_timeout(page_server: tuple[str, dict[str, str]],
                                                       visit: Callable[..., Visit]) -> None:
    variant = VARIANTS["recaptcha-v3"]
    verify = fake_verify_api("recaptcha")
    script = fake_browser_script("recaptcha", verify_api=verify, v3_timeout=0.2)
    url, pages = page_server
    with script.serve():
        script.set_mode("error")
        pages["/"] = page_html(variant, script.url, verify.public_key)
        page = visit(url)
        page.wait_for(lambda _: "error:Timeout" in page.page.evaluate("window.log"),
                      "the promise to reject with 'Timeout'")


def test_hcaptcha_invisible_execute_async_resolves_response_and_key(
        page_server: tuple[str, dict[str, str]], visit: Callable[..., Visit]) -> None:
    verify = fake_verify_api("hcaptcha")
    script = fake_browser_script("hcaptcha", verify_api=verify)
    src = "/1/api.js?render=explicit&onload=onVendor&recaptchacompat=off"
    variant = Variant("hcaptcha", src, """
  window.onVendor = function () {
    var id = hcaptcha.render("box", {sitekey: SITEKEY, size: "invisible"});
    hcaptcha.execute(id, {async: true}).then(function (r) {
      window.result = r; log.push(typeof window.grecaptcha);
      var same = r.response === hcaptcha.getResponse(id) && r.key === hcaptcha.getRespKey(id);
      log.push(same ? "token" : "mismatch");
    }, function (code) { log.push("error:" + code); });
  };""", ("h-captcha-response",))
    url, pages = page_server
    with script.serve():
        pages["/"] = page_html(variant, script.url, verify.public_key)
        page = visit(url)
        page.wait_for(lambda _: "token" in page.page.evaluate("window.log"), "the async execute")
        assert page.page.evaluate("window.log") == ["undefined", "token"]  # no grecaptcha shim
        assert page.page.query_selector("[data-fake-captcha]") is None  # invisible: no checkbox
        result: dict[str, Any] = page.page.evaluate("window.result")
        assert accepted(verify, result["response"])
