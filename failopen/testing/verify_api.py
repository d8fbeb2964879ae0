"""A fake of the vendor's verify endpoint, for failopen's tests and for yours.

In-process, with no sockets::

    api = FakeVerifyAPI()
    verifier = HttpVerifier("https://verify.test" + api.path, api.private_key,
                            transport=api.transport(), async_transport=api.transport())
    assert verifier.verify(FakeVerifyAPI.GOOD).valid

On a real loopback socket (real time-outs, slow drips, resets)::

    with api.serve() as server:
        verifier = HttpVerifier(server.url + api.path, api.private_key)
        api.set_fault("slow_drip")
        assert verifier.verify(FakeVerifyAPI.GOOD).outcome is VerifyOutcome.UNAVAILABLE

What it answers (POST to :attr:`path`; any other path is 404, any other method 405):

=======================================  ====  ==============================================
Request                                  HTTP  Body
=======================================  ====  ==============================================
body not a JSON object, no session_token  400  ``{"error": "INVALID REQUEST"}`` / ``"MISSING
                                               SESSION TOKEN"``
wrong or missing private_key             401  ``{"error": "INVALID PRIVATE KEY"}``
``GOOD`` or a token from add_token()     200  ``{"session_details": {"solved": ..., "verified":
or issue_token()                               ..., "session": <token>, "session_created": ...,
                                               "previously_verified": ..., "session_timed_out":
                                               ...}, "ip_intelligence": {...}}``
``BAD``                                  200  the same, solved false and verified false
``UNVERIFIED``                           200  the same, solved true and verified false
``DENIED``                               200  ``{"error": "DENIED ACCESS"}``
any other token                          400  ``{"error": "DENIED ACCESS"}``
=======================================  ====  ==============================================

Like the vendor's, each solved token is good once: a token verified a second time comes back with
``previously_verified`` true, and a token first verified ``session_lifetime`` seconds (default
600; None: never) or more after its session began comes back with ``session_timed_out`` true.
A session begins when its token is made: :meth:`issue_token` (a fresh token, as a browser that
solves a challenge gets), :meth:`add_token`, or for the built-in tokens construction and
:meth:`reset`. Time comes from ``clock`` (a :class:`~failopen.testing.FakeClock` in tests). The
spec defines the body only as far as ``session_details.solved``/``verified`` and an ``error``
key; the other fields, the lifetime and the error statuses are plausible, not authoritative.

Faults (:meth:`set_fault`) replace every answer on :attr:`path` until cleared:

* ``"500"``, ``"502"``, ``"503"``: that status (500 with a JSON error, 502/503 an HTML page);
  ``"429"``: rate limited. With ``retry_after``, 429 and 503 carry ``Retry-After`` in whole
  seconds, rounded up.
* ``"timeout"``: no answer for a minute (a stopped server ends it at once);
  ``"slow_drip"``: the normal answer, one byte every 50 ms; ``"truncated"``: half of the normal
  answer, then the connection closes; ``"reset"``: a TCP reset and nothing else.
* ``"not_json"``: 200 with an HTML page; ``"empty"``: 200 with no body; ``"wrong_shape"``: 200
  with a JSON object holding neither ``session_details`` nor ``error``.

In-process (:meth:`transport`), ``timeout`` becomes an immediate ``httpx.ReadTimeout``, ``reset``
an ``httpx.ReadError`` and ``truncated`` an ``httpx.RemoteProtocolError``; ``slow_drip`` cannot be
simulated and arrives whole. Use :meth:`serve` for real timing.

:attr:`requests` counts every request the fake received; :attr:`tokens_seen` lists the
``session_token`` values submitted, in order. Both, and the fault, are cleared by :meth:`reset`.
"""

from __future__ import annotations

import hashlib
import hmac
import itertools
import math
import secrets
import threading
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from failopen.clock import SYSTEM_CLOCK, Clock
from failopen.testing._served_verify import ServedVerifyAPI, delivered_badly
from failopen.testing._server import FakeRequest, LoopbackServer, Reply

__all__ = ["FakeVerifyAPI", "signed_token"]

_HTML_PAGE = b"<html><body><h1>Service temporarily unavailable</h1></body></html>"
_TIMEOUT_DELAY = 60.0


def _rfc3339(moment: datetime) -> str:
    return moment.astimezone(timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")


_SIGNED_PREFIX = "fake-solve-"


def signed_token(key: str) -> str:
    """A fresh solve's token that any :class:`FakeVerifyAPI` with private key ``key`` accepts,
    once, although it never saw it made: how ``failopen emulate vendor`` and ``failopen
    emulate verify``, two processes, agree on tokens (a test key, never a real one)."""
    nonce = secrets.token_hex(8)
    return f"{_SIGNED_PREFIX}{nonce}.{_signature(key, nonce)}"


def _signature(key: str, nonce: str) -> str:
    return hmac.new(key.encode(), nonce.encode(), hashlib.sha256).hexdigest()[:24]


def _signed_by(key: str, token: str) -> bool:
    nonce, dot, signature = token[len(_SIGNED_PREFIX):].partition(".")
    return (token.startswith(_SIGNED_PREFIX) and bool(dot) and len(nonce) == 16
            and hmac.compare_digest(signature, _signature(key, nonce)))


def _at(seconds: float) -> str:
    return _rfc3339(datetime.fromtimestamp(seconds, tz=timezone.utc))


@dataclass(frozen=True)
class _Session:
    solved: bool
    verified: bool
    created_at: float


class FakeVerifyAPI(ServedVerifyAPI):
    """The vendor's verify endpoint: known tokens, a private key, and scripted faults."""

    GOOD = "good-token"
    BAD = "bad-token"
    DENIED = "denied-token"
    UNVERIFIED = "unverified-token"
    FAULTS: frozenset[str] = frozenset(
        {"500", "502", "503", "429", "timeout", "slow_drip", "reset", "truncated",
         "not_json", "empty", "wrong_shape"}
    )
    path: str = "/api/v4/verify/"

    def __init__(
        self,
        *,
        private_key: str = "test-private-key",
        clock: Clock = SYSTEM_CLOCK,
        session_lifetime: float | None = 600.0,
    ) -> None:
        if session_lifetime is not None and not session_lifetime > 0:
            raise ValueError(f"session_lifetime must be positive seconds or None, "
                             f"got {session_lifetime!r}")
        self.private_key = private_key
        self.clock = clock
        self.session_lifetime = session_lifetime
        self._lock = threading.Lock()
        self._tokens: dict[str, _Session] = {}
        self._issued = itertools.count(1)
        self._fault: str | None = None
        self._retry_after: float | None = None
        self._verified_once: set[str] = set()
        self.requests = 0
        self.tokens_seen: list[str] = []
        #: The server of the latest :meth:`serve`, None until then.
        self.server: LoopbackServer | None = None
        self._verify_url: str | None = None
        self.add_token(self.GOOD)
        self.add_token(self.BAD, solved=False, verified=False)
        self.add_token(self.UNVERIFIED, solved=True, verified=False)

    def __repr__(self) -> str:
        return f"FakeVerifyAPI(fault={self._fault!r}, requests={self.requests})"

    def add_token(self, token: str, *, solved: bool = True, verified: bool = True) -> None:
        """Make ``token`` known, with the given challenge outcome; its session begins now."""
        with self._lock:
            self._tokens[token] = _Session(solved, verified, self.clock.time())
            self._verified_once.discard(token)

    def issue_token(self, *, solved: bool = True, verified: bool = True) -> str:
        """A fresh token, never verified, its session beginning now (one per simulated solve)."""
        token = f"issued-token-{next(self._issued)}"
        self.add_token(token, solved=solved, verified=verified)
        return token

    def set_fault(self, fault: str | None, *, retry_after: float | None = None) -> None:
        """Answer every verify request with ``fault`` (one of :attr:`FAULTS`), or None to heal."""
        if fault is not None and fault not in self.FAULTS:
            raise ValueError(f"unknown fault {fault!r}; choose from {sorted(self.FAULTS)}")
        with self._lock:
            self._fault, self._retry_after = fault, retry_after

    @property
    def fault(self) -> str | None:
        """The fault in force, or None."""
        return self._fault

    def reset(self) -> None:
        """Clear the fault, the counters and the replay memory; known tokens get new sessions."""
        with self._lock:
            self._fault = self._retry_after = None
            self.requests = 0
            self.tokens_seen = []
            self._verified_once.clear()
            now = self.clock.time()
            self._tokens = {token: _Session(s.solved, s.verified, now)
                            for token, s in self._tokens.items()}

    def handler(self, request: FakeRequest) -> Reply:
        """Answer one request; serve it with :meth:`transport` or :meth:`serve`."""
        with self._lock:
            self.requests += 1
        if request.path != self.path:
            return Reply(status=404, body=b"Not Found", headers=[("Content-Type", "text/plain")])
        if request.method != "POST":
            return Reply(status=405, body=b"Method Not Allowed",
                         headers=[("Content-Type", "text/plain"), ("Allow", "POST")])
        try:
            data: Any = request.json()
        except ValueError:
            data = None
        token = data.get("session_token") if isinstance(data, dict) else None
        with self._lock:
            if isinstance(token, str):
                self.tokens_seen.append(token)
            fault, retry_after = self._fault, self._retry_after
        if fault in ("slow_drip", "truncated"):
            return delivered_badly(self._respond(data, token), fault)
        if fault is not None:
            return self._fault_reply(fault, retry_after)
        return self._respond(data, token)

    # -- answers --------------------------------------------------------------------------------

    def _respond(self, data: Any, token: Any) -> Reply:
        if not isinstance(data, dict):
            return Reply.json({"error": "INVALID REQUEST"}, status=400)
        if data.get("private_key") != self.private_key:
            return Reply.json({"error": "INVALID PRIVATE KEY"}, status=401)
        if not isinstance(token, str) or not token:
            return Reply.json({"error": "MISSING SESSION TOKEN"}, status=400)
        return self._answer(token)

    def _answer(self, token: str) -> Reply:
        if token == self.DENIED:
            return Reply.json({"error": "DENIED ACCESS"})
        now = self.clock.time()
        with self._lock:
            session = self._tokens.get(token)
            if session is None and _signed_by(self.private_key, token):
                # A solve made by a fake vendor script in another process: it begins now.
                session = self._tokens[token] = _Session(True, True, now)
            previously = token in self._verified_once
            if session is not None:
                self._verified_once.add(token)
        if session is None:
            return Reply.json({"error": "DENIED ACCESS"}, status=400)
        lifetime = self.session_lifetime
        timed_out = lifetime is not None and now - session.created_at >= lifetime
        return Reply.json(self._session_body(token, session, now, previously, timed_out))

    @staticmethod
    def _session_body(
        token: str, session: _Session, now: float, previously: bool, timed_out: bool
    ) -> Any:
        solved, verified = session.solved, session.verified
        return {
            "session_details": {
                "solved": solved,
                "verified": verified,
                "session": token,
                "session_created": _at(session.created_at),
                "check_answer": _at(max(session.created_at, now - 3)),
                "verified_at": _at(now),
                "attempted": True,
                "security_level": "default",
                "session_is_legit": solved and verified and not (previously or timed_out),
                "previously_verified": previously,
                "session_timed_out": timed_out,
                "suppressed": False,
                "theme": "default",
                "user_language_shown": "en",
                "telltale_list": [],
            },
            "ip_intelligence": {
                "user_ip": "203.0.113.7",
                "is_tor": False,
                "is_vpn": False,
                "is_proxy": False,
                "is_bot": False,
                "country": "GB",
                "isp": "Example Networks",
            },
        }

    @staticmethod
    def _fault_reply(fault: str, retry_after: float | None) -> Reply:
        headers: list[tuple[str, str]] = []
        if retry_after is not None and fault in ("429", "503"):
            headers.append(("Retry-After", str(max(0, math.ceil(retry_after)))))
        html = [("Content-Type", "text/html"), *headers]
        if fault == "500":
            return Reply.json({"error": "INTERNAL ERROR"}, status=500)
        if fault in ("502", "503"):
            return Reply(status=int(fault), body=_HTML_PAGE, headers=html)
        if fault == "429":
            return Reply.json({"error": "TOO MANY REQUESTS"}, status=429, headers=headers)
        if fault == "timeout":
            return Reply(delay=_TIMEOUT_DELAY)
        if fault == "reset":
            return Reply(reset=True)
        if fault == "not_json":
            return Reply(body=_HTML_PAGE, headers=html)
        if fault == "empty":
            return Reply(headers=[("Content-Type", "application/json")])
        if fault == "wrong_shape":
            return Reply.json({"status": "ok", "result": {}})
        raise AssertionError(f"unhandled fault {fault!r}")  # pragma: no cover
