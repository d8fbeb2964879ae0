"""The vendor's verify call: is this enforcement token good?

:class:`HttpVerifier` POSTs ``{"private_key": ..., "session_token": ...}`` as JSON to the
vendor's verify endpoint (``FAILOPEN_VERIFY_URL``) within one overall deadline
(``FAILOPEN_VERIFY_TIMEOUT``) and maps the answer to one of five outcomes.

Which answer maps to which outcome, and the security decisions behind it, are in
:mod:`failopen.vendor.verify_answers` (pure, no I/O); its names are re-exported here.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import threading
import time
import weakref
from typing import Protocol, TypeAlias, runtime_checkable

import httpx

from failopen.clock import SYSTEM_CLOCK, Clock
from failopen.exceptions import ConfigError, FetchError
from failopen.secret import Secret
from failopen.vendor.exchange import afetch, fetch
from failopen.vendor.urls import check_url
from failopen.vendor.verify_answers import (
    _PRINTABLE_ASCII,
    MALFORMED_SESSION,
    MAX_TOKEN_LENGTH,
    VerifyOutcome,
    VerifyResult,
    _from_fetch_error,
    check_token,
    classify,
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

CREDENTIALS_LOG_INTERVAL = 300.0  # seconds between ERROR logs about a rejected private key

_USER_AGENT = "failopen"
_MAX_IN_FLIGHT = 100  # concurrent async verify calls per event loop; the rest queue in order
_WARNING_INTERVAL = 10.0  # seconds between "verify unavailable" warnings during an incident


@runtime_checkable
class Verifier(Protocol):
    """Anything that can verify an enforcement token, sync and async."""

    def verify(self, token: str) -> VerifyResult:
        """The vendor's verdict on ``token``; never raises for a bad or missing answer."""
        ...

    async def averify(self, token: str) -> VerifyResult:
        """The async twin of :meth:`verify`."""
        ...


_PACED_WARNINGS = frozenset(
    {VerifyOutcome.UNAVAILABLE, VerifyOutcome.RATE_LIMITED, VerifyOutcome.OVERLOADED}
)
_AsyncClients: TypeAlias = weakref.WeakKeyDictionary[
    asyncio.AbstractEventLoop, tuple[httpx.AsyncClient, asyncio.Semaphore]
]


class HttpVerifier:
    """Verifies tokens with the vendor's verify endpoint over HTTP; never raises on bad answers.

    ``transport``/``async_transport`` replace the network (e.g. ``FakeVerifyAPI().transport()``);
    ``clock`` paces the ERROR log about rejected credentials; ``lane`` names the worker pool of
    the sync calls (``verify``; the probe's own is ``probe``).
    """

    def __init__(
        self,
        verify_url: str,
        private_key: str | Secret,
        *,
        timeout: float = 3.0,
        require_verified: bool = False,
        max_bytes: int = 65_536,
        transport: httpx.BaseTransport | None = None,
        async_transport: httpx.AsyncBaseTransport | None = None,
        clock: Clock = SYSTEM_CLOCK,
        lane: str = "verify",
    ) -> None:
        self.verify_url = check_url(verify_url, setting="FAILOPEN_VERIFY_URL")
        # ``probe``: the watcher's own verify probe, in its own worker pool (failopen.engine.probe).
        self._lane = lane
        if isinstance(private_key, Secret):  # Config.private_key, passed as it is
            private_key = private_key.reveal()
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
                lane=self._lane,
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
        # A replay field of a type we cannot read refuses every token until the vendor or we
        # change: worth a (paced) warning, unlike an ordinary refusal.
        if outcome in _PACED_WARNINGS or result.reason.startswith(MALFORMED_SESSION):
            suppressed = self._warning_due()
            if suppressed is None:
                if logger.isEnabledFor(logging.DEBUG):
                    logger.debug("verify %s: %s", outcome.value, result.reason, extra={
                        "event": "failopen.verify_failed", "outcome": outcome.value,
                        "reason": result.reason, "suppressed": None})
            else:
                logger.warning("verify %s: %s%s", outcome.value, result.reason,
                               f" ({suppressed} similar since the last warning)"
                               if suppressed else "", extra={
                                   "event": "failopen.verify_failed",
                                   "outcome": outcome.value, "reason": result.reason,
                                   "suppressed": suppressed})
        elif result.status_code in (401, 403) and self._credentials_log_due():
            logger.error(
                "verify: the vendor rejected our credentials (HTTP %s) at %s; check "
                "FAILOPEN_PRIVATE_KEY. Every token is rejected until this is fixed.",
                result.status_code, self.verify_url,
                extra={"event": "failopen.verify_credentials_rejected",
                       "status_code": result.status_code, "verify_url": self.verify_url},
            )
        elif logger.isEnabledFor(logging.DEBUG):
            logger.debug("verify %s: %s", outcome.value, result.reason, extra={
                "event": "failopen.verify", "outcome": outcome.value, "reason": result.reason})
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
