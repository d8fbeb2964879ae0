"""A fake of the vendor's client script, ``{vendor_url}/v2/<public key>/api.js``, for browser tests.

It behaves as the spec describes the real one (fail-open guidance, item 2): loaded with a
``data-callback`` attribute naming a global function, it calls that function with an
enforcement object (``setConfig``, ``run``, ``reset``). After ``setConfig`` it calls ``onReady``;
``run()`` ends in ``onCompleted({token})`` with a token the fake verify API accepts::

    vendor = FakeVendorScript(verify_api=fake_verify_api)   # tokens registered with that fake
    with vendor.serve():
        config = config.replace(vendor_url=vendor.url, public_key="test-public-key")
        vendor.set_mode("error_then_ok:2")                  # switch at any time

Modes (:meth:`set_mode`; each page load gets the mode current when the script was requested):

=====================  ===========================================================================
``ok``                 loads, ``onReady``, ``run()`` -> ``onCompleted({token})``
``http404``            the script answers 404: the page sees a script load error
``silent``             the script loads and never calls the ``data-callback`` (no ``onReady``)
``error_then_ok:N``    ``run()`` calls ``onError`` the first N times on that page, then works
``error``              ``run()`` always calls ``onError`` (session creation cannot reach it)
``failed``             ``run()`` calls ``onFailed``: the person failed the challenge, no outage
``slow:MS``            the script is answered after MS milliseconds, then works as ``ok``
=====================  ===========================================================================

Each served script carries fresh tokens, registered with ``verify_api`` when one is given (so a
server refusing replayed tokens still accepts them); with ``signing_key`` instead, tokens that a
``FakeVerifyAPI`` with that private key accepts once each, wherever it runs (``failopen emulate
vendor`` does this); with neither, every token is
:attr:`FakeVerifyAPI.GOOD <failopen.testing.FakeVerifyAPI.GOOD>`. :attr:`script_requests` counts
requests for the script, :attr:`public_keys` lists the keys they named; :meth:`reset` clears
both and returns to ``ok``.
"""

from __future__ import annotations

import json
import secrets
import threading

from failopen.testing._server import FakeRequest, Handler, LoopbackServer, Reply
from failopen.testing._vendor_modes import parse_mode
from failopen.testing.verify_api import FakeVerifyAPI, signed_token

__all__ = ["FakeVendorScript"]

_TOKENS_PER_PAGE = 8
_HEADERS = [("Content-Type", "text/javascript; charset=utf-8"), ("Cache-Control", "no-store")]

# The fake itself: ES5, no eval, callbacks always asynchronous (as a network-backed vendor's are).
_SCRIPT = """(function () {
  var cfg = %s, me = document.currentScript, name = me && me.getAttribute("data-callback");
  var hooks = {}, errors = 0, used = 0, ready = false;
  function later(fn, arg) { setTimeout(function () { if (fn) fn(arg); }, 0); }
  if (cfg.mode === "silent") return;
  if (!name || typeof window[name] !== "function") {
    console.error("fake vendor: data-callback does not name a global function");
    return;
  }
  window[name]({
    setConfig: function (options) {
      for (var key in options) hooks[key] = options[key];
      if (!ready) { ready = true; later(hooks.onReady); }
    },
    run: function () {
      if (cfg.mode === "failed") return later(hooks.onFailed, {error: "CHALLENGE_FAILED"});
      if (cfg.mode === "error" || errors < cfg.errors) {
        errors += 1;
        return later(hooks.onError, {error: {error: "fake vendor: session unavailable"}});
      }
      later(hooks.onCompleted, {token: cfg.tokens[used++ %% cfg.tokens.length]});
    },
    reset: function () {}
  });
})();
"""


class FakeVendorScript:
    """The vendor's ``api.js``, with the modes a browser integration must survive."""

    MODES: frozenset[str] = frozenset(
        {"ok", "http404", "silent", "error_then_ok:N", "error", "failed", "slow:MS"}
    )

    def __init__(self, *, verify_api: FakeVerifyAPI | None = None,
                 signing_key: str | None = None) -> None:
        self.verify_api = verify_api
        #: Without ``verify_api``: sign fresh tokens that a FakeVerifyAPI with this private key
        #: accepts once each (:func:`~failopen.testing.verify_api.signed_token`); None: GOOD.
        self.signing_key = signing_key
        self._lock = threading.Lock()
        self._mode = "ok"
        self.script_requests = 0
        self.public_keys: list[str] = []
        #: The server of the latest :meth:`serve`, None until then.
        self.server: LoopbackServer | None = None

    def __repr__(self) -> str:
        return f"FakeVendorScript(mode={self._mode!r}, script_requests={self.script_requests})"

    @property
    def mode(self) -> str:
        """The current mode, as given to :meth:`set_mode`."""
        return self._mode

    def set_mode(self, mode: str) -> None:
        """Switch the mode (see the module docstring) for every script served from now on."""
        parse_mode(mode)
        with self._lock:
            self._mode = mode

    def reset(self) -> None:
        """Back to ``ok``, counters cleared."""
        with self._lock:
            self._mode = "ok"
            self.script_requests = 0
            self.public_keys = []

    def handler(self, request: FakeRequest) -> Reply:
        """Answer one request; serve it with :meth:`serve` (a browser needs a real socket)."""
        parts = request.path.split("/")
        if request.method not in ("GET", "HEAD") or len(parts) != 4 or parts[1] != "v2" \
                or not parts[2] or parts[3] != "api.js":
            return Reply(status=404, body=b"Not Found", headers=[("Content-Type", "text/plain")])
        with self._lock:
            self.script_requests += 1
            self.public_keys.append(parts[2])
            mode = self._mode
        kind, number = parse_mode(mode)
        if kind == "http404":
            return Reply(status=404, body=b"Not Found", headers=[("Content-Type", "text/plain")])
        config = {"mode": kind, "errors": number if kind == "error_then_ok" else 0,
                  "tokens": self._tokens()}
        body = (_SCRIPT % json.dumps(config)).encode()
        return Reply(body=body, headers=list(_HEADERS),
                     delay=number / 1000 if kind == "slow" else 0.0)

    def serve(self, port: int = 0, *, control: bool = False) -> LoopbackServer:
        """This fake on a started loopback server, also kept as :attr:`server`; see :attr:`url`.

        ``control=True`` also answers ``GET``/``POST /_control`` (:mod:`failopen.testing.control`).
        """
        handler: Handler = self.handler
        if control:
            from failopen.testing.control import VendorScriptControls, with_control

            handler = with_control(handler, VendorScriptControls(self))
        self.server = LoopbackServer(handler, port=port).start()
        return self.server

    @property
    def url(self) -> str:
        """The ``FAILOPEN_VENDOR_URL`` of the latest :meth:`serve`; RuntimeError before."""
        if self.server is None:
            raise RuntimeError("FakeVendorScript is not served: call serve() first")
        return self.server.url

    def _tokens(self) -> list[str]:
        api = self.verify_api
        if api is None and self.signing_key is not None:
            return [signed_token(self.signing_key) for _ in range(_TOKENS_PER_PAGE)]
        if api is None:
            return [FakeVerifyAPI.GOOD]
        tokens = [f"fake-vendor-{secrets.token_hex(8)}" for _ in range(_TOKENS_PER_PAGE)]
        for token in tokens:
            api.add_token(token)
        return tokens
