"""Fakes of Google reCAPTCHA's ``/recaptcha/api.js`` (v2 and v3) and reCAPTCHA Enterprise's
``/recaptcha/enterprise.js``, for browser tests of a reCAPTCHA site.

v2, explicit: ``{url}/recaptcha/api.js?render=explicit&onload=NAME``. ``grecaptcha.render(container,
params) -> widgetId`` (a number from 0; ``container`` an element or its id) with ``sitekey``,
``size`` (``"normal"``, ``"compact"``: a checkbox; ``"invisible"``: nothing to see), ``theme``,
``badge``, ``tabindex`` (accepted, no effect), ``callback(token)``, ``expired-callback``,
``error-callback`` (no argument, as Google's docs give it: "usually network connectivity").
The container gets a hidden textarea ``g-recaptcha-response`` (id ``g-recaptcha-response``, then
``g-recaptcha-response-1``, ...) holding the token. ``grecaptcha.execute(widgetId?)`` runs an
invisible widget's challenge; ``reset(widgetId?)``, ``getResponse(widgetId?)`` (``""`` without a
token), ``ready(cb)``. Without an id, the first widget. A checkbox widget renders ``<button
type="button" data-fake-captcha="recaptcha">``: a click runs the challenge.

v3: ``{url}/recaptcha/api.js?render=SITEKEY``. ``grecaptcha.ready(cb)``, then
``grecaptcha.execute(SITEKEY, {action}) -> Promise<token>``; the token carries the action and
:attr:`~BrowserScriptFake.score` (the verify fake's 0.9 when None). On an error the real promise
does not settle with an error object: it stays pending, and rejects later with the bare string
``"Timeout"`` (google/recaptcha#269 and #478); the fake rejects with ``"Timeout"`` after
``v3_timeout`` seconds (None: it never settles). ``execute`` with a site key the script was not
loaded for rejects with an ``Error``, as Google's does. (``execute(widgetId, {action})`` on an
invisible widget rendered with a v3 key also resolves the token.)

Enterprise: the same API under ``grecaptcha.enterprise`` (``render``, ``execute``, ``reset``,
``getResponse``, ``ready``), loaded from ``/recaptcha/enterprise.js``; its tokens also carry the
site key they were made for (the assessment checks it).

Google's v2 script shows an ``alert`` when a challenge fails without an ``error-callback``; the
fake logs a warning instead (a dialog would stop a headless test). Not implemented: implicit
rendering of ``.g-recaptcha`` elements, ``hl``, ``isolated``.
"""

from __future__ import annotations

from typing import Any, ClassVar

from failopen.testing._server import FakeRequest
from failopen.testing.browser_scripts._base import BrowserScriptFake
from failopen.testing.providers import CaptchaVerifyFake

__all__ = ["FakeRecaptchaEnterpriseScript", "FakeRecaptchaScript"]

_BODY = r"""
  var widgets = [], render = cfg.query.render;
  var v3key = render && render !== "explicit" ? render : null;
  function find(ref) {
    if (ref === undefined || ref === null) return widgets[0] || null;
    if (typeof ref !== "number" && !/^[0-9]+$/.test(String(ref))) return null;
    return widgets[Number(ref)] || null;
  }
  function setToken(w, token) { w.token = token; w.field.value = token; }
  function stop(w) { w.run += 1; clearTimeout(w.timer); }
  function runV2(w, action, promise) {
    stop(w);
    var mine = w.run, p = w.p;
    challenge(w.el, {w: String(w.id), k: p.sitekey, s: p.size || "normal", a: action,
                     v: action ? "3" : "2"}, function (result) {
      if (mine !== w.run) return;
      if (result.error) {
        if (w.button) w.button.disabled = false;
        if (typeof p["error-callback"] === "function") call(p["error-callback"]);
        else console.warn("fake reCAPTCHA: cannot contact reCAPTCHA (no error-callback)");
        if (promise) timeout(promise);
        return;
      }
      setToken(w, result.token);
      call(p.callback, result.token);
      if (promise) later(function () { promise.resolve(result.token); });
      if (cfg.expire_ms) w.timer = later(function () {
        if (mine !== w.run) return;
        setToken(w, "");
        if (w.button) w.button.disabled = false;
        call(p["expired-callback"]);
      }, cfg.expire_ms);
    });
  }
  // Google's promise rejects late, with a bare string (not an Error); or never, if so set.
  function timeout(d) {
    if (cfg.v3_timeout_ms !== null) later(function () { d.reject("Timeout"); }, cfg.v3_timeout_ms);
  }
  function deferred() {
    var d = {};
    d.promise = new Promise(function (resolve, reject) { d.resolve = resolve; d.reject = reject; });
    return d;
  }
  function runV3(sitekey, action, d) {
    challenge(document.body, {k: sitekey, a: action, v: "3"}, function (result) {
      if (result.error) {
        timeout(d);
        return;
      }
      later(function () { d.resolve(result.token); });
    });
  }
  var api = {
    render: function (container, params) {
      var el = element(container), p = params || {}, id = widgets.length;
      if (!el) throw new Error("reCAPTCHA placeholder element must be an element or id");
      var w = {id: id, el: el, p: p, run: 0, token: "", timer: null};
      w.field = hidden(el, "textarea", "g-recaptcha-response",
                       id === 0 ? "g-recaptcha-response" : "g-recaptcha-response-" + id);
      w.frame = widgetFrame(el, {w: String(id), k: p.sitekey, s: p.size || "normal"});
      if (p.size !== "invisible") {
        w.button = checkbox(el, function () { w.button.disabled = true; runV2(w); });
      }
      widgets.push(w);
      return id;
    },
    execute: function (ref, options) {
      var d = deferred(), action = options && options.action;
      if (typeof ref === "string" && !/^[0-9]+$/.test(ref)) {
        if (ref !== v3key) {
          later(function () {
            d.reject(new Error("Invalid site key or not loaded in api.js: " + ref));
          });
        } else {
          runV3(ref, action, d);
        }
        return d.promise;
      }
      var w = find(ref);
      if (!w) {
        later(function () { d.reject(new Error("Invalid reCAPTCHA client id: " + ref)); });
        return d.promise;
      }
      runV2(w, action, d);
      return d.promise;
    },
    reset: function (ref) {
      var w = find(ref);
      if (!w) return;
      stop(w); setToken(w, "");
      if (w.button) w.button.disabled = false;
    },
    getResponse: function (ref) { var w = find(ref); return w ? w.token : ""; },
    ready: function (callback) { call(callback); }
  };
  if (cfg.namespace) {
    window.grecaptcha = window.grecaptcha || {};
    window.grecaptcha[cfg.namespace] = api;
    window.grecaptcha.ready = window.grecaptcha.ready || api.ready;
  } else {
    window.grecaptcha = api;
  }
  onload();
"""


class FakeRecaptchaScript(BrowserScriptFake):
    """reCAPTCHA's ``api.js``: v2 checkbox and invisible widgets, v3 ``execute`` with actions."""

    vendor = "recaptcha"
    script_path: ClassVar[str] = "/recaptcha/api.js"
    body: ClassVar[str] = _BODY
    error_code: ClassVar[str] = "network"
    #: ``grecaptcha.<namespace>`` holds the API; empty: ``grecaptcha`` itself.
    namespace: ClassVar[str] = ""

    def __init__(self, *, verify_api: CaptchaVerifyFake | None = None,
                 signing_key: str | None = None, score: float | None = None,
                 v3_timeout: float | None = 1.0) -> None:
        super().__init__(verify_api=verify_api, signing_key=signing_key, score=score)
        #: Seconds after a failed v3 challenge until ``execute``'s promise rejects with
        #: ``"Timeout"`` (Google's takes longer; None: it never settles).
        self.v3_timeout = v3_timeout

    def _config(self, request: FakeRequest) -> dict[str, Any]:
        timeout = None if self.v3_timeout is None else round(self.v3_timeout * 1000)
        return {"namespace": self.namespace, "v3_timeout_ms": timeout}

    def _claims(self, attempt: dict[str, str | None]) -> dict[str, Any]:
        claims = super()._claims(attempt)
        if attempt.get("v") != "3":
            # A v2 token carries neither: the verify fake answers a v2 shape for it.
            claims["action"] = claims["score"] = None
        return claims


class FakeRecaptchaEnterpriseScript(FakeRecaptchaScript):
    """reCAPTCHA Enterprise's ``enterprise.js``: the same API under ``grecaptcha.enterprise``."""

    vendor = "recaptcha-enterprise"
    script_path: ClassVar[str] = "/recaptcha/enterprise.js"
    namespace: ClassVar[str] = "enterprise"
