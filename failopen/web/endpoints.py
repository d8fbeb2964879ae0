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
from dataclasses import dataclass
from functools import lru_cache
from html import escape
from pathlib import Path
from typing import TYPE_CHECKING, Any

from failopen.config import Config
from failopen.engine.flag import FORCE_OFF_MAX_TTL, EnforcementFlag, FlagState, Override, rfc3339
from failopen.engine.guard import Decision
from failopen.exceptions import StoreError
from failopen.secret import Secret
from failopen.stores.memory import MemoryStore
from failopen.web.body_tokens import media_type, token_from_body
from failopen.web.refusals import REFUSAL_LOG_INTERVAL, RefusalLog

if TYPE_CHECKING:
    from failopen.engine.probe import VerifyProbe
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
SNIPPET_PATH = Path(__file__).parent.parent / "static" / "failopen" / "failopen.js"

_PUBLIC_MESSAGES = {
    "missing_token": "This request needs an enforcement token.",
    "invalid_token": "The enforcement token was not accepted.",
    "rate_limited": "The request cannot be verified right now; retry shortly.",
    "cannot_verify": "The request cannot be verified right now; retry shortly.",
    "internal_error": "The request cannot be verified right now; retry shortly.",
}
_MAX_REASON = 500
# What handle_override appends to an override's reason: " (by <actor>)".
_ACTOR_START = " (by "


# --- the client flag endpoint ---------------------------------------------------------------------


def wants_confirm(value: str | None) -> bool:
    """True for ``?confirm=1`` (or ``true``/``yes``): the caller asks for an outage check now."""
    return value is not None and value.strip().lower() in {"1", "true", "yes"}


def flag_payload(
    state: FlagState, *, mode: str = "enforce", probe: VerifyProbe | None = None
) -> dict[str, Any]:
    """The flag endpoint's JSON (an override's reason without who placed it).

    ``probe`` (the runtime's, with ``FAILOPEN_EVIDENCE=status,probe``) adds its public block
    under ``probe``; without it ``probe`` is null.

    In shadow mode the server enforces whatever the flag says, so the browser is told to enforce
    too (a browser skipping the challenge would only collect 403s); ``shadow.enforce`` (and
    the older ``would_bypass``, its negation) shows what enforce mode would answer.
    """
    payload = state.to_dict()
    if state.source == "override":
        # The endpoint answers anyone: who placed the override (a staff user name, with Django)
        # is for the audit log and ``failopen override show``, not for the public.
        payload["reason"] = _without_actor(state.reason)
    elif state.source == "probe" and probe is not None:
        payload["reason"] = probe.public_reason(state.reason)
    payload["mode"] = mode
    payload["probe"] = probe.public() if probe is not None else None
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
    media = media_type(content_type)
    return media == "application/json" or media.endswith("+json")


# --- the override endpoint ----------------------------------------------------------------------


def bearer_token(authorization: str | None) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header, else None."""
    if not authorization:
        return None
    scheme, _, token = authorization.strip().partition(" ")
    token = token.strip()
    return token if scheme.lower() == "bearer" and token else None


def admin_token_matches(given: str | None, expected: Secret | str | None) -> bool:
    """Constant-time comparison; False when either side is missing."""
    if isinstance(expected, Secret):
        expected = expected.reveal()
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
                      actor, extra={"event": "failopen.override_not_shared", "actor": actor})
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
        audit.error("override by %r failed: %s", actor, exc,
                    extra={"event": "failopen.override_failed", "actor": actor,
                           "error": str(exc)})
        return 503, {"error": {"code": "store_unavailable",
                               "message": "the override store cannot be written; nothing changed"}}
    except ValueError as exc:  # a ttl outside the flag's limits: the message names them
        return 400, {"error": {"code": "bad_request", "message": str(exc)}}
    override = flag.override
    audit.warning("override enforce=%s expires_at=%s by=%r reason=%r", request.enforce,
                  rfc3339(override.expires_at) if override is not None else None, actor,
                  request.reason, extra={
                      "event": "failopen.override_request", "enforce": request.enforce,
                      "expires_at": rfc3339(override.expires_at) if override is not None
                      else None, "actor": actor, "reason": request.reason})
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
