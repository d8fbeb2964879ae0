"""Where overrides live, so every worker process that serves requests sees the same one.

* ``memory:`` — this process only (the default; fine for one worker).
* ``file:///path/to/override.json`` — every process on one machine. Writes are atomic
  (write, fsync, rename); readers poll a cheap ``lstat`` about once a second, off the request path.
  Whoever can write that file can switch enforcement off, so the file store trusts only what this
  user or root could have written: the directory must be owned by this user or root and not
  group- or world-writable (never ``/tmp``; use e.g. ``mkdir -m 0755 /run/failopen``), and the
  file must be a regular file (no symlink), owned by this user or root, not group- or
  world-writable. A bad directory is a ConfigError at start-up; a bad file is a StoreError, and
  the flag keeps the override it last knew.

A store answers three questions: what is the override (``load``), is there possibly a newer one
than I last loaded (``changed``, cheap), and record this one (``save``; None lifts it).

* ``redis://[:password@]host:port/db``, ``rediss://`` (TLS), ``unix:///path.sock`` — every
  process of a fleet, on any machine (:mod:`failopen.stores.redis`; ``failopen[redis]``). The
  override's expiry is a Redis TTL; the fleet also shares one status poller through it.

A store URL may carry a password (``redis://:password@host``), so it is only ever shown through
:func:`mask_url`: in errors, logs, ``Config.describe()`` and ``repr``. A URL this version cannot
open is a ConfigError when the Config is built, not a failure on every request.
"""

from __future__ import annotations

import re
from typing import Protocol
from urllib.parse import SplitResult, parse_qsl, unquote, urlencode, urlsplit

from failopen.engine.flag import Override
from failopen.exceptions import ConfigError
from failopen.secret import Secret
from failopen.stores.redis import REDIS_SCHEMES, check_redis_url

__all__ = [
    "OverrideStore", "check_store_url", "mask_url", "open_store", "shown_url", "split_password",
]

_MASK = "***"
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]{0,30}")
# A user name shown beside a masked password: plain characters only, else it is masked too.
_USER = re.compile(r"[A-Za-z0-9._~%+-]{0,64}")
# Query parameters whose value is shown as *** (redis-py and others accept ?password=...).
_SECRET_PARAM = re.compile(r"pass|pwd|secret|token|auth|key|cred", re.IGNORECASE)
_USE_INSTEAD = "use redis://host:port/db (a fleet), file:///path/override.json (every process " \
    "on one machine) or memory: (one process)"


class OverrideStore(Protocol):
    """Storage for the operator override shared by a fleet of processes."""

    def load(self) -> Override | None:
        """The stored override (expired ones included; the flag drops those). Raises StoreError."""
        ...

    def save(self, override: Override | None) -> None:
        """Store an override, or lift it with None. Raises StoreError."""
        ...

    def changed(self) -> bool:
        """Cheap: may ``load`` return something other than last time? Raises StoreError."""
        ...

    def describe(self) -> str:
        """Where the override lives, for logs and ``failopen override show``."""
        ...


def mask_url(url: object) -> str:
    """``url`` safe to show: any password (userinfo, ``?password=``, a fragment) becomes ``***``.

    Never raises, and never echoes what it cannot read as a URL: everything before the last
    ``@`` is userinfo (a password may hold an unescaped ``@``, ``/`` or ``?``), and text without
    ``://`` is shown as ``***`` unless it is a bare ``scheme:`` (``memory:``) or a path.
    """
    if not isinstance(url, str):
        return f"<{type(url).__name__}>"
    scheme, sep, rest = url.partition("://")
    if not sep:
        head, colon, tail = url.partition(":")
        # A bare "memory:" or a path ("file:/run/x.json", one slash short) is no secret.
        if colon and _SCHEME.fullmatch(head) and "@" not in tail and (
                not tail or tail.startswith("/")):
            return url
        return _MASK
    if not _SCHEME.fullmatch(scheme):
        return _MASK
    userinfo = ""
    if "@" in rest and not (scheme.lower() == "file" and rest.startswith("/")):  # a path's @
        given, _, rest = rest.rpartition("@")
        if "?" in given or "#" in given:
            # The @ may sit in a query or a fragment (?password=p@ss): no telling what is what.
            return f"{scheme}://{_MASK}"
        user, colon, _password = given.partition(":")
        # redis://:***@host, rediss://default:***@host; a lone userinfo may be the password.
        userinfo = f"{user}:{_MASK}@" if colon and _USER.fullmatch(user) else f"{_MASK}@"
    rest, hash_sign, fragment = rest.partition("#")
    rest, question, query = rest.partition("?")
    if query:
        query = _mask_query(query)
    return (f"{scheme}://{userinfo}{rest}{question}{query}"
            + (f"#{_MASK}" if hash_sign and fragment else hash_sign))


def _mask_query(query: str) -> str:
    """The query up to its first secret-sounding parameter, that one's value as ``***``, and
    ``***`` for all that follows (a password may hold an unescaped ``&`` or ``=``)."""
    shown: list[str] = []
    for at, item in enumerate(query.split("&")):
        if not _SECRET_PARAM.search(item):  # the whole item: ?=?password=...
            shown.append(item)
            continue
        name, equals, _value = item.partition("=")
        shown.append(f"{name}={_MASK}" if equals and _USER.fullmatch(name) else _MASK)
        if at < query.count("&"):
            shown.append(_MASK)
        break
    return "&".join(shown)


def shown_url(url: object, *, password: bool) -> str:
    """``url`` as :func:`mask_url` shows it, with ``:***@`` when a password goes beside it
    (``FAILOPEN_STORE_PASSWORD``): a reader sees that the store takes one."""
    if not password or not isinstance(url, str) or "://" not in url:
        return mask_url(url)
    scheme, _, rest = url.partition("://")
    user, at, host = rest.rpartition("@")
    if not at:
        return mask_url(f"{scheme}://:{_MASK}@{rest}")
    if ":" not in user and _USER.fullmatch(user):  # a user name whose password was moved out
        return mask_url(f"{scheme}://{user}:{_MASK}@{host}")
    return mask_url(url)


def _userinfo_cut_short(rest: str, parts: SplitResult) -> bool:
    """True when a ``/``, ``?`` or ``#`` in the password ended the userinfo early for urlsplit
    (and redis-py): the ``@`` that closes it lies after the authority, in the path, a query
    parameter's name or the fragment, or after an authority that names no usable host."""
    tail = rest[len(parts.netloc):]  # urlsplit keeps the authority as written
    if "@" not in tail:
        return False
    before_fragment, _, fragment = tail.partition("#")
    path, _, query = before_fragment.partition("?")
    if "@" in path or "@" in fragment:
        return True
    try:
        parts.port  # noqa: B018 - raises for the start of a password read as the port
    except ValueError:
        return True
    # In a value (?password=p@ss, ?client_name=a@b) the @ is read as written; in a name it is
    # what followed a "?" in the password.
    return not parts.hostname or any("@" in item.partition("=")[0] for item in query.split("&"))


def split_password(url: str) -> tuple[str, str | None]:
    """A Redis URL without its password, and the password (None when it carries none).

    Reads the password where redis-py does (userinfo, then ``?password=``), so what is left
    opens the same server once the password is passed beside it. Other URLs come back as given;
    a ConfigError (URL masked) when a password's ``/``, ``?`` or ``#`` ends the userinfo early.
    """
    scheme, sep, rest = url.partition("://")
    if not sep or scheme.lower() not in REDIS_SCHEMES:
        return url, None
    parts = urlsplit(url)
    if scheme.lower() != "unix" and _userinfo_cut_short(rest, parts):
        # The URL would stay in Config.store as written, its password in clear for asdict().
        raise ConfigError(f"FAILOPEN_STORE: {mask_url(url)} does not parse as written: "
                          "percent-encode any '/', '?', '#' or '@' in its password, "
                          "or give the password in FAILOPEN_STORE_PASSWORD")
    query = parse_qsl(parts.query, keep_blank_values=True)
    # As redis-py reads it: the first value that is not blank.
    in_query = [value for name, value in query if name == "password" and value]
    password = unquote(parts.password) if parts.password else None
    if password is not None and in_query and in_query[0] != password:
        raise ConfigError(f"FAILOPEN_STORE: {mask_url(url)} carries two different passwords; "
                          "give it once, best in FAILOPEN_STORE_PASSWORD")
    if password is None and not in_query:
        return url, None
    netloc = parts.netloc.rpartition("@")[2]
    if parts.username:
        netloc = f"{parts.username}@{netloc}"
    kept = urlencode([(name, value) for name, value in query if name != "password"])
    # By hand: urlunsplit drops the empty host of unix:///path.sock.
    stripped = (f"{parts.scheme}://{netloc}{parts.path}" + (f"?{kept}" if kept else "")
                + (f"#{parts.fragment}" if parts.fragment else ""))
    return stripped, password if password is not None else in_query[0]


def check_store_url(url: object) -> str:
    """``url`` when this version can open it (checked without I/O), else a ConfigError that
    shows the URL masked and says what to use instead."""
    from failopen.stores.file import parse_file_url

    if not isinstance(url, str) or not url.strip():
        raise ConfigError(f"FAILOPEN_STORE: expected a store URL; {_USE_INSTEAD}")
    if url.startswith("memory:"):
        return url
    if url.startswith("file://"):
        parse_file_url(url)
        return url
    scheme = url.partition(":")[0]
    if url.partition("://")[1] and scheme.lower() in REDIS_SCHEMES:
        check_redis_url(url)
        return url
    shown = mask_url(url)
    what = ("the value (not shown: it may hold a password) is not a URL" if shown == _MASK
            else f"{shown} is not a store URL this version can open")
    raise ConfigError(f"FAILOPEN_STORE: {what}; {_USE_INSTEAD}")


def open_store(url: str, *, prefix: str = "failopen:",
               password: Secret | str | None = None) -> OverrideStore:
    """Open the store named by a ``FAILOPEN_STORE`` URL (ConfigError, URL masked, if it cannot).

    ``prefix`` (``FAILOPEN_REDIS_PREFIX``) and ``password`` (``FAILOPEN_STORE_PASSWORD``; a
    password in the URL works too) apply to a Redis store only. Opening makes no I/O.
    """
    from failopen.stores.file import FileStore
    from failopen.stores.memory import MemoryStore

    check_store_url(url)
    if url.startswith("memory:"):
        return MemoryStore()
    if url.startswith("file://"):
        return FileStore.from_url(url)
    from failopen.stores.redis import RedisStore

    if isinstance(password, Secret):
        password = password.reveal()
    return RedisStore(url, prefix=prefix, password=password or None)
