"""The vendor's verify call: is this enforcement token good?

:class:`HttpVerifier` POSTs ``{"private_key": ..., "session_token": ...}`` as JSON to the
vendor's verify endpoint (``FAILOPEN_VERIFY_URL``) within one overall deadline
(``FAILOPEN_VERIFY_TIMEOUT``) and maps the answer to one of five outcomes. The spec defines the
body only as far as ``session_details.solved`` / ``session_details.verified`` and an ``error``
key; unknown fields are ignored.

==========================================================  ============  ========================
Answer                                                      Outcome       Why
==========================================================  ============  ========================
2xx, ``session_details.solved`` true                        VALID         (with ``require_verified``
                                                                          also ``verified`` true)
2xx, solved true but verified false, ``require_verified``   INVALID
2xx, solved false                                           INVALID
2xx or 4xx with an ``error`` key whose value is not null    INVALID       even beside solved true
429                                                         RATE_LIMITED  a caller can provoke it
401 / 403                                                   INVALID       our private key is wrong:
                                                                          logged at ERROR, at most
                                                                          every 5 minutes
any other 4xx, JSON or not                                  INVALID       see below
5xx, other unexpected statuses (e.g. a final 3xx)           UNAVAILABLE
2xx that is empty, not JSON, or JSON of another shape       UNAVAILABLE   no session_details and
(no session_details, solved/verified not booleans)                        no error
timeout, connection refused/reset, truncated body,          UNAVAILABLE
body over ``max_bytes``, redirect to another origin
no free slot for the call before the deadline (async:       OVERLOADED    our own process could not
``_MAX_IN_FLIGHT`` calls per event loop in flight; sync:                  get the call out in time:
no free verify worker thread); no request was sent                        never evidence of a vendor
                                                                          outage; the guard answers
                                                                          503 without asking the
                                                                          status page
empty token, longer than 4096 characters, or not            INVALID       decided locally: no
printable ASCII                                                           network call
==========================================================  ============  ========================

Security decisions:

* UNAVAILABLE is the only outcome that can lead to fail-open (and only after the status page
  confirms an outage), so nothing the caller controls may produce it. The token is the only input
  an attacker controls: an odd token is INVALID before any I/O (a lone surrogate would otherwise
  break JSON encoding and look like a transport error), and every 4xx, JSON body or not, is
  INVALID, because a 4xx answers something about *this* request. A 429 is RATE_LIMITED, never
  UNAVAILABLE: anyone can exhaust a rate limit.
* Request volume is attacker-controlled too, so a call that waited in our own queue past the
  deadline (async in-flight cap, sync worker threads) is OVERLOADED, never UNAVAILABLE.
* ``retry_after`` is a hint from the vendor: it is kept finite and at most an hour.
* A vendor that answered a crafted token with 5xx would be a vendor bug; the guard still needs a
  confirmed outage on the status page before it bypasses.
* An ``error`` key whose value is ``null`` is treated as absent, so a vendor that adds
  ``"error": null`` to successful answers does not lock every user out; any other value is an
  error.
* The private key and the token never appear in logs, reprs, reasons or exceptions. Text taken
  from the vendor's answer or from a transport error is kept only when it is short printable ASCII
  sharing no 8-character run with either secret.
"""

from __future__ import annotations

import asyncio
import enum
import json
import logging
import math
import os
import re
import threading
import time
import weakref
from dataclasses import dataclass
from typing import Any, Protocol, TypeAlias, runtime_checkable

import httpx

from failopen._http import Fetched, afetch, check_url, fetch, parse_retry_after
from failopen.clock import SYSTEM_CLOCK, Clock
from failopen.exceptions import (
    ConfigError,
    FetchError,
    FetchOverloaded,
    FetchTimeout,
    RedirectRefused,
    ResponseTooLarge,
)

__all__ = [
    "VerifyOutcome",
    "VerifyResult",
    "Verifier",
    "HttpVerifier",
    "check_token",
    "classify",
    "MAX_TOKEN_LENGTH",
]

logger = logging.getLogger("failopen.verify")

MAX_TOKEN_LENGTH = 4096
CREDENTIALS_LOG_INTERVAL = 300.0  # seconds between ERROR logs about a rejected private key

_PRINTABLE_ASCII = re.compile(r"[\x20-\x7e]+")
_SHARED_RUN = 8  # a fragment this long shared with a secret withholds the text
_DETAIL_LIMIT = 64
_USER_AGENT = "failopen"
_MAX_IN_FLIGHT = 100  # concurrent async verify calls per event loop; the rest queue in order
_WARNING_INTERVAL = 10.0  # seconds between "verify unavailable" warnings during an incident
_MAX_RETRY_AFTER = 3600.0  # seconds; a longer (or non-finite) Retry-After hint is cut to this


class VerifyOutcome(str, enum.Enum):
    """What the verify call said about a token."""

    VALID = "valid"
    INVALID = "invalid"
    UNAVAILABLE = "unavailable"
    RATE_LIMITED = "rate_limited"
    OVERLOADED = "overloaded"


@dataclass(frozen=True)
class VerifyResult:
    """The outcome of one verify call, with a short log-safe reason."""

    outcome: VerifyOutcome
    reason: str
    status_code: int | None = None
    retry_after: float | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "retry_after", _clamp_retry_after(self.retry_after))

    @property
    def valid(self) -> bool:
        """True only when the vendor said the token is good."""
        return self.outcome is VerifyOutcome.VALID


def _clamp_retry_after(value: object) -> float | None:
    """A usable Retry-After hint: finite, in ``[0, _MAX_RETRY_AFTER]`` seconds, or None."""
    if value is None or isinstance(value, bool):
        return None
    try:
        seconds = float(value)  # type: ignore[arg-type]  # anything float() takes
    except (TypeError, ValueError, OverflowError):
        return None
    if math.isnan(seconds):
        return None
    return min(max(seconds, 0.0), _MAX_RETRY_AFTER)  # inf becomes the cap


@runtime_checkable
class Verifier(Protocol):
    """Anything that can verify an enforcement token, sync and async."""

    def verify(self, token: str) -> VerifyResult: ...

    async def averify(self, token: str) -> VerifyResult: ...


def _safe_text(text: str, secrets: tuple[str, ...], limit: int) -> str | None:
    """``text`` cut to printable ASCII and ``limit`` chars, or None if it may carry a secret."""
    text = "".join(ch for ch in text if " " <= ch <= "~")[:limit].strip()
    if not text:
        return None
    for secret in secrets:
        if not secret:
            continue
        if len(secret) < _SHARED_RUN:
            if secret in text:
                return None
        elif any(
            text[i : i + _SHARED_RUN] in secret for i in range(len(text) - _SHARED_RUN + 1)
        ):
            return None
    return text


def check_token(token: str) -> VerifyResult | None:
    """INVALID for a token no vendor would issue (decided without I/O), else None."""
    if not isinstance(token, str) or not token:
        return VerifyResult(VerifyOutcome.INVALID, "no token")
    if len(token) > MAX_TOKEN_LENGTH:
        return VerifyResult(
            VerifyOutcome.INVALID, f"token longer than {MAX_TOKEN_LENGTH} characters"
        )
    if not _PRINTABLE_ASCII.fullmatch(token):
        return VerifyResult(VerifyOutcome.INVALID, "token has characters outside printable ASCII")
    return None


def _decode(content: bytes) -> Any:
    """The body as JSON, or raise ValueError."""
    try:
        return json.loads(content)
    except RecursionError:
        raise ValueError("nested too deeply") from None


def _error_detail(body: Any, secrets: tuple[str, ...]) -> str:
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict):  # tolerate {"error": {"code": ..., "message": ...}}
        error = error.get("code") or error.get("message")
    if not isinstance(error, str):
        return ""
    detail = _safe_text(error, secrets, _DETAIL_LIMIT)
    return f": {detail}" if detail else ""


def classify(
    fetched: Fetched, *, require_verified: bool, secrets: tuple[str, ...]
) -> VerifyResult:
    """Map a complete HTTP answer to a result (pure: no I/O, no logging)."""
    status = fetched.status_code
    unavailable, invalid = VerifyOutcome.UNAVAILABLE, VerifyOutcome.INVALID

    def result(
        outcome: VerifyOutcome, reason: str, retry_after: float | None = None
    ) -> VerifyResult:
        return VerifyResult(outcome, reason, status, retry_after)

    if status == 429:
        try:
            retry_after = parse_retry_after(fetched.headers.get("retry-after"))
        except Exception:  # a hint only: a bad header must not turn 429 into an exception
            retry_after = None
        return result(VerifyOutcome.RATE_LIMITED, "vendor rate limit (HTTP 429)", retry_after)
    if status in (401, 403):
        return result(invalid, f"vendor rejected our credentials (HTTP {status})")
    if 400 <= status < 500:
        try:
            body = _decode(fetched.content)
        except ValueError:
            return result(invalid, f"vendor refused the request (HTTP {status}, non-JSON body)")
        return result(
            invalid, f"vendor refused the request (HTTP {status}){_error_detail(body, secrets)}"
        )
    if not 200 <= status < 300:
        return result(unavailable, f"vendor answered HTTP {status}")
    if not fetched.content.strip():
        return result(unavailable, f"vendor answered HTTP {status} with an empty body")
    try:
        body = _decode(fetched.content)
    except ValueError:
        return result(unavailable, f"vendor answered HTTP {status} with a non-JSON body")
    if not isinstance(body, dict):
        return result(unavailable, "vendor answer is JSON but not an object")
    if body.get("error") is not None:
        return result(invalid, f"vendor denied the token{_error_detail(body, secrets)}")
    details = body.get("session_details")
    if not isinstance(details, dict):
        return result(unavailable, "vendor answer has neither session_details nor error")
    solved = details.get("solved")
    if not isinstance(solved, bool):
        return result(unavailable, "vendor answer has no boolean session_details.solved")
    if not solved:
        return result(invalid, "challenge not solved")
    if not require_verified:
        return result(VerifyOutcome.VALID, "solved")
    verified = details.get("verified")
    if not isinstance(verified, bool):
        return result(unavailable, "vendor answer has no boolean session_details.verified")
    if not verified:
        return result(invalid, "solved but not verified")
    return result(VerifyOutcome.VALID, "solved and verified")


def _from_fetch_error(exc: FetchError, secrets: tuple[str, ...]) -> VerifyResult:
    outcome = VerifyOutcome.UNAVAILABLE
    if isinstance(exc, FetchOverloaded):  # checked first: it says nothing about the vendor
        kind, outcome = "overloaded", VerifyOutcome.OVERLOADED
    elif isinstance(exc, FetchTimeout):
        kind = "timeout"
    elif isinstance(exc, ResponseTooLarge):
        kind = "answer too large"
    elif isinstance(exc, RedirectRefused):
        kind = "redirect refused"
    else:
        kind = "transport error"
    try:
        text = str(exc)
    except Exception:  # never let a broken exception turn a result into a crash
        text = ""
    detail = _safe_text(text, secrets, 160)
    reason = f"{kind}: {detail}" if detail else kind
    return VerifyResult(outcome, reason)


_PACED_WARNINGS = frozenset(
    {VerifyOutcome.UNAVAILABLE, VerifyOutcome.RATE_LIMITED, VerifyOutcome.OVERLOADED}
)
_AsyncClients: TypeAlias = weakref.WeakKeyDictionary[
    asyncio.AbstractEventLoop, tuple[httpx.AsyncClient, asyncio.Semaphore]
]


class HttpVerifier:
    """Verifies tokens with the vendor's verify endpoint over HTTP; never raises on bad answers.

    ``transport``/``async_transport`` replace the network (e.g. ``FakeVerifyAPI().transport()``);
    ``clock`` paces the ERROR log about rejected credentials.
    """

    def __init__(
        self,
        verify_url: str,
        private_key: str,
        *,
        timeout: float = 3.0,
        require_verified: bool = False,
        max_bytes: int = 65_536,
        transport: httpx.BaseTransport | None = None,
        async_transport: httpx.AsyncBaseTransport | None = None,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.verify_url = check_url(verify_url, setting="FAILOPEN_VERIFY_URL")
        if not isinstance(private_key, str) or not private_key:
            raise ConfigError("FAILOPEN_PRIVATE_KEY: the vendor private key is required")
        if not _PRINTABLE_ASCII.fullmatch(private_key) or private_key != private_key.strip():
            # Typically a trailing newline from a secrets file; never echo the key itself.
            raise ConfigError(
                "FAILOPEN_PRIVATE_KEY: has surrounding whitespace or characters outside "
                "printable ASCII (a trailing newline from a secrets file?)"
            )
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not (
            math.isfinite(timeout) and timeout > 0
        ):
            raise ConfigError(
                f"FAILOPEN_VERIFY_TIMEOUT: must be a positive number of seconds, got {timeout!r}"
            )
        if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes <= 0:
            raise ConfigError(f"max_bytes: must be a positive integer, got {max_bytes!r}")
        self._private_key = private_key
        self.timeout = float(timeout)
        self.require_verified = require_verified
        self.max_bytes = max_bytes
        self._transport = transport
        self._async_transport = async_transport
        self._clock = clock
        self._lock = threading.Lock()
        self._client: httpx.Client | None = None
        self._client_pid = 0
        # One (client, in-flight cap) per event loop, read and written as one tuple.
        self._aclients: _AsyncClients = weakref.WeakKeyDictionary()
        self._aclients_pid = os.getpid()
        self._credentials_logged_at: float | None = None
        self._warned_at: float | None = None
        self._warnings_suppressed = 0

    def __repr__(self) -> str:
        return f"HttpVerifier(verify_url={self.verify_url!r})"

    # -- clients --------------------------------------------------------------------------------

    def _sync_client(self) -> httpx.Client:
        # A client inherited through fork shares its sockets with the parent: start afresh.
        client = self._client
        if client is None or self._client_pid != os.getpid():
            with self._lock:
                if self._client is None or self._client_pid != os.getpid():
                    self._client = httpx.Client(
                        transport=self._transport, headers=self._headers()
                    )
                    self._client_pid = os.getpid()
                client = self._client
        return client

    def _async_client(self) -> tuple[httpx.AsyncClient, asyncio.Semaphore]:
        """This loop's client and its in-flight cap, made on first use.

        Connections belong to the loop that opened them, so each loop gets its own client (and
        its own ``_MAX_IN_FLIGHT`` cap), kept for as long as the loop: an app running a loop per
        thread opens one client per loop, not one per call.
        """
        loop = asyncio.get_running_loop()
        aclients = self._aclients
        if self._aclients_pid == os.getpid():
            entry = aclients.get(loop)
            if entry is not None:
                return entry
        with self._lock:
            if self._aclients_pid != os.getpid():
                # Inherited through fork: those clients share sockets with the parent. Drop them
                # unclosed; the parent still owns them.
                self._aclients = weakref.WeakKeyDictionary()
                self._aclients_pid = os.getpid()
            entry = self._aclients.get(loop)
            if entry is None:
                # A client of a closed loop can never be used or closed again, and may hold its
                # loop alive (pooled streams, a semaphore's waiters): forget it.
                for stale in [other for other in self._aclients if other.is_closed()]:
                    del self._aclients[stale]
                entry = (
                    httpx.AsyncClient(
                        transport=self._async_transport, headers=self._headers(),
                        limits=httpx.Limits(max_connections=_MAX_IN_FLIGHT),
                    ),
                    asyncio.Semaphore(_MAX_IN_FLIGHT),
                )
                self._aclients[loop] = entry
        return entry

    @staticmethod
    def _headers() -> dict[str, str]:
        return {"User-Agent": _USER_AGENT, "Accept": "application/json"}

    def close(self) -> None:
        """Release the sync client's connections (a later call opens new ones)."""
        with self._lock:
            client, self._client = self._client, None
        if client is not None and self._client_pid == os.getpid():
            client.close()

    async def aclose(self) -> None:
        """Release the running loop's async client (a later call on this loop opens a new one).

        Call it on each event loop that made calls, before that loop ends; clients of other loops
        are left alone. A client of a loop that closed without it is dropped when another loop
        next makes a client, and its sockets wait for the garbage collector.
        """
        loop = asyncio.get_running_loop()
        with self._lock:
            if self._aclients_pid != os.getpid():  # inherited through fork: the parent's
                self._aclients = weakref.WeakKeyDictionary()
                self._aclients_pid = os.getpid()
            entry = self._aclients.pop(loop, None)
        if entry is not None:
            await entry[0].aclose()

    def __enter__(self) -> HttpVerifier:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    async def __aenter__(self) -> HttpVerifier:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    # -- the call -------------------------------------------------------------------------------

    def verify(self, token: str) -> VerifyResult:
        """Ask the vendor about ``token``; every failure becomes a result, never an exception."""
        early = check_token(token)
        if early is not None:
            return self._finish(early)
        secrets = (token, self._private_key)
        try:
            fetched = fetch(
                self._sync_client(), "POST", self.verify_url,
                timeout=self.timeout, max_bytes=self.max_bytes, json=self._payload(token),
                lane="verify",
            )
        except FetchError as exc:
            return self._finish(_from_fetch_error(exc, secrets))
        return self._finish(classify(fetched, require_verified=self.require_verified,
                                     secrets=secrets))

    async def averify(self, token: str) -> VerifyResult:
        """The async twin of :meth:`verify`."""
        early = check_token(token)
        if early is not None:
            return self._finish(early)
        secrets = (token, self._private_key)
        client, semaphore = self._async_client()
        started = time.monotonic()
        try:
            # Callers beyond the cap wait here, inside the deadline: httpx's own pool queue slows
            # down superlinearly with thousands of waiters, an asyncio.Semaphore does not.
            await asyncio.wait_for(semaphore.acquire(), self.timeout)
        except asyncio.TimeoutError:
            # Our own queue, whose length a caller controls: never evidence about the vendor.
            return self._finish(VerifyResult(
                VerifyOutcome.OVERLOADED,
                f"overloaded: no free connection within {self.timeout:g}s"))
        try:
            fetched = await afetch(
                client, "POST", self.verify_url,
                timeout=max(self.timeout - (time.monotonic() - started), 0.001),
                max_bytes=self.max_bytes, json=self._payload(token),
            )
        except FetchError as exc:
            return self._finish(_from_fetch_error(exc, secrets))
        finally:
            semaphore.release()
        return self._finish(classify(fetched, require_verified=self.require_verified,
                                     secrets=secrets))

    def _payload(self, token: str) -> dict[str, str]:
        return {"private_key": self._private_key, "session_token": token}

    def _finish(self, result: VerifyResult) -> VerifyResult:
        outcome = result.outcome
        if outcome in _PACED_WARNINGS:
            suppressed = self._warning_due()
            if suppressed is None:
                logger.debug("verify %s: %s", outcome.value, result.reason)
            else:
                logger.warning("verify %s: %s%s", outcome.value, result.reason,
                               f" ({suppressed} similar since the last warning)"
                               if suppressed else "")
        elif result.status_code in (401, 403) and self._credentials_log_due():
            logger.error(
                "verify: the vendor rejected our credentials (HTTP %s) at %s; check "
                "FAILOPEN_PRIVATE_KEY. Every token is rejected until this is fixed.",
                result.status_code, self.verify_url,
            )
        else:
            logger.debug("verify %s: %s", outcome.value, result.reason)
        return result

    def _warning_due(self) -> int | None:
        """During an incident every request fails alike: warn once per interval, with a count."""
        now = self._clock.monotonic()
        with self._lock:
            last = self._warned_at
            if last is not None and now - last < _WARNING_INTERVAL:
                self._warnings_suppressed += 1
                return None
            suppressed, self._warnings_suppressed = self._warnings_suppressed, 0
            self._warned_at = now
            return suppressed

    def _credentials_log_due(self) -> bool:
        now = self._clock.monotonic()
        with self._lock:
            last = self._credentials_logged_at
            if last is not None and now - last < CREDENTIALS_LOG_INTERVAL:
                return False
            self._credentials_logged_at = now
            return True
