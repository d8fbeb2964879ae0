"""What every captcha vendor's browser-script fake does alike: serve the script at the vendor's
path with a mode, record what the page rendered and every challenge attempt, and hand out tokens
the vendor's verify fake accepts once.

A vendor module holds only its differences: its paths, its JavaScript (the public API over the
shared runtime in :mod:`._runtime`), its error code, and which claims its tokens carry.
"""

from __future__ import annotations

import re
import secrets
import threading
from abc import ABC
from dataclasses import dataclass
from typing import Any, ClassVar

from failopen.testing._server import FakeRequest, Handler, LoopbackServer, Reply
from failopen.testing._vendor_modes import WIDGET_KINDS, parse_mode
from failopen.testing.browser_scripts._runtime import (
    CHALLENGE_PATH,
    WIDGET_PATH,
    challenge_page,
    script,
    widget_page,
)
from failopen.testing.providers import FAKES, CaptchaVerifyFake, mint_token

__all__ = ["BrowserScriptFake", "ChallengeAttempt", "WidgetRender"]

_SCRIPT_HEADERS = [
    ("Content-Type", "text/javascript; charset=utf-8"), ("Cache-Control", "no-store"),
    # A module script (Friendly Captcha's) from another origin is fetched with CORS.
    ("Access-Control-Allow-Origin", "*"),
]
_PAGE_HEADERS = [("Content-Type", "text/html; charset=utf-8"), ("Cache-Control", "no-store")]
_NOT_FOUND = Reply(status=404, body=b"Not Found", headers=[("Content-Type", "text/plain")])
_ORIGIN = re.compile(r"https?://[A-Za-z0-9.\-\[\]:]+")


@dataclass(frozen=True)
class WidgetRender:
    """One widget the page rendered (``render``/``createWidget``), as the fake's server saw it."""

    widget: str
    sitekey: str | None
    size: str | None = None
    action: str | None = None
    #: Turnstile's ``execution``, Friendly Captcha's ``startMode``; None where the vendor has none.
    start: str | None = None


@dataclass(frozen=True)
class ChallengeAttempt:
    """One challenge the page ran (an automatic run, a click, ``execute``), and its outcome."""

    widget: str | None
    sitekey: str | None
    action: str | None
    size: str | None
    #: ``"token"`` or ``"error"`` (the mode's verdict).
    outcome: str
    token: str | None
    #: 1 for the page's first attempt: what ``error_then_ok:N`` counts.
    attempt: int


def _one(query: dict[str, list[str]], name: str) -> str | None:
    values = query.get(name)
    return values[0] if values and values[0] != "" else None


class BrowserScriptFake(ABC):
    """A captcha vendor's browser script, with the modes a browser integration must survive."""

    #: The registry name, the same as the verify fake's (``failopen.testing.providers.FAKES``).
    vendor: ClassVar[str]
    #: The path a page loads, relative to :attr:`url` (the vendor's origin).
    script_path: ClassVar[str]
    #: The vendor's JavaScript, run after the shared prelude (see :mod:`._runtime`).
    body: ClassVar[str]
    #: What the widget's error callback receives in ``error`` modes.
    error_code: ClassVar[str]
    MODES: ClassVar[frozenset[str]] = frozenset(
        {"ok", "http404", "silent", "error_then_ok:N", "error", "expire:MS", "slow:MS"})

    def __init__(self, *, verify_api: CaptchaVerifyFake | None = None,
                 signing_key: str | None = None, score: float | None = None) -> None:
        if verify_api is not None and verify_api.vendor != self.vendor:
            raise ValueError(f"a {self.vendor} script needs the {self.vendor} verify fake, "
                             f"not {verify_api.vendor}'s")
        self.verify_api = verify_api
        #: Without ``verify_api``: tokens minted with this key (:func:`mint_token`), which a verify
        #: fake with that private key accepts once, in any process; None: the fake's default key.
        self.signing_key = signing_key
        #: The score the next tokens carry, where the vendor's tokens carry one; None: the verify
        #: fake's default. Change it at any time.
        self.score = score
        self._lock = threading.Lock()
        self._mode = "ok"
        self.script_requests = 0
        #: The query string of each script request, e.g. ``{"render": "explicit", "onload": "f"}``.
        self.script_queries: list[dict[str, str]] = []
        self.renders: list[WidgetRender] = []
        self.challenges: list[ChallengeAttempt] = []
        #: The server of the latest :meth:`serve`, None until then.
        self.server: LoopbackServer | None = None

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(mode={self._mode!r}, "
                f"script_requests={self.script_requests}, challenges={len(self.challenges)})")

    # -- state ----------------------------------------------------------------------------------

    @property
    def mode(self) -> str:
        """The current mode, as given to :meth:`set_mode`."""
        return self._mode

    def set_mode(self, mode: str) -> None:
        """Switch the mode for every script served from now on (a loaded page keeps its own)."""
        parse_mode(mode, WIDGET_KINDS)
        with self._lock:
            self._mode = mode

    def reset(self) -> None:
        """Back to ``ok``, records cleared."""
        with self._lock:
            self._mode = "ok"
            self.script_requests = 0
            self.script_queries = []
            self.renders = []
            self.challenges = []

    @property
    def tokens(self) -> list[str]:
        """Every token handed to a page, oldest first."""
        return [c.token for c in self.challenges if c.token is not None]

    # -- serving --------------------------------------------------------------------------------

    def serves_script(self, path: str) -> bool:
        """Whether ``path`` is (one of) this vendor's script paths."""
        return path == self.script_path

    def handler(self, request: FakeRequest) -> Reply:
        """Answer one request; serve it with :meth:`serve` (a browser needs a real socket)."""
        if request.method not in ("GET", "HEAD"):
            return _NOT_FOUND
        if request.path == WIDGET_PATH:
            return self._widget(request)
        if request.path == CHALLENGE_PATH:
            return self._challenge(request)
        if not self.serves_script(request.path):
            return _NOT_FOUND
        query = {name: values[0] for name, values in request.query.items() if values}
        with self._lock:
            self.script_requests += 1
            self.script_queries.append(query)
            mode = self._mode
        kind, number = parse_mode(mode, WIDGET_KINDS)
        if kind == "http404":
            return _NOT_FOUND
        config = {
            "vendor": self.vendor, "mode": kind, "query": query, "origin": self._origin(request),
            "errors": number if kind == "error_then_ok" else 0,
            "expire_ms": number if kind == "expire" else 0,
            "error_code": self.error_code, **self._config(request),
        }
        return Reply(body=script(config, self.body), headers=list(_SCRIPT_HEADERS),
                     delay=number / 1000 if kind == "slow" else 0.0)

    def serve(self, port: int = 0, *, control: bool = False) -> LoopbackServer:
        """This fake on a started loopback server, also kept as :attr:`server`; see :attr:`url`.

        ``control=True`` also answers ``GET``/``POST /_control`` as the spec's vendor script
        does (``{"down": true}``, ``{"mode": "expire:500"}``; :mod:`failopen.testing.control`).
        """
        handler: Handler = self.handler
        if control:
            from failopen.testing.control import VendorScriptControls, with_control

            handler = with_control(handler, VendorScriptControls(self, WIDGET_KINDS))
        self.server = LoopbackServer(handler, port=port).start()
        return self.server

    @property
    def url(self) -> str:
        """The vendor origin (``FAILOPEN_VENDOR_URL``) of the latest :meth:`serve`."""
        if self.server is None:
            raise RuntimeError(f"{type(self).__name__} is not served: call serve() first")
        return self.server.url

    @property
    def script_url(self) -> str:
        """:attr:`url` + :attr:`script_path`: what a page's ``<script src>`` names."""
        return self.url + self.script_path

    # -- what a vendor module may add -----------------------------------------------------------

    def _config(self, request: FakeRequest) -> dict[str, Any]:
        """More of the script's configuration (e.g. reCAPTCHA's namespace)."""
        return {}

    def _claims(self, attempt: dict[str, str | None]) -> dict[str, Any]:
        """The claims a token for ``attempt`` carries (the query of its challenge frame)."""
        claims: dict[str, Any] = {"hostname": attempt.get("h"), "action": attempt.get("a"),
                                  "cdata": attempt.get("x"), "site_key": attempt.get("k"),
                                  "score": self.score}
        return claims

    # -- the frames -----------------------------------------------------------------------------

    def _origin(self, request: FakeRequest) -> str:
        # The page reaches the fake at the Host it asked for (127.0.0.1:port, or a mapped name).
        host = request.headers.get("host")
        if host:
            return f"http://{host}"
        return self.server.url if self.server is not None else "http://127.0.0.1"

    def _widget(self, request: FakeRequest) -> Reply:
        query = request.query
        render = WidgetRender(widget=_one(query, "w") or "", sitekey=_one(query, "k"),
                              size=_one(query, "s"), action=_one(query, "a"),
                              start=_one(query, "e"))
        with self._lock:
            self.renders.append(render)
        return Reply(body=widget_page(self.vendor), headers=list(_PAGE_HEADERS))

    def _challenge(self, request: FakeRequest) -> Reply:
        fields = {name: _one(request.query, name) for name in request.query}
        parent = fields.get("p") or ""
        if not _ORIGIN.fullmatch(parent):
            return Reply(status=400, body=b"no parent origin", headers=[("Content-Type",
                                                                          "text/plain")])
        failed = fields.get("o") == "error"
        token = None if failed else self._issue(fields)
        attempt = fields.get("t") or "0"
        record = ChallengeAttempt(
            widget=fields.get("w"), sitekey=fields.get("k"), action=fields.get("a"),
            size=fields.get("s"), outcome="error" if failed else "token", token=token,
            attempt=int(attempt) if attempt.isdigit() else 0)
        with self._lock:
            self.challenges.append(record)
        message: dict[str, Any] = {"fakeCaptcha": fields.get("n"), "token": token,
                                   "error": self.error_code if failed else None}
        return Reply(body=challenge_page(parent, message), headers=list(_PAGE_HEADERS))

    def _issue(self, attempt: dict[str, str | None]) -> str:
        verify = FAKES[self.vendor]
        given = {name: value for name, value in self._claims(attempt).items()
                 if value is not None and name in verify.CLAIMS}
        if self.verify_api is not None:
            token = f"{self.vendor}-browser-{secrets.token_hex(12)}"
            self.verify_api.add_token(token, **given)
            return token
        key = self.signing_key if self.signing_key is not None else verify.DEFAULT_PRIVATE_KEY
        return mint_token(self.vendor, key, **given)
