"""A fake of Cloudflare Turnstile's ``/turnstile/v0/api.js``, for browser tests of a Turnstile site.

Load it as ``{url}/turnstile/v0/api.js?render=explicit&onload=NAME``; ``window[NAME]()`` is called
once the API is ready. ``window.turnstile`` has, as Cloudflare's client-side rendering docs give
them:

* ``render(container, params) -> widgetId`` (``container`` an element, an element id or a CSS
  selector); params ``sitekey``, ``action``, ``cData``, ``callback(token)``,
  ``error-callback(code)``, ``expired-callback(token)``, ``timeout-callback`` (accepted, never
  called: the fake has no interactive challenge to time out), ``execution`` (``"render"``, the
  default, runs the challenge at once; ``"execute"`` waits for ``execute``), ``appearance``,
  ``size``, ``theme`` (accepted, no effect), ``response-field`` (default true) and
  ``response-field-name`` (default ``cf-turnstile-response``): a hidden input of that name inside
  the container holds the token; ``retry`` (``"auto"``, the default, runs the challenge again
  ``retry-interval`` ms, default 8000, after an error; ``"never"`` leaves it to ``reset``),
  ``refresh-expired`` (``"auto"``, the default, runs again when the token expires).
* ``execute(container | widgetId, params?)`` (renders with ``params`` first if nothing is there),
  ``reset(widgetId?)`` (clears the token; a ``render``-execution widget runs again: a new attempt),
  ``remove(widgetId?)``, ``getResponse(widgetId?)``, ``isExpired(widgetId?)``, ``ready(cb)``.
  Without an id, the latest widget.

A managed widget completes on its own shortly after ``render``: there is nothing to click. On an
error the ``error-callback`` gets code ``200500`` (the docs' "loading error: the iframe could not
be loaded", what an outage looks like); with no ``error-callback`` the fake throws, as the docs
say Turnstile does. Cloudflare says a truthy return from ``error-callback`` marks the error
handled; the fake still retries under ``retry: "auto"`` (the docs do not say a handled error stops
the retry). Not implemented: implicit rendering of ``.cf-turnstile`` elements, ``compat=recaptcha``,
the ``before-/after-interactive`` and ``unsupported`` callbacks.
"""

from __future__ import annotations

from typing import ClassVar

from failopen.testing.browser_scripts._base import BrowserScriptFake

__all__ = ["FakeTurnstileScript"]

_BODY = r"""
  var widgets = {}, order = [];
  function find(ref) {
    if (ref === undefined || ref === null) {
      return order.length ? widgets[order[order.length - 1]] : null;
    }
    if (widgets[ref]) return widgets[ref];
    var el = element(ref), i;
    for (i = 0; i < order.length; i++) if (widgets[order[i]].el === el) return widgets[order[i]];
    return null;
  }
  function setToken(w, token) { w.token = token; if (w.input) w.input.value = token || ""; }
  function stop(w) { w.run += 1; clearTimeout(w.timer); }
  function run(w) {
    stop(w);
    var mine = w.run, p = w.p;
    challenge(w.el, {w: w.id, k: p.sitekey, a: p.action, x: p.cData || p.cdata, s: p.size},
      function (result) {
        if (mine !== w.run || w.removed) return;
        if (result.error) return failed(w, mine, result.error);
        setToken(w, result.token); w.expired = false;
        call(p.callback, result.token);
        if (cfg.expire_ms) w.timer = later(function () {
          if (mine !== w.run) return;
          w.expired = true; setToken(w, "");
          call(p["expired-callback"], result.token);
          if ((p["refresh-expired"] || "auto") === "auto") run(w);
        }, cfg.expire_ms);
      });
  }
  function failed(w, mine, code) {
    var handler = w.p["error-callback"];
    later(function () {
      if (mine !== w.run) return;
      if ((w.p.retry || "auto") === "auto") {
        w.timer = later(function () { if (mine === w.run && !w.removed) run(w); },
                        w.p["retry-interval"] || 8000);
      }
      if (typeof handler !== "function") {
        throw new Error("[Cloudflare Turnstile] Error: " + code + ".");
      }
      if (!handler(code)) console.warn("[Cloudflare Turnstile] Error: " + code + ".");
    });
  }
  var turnstile = {
    render: function (container, params) {
      var el = element(container), p = params || {}, id = uid("cf-chl-widget-");
      if (!el) {
        console.error("[Cloudflare Turnstile] no container " + container);
        return undefined;
      }
      var w = {id: id, el: el, p: p, run: 0, token: "", expired: false, timer: null,
               removed: false};
      if (p["response-field"] !== false) {
        w.input = hidden(el, "input", p["response-field-name"] || "cf-turnstile-response",
                         id + "_response");
      }
      w.frame = widgetFrame(el, {w: id, k: p.sitekey, a: p.action, s: p.size,
                                 e: p.execution || "render"});
      widgets[id] = w; order.push(id);
      if ((p.execution || "render") === "render") run(w);
      return id;
    },
    execute: function (target, params) {
      var w = find(target);
      if (!w) {
        var merged = {}, key;
        for (key in params || {}) merged[key] = params[key];
        merged.execution = "execute";
        w = widgets[turnstile.render(target, merged)];
        if (!w) return;
      }
      run(w);
    },
    reset: function (ref) {
      var w = find(ref);
      if (!w) return;
      stop(w); setToken(w, ""); w.expired = false;
      if ((w.p.execution || "render") === "render") run(w);
    },
    remove: function (ref) {
      var w = find(ref);
      if (!w) return;
      stop(w); w.removed = true;
      if (w.input && w.input.parentNode) w.input.parentNode.removeChild(w.input);
      if (w.frame && w.frame.parentNode) w.frame.parentNode.removeChild(w.frame);
      delete widgets[w.id];
      order.splice(order.indexOf(w.id), 1);
    },
    getResponse: function (ref) { var w = find(ref); return w && w.token ? w.token : undefined; },
    isExpired: function (ref) { var w = find(ref); return !!(w && w.expired); },
    ready: function (callback) { call(callback); }
  };
  window.turnstile = turnstile;
  onload();
"""


class FakeTurnstileScript(BrowserScriptFake):
    """Cloudflare Turnstile's ``api.js``: managed and execute-mode widgets, retries, expiry."""

    vendor = "turnstile"
    script_path: ClassVar[str] = "/turnstile/v0/api.js"
    body: ClassVar[str] = _BODY
    error_code: ClassVar[str] = "200500"
