"""Store URLs as failopen shows them: a password in a URL (``redis://:pw@host``, ``?password=``)
is never shown, and a password given in the URL is split off into its own secret setting.

Every error, log line, ``Config.describe()`` and ``repr`` shows a store URL through
:func:`mask_url`; :func:`split_password` lets ``Config.store`` name the server only.
"""

from __future__ import annotations

import ipaddress
import re
from urllib.parse import SplitResult, parse_qsl, unquote, urlencode, urlsplit

from failopen.exceptions import ConfigError

__all__ = ["CLUSTER_SCHEMES", "MASK", "REDIS_SCHEMES", "SENTINEL_SCHEMES", "mask_url", "shown_url",
           "split_password"]

#: Redis Sentinel (:mod:`failopen.stores.sentinel`): the sentinels name the primary.
SENTINEL_SCHEMES = frozenset({"redis+sentinel", "rediss+sentinel"})
#: Redis Cluster (:mod:`failopen.stores.cluster`): any node names the others and the slot map.
CLUSTER_SCHEMES = frozenset({"redis+cluster", "rediss+cluster"})
REDIS_SCHEMES = frozenset({"redis", "rediss", "unix"}) | SENTINEL_SCHEMES | CLUSTER_SCHEMES

MASK = "***"
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]{0,30}")
# A user name shown beside a masked password: plain characters only, else it is masked too.
_USER = re.compile(r"[A-Za-z0-9._~%+-]{0,64}")
# Query parameters whose value is shown as *** (redis-py and others accept ?password=...).
_SECRET_PARAM = re.compile(r"pass|pwd|secret|token|auth|key|cred", re.IGNORECASE)


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
        return MASK
    if not _SCHEME.fullmatch(scheme):
        return MASK
    userinfo = ""
    if "@" in rest and not (scheme.lower() == "file" and rest.startswith("/")):  # a path's @
        given, _, rest = rest.rpartition("@")
        if "?" in given or "#" in given:
            # The @ may sit in a query or a fragment (?password=p@ss): no telling what is what.
            return f"{scheme}://{MASK}"
        user, colon, _password = given.partition(":")
        # redis://:***@host, rediss://default:***@host; a lone userinfo may be the password.
        userinfo = f"{user}:{MASK}@" if colon and _USER.fullmatch(user) else f"{MASK}@"
    rest, hash_sign, fragment = rest.partition("#")
    rest, question, query = rest.partition("?")
    if query:
        query = _mask_query(query)
    return (f"{scheme}://{userinfo}{rest}{question}{query}"
            + (f"#{MASK}" if hash_sign and fragment else hash_sign))


def _mask_query(query: str) -> str:
    """The query up to its first secret-sounding parameter, that one's value as ``***``, and
    ``***`` for all that follows (a password may hold an unescaped ``&`` or ``=``)."""
    shown: list[str] = []
    for at, item in enumerate(query.split("&")):
        if not _SECRET_PARAM.search(item):  # the whole item: ?=?password=...
            shown.append(item)
            continue
        name, equals, _value = item.partition("=")
        shown.append(f"{name}={MASK}" if equals and _USER.fullmatch(name) else MASK)
        if at < query.count("&"):
            shown.append(MASK)
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
        return mask_url(f"{scheme}://:{MASK}@{rest}")
    if ":" not in user and _USER.fullmatch(user):  # a user name whose password was moved out
        return mask_url(f"{scheme}://{user}:{MASK}@{host}")
    return mask_url(url)


def _userinfo_cut_short(rest: str, parts: SplitResult, *, hosts: bool = False) -> bool:
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
    if hosts:
        # A Sentinel or Cluster URL lists hosts ("h1:26379,h2:26379"): urlsplit reads no port
        # there, and the hosts are checked one by one (failopen.stores.sentinel, .cluster).
        return any("@" in item.partition("=")[0] for item in query.split("&"))
    try:
        parts.port  # noqa: B018 - raises for the start of a password read as the port
    except ValueError:
        return True
    # In a value (?password=p@ss, ?client_name=a@b) the @ is read as written; in a name it is
    # what followed a "?" in the password.
    return not parts.hostname or any("@" in item.partition("=")[0] for item in query.split("&"))


def _check_brackets(hosts: str) -> None:
    """ValueError unless each bracketed host of ``hosts`` (``host:port``, several separated by
    ``,`` for Sentinel and Cluster) is an IPv6 address."""
    for item in hosts.split(","):
        if "[" not in item and "]" not in item:
            continue
        inside, closed, port = item.removeprefix("[").partition("]")
        if not item.startswith("[") or not closed or "[" in inside or "]" in port \
                or (port and not port.startswith(":")):
            raise ValueError("bracketed host")
        ipaddress.IPv6Address(inside)  # a zone (fe80::1%eth0) is accepted as urlsplit does


def split_password(url: str) -> tuple[str, str | None]:
    """A Redis URL without its password, and the password (None when it carries none).

    Reads the password where redis-py does (userinfo, then ``?password=``), so what is left
    opens the same server once the password is passed beside it. Other URLs come back as given;
    a ConfigError (URL masked) when a password's ``/``, ``?`` or ``#`` ends the userinfo early.
    """
    scheme, sep, rest = url.partition("://")
    if not sep or scheme.lower() not in REDIS_SCHEMES:
        return url, None
    try:
        parts = urlsplit(url)
        # Python 3.11.4+ refuses a bracketed host that is no IPv6 address; earlier ones let
        # "[zz]" through to fail at the first connection: checked here alike for every version.
        _check_brackets(parts.netloc.rpartition("@")[2])
    except ValueError:  # "[zz]", "[::1" (its message is not quoted: it may hold the password)
        raise ConfigError(f"FAILOPEN_STORE: {mask_url(url)} does not parse: an IPv6 host goes "
                          "in brackets, as [::1]:6379; percent-encode any '[' or ']' in the "
                          "password") from None
    if scheme.lower() != "unix" and _userinfo_cut_short(
            rest, parts, hosts=scheme.lower() in SENTINEL_SCHEMES | CLUSTER_SCHEMES):
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
