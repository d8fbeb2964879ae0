"""What a failed Redis call says: which store, what failed, and what to change.

A wrong password is not an unusable override, and a refused connection is not a slow server:
each gets its own words, naming the store with its password masked and the host:port tried.
The text never quotes the server's reply or redis-py's message (a server may echo a command's
arguments, among them the password); only the local OS error (``Connection refused``) is kept.
"""

from __future__ import annotations

from typing import Any

__all__ = ["explain_failure"]

_FIX_URL = "redis://[USER]:PASSWORD@host:port/db"


def _settings(client: Any) -> dict[str, Any]:
    try:
        return dict(client.connection_pool.connection_kwargs)
    except (AttributeError, TypeError):
        return {}


def _address(settings: dict[str, Any]) -> str:
    """``host:port`` (or the socket path) redis-py connects to, from its pool settings."""
    if settings.get("path"):
        return str(settings["path"])
    host, port = str(settings.get("host") or "localhost"), settings.get("port") or 6379
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _address_shown(shown: str) -> str:
    """``host:port`` (or the socket path) as the masked store URL writes it."""
    scheme, _, rest = shown.partition("://")
    if scheme.lower() == "unix":
        return rest.split("?", 1)[0]
    authority = rest.split("/", 1)[0].split("?", 1)[0].rpartition("@")[2]
    return authority if authority.rpartition(":")[2].isdigit() else f"{authority}:6379"


def _os_reason(exc: BaseException) -> str:
    """The OS's words for a failed connection (``Connection refused``), else the error type."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, OSError) and isinstance(seen.strerror, str) and seen.strerror:
            return seen.strerror
        seen = seen.__cause__ or seen.__context__
    return type(exc).__name__


def explain_failure(exc: BaseException, *, what: str, shown: str, client: Any,
                    prefix: str) -> str:
    """One line for ``client``'s failed Redis call ``what``; ``shown`` is the store URL with
    its password masked."""
    from redis import exceptions as rex

    store, settings = f"Redis store {shown}", _settings(client)
    address = _address(settings)
    if address.lower() != _address_shown(shown).lower():
        # redis-py read the URL otherwise than it is written (an unescaped "/" in a password
        # ends the host part early): its host and port may hold part of the password.
        return (f"{store}: {what} failed, and the store URL does not parse as written: "
                "percent-encode any '/', '?', '#' or '@' in its password (FAILOPEN_STORE)")
    if isinstance(exc, (rex.AuthenticationError, rex.AuthenticationWrongNumberOfArgsError)):
        if settings.get("password"):
            fix = ("the server refused the user or password of the store URL: correct them in "
                   f"FAILOPEN_STORE ({_FIX_URL}) or FAILOPEN_STORE_PASSWORD")
        else:
            fix = ("the server wants a password and the store URL gives none: add it to "
                   f"FAILOPEN_STORE_PASSWORD (or to FAILOPEN_STORE: {_FIX_URL})")
        return f"{store}: authentication failed ({what}): {fix}"
    if isinstance(exc, rex.NoPermissionError):
        return (f"{store}: permission denied ({what}): the store URL's Redis user may not run "
                f"{what} on the keys {prefix}*; grant it read, write and script rights on them "
                "(ACL SETUSER), or use a user that has them in FAILOPEN_STORE")
    if isinstance(exc, rex.TimeoutError):
        return (f"{store}: no answer from {address} in time ({what}); is the server "
                "up, and reachable from here?")
    if isinstance(exc, (rex.ConnectionError, OSError)):
        return (f"{store}: connection to {address} failed ({what}: "
                f"{_os_reason(exc)}); "
                "check where FAILOPEN_STORE points, and that the server is up")
    if isinstance(exc, rex.ResponseError):  # READONLY, OOM, LOADING, a disabled command...
        return f"{store}: the server refused {what} ({type(exc).__name__})"
    return (f"{store}: {address} did not answer {what} as Redis does "
            f"({type(exc).__name__}); is that the Redis server's host and port?")
