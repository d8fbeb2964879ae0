"""Every error failopen raises, in one tree.

    FailopenError
    ├── ConfigError            a setting is missing or wrong; raised at start-up, names the setting
    ├── FetchError             an HTTP exchange gave no usable answer
    │   ├── FetchTimeout       no complete answer within the overall deadline
    │   ├── FetchOverloaded    this process could not even start the exchange in time
    │   ├── FetchTransportError  connection refused or reset, TLS failure, protocol error
    │   ├── ResponseTooLarge   the body passed the size cap
    │   └── RedirectRefused    a redirect to another host, or too many redirects
    ├── StatusError            the status page could not be used as evidence
    │   ├── StatusUnavailable  it could not be read (wraps a FetchError, or an HTTP error status)
    │   └── StatusParseError   it answered, but not with a well-formed components document
    │       └── GlobalComponentError  which component is global cannot be told (never guessed)
    └── StoreError             the override store could not be read or written
        └── StoreUnavailable   not reached, or it refused us (authentication, permissions):
                               nothing is known about the override in it

None of these ever reaches a request: the guard and the adapters turn them into decisions.
Messages never contain secrets (private key, client secret, tokens).
"""

from __future__ import annotations

__all__ = [
    "FailopenError",
    "ConfigError",
    "FetchError",
    "FetchTimeout",
    "FetchOverloaded",
    "FetchTransportError",
    "ResponseTooLarge",
    "RedirectRefused",
    "StatusError",
    "StatusUnavailable",
    "StatusParseError",
    "GlobalComponentError",
    "StoreError",
    "StoreUnavailable",
]


class FailopenError(Exception):
    """Base class of every failopen error."""


class ConfigError(FailopenError, ValueError):
    """A setting is missing or invalid. The message names the setting and what to change."""


class FetchError(FailopenError):
    """An HTTP exchange gave no usable answer."""


class FetchTimeout(FetchError):
    """No complete answer arrived within the overall deadline."""


class FetchOverloaded(FetchError):
    """The exchange never started before the deadline: every worker was busy. Local load, which
    a caller can cause by sending many requests, so it is never evidence about the vendor."""


class FetchTransportError(FetchError):
    """The connection failed: refused, reset, TLS, or a broken HTTP exchange."""


class ResponseTooLarge(FetchError):
    """The response body passed the configured size cap."""


class RedirectRefused(FetchError):
    """A redirect pointed off the original host, or there were too many of them."""


class StatusError(FailopenError):
    """The status page could not be used as evidence either way."""


class StatusUnavailable(StatusError):
    """The status page could not be read, or answered with an HTTP error status."""

    def __init__(self, message: str, *, status_code: int | None = None,
                 retry_after: float | None = None) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.retry_after = retry_after


class StatusParseError(StatusError):
    """The status page answered, but not with a well-formed components document."""


class GlobalComponentError(StatusParseError):
    """The page does not say which component is the global one: ambiguous, not the documented
    shape, a FAILOPEN_GLOBAL_COMPONENT that matches nothing or several, or a pinned component that
    left the page. The message lists the components as ``id (name)`` and says what to set. Never
    evidence of an outage, and never a reason to fall back to the page-wide indicator."""


class StoreError(FailopenError):
    """The override store could not be read or written."""


class StoreUnavailable(StoreError):
    """The store was not reached, or refused us (a wrong password, an ACL); says nothing about
    the override in it. The message names the store (password masked) and what to change."""
