"""What every captcha vendor's verify fake does alike: known tokens, each good once and only within
its lifetime, scripted faults, and serving in-process or on a loopback socket.

A vendor's module holds only its differences: its path, how it reads a request (:meth:`_read`,
:meth:`_token_in`), what it answers (:meth:`_answer`) and its error codes. The faults mean what
they mean for :class:`~failopen.testing.FakeVerifyAPI`; where a vendor has its own style for a
500, 429 or 503 (Google's error envelope) the module supplies it (:meth:`_status_reply`),
otherwise the vendor's front end answers with an HTML page.
"""

from __future__ import annotations

import itertools
import threading
from abc import ABC, abstractmethod
from typing import Any, ClassVar

from failopen.clock import SYSTEM_CLOCK, Clock
from failopen.testing._served_verify import ServedVerifyAPI, delivered_badly
from failopen.testing._server import FakeRequest, LoopbackServer, Reply
from failopen.testing.providers._tokens import (
    DOCUMENTED,
    Lifetime,
    Redemption,
    Solve,
    TokenBook,
    check_claims,
)
from failopen.testing.providers._wire import HTML_PAGE, html_reply, retry_after_headers

__all__ = ["CaptchaVerifyFake", "DOCUMENTED", "Lifetime", "Redemption", "Solve"]

_TIMEOUT_DELAY = 60.0


class CaptchaVerifyFake(ServedVerifyAPI, ABC):
    """A captcha vendor's server-side verify API: its keys, its tokens, and scripted faults."""

    #: The registry name (``failopen.testing.providers.FAKES``).
    vendor: ClassVar[str]
    #: The browser form field the widget fills with the token.
    token_field: ClassVar[str]
    #: The vendor's documented token lifetime, in seconds.
    lifetime: ClassVar[float]
    #: The :meth:`issue_token` options this vendor's tokens carry.
    CLAIMS: ClassVar[frozenset[str]] = frozenset({"hostname"})
    DEFAULT_PRIVATE_KEY: ClassVar[str] = "test-secret-key"
    DEFAULT_PUBLIC_KEY: ClassVar[str] = "test-site-key"
    path: str
    #: Known and valid once, from construction (and each :meth:`reset`).
    GOOD: ClassVar[str] = "good-token"
    #: Never valid: the vendor's answer to junk.
    BAD: ClassVar[str] = "bad-token"
    FAULTS: ClassVar[frozenset[str]] = frozenset(
        {"500", "502", "503", "429", "timeout", "slow_drip", "reset", "truncated",
         "not_json", "empty", "wrong_shape"}
    )

    def __init__(
        self,
        *,
        private_key: str | None = None,
        public_key: str | None = None,
        clock: Clock = SYSTEM_CLOCK,
        token_lifetime: float | None | Lifetime = DOCUMENTED,
    ) -> None:
        lifetime = self.lifetime if token_lifetime is DOCUMENTED else token_lifetime
        if isinstance(lifetime, Lifetime) or (lifetime is not None and not lifetime > 0):
            raise ValueError(f"token_lifetime must be positive seconds, None (never) or "
                             f"DOCUMENTED, got {token_lifetime!r}")
        self.private_key = private_key if private_key is not None else self.DEFAULT_PRIVATE_KEY
        self.public_key = public_key if public_key is not None else self.DEFAULT_PUBLIC_KEY
        self.clock = clock
        self.token_lifetime: float | None = lifetime
        self._lock = threading.Lock()
        self._book = TokenBook(self.vendor, lambda: self.private_key, clock, lifetime,
                               lambda given: self.claims(**given))
        self._issued = itertools.count(1)
        self._fault: str | None = None
        self._retry_after: float | None = None
        self.requests = 0
        self.tokens_seen: list[str] = []
        #: The server of the latest :meth:`serve`, None until then.
        self.server: LoopbackServer | None = None
        self._verify_url: str | None = None
        self.add_token(self.GOOD)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(fault={self._fault!r}, requests={self.requests})"

    # -- tokens ---------------------------------------------------------------------------------

    @classmethod
    def claims(cls, **given: Any) -> dict[str, Any]:
        """``given`` minus the unset (None) options; TypeError for one this vendor has not."""
        return check_claims(cls.vendor, cls.CLAIMS, given)

    def add_token(
        self, token: str, *, hostname: str | None = None, action: str | None = None,
        cdata: str | None = None, site_key: str | None = None, score: float | None = None,
        browser_error: bool | None = None,
    ) -> None:
        """Make ``token`` known, solved now, with the options this vendor's tokens carry."""
        claims = self.claims(hostname=hostname, action=action, cdata=cdata, site_key=site_key,
                             score=score, browser_error=browser_error)
        self._book.add(token, claims)

    def issue_token(
        self, *, hostname: str | None = None, action: str | None = None,
        cdata: str | None = None, site_key: str | None = None, score: float | None = None,
        browser_error: bool | None = None,
    ) -> str:
        """A fresh token, never verified, solved now (one per simulated widget solve)."""
        token = f"{self.vendor}-issued-{next(self._issued)}"
        self.add_token(token, hostname=hostname, action=action, cdata=cdata, site_key=site_key,
                       score=score, browser_error=browser_error)
        return token

    # -- faults and state -----------------------------------------------------------------------

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
        """Clear the fault, the counters and the replay memory; known tokens are solved anew."""
        with self._lock:
            self._fault = self._retry_after = None
            self.requests = 0
            self.tokens_seen = []
            self._forget()
        self._book.renew()

    def _redeem(self, token: str) -> tuple[Redemption, Solve | None]:
        """Verify ``token`` once (see :meth:`TokenBook.redeem`)."""
        return self._book.redeem(token)

    def _forget(self) -> None:  # noqa: B027 - a hook most vendors need not fill
        """Drop what a vendor remembers beyond tokens (Turnstile's idempotent answers)."""

    # -- serving --------------------------------------------------------------------------------

    def handler(self, request: FakeRequest) -> Reply:
        """Answer one request; serve it with :meth:`transport` or :meth:`serve`."""
        with self._lock:
            self.requests += 1
        if not self._serves(request.path):
            return Reply(status=404, body=b"Not Found", headers=[("Content-Type", "text/plain")])
        if request.method != "POST":
            return Reply(status=405, body=b"Method Not Allowed",
                         headers=[("Content-Type", "text/plain"), ("Allow", "POST")])
        fields = self._read(request)
        token = self._token_in(fields)
        with self._lock:
            if isinstance(token, str):
                self.tokens_seen.append(token)
            fault, retry_after = self._fault, self._retry_after
        if fault in ("slow_drip", "truncated"):
            return delivered_badly(self._answer(request, fields), fault)
        if fault is not None:
            return self._fault_reply(fault, retry_after)
        return self._answer(request, fields)

    # -- what a vendor module says --------------------------------------------------------------

    def _serves(self, path: str) -> bool:
        """Whether ``path`` is this vendor's verify route."""
        return path == self.path

    @abstractmethod
    def _read(self, request: FakeRequest) -> dict[str, Any] | None:
        """The request's fields as this vendor reads them; None when it cannot read the body."""

    def _token_in(self, fields: dict[str, Any] | None) -> Any:
        """The token the request submits (for :attr:`tokens_seen`)."""
        return None if fields is None else fields.get("response")

    @abstractmethod
    def _answer(self, request: FakeRequest, fields: dict[str, Any] | None) -> Reply:
        """The vendor's answer to a request on its route, no fault in force."""

    def _status_reply(self, status: int, headers: list[tuple[str, str]]) -> Reply | None:
        """The vendor's own 500/429/503 body, or None for its front end's HTML page."""
        return None

    def _fault_reply(self, fault: str, retry_after: float | None) -> Reply:
        headers = retry_after_headers(retry_after) if fault in ("429", "503") else []
        if fault in ("500", "502", "503", "429"):
            styled = self._status_reply(int(fault), headers)
            return styled if styled is not None else html_reply(int(fault), headers)
        if fault == "timeout":
            return Reply(delay=_TIMEOUT_DELAY)
        if fault == "reset":
            return Reply(reset=True)
        if fault == "not_json":
            return Reply(body=HTML_PAGE, headers=[("Content-Type", "text/html")])
        if fault == "empty":
            return Reply(headers=[("Content-Type", "application/json")])
        if fault == "wrong_shape":
            return Reply.json({"status": "ok", "result": {}})
        raise AssertionError(f"unhandled fault {fault!r}")  # pragma: no cover
