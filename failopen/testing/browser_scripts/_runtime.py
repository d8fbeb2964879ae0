"""What every fake browser script shares in the browser: its configuration, the mode's verdict on
each challenge attempt, and the frames that carry attempts to the fake's server.

A real widget talks to its vendor from iframes on the vendor's origin; so do these fakes. A render
loads ``{origin}/__fake__/widget?...`` into the container (the server records it), and every
challenge attempt loads ``{origin}/__fake__/challenge?...``, whose page posts the outcome back to
the parent with ``postMessage``: a token the server has just registered with the verify fake, or an
error. A page's CSP therefore needs ``frame-src`` for the fake's origin, as for the real vendors,
and nothing else beyond ``script-src``.

The JavaScript is ES5 with no ``eval``; callbacks always run asynchronously, as a network-backed
vendor's do.
"""

from __future__ import annotations

import html
import json
from typing import Any

__all__ = ["CHALLENGE_PATH", "WIDGET_PATH", "challenge_page", "script", "widget_page"]

WIDGET_PATH = "/__fake__/widget"
CHALLENGE_PATH = "/__fake__/challenge"

# ``cfg`` comes from the server: mode, errors (error_then_ok:N), expire_ms, origin, the script's
# query string, and what the vendor module adds. ``attempts`` counts this page's challenges: the
# mode's N is per page, as an outage a page lives through would be.
_PRELUDE = """(function () {
  "use strict";
  var cfg = CONFIG;
  if (cfg.mode === "silent") return;
  var attempts = 0, seq = 0;
  function later(fn, ms) { return setTimeout(fn, ms || 0); }
  function call(fn) {
    var args = Array.prototype.slice.call(arguments, 1);
    if (typeof fn === "function") later(function () { fn.apply(null, args); });
  }
  function element(target) {
    if (typeof target !== "string") return target || null;
    var found = document.getElementById(target.charAt(0) === "#" ? target.slice(1) : target);
    if (found) return found;
    try { return document.querySelector(target); } catch (e) { return null; }
  }
  function uid(prefix) { return prefix + (++seq) + Math.random().toString(36).slice(2, 8); }
  function frame(parent, path, params, onMessage) {
    var nonce = uid("n"), query = [], key, f = document.createElement("iframe");
    params.n = nonce; params.p = location.origin; params.h = location.hostname;
    for (key in params) {
      if (params[key] !== undefined && params[key] !== null) {
        query.push(encodeURIComponent(key) + "=" + encodeURIComponent(String(params[key])));
      }
    }
    f.title = "fake captcha";
    f.style.cssText = "width:0;height:0;border:0;position:absolute;left:-9999px";
    if (onMessage) {
      var listener = function (event) {
        if (event.origin !== cfg.origin || !event.data || event.data.fakeCaptcha !== nonce) return;
        window.removeEventListener("message", listener);
        if (f.parentNode) f.parentNode.removeChild(f);
        onMessage(event.data);
      };
      window.addEventListener("message", listener);
    }
    f.src = cfg.origin + path + "?" + query.join("&");
    (parent || document.body).appendChild(f);
    return f;
  }
  function widgetFrame(parent, params) { return frame(parent, WIDGET_PATH, params, null); }
  // One challenge attempt; the mode decides its outcome, the server mints the token.
  function challenge(parent, params, done) {
    attempts += 1;
    params.o = (cfg.mode === "error" || attempts <= cfg.errors) ? "error" : "ok";
    params.t = attempts;
    frame(parent, CHALLENGE_PATH, params, done);
  }
  function hidden(parent, tag, name, id) {
    var field = document.createElement(tag);
    if (tag === "input") field.type = "hidden"; else field.style.display = "none";
    field.name = name;
    if (id) field.id = id;
    parent.appendChild(field);
    return field;
  }
  function checkbox(parent, onClick) {
    var button = document.createElement("button");
    button.type = "button";
    button.setAttribute("data-fake-captcha", cfg.vendor);
    button.textContent = "I am human";
    button.addEventListener("click", onClick);
    parent.appendChild(button);
    return button;
  }
  function onload() {
    var name = cfg.query.onload;
    if (!name) return;
    later(function () {
      if (typeof window[name] === "function") window[name]();
      else console.error("fake " + cfg.vendor + ": onload=" + name + " names no global function");
    });
  }
""".replace("WIDGET_PATH", json.dumps(WIDGET_PATH)).replace(
    "CHALLENGE_PATH", json.dumps(CHALLENGE_PATH))

_EPILOGUE = "})();\n"


def script(config: dict[str, Any], body: str) -> bytes:
    """The served script: the shared prelude with ``config``, then the vendor's ``body``."""
    # "</" inside a JSON string would end an inline <script>; harmless here, escaped anyway.
    encoded = json.dumps(config, sort_keys=True).replace("</", "<\\/")
    return (_PRELUDE.replace("CONFIG", encoded, 1) + body + _EPILOGUE).encode()


def widget_page(vendor: str) -> bytes:
    """The page a rendered widget's frame shows."""
    return (f"<!doctype html><meta charset=utf-8><title>fake {html.escape(vendor)}</title>"
            f"<p>fake {html.escape(vendor)} widget</p>").encode()


def challenge_page(parent_origin: str, message: dict[str, Any]) -> bytes:
    """The page of one challenge attempt: it posts ``message`` to the page that framed it."""
    payload = json.dumps(message, sort_keys=True).replace("</", "<\\/")
    target = json.dumps(parent_origin).replace("</", "<\\/")
    return (f"<!doctype html><meta charset=utf-8><title>fake challenge</title>"
            f"<script>parent.postMessage({payload}, {target});</script>").encode()
