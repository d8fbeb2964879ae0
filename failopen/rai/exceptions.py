"""Every error the session-intelligence client raises, in one tree.

    FailopenError
    └── RaiError                 status_code, code, message, request_id
        ├── RaiValidationError   (also ValueError) a bad argument, caught before any request
        ├── RaiTransportError    no HTTP answer (connection, time-out) after the retries
        ├── InvalidResponse      an answer that is not the documented shape (bad JSON, a
        │                        repeated page token, a token response without a token)
        ├── BadRequest           400: invalid_request, invalid_page_size, invalid_window, ...
        ├── Unauthorized         401: bad credentials, or a token refused twice
        ├── Forbidden            403: forbidden, forbidden_public_key
        ├── NotFound             404: not_found
        └── ServerError          5xx, after the retries

Any other HTTP error status (405, 429, ...) raises :class:`RaiError` itself, with the status set.
Branch on ``code`` (spec section 7), not on ``message``: the vendor may reword messages.
Messages never contain the client secret or an access token.
"""

from __future__ import annotations

from failopen.exceptions import FailopenError

__all__ = [
    "RaiError",
    "RaiValidationError",
    "RaiTransportError",
    "InvalidResponse",
    "BadRequest",
    "Unauthorized",
    "Forbidden",
    "NotFound",
    "ServerError",
]


class RaiError(FailopenError):
    """Base class of the session-intelligence client's errors.

    ``status_code`` is the HTTP status (None when no answer arrived), ``code`` the envelope's
    ``error.code``, ``request_id`` the id to quote to the vendor's support.
    """

    def __init__(
        self,
        message: str,
        *,
        status_code: int | None = None,
        code: str | None = None,
        request_id: str | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status_code = status_code
        self.code = code
        self.request_id = request_id
        #: Seconds the service asked to wait (Retry-After), when it said.
        self.retry_after = retry_after

    def __str__(self) -> str:
        head = " ".join(str(part) for part in (self.status_code, self.code) if part is not None)
        text = f"{head}: {self.message}" if head else self.message
        if self.request_id:
            text += f" (request_id={self.request_id})"
        return text

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(message={self.message!r}, status_code={self.status_code!r}, "
            f"code={self.code!r}, request_id={self.request_id!r})"
        )


class RaiValidationError(RaiError, ValueError):
    """An argument is invalid; raised before any request is sent."""


class RaiTransportError(RaiError):
    """No HTTP answer arrived (connection failure or time-out), or a 2xx answer arrived cut off
    (``code`` ``incomplete_answer``), after the retries."""

    #: No connection could be made (refused, no such host, unreachable): its retries are not
    #: logged one by one, so a dead host is one line, the final error's.
    unreachable: bool = False
    #: ``host:port`` a connection timed out to: the client warns of it once, not per attempt.
    connect_timeout: str | None = None


class InvalidResponse(RaiError):
    """The service answered, but not with the documented shape."""


class BadRequest(RaiError):
    """400: the service rejected the request's parameters or body."""


class Unauthorized(RaiError):
    """401: the credentials were refused, or a freshly issued token was refused."""


class Forbidden(RaiError):
    """403: authenticated, but not allowed this endpoint, resource or public key."""


class NotFound(RaiError):
    """404: the resource does not exist or is outside the caller's scope."""


class ServerError(RaiError):
    """5xx: the service failed, and kept failing through the retries."""
