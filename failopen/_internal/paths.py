"""Every spelling of a request path that a router, server or proxy may resolve to the same route.

``Config.protects_path`` (:class:`ProtectedPaths`) asks for them only when a path holds a
character worth the trouble (:data:`ODD_CHARACTER`, ``//`` or ``/.``), so the common, canonical
path costs one scan. Each spelling can only add protection: a superset is fine, a missing one is
a bypass. Case is one of them (:func:`folded`): a ``(?i)`` route, or a CMS whose database
compares slugs without case or accents (Wagtail on MySQL), serves ``/JOIN/`` as ``/join/``.
"""

from __future__ import annotations

import posixpath
import re
import unicodedata
from urllib.parse import unquote

__all__ = ["ODD_CHARACTER", "ProtectedPaths", "folded", "request_paths", "spellings"]

_SLASHES = re.compile("/{2,}")
# A character a router may drop or stop at: controls, any whitespace, invisible format
# characters, symbols outside printable ASCII (all neither a word character nor "!".."~"), and the
# ";" "?" "#" that only percent-decoding can put into an ASGI path.
_CUT = re.compile(r"[^\w!-~]|[;?#]")
# A character that makes a path worth building its other spellings for: anything but printable
# ASCII, and "#" "%" ";" "?" "\\". One character class: the cheapest scan (with "//" and "/.").
ODD_CHARACTER = re.compile(r'[^!"$&-:<->@-\[\]-~]')


def spellings(path: str) -> set[str]:
    """Every spelling of ``path`` some router, server or proxy may resolve it to.

    Combined: decoded once more (``%0A``), ``\\`` read as ``/``, cut at the first character a
    router may stop at or with every such character dropped, then slashes merged and dot
    segments resolved. A superset is fine: each spelling can only add protection.
    """
    decoded = {path, unquote(path)} if "%" in path else {path}
    spellings: set[str] = set()
    for text in decoded:
        text = text.replace("\\", "/")
        cut = _CUT.search(text)
        for candidate in (text, _CUT.sub("", text), text[:cut.start()] if cut else text):
            spellings.add(candidate)
            if "//" in candidate or "/." in candidate:
                spellings.add(posixpath.normpath(_SLASHES.sub("/", candidate)))
    return spellings


def request_paths(url_path: str, mount: str = "") -> tuple[str, str]:
    """``(path, routed)``: the request a URL's path (percent-encoded, as a browser's
    ``URL.pathname`` has it) arrives as. ``path`` is decoded once, as servers decode it (UTF-8,
    invalid bytes replaced: uvicorn's reading, and gunicorn's read back as werkzeug does);
    ``routed`` is ``path`` without ``mount`` (``SCRIPT_NAME``, ``root_path``, Django's script
    prefix) in front, what the app routes on; ``path`` itself when it is not under ``mount``.

    Only the server's part: the spellings a router may resolve either to are
    :func:`spellings`', built where the guard looks a path up. Linear in the path's length.
    """
    path = unquote(url_path) if "%" in url_path else url_path
    mount = mount.rstrip("/")
    # Only a whole segment: "/app" is not the mount of "/apple".
    if mount and path.startswith(mount) and path[len(mount):len(mount) + 1] in ("", "/"):
        return path, path[len(mount):]
    return path, path


def folded(path: str) -> str:
    """``path`` as a router or database that ignores case compares it: case-folded and, beyond
    ASCII, without accents (MySQL's default collation reads ``/jöin/`` as ``/join/``). Per
    character, so a folded prefix is a prefix of the folded path."""
    if path.isascii():
        return path.lower()
    # Upper case first: MySQL's general_ci compares "ı" as "I", as Python upper-cases it.
    path = unicodedata.normalize("NFKD", path.upper().casefold())
    return "".join(c for c in path if not unicodedata.combining(c))


class ProtectedPaths:
    """Protected path prefixes, and the questions the guard asks of them."""

    __slots__ = ("exact", "folded", "folded_exact", "paths")

    def __init__(self, paths: tuple[str, ...]) -> None:
        self.paths = paths
        # "/signup/" listed: "/signup" reaches the same view in many routers.
        self.exact = frozenset(p.rstrip("/") for p in paths if len(p) > 1 and p.endswith("/"))
        self.folded = tuple(folded(p) for p in paths)
        self.folded_exact = frozenset(folded(p) for p in self.exact)

    def cover(self, path: str) -> bool:
        """True when ``path``, in any spelling or case a router may treat as the same, is
        under a protected path. Linear in the path's length for a canonical path."""
        if path.startswith(self.paths) or path in self.exact:
            return True
        # The common, canonical path costs one scan; the spellings are built only for odd ones.
        if ODD_CHARACTER.search(path) is None and "//" not in path and "/." not in path:
            return self._folded_covers(path.lower())  # printable ASCII: lower() is folded()
        return any(s.startswith(self.paths) or s in self.exact or self._folded_covers(folded(s))
                   for s in spellings(path))

    def _folded_covers(self, path: str) -> bool:
        return path.startswith(self.folded) or path in self.folded_exact
