"""The override endpoint (``POST <prefix>/override``): who may place an override (the admin
token, compared in constant time), what a request may ask (an expiry is required to switch
enforcement off, at most :data:`~failopen.engine.flag.FORCE_OFF_MAX_TTL`), and the audit line of
each attempt. Refused attempts are logged paced (:mod:`failopen.web.refusals`).

After the store is written the endpoint waits (``"wait"``, 5 seconds by default, at most 30, 0 not
at all) for the live processes of the deployment to apply the change and answers ``"reached"``
and ``"processes"`` (:mod:`failopen.engine.override_reach`): 200 when at least one did (or the
reach was not measured, as with a file store), 202 with a ``"warning"`` when none did: stored,
but nothing applied it yet, which must not read as done."""

from __future__ import annotations

import hmac
import json
import logging
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from failopen.clock import SYSTEM_CLOCK, Clock
from failopen.engine.flag import FORCE_OFF_MAX_TTL, EnforcementFlag, Override, rfc3339
from failopen.engine.override_reach import DEFAULT_WAIT, MAX_WAIT, Reach, measure_reach
from failopen.exceptions import StoreError
from failopen.secret import Secret
from failopen.stores.memory import MemoryStore
from failopen.web.flag_endpoint import flag_payload

if TYPE_CHECKING:
    from failopen.stores import OverrideStore

__all__ = [
    "MAX_OVERRIDE_BODY", "STORE_NOT_SHARED", "admin_token_matches", "bearer_token",
    "describe_override", "handle_override", "store_is_shared",
]

audit = logging.getLogger("failopen.audit")

#: Largest override request body read (the JSON has three short fields).
MAX_OVERRIDE_BODY = 4096
_MAX_REASON = 500


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
    wait: float = DEFAULT_WAIT


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
    mode: str = "enforce", set_by: str | None = None, page: str | None = None,
    clock: Clock = SYSTEM_CLOCK,
) -> tuple[int, dict[str, Any]]:
    """Apply ``{"enforce": false|true|null, "ttl": seconds, "reason": "...", "wait": seconds}``
    after auth.

    Returns the status and JSON to answer: 200 with the override (its ``expires_at`` says when
    it lapses), the fresh flag and how many live processes applied it (``page``: the hash of the
    status page this deployment watches; only its processes count), 202 the same when none did
    within the wait, 400 with what is wrong with the request, 409 when ``store``
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
    try:
        reach = measure_reach(store, override, page=page, wait=request.wait, clock=clock)
    except StoreError as exc:
        reach = Reach("unknown", note="the store could not be read after writing")
        audit.error("override by %r: its reach could not be read: %s", actor, exc,
                    extra={"event": "failopen.override_reach_unknown", "actor": actor})
    if reach.unconfirmed:
        audit.warning("override by %r reached no live process: %s", actor, reach.warning(),
                      extra={"event": "failopen.override_not_reached", "actor": actor,
                             "processes": reach.processes})
    return 202 if reach.unconfirmed else 200, {
        **describe_override(override), "flag": flag_payload(flag.state, mode=mode),
        **reach.to_json()}


def _parse_override(body: bytes) -> _OverrideRequest:
    if len(body) > MAX_OVERRIDE_BODY:
        raise ValueError(f"body over {MAX_OVERRIDE_BODY} bytes")
    try:
        data = json.loads(body)
    except (ValueError, RecursionError):
        raise ValueError("body is not JSON") from None
    if not isinstance(data, dict):
        raise ValueError('expected a JSON object like {"enforce": false, "ttl": 900}')
    unknown = sorted(set(data) - {"enforce", "ttl", "reason", "wait"})
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
    wait = data.get("wait", DEFAULT_WAIT)
    # A worker waits meanwhile: bounded, and a number of seconds (never a bool, never NaN).
    try:
        wait_ok = (not isinstance(wait, bool) and isinstance(wait, (int, float))
                   and math.isfinite(wait) and 0 <= wait <= MAX_WAIT)
    except OverflowError:
        wait_ok = False
    if not wait_ok:
        raise ValueError(f'"wait" must be a number of seconds from 0 to {MAX_WAIT:g}')
    return _OverrideRequest(enforce=enforce, ttl=ttl, reason=reason.strip(), wait=float(wait))
