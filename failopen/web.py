"""What the adapters say over HTTP, free of any framework.

The Django and ASGI adapters differ only in how they read a request and write a response; the
bodies, headers and rules live here so both answer the same way:

- the client flag endpoint (``GET <prefix>/flag``, ``?confirm=1``),
- rejections (403 / 503 + Retry-After), as JSON or a small HTML page,
- the enforcement token inside a urlencoded, multipart or JSON body,
- the override endpoint (``POST <prefix>/override``) and its admin token,
- the browser snippet and the attributes of its script tag.

Rejection messages are fixed per outcome: the detailed reason (which verify failure, whether an
outage was confirmed) goes to the log, never to a client probing for a way in.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import math
import re
from dataclasses import dataclass
from functools import lru_cache
from html import escape
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

from failopen._refusals import REFUSAL_LOG_INTERVAL, RefusalLog
from failopen.config import Config
from failopen.exceptions import StoreError
from failopen.flag import FORCE_OFF_MAX_TTL, EnforcementFlag, FlagState, Override, rfc3339
from failopen.guard import Decision
from failopen.stores.memory import MemoryStore
from failopen.verify import MAX_TOKEN_LENGTH

if TYPE_CHECKING:
    from failopen.stores import OverrideStore

__all__ = [
    "FLAG_HEADERS",
    "MAX_OVERRIDE_BODY",
    "REFUSAL_LOG_INTERVAL",
    "RefusalLog",
    "SNIPPET_OPTIONS",
    "SNIPPET_PATH",
    "STORE_NOT_SHARED",
    "Snippet",
    "admin_token_matches",
    "bearer_token",
    "describe_override",
    "flag_payload",
    "handle_override",
    "load_snippet",
    "prefers_json",
    "rejection_headers",
    "rejection_html",
    "rejection_json",
    "rejection_payload",
    "snippet_attributes",
    "store_is_shared",
    "token_from_body",
    "wants_confirm",
]

audit = logging.getLogger("failopen.audit")

#: Headers of every flag endpoint answer: a cached "enforce: false" would outlive the outage.
FLAG_HEADERS: tuple[tuple[str, str], ...] = (
    ("Content-Type", "application/json"),
    ("Cache-Control", "no-store"),
)

#: Largest override request body read (the JSON has three short fields).
MAX_OVERRIDE_BODY = 4096

#: Where the browser snippet ships inside the package.
SNIPPET_PATH = Path(__file__).parent / "static" / "failopen" / "failopen.js"

_PUBLIC_MESSAGES = {
    "missing_token": "This request needs an enforcement token.",
    "invalid_token": "The enforcement token was not accepted.",
    "rate_limited": "The request cannot be verified right now; retry shortly.",
    "cannot_verify": "The request cannot be verified right now; retry shortly.",
    "internal_error": "The request cannot be verified right now; retry shortly.",
}
_MAX_REASON = 500
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
# What handle_override appends to an override's reason: " (by <actor>)".
_ACTOR_START = " (by "


# --- the client flag endpoint ---------------------------------------------------------------------


def wants_confirm(value: str | None) -> bool:
    """True for ``?confirm=1`` (or ``true``/``yes``): the caller asks for an outage check now."""
    return value is not None and value.strip().lower() in {"1", "true", "yes"}


def flag_payload(state: FlagState, *, mode: str = "enforce") -> dict[str, Any]:
    """The flag endpoint's JSON (an override's reason without who placed it).

    In shadow mode the server enforces whatever the flag says, so the browser is told to enforce
    too (a browser skipping the challenge would only collect 403s); ``shadow.enforce`` (and
    the older ``would_bypass``, its negation) shows what enforce mode would answer.
    """
    payload = state.to_dict()
    if state.source == "override":
        # The endpoint answers anyone: who placed the override (a staff user name, with Django)
        # is for the audit log and ``failopen override show``, not for the public.
        payload["reason"] = _without_actor(state.reason)
    payload["mode"] = mode
    if mode == "shadow":
        payload["would_bypass"] = not state.enforce
        payload["shadow"] = {"enforce": state.enforce}
        payload["enforce"] = True
    return payload


def _without_actor(reason: str) -> str:
    """The reason without " (by <actor>)". From the first " (by ": a user name may hold
    parentheses (and " (by " itself); cutting an operator's own words short is the safe way."""
    start = reason.find(_ACTOR_START)
    return reason[:start] if start != -1 and reason.endswith(")") else reason


# --- rejections ---------------------------------------------------------------------------------


def rejection_payload(decision: Decision) -> dict[str, Any]:
    """``{"error": {"code": <outcome>, "message": <fixed public text>}}``."""
    message = _PUBLIC_MESSAGES.get(decision.outcome, _PUBLIC_MESSAGES["cannot_verify"])
    return {"error": {"code": decision.outcome, "message": message}}


def rejection_json(decision: Decision) -> bytes:
    """The JSON rejection body, encoded."""
    return json.dumps(rejection_payload(decision)).encode()


def rejection_html(decision: Decision) -> bytes:
    """A small HTML page for browsers that did not ask for JSON."""
    message = escape(rejection_payload(decision)["error"]["message"])
    title = "Request refused" if decision.status_code == 403 else "Please retry shortly"
    return (
        f'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>{title}</title>'
        f"</head><body><h1>{title}</h1><p>{message}</p></body></html>"
    ).encode()


def rejection_headers(decision: Decision, *, json_body: bool) -> list[tuple[str, str]]:
    """Content type, ``Cache-Control: no-store``, and ``Retry-After`` on a 503."""
    headers = [
        ("Content-Type", "application/json" if json_body else "text/html; charset=utf-8"),
        ("Cache-Control", "no-store"),
    ]
    if decision.retry_after is not None:
        headers.append(("Retry-After", str(decision.retry_after)))
    return headers


def prefers_json(accept: str | None, content_type: str | None = None) -> bool:
    """JSON for API clients: Accept names JSON, or a JSON request that did not ask for HTML."""
    accept = (accept or "").lower()
    if "json" in accept:
        return True
    if "text/html" in accept:
        return False
    media = _media_type(content_type)
    return media == "application/json" or media.endswith("+json")


# --- the token in a request body ----------------------------------------------------------------


def token_from_body(content_type: str | None, body: bytes, field: str) -> str | None:
    """The ``field`` value of a urlencoded, multipart or JSON body; None if absent or unreadable.

    Never raises: a body this cannot read simply carries no token, and the guard refuses it.
    Neither does a flood (over 1000 fields or parts, over 32 headers in a part, over 5000 JSON
    values): this runs on the ASGI event loop, so its cost stays linear in the body and small
    per byte (tests/benchmarks/bench_asgi_body.py).
    """
    media = _media_type(content_type)
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


def _media_type(content_type: str | None) -> str:
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


# --- the override endpoint ----------------------------------------------------------------------


def bearer_token(authorization: str | None) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header, else None."""
    if not authorization:
        return None
    scheme, _, token = authorization.strip().partition(" ")
    token = token.strip()
    return token if scheme.lower() == "bearer" and token else None


def admin_token_matches(given: str | None, expected: str | None) -> bool:
    """Constant-time comparison; False when either side is missing."""
    if not given or not expected:
        return False
    return hmac.compare_digest(given.encode("utf-8", "replace"), expected.encode("utf-8"))


def describe_override(override: Override | None) -> dict[str, Any]:
    """``{"override": null}`` or the override with RFC 3339 times (CLI and endpoint share it)."""
    if override is None:
        return {"override": None}
    return {"override": {"enforce": override.enforce, "reason": override.reason,
                         "set_at": rfc3339(override.set_at),
                         "expires_at": rfc3339(override.expires_at),
                         "set_by": override.set_by}}


@dataclass(frozen=True)
class _OverrideRequest:
    enforce: bool | None
    ttl: float | None
    reason: str


#: The override endpoint's answer when its store lives in this process only (409).
STORE_NOT_SHARED: dict[str, Any] = {"error": {
    "code": "store_not_shared",
    "message": "Nothing changed: the override store is memory:, which only the worker that "
               "answered would see, while the others went on as before. Set "
               "FAILOPEN_STORE=file:///run/failopen/override.json (a directory only this user "
               "can write; every worker of this machine) or FAILOPEN_STORE=redis://host:6379/0 "
               "(every process of a fleet) so every worker sees an override, and restart.",
}}


def store_is_shared(store: OverrideStore) -> bool:
    """False for a store only this process sees (``memory:``): an override there misleads."""
    return not isinstance(store, MemoryStore)


def handle_override(
    flag: EnforcementFlag, body: bytes, *, actor: str, store: OverrideStore,
    mode: str = "enforce", set_by: str | None = None,
) -> tuple[int, dict[str, Any]]:
    """Apply ``{"enforce": false|true|null, "ttl": seconds, "reason": "..."}`` after auth.

    Returns the status and JSON to answer: 200 with the override (its ``expires_at`` says when
    it lapses) and the fresh flag, 400 with what is wrong with the request, 409 when ``store``
    (the one ``flag`` writes) is this process's only, or 503 when the store cannot be written
    (nothing changed either way). Forcing off without a ttl lasts an hour; a ttl beyond the
    flag's limits (off: 7 days, on: 30 days) is a 400 naming the limit. The caller has already
    authenticated ``actor``; the audit log names them. ``set_by`` (default ``actor``) is stored
    with the override (``admin-token``, ``django:<user id>``).
    """
    if not store_is_shared(store):
        # A 200 here once told an operator the fleet obeyed while two workers of three went on
        # admitting tokenless requests.
        audit.warning("override by %r refused: the memory: store reaches this process only",
                      actor)
        return 409, STORE_NOT_SHARED
    try:
        request = _parse_override(body)
    except ValueError as exc:
        return 400, {"error": {"code": "bad_request", "message": str(exc)}}
    # The flag keeps 500 characters of a reason: cut the operator's text, never who they are.
    suffix = f" (by {actor})"
    reason = (request.reason or "override endpoint")[:max(0, _MAX_REASON - len(suffix))] + suffix
    try:
        if request.enforce is None:
            flag.automatic(reason)
        elif request.enforce:
            flag.force_on(reason, ttl=request.ttl, set_by=set_by or actor)
        else:
            flag.force_off(reason, ttl=request.ttl, set_by=set_by or actor)
    except StoreError as exc:
        audit.error("override by %r failed: %s", actor, exc)
        return 503, {"error": {"code": "store_unavailable",
                               "message": "the override store cannot be written; nothing changed"}}
    except ValueError as exc:  # a ttl outside the flag's limits: the message names them
        return 400, {"error": {"code": "bad_request", "message": str(exc)}}
    override = flag.override
    audit.warning("override enforce=%s expires_at=%s by=%r reason=%r", request.enforce,
                  rfc3339(override.expires_at) if override is not None else None, actor,
                  request.reason)
    return 200, {**describe_override(override), "flag": flag_payload(flag.state, mode=mode)}


def _parse_override(body: bytes) -> _OverrideRequest:
    if len(body) > MAX_OVERRIDE_BODY:
        raise ValueError(f"body over {MAX_OVERRIDE_BODY} bytes")
    try:
        data = json.loads(body)
    except (ValueError, RecursionError):
        raise ValueError("body is not JSON") from None
    if not isinstance(data, dict):
        raise ValueError('expected a JSON object like {"enforce": false, "ttl": 900}')
    unknown = sorted(set(data) - {"enforce", "ttl", "reason"})
    if unknown:
        raise ValueError(f"unknown field(s): {', '.join(map(str, unknown))}")
    # Identity, not equality: 0 == False and 1 == True, and a number is not a decision.
    if "enforce" not in data or not any(data["enforce"] is v for v in (True, False, None)):
        raise ValueError('"enforce" is required: false (bypass), true (enforce) or null (auto)')
    enforce = data["enforce"]
    ttl = data.get("ttl")
    if ttl is not None:
        if enforce is None:
            raise ValueError('"ttl" does not apply to "enforce": null')
        # The range (off: at most 7 days, on: 30) is the flag's to check, for every path alike.
        try:
            usable = (not isinstance(ttl, bool) and isinstance(ttl, (int, float))
                      and math.isfinite(ttl) and ttl > 0)
        except OverflowError:  # an integer too large for a float: 10**400
            usable = False
        if not usable:
            raise ValueError('"ttl" must be a positive number of seconds, at most '
                             f"{int(FORCE_OFF_MAX_TTL)} when forcing enforcement off")
        ttl = float(ttl)
    reason = data.get("reason", "")
    if not isinstance(reason, str) or len(reason) > _MAX_REASON:
        raise ValueError(f'"reason" must be a string of at most {_MAX_REASON} characters')
    return _OverrideRequest(enforce=enforce, ttl=ttl, reason=reason.strip())


# --- the browser snippet ------------------------------------------------------------------------


@dataclass(frozen=True)
class Snippet:
    """The snippet's bytes with a strong ETag, read once."""

    body: bytes
    etag: str


@lru_cache(maxsize=1)
def load_snippet(path: Path = SNIPPET_PATH) -> Snippet | None:
    """The browser snippet shipped with the package, or None while it is not there."""
    try:
        body = path.read_bytes()
    except OSError:
        return None
    return Snippet(body=body, etag='"' + hashlib.sha256(body).hexdigest()[:32] + '"')


#: The snippet's tuning options: keyword of :func:`snippet_attributes` -> attribute.
SNIPPET_OPTIONS: dict[str, str] = {
    "form": "data-failopen-form",
    "ready_timeout_ms": "data-failopen-ready-timeout-ms",
    "retries": "data-failopen-retries",
    "retry_delay_ms": "data-failopen-retry-delay-ms",
}


def snippet_attributes(
    config: Config,
    *,
    flag_url: str,
    form: str | None = None,
    ready_timeout_ms: int | None = None,
    retries: int | None = None,
    retry_delay_ms: int | None = None,
) -> dict[str, str]:
    """The ``data-*`` attributes of the snippet's script tag: where to ask, what to send.

    The settings always; the tuning options only when given (the snippet has defaults for them:
    ``form`` every form holding the token field, 10000 ms, 3 retries, 500 ms). A tuning value
    that is not a whole number of at least 0 (1 for the time-out), or an empty ``form``, is a
    ValueError naming the option.
    """
    attributes = {
        "data-failopen-flag-url": flag_url,
        "data-failopen-public-key": config.public_key or "",
        "data-failopen-token-field": config.token_field,
        "data-failopen-vendor-url": config.vendor_url or "",
    }
    if form is not None:
        if not isinstance(form, str) or not form.strip():
            raise ValueError("form: expected a CSS selector like '#login'")
        attributes[SNIPPET_OPTIONS["form"]] = form
    for name, value, least in (("ready_timeout_ms", ready_timeout_ms, 1),
                               ("retries", retries, 0), ("retry_delay_ms", retry_delay_ms, 0)):
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise ValueError(f"{name}: expected a whole number of at least {least}, got {value!r}")
        attributes[SNIPPET_OPTIONS[name]] = str(value)
    return attributes
