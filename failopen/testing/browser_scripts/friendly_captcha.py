"""A fake of Friendly Captcha v2's site script (``@friendlycaptcha/sdk``), for browser tests.

Friendly Captcha's docs load the SDK from jsDelivr as
``https://cdn.jsdelivr.net/npm/@friendlycaptcha/sdk@<version>/site.min.js`` (``type="module"``)
and ``site.compat.min.js`` (``nomodule``); the fake serves both, for any ``@<version>`` or none,
under :attr:`url` (so ``FAILOPEN_VENDOR_URL`` is the CDN's origin and the path carries the
version). There is no ``onload`` parameter: the API is ready when the script's ``load`` event fires.

``window.frcaptcha`` (the SDK instance the site script creates) has
``createWidget({element, sitekey, startMode, formFieldName}) -> WidgetHandle`` and ``widgets``
(a ``Map`` of id to handle); ``startMode`` is ``"focus"`` (the default: the challenge starts when
the form around the widget gets focus, or on a click of the widget), ``"auto"`` (at once) or
``"none"`` (on ``start()`` or a click). A ``WidgetHandle`` has ``id``, ``getResponse()``,
``getState()``, ``start()``, ``reset()`` (back to the start; ``auto`` starts again),
``destroy()`` and ``addEventListener(type, listener)``. The widget dispatches DOM events on
``element``: ``frc:widget.complete`` (``event.detail.response``), ``frc:widget.error``
(``event.detail.error`` is ``{code: "network_error", detail}``), ``frc:widget.expire``,
``frc:widget.reset``, ``frc:widget.statechange`` (``event.detail.state``). A hidden input
``frc-captcha-response`` (or ``formFieldName``) in ``element`` holds the token once completed; until
then a placeholder that starts with a dot (``.UNSTARTED``, ``.SOLVING``, ``.ERROR``, ``.EXPIRED``),
as the real widget's does: a form must not take it for a token. On load the script also attaches a
widget to each ``.frc-captcha[data-sitekey]`` element, reading ``data-start``.

The widget shows ``<button type="button" data-fake-captcha="friendly-captcha">``: a click starts
it. Friendly Captcha documents its error codes only loosely; ``network_error`` is the fake's choice.
Not implemented: Risk Intelligence, ``apiEndpoint``, ``language``, themes.
"""

from __future__ import annotations

import re
from typing import ClassVar

from failopen.testing.browser_scripts._base import BrowserScriptFake

__all__ = ["FakeFriendlyCaptchaScript"]

_PATH = re.compile(r"/npm/@friendlycaptcha/sdk(@[A-Za-z0-9.\-]+)?/site(\.compat)?\.min\.js")

_BODY = r"""
  var widgets = new Map();
  function fire(w, name, extra) {
    var detail = {name: name, state: w.state}, key;
    for (key in extra || {}) detail[key] = extra[key];
    later(function () {
      w.el.dispatchEvent(new CustomEvent(name, {bubbles: true, detail: detail}));
    });
  }
  function setState(w, state, field) {
    w.state = state;
    if (field !== undefined) w.input.value = field;
    fire(w, "frc:widget.statechange");
  }
  function start(w) {
    if (w.state === "solving" || w.state === "completed" || w.state === "destroyed") return;
    w.run += 1;
    var mine = w.run;
    setState(w, "solving", ".SOLVING");
    challenge(w.el, {w: w.id, k: w.sitekey}, function (result) {
      if (mine !== w.run) return;
      if (result.error) {
        setState(w, "error", ".ERROR");
        fire(w, "frc:widget.error",
             {error: {code: result.error, detail: "fake: the API is unreachable"}});
        return;
      }
      w.response = result.token;
      setState(w, "completed", result.token);
      fire(w, "frc:widget.complete", {response: result.token});
      if (cfg.expire_ms) w.timer = later(function () {
        if (mine !== w.run) return;
        w.response = "";
        setState(w, "expired", ".EXPIRED");
        fire(w, "frc:widget.expire");
      }, cfg.expire_ms);
    });
  }
  function createWidget(options) {
    var el = options.element, id = uid("frc");
    if (!el) throw new Error("Friendly Captcha: createWidget needs an element");
    var w = {id: id, el: el, sitekey: options.sitekey || el.getAttribute("data-sitekey"),
             mode: options.startMode || "focus", state: "unstarted", run: 0, response: "",
             timer: null};
    w.input = hidden(el, "input", options.formFieldName || "frc-captcha-response");
    w.input.value = ".UNSTARTED";
    w.frame = widgetFrame(el, {w: id, k: w.sitekey, e: w.mode});
    w.button = checkbox(el, function () { start(w); });
    var form = el.closest ? el.closest("form") : null;
    if (w.mode === "focus" && form) {
      form.addEventListener("focusin", function () { if (w.state === "unstarted") start(w); });
    }
    var handle = {
      id: id,
      getResponse: function () { return w.response; },
      getState: function () { return w.state; },
      start: function () { start(w); },
      reset: function () {
        if (w.state === "destroyed") return;
        w.run += 1; clearTimeout(w.timer); w.response = "";
        setState(w, "unstarted", ".UNSTARTED");
        fire(w, "frc:widget.reset");
        if (w.mode === "auto") start(w);
      },
      destroy: function () {
        w.run += 1; clearTimeout(w.timer); w.state = "destroyed";
        [w.input, w.frame, w.button].forEach(function (node) {
          if (node.parentNode) node.parentNode.removeChild(node);
        });
        widgets["delete"](id);
      },
      addEventListener: function (type, listener, opts) {
        el.addEventListener(type, listener, opts);
      },
      removeEventListener: function (type, listener, opts) {
        el.removeEventListener(type, listener, opts);
      }
    };
    el.frcWidget = handle;
    widgets.set(id, handle);
    if (w.mode === "auto") start(w);
    return handle;
  }
  window.frcaptcha = {createWidget: createWidget, widgets: widgets};
  function attachAll() {
    var found = document.querySelectorAll(".frc-captcha[data-sitekey]"), i;
    for (i = 0; i < found.length; i++) {
      if (!found[i].frcWidget) {
        createWidget({element: found[i],
                      startMode: found[i].getAttribute("data-start") || undefined});
      }
    }
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", attachAll);
  else attachAll();
"""


class FakeFriendlyCaptchaScript(BrowserScriptFake):
    """Friendly Captcha v2's ``site.min.js``: ``createWidget``, its DOM events, expiry."""

    vendor = "friendly-captcha"
    script_path: ClassVar[str] = "/npm/@friendlycaptcha/sdk@0.1.27/site.min.js"
    body: ClassVar[str] = _BODY
    error_code: ClassVar[str] = "network_error"

    def serves_script(self, path: str) -> bool:
        """``site.min.js`` and ``site.compat.min.js``, of any version."""
        return _PATH.fullmatch(path) is not None
