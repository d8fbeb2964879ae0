"""The enforcement token inside a request body: urlencoded, multipart or JSON.

Every parser here runs on a body an anonymous client chose, before anything is verified, so each
is linear in the body and bounded in what it builds: a JSON body is parsed only below a count of
values, a urlencoded body decodes only the token's own field, and multipart headers are scanned
without backtracking. A body that exceeds a bound carries no token (and is refused while
enforcing); the header remains the way to send one.
"""

from __future__ import annotations

import json
import re
from urllib.parse import unquote

from failopen.providers.verify import MAX_TOKEN_LENGTH

__all__ = ["media_type", "token_from_body"]

_MAX_FORM_FIELDS = 1000
# Commas and opening brackets in a JSON body: bounds what json.loads can cost (~2 ms at most).
_MAX_JSON_VALUES = 5000
_MAX_PART_HEADERS = 32
# The token's own Content-Disposition is ``form-data; name="<field>"``, the name at most 12
# characters per character of the field (RFC 2231, 4 bytes as %XX): a longer one is some other
# part (a file's long name), and is not read, which keeps the cost per part bounded by the field.
_DISPOSITION_SLACK = 64
_MAX_PARAMS = 32
_BLANKS = re.compile(r"[ \t]*")
# A quoted-string with backslash escapes, from its opening quote (unrolled: no nested choice).
_ESCAPED = re.compile(r'"([^"\\]*(?:\\.[^"\\]*)*)"')



def token_from_body(content_type: str | None, body: bytes, field: str) -> str | None:
    """The ``field`` value of a urlencoded, multipart or JSON body; None if absent or unreadable.

    Never raises: a body this cannot read simply carries no token, and the guard refuses it.
    Neither does a flood (over 1000 fields or parts, over 32 headers in a part, over 5000 JSON
    values): this runs on the ASGI event loop, so its cost stays linear in the body and small
    per byte (tests/benchmarks/bench_asgi_body.py).
    """
    media = media_type(content_type)
    try:
        if media == "application/x-www-form-urlencoded":
            return _from_urlencoded(body, field)
        if media == "application/json" or media.endswith("+json"):
            return _from_json(body, field)
        if media == "multipart/form-data":
            return _from_multipart(content_type or "", body, field)
    except (ValueError, RecursionError, UnicodeError):
        return None
    return None


def media_type(content_type: str | None) -> str:
    """The media type of a Content-Type header, lower-cased, without parameters."""
    return (content_type or "").split(";", 1)[0].strip().lower()


def _from_urlencoded(body: bytes, field: str) -> str | None:
    """What ``parse_qsl(keep_blank_values=True)`` reads for ``field``, decoding only that pair.

    parse_qsl decodes every name and value: ~0.1 s per MiB of ``%41``. Here a name too long to
    decode to ``field`` is skipped unread, and only the matching value is decoded.
    """
    text = body.decode("utf-8", "replace")
    if text.count("&") >= _MAX_FORM_FIELDS:  # parse_qsl's max_num_fields, as before
        raise ValueError("too many form fields")
    # Each character of the field is at most 4 bytes, each byte at most "%XX" when encoded.
    longest_name = 12 * len(field)
    for pair in text.split("&"):
        if not pair:
            continue
        name, _, value = pair.partition("=")
        if len(name) > longest_name or unquote(name.replace("+", " "), errors="replace") != field:
            continue
        if len(value) > 3 * MAX_TOKEN_LENGTH:
            # Decoded it is longer than any token (or not ASCII): the guard refuses it as
            # invalid either way, without ~0.1 s of decoding per MiB.
            return value[:MAX_TOKEN_LENGTH + 1]
        return unquote(value.replace("+", " "), errors="replace")
    return None


def _from_json(body: bytes, field: str) -> str | None:
    # json.loads is C code holding the GIL: ~0.1 ms per KiB of tiny containers or numbers, and
    # a worker thread would stall the loop as long. A log-in or sign-up carries far fewer values
    # than this bound, which costs three memchr-speed passes to check.
    if body.count(b",") + body.count(b"[") + body.count(b"{") > _MAX_JSON_VALUES:
        raise ValueError("too many JSON values")
    data = json.loads(body)
    value = data.get(field) if isinstance(data, dict) else None
    return value if isinstance(value, str) else None


def _from_multipart(content_type: str, body: bytes, field: str) -> str | None:
    boundary = _header_param(content_type, "boundary")
    if not boundary:
        return None
    delimiter = b"--" + boundary.encode("latin-1")
    # Walked with find(), not split(): a body of tiny parts would otherwise become a list of
    # hundreds of thousands of slices before the first one is looked at.
    start, parts = body.find(delimiter), 0
    while start != -1:
        start += len(delimiter)
        if body.startswith(b"--", start):  # the closing delimiter
            break
        parts += 1
        if parts > _MAX_FORM_FIELDS:  # a flood is refused, not parsed (like urlencoded)
            raise ValueError("too many multipart parts")
        end = body.find(delimiter, start)
        stop = len(body) if end == -1 else end
        if body.startswith(b"\r\n", start):
            start += 2
        head_end = body.find(b"\r\n\r\n", start, stop)
        if head_end != -1 and _names_field(body[start:head_end], field):
            return body[head_end + 4:stop].removesuffix(b"\r\n").decode("utf-8")
        start = end
    return None


def _names_field(head: bytes, field: str) -> bool:
    """True when a part's headers make it the form field ``field`` (never a file upload)."""
    lines = head.split(b"\r\n", _MAX_PART_HEADERS)
    if len(lines) > _MAX_PART_HEADERS:  # real parts carry two or three headers
        raise ValueError("too many headers in a multipart part")
    for line in lines:
        name, _, header = line.decode("latin-1").partition(":")
        if name.strip().lower() != "content-disposition":
            continue
        if len(header) > _DISPOSITION_SLACK + 12 * len(field):
            return False  # not the token's part (see _DISPOSITION_SLACK), and not read
        # The first Content-Disposition decides; the name is checked first, as the cheaper test
        # rules out almost every part. A file upload is never the token, whatever its name.
        return (_header_param(header, "name") == field
                and _header_param(header, "filename") is None)
    return False


def _quoted_string(value: str, start: int) -> tuple[str, int] | None:
    """The quoted-string at ``start`` (after blanks) with its escapes still in, and the index
    after its closing quote; None when there is none or it is unterminated.

    The common string (no backslash before the next quote) is found with ``str.find``, at memchr
    speed; only one with escapes goes through the regex. A regex alone backtracked through a long
    unterminated string: ~0.15 s per MiB of a multipart body, on the event loop.
    """
    opening = _BLANKS.match(value, start).end()  # type: ignore[union-attr]  # always matches
    if not value.startswith('"', opening):
        return None
    close = value.find('"', opening + 1)
    if close == -1:
        return None
    if value.find("\\", opening + 1, close) == -1:
        return value[opening + 1:close], close + 1
    escaped = _ESCAPED.match(value, opening)
    return (escaped.group(1), escaped.end()) if escaped is not None else None


def _header_param(value: str, param: str) -> str | None:
    """One parameter of a header like ``form-data; name="x"``, in time linear in its length.

    Not ``email.message``: its parameter parsing takes seconds on a megabyte of ``;``, and a
    multipart body is made of such headers. Quoted strings unescape ``\\`` and ``\"`` only (as
    email and Django do); ``param*=charset'lang'%XX`` (RFC 2231) wins over ``param=``; a
    parameter split in RFC 2231 sections (``param*0=``) is not read.
    """
    plain = extended = None
    at, end, seen = value.find(";"), len(value), 0
    while at != -1 and seen < _MAX_PARAMS:
        seen += 1
        semi = value.find(";", at + 1)
        stop = end if semi == -1 else semi
        equals = value.find("=", at + 1, stop)
        if equals == -1:  # a parameter without a value
            at = semi
            continue
        name = value[at + 1:equals].strip().lower()
        quoted = _quoted_string(value, equals + 1)
        if quoted is not None:
            found = quoted[0].replace("\\\\", "\\").replace('\\"', '"')
            at = value.find(";", quoted[1])
        elif value[equals + 1:stop].lstrip().startswith('"'):
            break  # an unterminated quote: nothing after it can be read reliably
        else:
            found = value[equals + 1:stop].strip()
            at = semi
        if name == param and plain is None:
            plain = found
        elif name == param + "*" and extended is None:
            extended = found
    if extended is not None:
        charset, _, rest = extended.partition("'")
        try:
            return unquote(rest.partition("'")[2], encoding=charset or "utf-8", errors="strict")
        except (LookupError, UnicodeError):
            return None  # a charset Python does not know cannot name our field
    return plain
