"""A fake of hCaptcha's ``/1/api.js``, for browser tests of an hCaptcha site.

Load it as ``{url}/1/api.js?render=explicit&onload=NAME`` (``recaptchacompat=off`` too, if the page
wants no ``grecaptcha``); ``window[NAME]()`` is called once the API is ready. ``window.hcaptcha``
has, as hCaptcha's configuration docs give them:

* ``render(container, params) -> widgetId`` (``container`` an element or its id); params
  ``sitekey``, ``size`` (``"normal"``, the default, and ``"compact"`` show a checkbox;
  ``"invisible"`` shows nothing), ``theme``, ``tabindex`` (accepted, no effect),
  ``callback(token)``, ``expired-callback``, ``chalexpired-callback`` (accepted, never called:
  the fake's challenge cannot expire half-solved), ``error-callback(code)``, ``open-callback``,
  ``close-callback`` (called around each challenge). The container gets hidden textareas
  ``h-captcha-response`` and, unless ``recaptchacompat=off``, ``g-recaptcha-response``, both
  holding the token.
* ``execute(widgetId?, {async: true}?)``: runs the challenge; with ``async: true`` it returns a
  Promise of ``{response, key}`` that rejects with the error code.
* ``reset(widgetId?)``, ``remove(widgetId?)``, ``getResponse(widgetId?)`` (``""`` when there is no
  token), ``getRespKey(widgetId?)``, ``setData(widgetId, data)``. Without an id, the first widget.

With ``recaptchacompat`` not ``off`` and no ``window.grecaptcha`` yet, ``grecaptcha`` is the same
object, as hCaptcha does. A checkbox widget renders ``<button type="button"
data-fake-captcha="hcaptcha">`` in its container: a click runs the challenge, as a person's would.
Errors give the code ``network-error`` (hCaptcha's client-side code for an unreachable API). Not
implemented: implicit rendering of ``.h-captcha`` elements, ``hl`` and the look of the widget.
"""

from __future__ import annotations

from typing import ClassVar

from failopen.testing.browser_scripts._base import BrowserScriptFake

__all__ = ["FakeHCaptchaScript"]

_BODY = r"""
  var widgets = {}, order = [], compat = cfg.query.recaptchacompat !== "off";
  function find(ref) {
    if (ref === undefined || ref === null || ref === "") {
      return order.length ? widgets[order[0]] : null;
    }
    return widgets[ref] || null;
  }
  function setToken(w, token, key) {
    w.token = token; w.key = key;
    for (var i = 0; i < w.fields.length; i++) w.fields[i].value = token;
  }
  function stop(w) { w.run += 1; clearTimeout(w.timer); }
  function run(w, promise) {
    stop(w);
    var mine = w.run, p = w.p;
    call(p["open-callback"]);
    challenge(w.el, {w: w.id, k: p.sitekey, s: p.size || "normal"}, function (result) {
      if (mine !== w.run || w.removed) {
        if (promise) promise.reject("challenge-closed");
        return;
      }
      call(p["close-callback"]);
      if (result.error) {
        if (w.button) w.button.disabled = false;
        call(p["error-callback"], result.error);
        if (promise) later(function () { promise.reject(result.error); });
        return;
      }
      var key = uid("E0_");
      setToken(w, result.token, key);
      call(p.callback, result.token);
      if (promise) later(function () { promise.resolve({response: result.token, key: key}); });
      if (cfg.expire_ms) w.timer = later(function () {
        if (mine !== w.run) return;
        setToken(w, "", "");
        if (w.button) w.button.disabled = false;
        call(p["expired-callback"]);
      }, cfg.expire_ms);
    });
  }
  var hcaptcha = {
    render: function (container, params) {
      var el = element(container), p = params || {}, id = uid("h");
      if (!el) throw new Error("[hCaptcha] render: invalid container '" + container + "'.");
      var w = {id: id, el: el, p: p, run: 0, token: "", key: "", timer: null, removed: false,
               fields: []};
      w.fields.push(hidden(el, "textarea", "h-captcha-response", "h-captcha-response-" + id));
      if (compat) {
        w.fields.push(hidden(el, "textarea", "g-recaptcha-response", "g-recaptcha-response-" + id));
      }
      w.frame = widgetFrame(el, {w: id, k: p.sitekey, s: p.size || "normal"});
      if (p.size !== "invisible") {
        w.button = checkbox(el, function () { w.button.disabled = true; run(w); });
      }
      widgets[id] = w; order.push(id);
      return id;
    },
    execute: function (ref, options) {
      var w = find(ref), deferred = null, promise;
      if (options && options.async) {
        promise = new Promise(function (resolve, reject) {
          deferred = {resolve: resolve, reject: reject};
        });
      }
      if (!w) {
        if (deferred) later(function () { deferred.reject("invalid-captcha-id"); });
        else console.error("[hCaptcha] execute: no widget " + ref);
        return promise;
      }
      run(w, deferred);
      return promise;
    },
    reset: function (ref) {
      var w = find(ref);
      if (!w) return;
      stop(w); setToken(w, "", "");
      if (w.button) w.button.disabled = false;
    },
    remove: function (ref) {
      var w = find(ref), i;
      if (!w) return;
      stop(w); w.removed = true;
      for (i = 0; i < w.fields.length; i++) w.el.removeChild(w.fields[i]);
      if (w.button) w.el.removeChild(w.button);
      if (w.frame.parentNode) w.frame.parentNode.removeChild(w.frame);
      delete widgets[w.id];
      order.splice(order.indexOf(w.id), 1);
    },
    getResponse: function (ref) { var w = find(ref); return w ? w.token : ""; },
    getRespKey: function (ref) { var w = find(ref); return w ? w.key : ""; },
    setData: function (ref, data) { var w = find(ref); if (w) w.data = data; }
  };
  window.hcaptcha = hcaptcha;
  if (compat && !window.grecaptcha) window.grecaptcha = hcaptcha;
  onload();
"""


class FakeHCaptchaScript(BrowserScriptFake):
    """hCaptcha's ``api.js``: checkbox and invisible widgets, the async ``execute``, expiry."""

    vendor = "hcaptcha"
    script_path: ClassVar[str] = "/1/api.js"
    body: ClassVar[str] = _BODY
    error_code: ClassVar[str] = "network-error"
