"""OAuth 2.0 client credentials for the session-intelligence API (spec 5), as an ``httpx.Auth``.

The token is cached until shortly before ``expires_in`` runs out. Only one refresh runs at a time:
threads wait on a ``threading.Lock``, tasks on an ``asyncio.Lock``, and whoever gets the lock next
finds the fresh token in the cache. A 401 on a data call drops the token that was refused (unless
another caller already replaced it), fetches a new one and sends the request once more.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from collections import deque
from collections.abc import AsyncGenerator, Callable, Generator
from typing import Any

import httpx
from cachetools import TLRUCache

from failopen.rai._base import decode_object, error_from_response
from failopen.rai._bounded import ACCEPT_ENCODING, MAX_TOKEN_BYTES, aread_bounded, read_bounded
from failopen.rai.exceptions import InvalidResponse

__all__ = ["ClientCredentialsAuth"]

logger = logging.getLogger("failopen.rai")

_KEY = "token"
_REFRESH_MARGIN = 60.0  # seconds before expiry; at most 10% of the lifetime
_REDACTED = "[redacted]"


class _Token:
    """An access token whose repr never shows it."""

    __slots__ = ("value", "lifetime")

    def __init__(self, value: str, lifetime: int) -> None:
        self.value = value
        self.lifetime = lifetime

    @property
    def ttl(self) -> float:
        """Seconds to keep it: its lifetime less a margin, so it is not sent as it expires."""
        return self.lifetime - min(_REFRESH_MARGIN, self.lifetime * 0.1)

    def __repr__(self) -> str:
        return f"<access token, expires_in={self.lifetime}>"


def _ttu(_key: str, token: _Token, now: float) -> float:
    return now + token.ttl


class ClientCredentialsAuth(httpx.Auth):
    """Fetches, caches and refreshes the bearer token; usable by ``httpx.Client`` and
    ``httpx.AsyncClient``.

    ``timer`` is a monotonic clock in seconds (injectable, so expiry is testable without
    sleeping).
    """

    requires_request_body = False
    requires_response_body = False

    def __init__(
        self,
        token_url: str | httpx.URL,
        client_id: str,
        client_secret: str,
        *,
        timer: Callable[[], float] = time.monotonic,
        user_agent: str = "failopen",
    ) -> None:
        self._token_url = httpx.URL(token_url)
        self._client_id = client_id
        self._client_secret = client_secret
        self._user_agent = user_agent
        self._cache: TLRUCache[str, _Token] = TLRUCache(maxsize=1, ttu=_ttu, timer=timer)
        self._thread_lock = threading.Lock()
        self._async_lock = asyncio.Lock()
        # Tokens handed out lately, so an error text echoing one can be scrubbed.
        self._issued: deque[str] = deque(maxlen=4)

    def __repr__(self) -> str:
        return (
            f"ClientCredentialsAuth(token_url={str(self._token_url)!r}, "
            f"client_id={self._client_id!r})"
        )

    def redact(self, text: str) -> str:
        """``text`` with the client secret and recent tokens blanked out."""
        for secret in (self._client_secret, *self._issued):
            if not secret:
                continue
            # Also the form it takes inside a JSON string (an echoed request body, say).
            for form in {secret, json.dumps(secret)[1:-1]}:
                if form in text:
                    text = text.replace(form, _REDACTED)
        return text

    def invalidate(self) -> None:
        """Forget the cached token; the next request fetches a new one."""
        self._cache.pop(_KEY, None)

    # --- shared, I/O-free ---

    def _cached(self) -> _Token | None:
        return self._cache.get(_KEY)

    def _token_request(self, template: httpx.Request) -> httpx.Request:
        extensions: dict[str, Any] = {}
        if "timeout" in template.extensions:
            extensions["timeout"] = template.extensions["timeout"]
        logger.debug("requesting an access token for client_id=%s", self._client_id)
        return httpx.Request(
            "POST",
            self._token_url,
            json={"client_id": self._client_id, "client_secret": self._client_secret},
            headers={"Accept": "application/json", "Accept-Encoding": ACCEPT_ENCODING,
                     "User-Agent": self._user_agent},
            extensions=extensions,
        )

    def _accept(self, response: httpx.Response) -> _Token:
        if response.status_code != 200:
            raise error_from_response(
                response.status_code, response.headers, response.content, self.redact
            )
        body = decode_object(response.content, "authorize")
        value, lifetime = body.get("access_token"), body.get("expires_in")
        token_type = body.get("token_type", "Bearer")
        if not isinstance(value, str) or not value:
            raise InvalidResponse("authorize: the answer carries no access_token")
        if isinstance(lifetime, bool) or not isinstance(lifetime, int) or lifetime < 0:
            raise InvalidResponse("authorize: expires_in is not a non-negative integer")
        if not isinstance(token_type, str) or token_type.lower() != "bearer":
            raise InvalidResponse("authorize: token_type is not Bearer")
        token = _Token(value, lifetime)
        self._issued.append(value)
        self._cache[_KEY] = token
        logger.debug("access token issued for client_id=%s, expires_in=%ds", self._client_id,
                     lifetime)
        return token

    def _refused(self, used: _Token) -> _Token | None:
        """After a 401: the token to retry with, or None when a new one must be fetched."""
        current = self._cached()
        if current is None or current is used:
            self.invalidate()
            return None
        return current  # another caller refreshed while this request was in flight

    @staticmethod
    def _sign(request: httpx.Request, token: _Token) -> httpx.Request:
        request.headers["Authorization"] = f"Bearer {token.value}"
        return request

    # --- the flows ---

    def sync_auth_flow(
        self, request: httpx.Request
    ) -> Generator[httpx.Request, httpx.Response, None]:
        """Sign with the cached token (fetching one if needed); on 401 refresh once, retry once."""
        with self._thread_lock:
            token = self._cached()
            if token is None:
                answer = yield self._token_request(request)
                read_bounded(answer, "authorize", MAX_TOKEN_BYTES)
                token = self._accept(answer)
        response = yield self._sign(request, token)
        if response.status_code != 401:
            return
        read_bounded(response, "a refused request", MAX_TOKEN_BYTES)  # httpx reads it next
        with self._thread_lock:
            retry_with = self._refused(token)
            if retry_with is None:
                answer = yield self._token_request(request)
                read_bounded(answer, "authorize", MAX_TOKEN_BYTES)
                retry_with = self._accept(answer)
        yield self._sign(request, retry_with)

    async def async_auth_flow(
        self, request: httpx.Request
    ) -> AsyncGenerator[httpx.Request, httpx.Response]:
        """The async twin of :meth:`sync_auth_flow`."""
        async with self._async_lock:
            token = self._cached()
            if token is None:
                answer = yield self._token_request(request)
                await aread_bounded(answer, "authorize", MAX_TOKEN_BYTES)
                token = self._accept(answer)
        response = yield self._sign(request, token)
        if response.status_code != 401:
            return
        await aread_bounded(response, "a refused request", MAX_TOKEN_BYTES)
        async with self._async_lock:
            retry_with = self._refused(token)
            if retry_with is None:
                answer = yield self._token_request(request)
                await aread_bounded(answer, "authorize", MAX_TOKEN_BYTES)
                retry_with = self._accept(answer)
        yield self._sign(request, retry_with)
