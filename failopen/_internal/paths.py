"""Every spelling of a request path that a router, server or proxy may resolve to the same route.

``Config.protects_path`` asks for them only when a path holds a character worth the trouble
(:data:`ODD_CHARACTER`, ``//`` or ``/.``), so the common, canonical path costs one scan. Each
spelling can only add protection: a superset is fine, a missing one is a bypass.
"""

from __future__ import annotations

import posixpath
import re
from urllib.parse import unquote

__all__ = ["ODD_CHARACTER", "request_paths", "spellings"]

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
