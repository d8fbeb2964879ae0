"""The client flag endpoint (``GET <prefix>/flag``, ``?confirm=1``): the flag as JSON for the
browser snippet, never cached, and without who placed an override."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

from failopen.config import Config
from failopen.engine.flag import FlagState
from failopen.engine.outage import ChallengeSource
from failopen.fallback.second_vendor import ALTCHA

if TYPE_CHECKING:
    from failopen.engine.probe import VerifyProbe


class PollDiagnosis(Protocol):
    """What the status watcher tells about its polls (:class:`~failopen.StatusWatcher`)."""

    @property
    def last_poll_error(self) -> str | None: ...

    @property
    def impaired_regions(self) -> tuple[tuple[str, str], ...]: ...

    @property
    def watching(self) -> dict[str, Any]: ...

__all__ = [
    "ACTOR_START", "CHALLENGE_ENFORCING", "FLAG_HEADERS", "PollDiagnosis", "challenge_answer",
    "fallback_challenge", "flag_payload", "route_action", "wants_confirm",
]

# What handle_override appends to an override's reason: " (by <actor>)".
ACTOR_START = " (by "

#: Headers of every flag endpoint answer: a cached "enforce: false" would outlive the outage.
FLAG_HEADERS: tuple[tuple[str, str], ...] = (
    ("Content-Type", "application/json"),
    ("Cache-Control", "no-store"),
)


def wants_confirm(value: str | None) -> bool:
    """True for ``?confirm=1`` (or ``true``/``yes``): the caller asks for an outage check now."""
    return value is not None and value.strip().lower() in {"1", "true", "yes"}


def fallback_challenge(config: Config) -> dict[str, str]:
    """What a ``fallback`` route asks for, as the snippet is told: ``{"vendor": "altcha"}``, or
    the second vendor's name, site key, script origin and token field (never a secret)."""
    if config.fallback_vendor is None:
        return {"vendor": ALTCHA}
    return {"vendor": config.fallback_vendor, "public_key": str(config.fallback_public_key),
            "vendor_url": str(config.fallback_vendor_url),
            "token_field": config.fallback_token_field}


def route_action(config: Config, route: str | None, marked: str | None = None) -> str | None:
    """The action the tokens of ``route`` must carry: ``marked`` (Django's ``@protect(action=
    ...)``), else FAILOPEN_EXPECTED_ACTIONS; None when neither names one."""
    if marked is not None:
        return marked
    return dict(config.expected_actions).get(route) if route and config.expected_actions \
        else None


def flag_payload(
    state: FlagState, *, mode: str = "enforce", probe: VerifyProbe | None = None,
    outage_policy: str | None = None, poll: PollDiagnosis | None = None,
    challenge: Mapping[str, str] | None = None, action: str | None = None,
) -> dict[str, Any]:
    """The flag endpoint's JSON (an override's reason without who placed it).

    ``probe`` (the runtime's, with ``FAILOPEN_EVIDENCE=status,probe``) adds its public block
    under ``probe``; without it ``probe`` is null. ``outage_policy`` is what the route the
    browser asked about (``?path=``) does while enforcement is off: ``open``, ``fallback`` or
    ``closed``; null when it is not a protected route (or none was asked about).

    ``poll`` (the runtime's status watcher) makes ``error`` the last poll's error from the first
    poll that fails, not only once the reading is stale, and adds ``impaired_regions``
    (``[{"region", "status"}]``, diagnosis only): what an operator asks first in an incident;
    and ``vendor`` and ``component`` (``{"id", "name"}``, null without a status page): whose
    status page decides, by which component.

    In shadow mode the server enforces whatever the flag says, so the browser is told to enforce
    too (a browser skipping the challenge would only collect 403s); ``shadow.enforce`` (and
    the older ``would_bypass``, its negation) shows what enforce mode would answer.

    ``fallback`` is ``challenge`` (:func:`fallback_challenge`) while enforcement is off in enforce
    mode and the asked route's policy is ``fallback``; else null: the snippet renders the second
    vendor only then, and the server accepts its token only then (the browser never chooses).
    ``action`` is the action the asked route's tokens must carry (reCAPTCHA v3's ``execute``),
    or null.
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
    payload["outage_policy"] = outage_policy
    payload["fallback"] = dict(challenge) if challenge is not None and mode == "enforce" \
        and not state.enforce and outage_policy == "fallback" else None
    payload["action"] = action
    if poll is not None:
        payload["error"] = poll.last_poll_error or state.error
        payload["impaired_regions"] = [{"region": region, "status": status}
                                       for region, status in poll.impaired_regions]
        payload.update(poll.watching)
    else:
        payload["impaired_regions"] = []
    if mode == "shadow":
        payload["would_bypass"] = not state.enforce
        payload["shadow"] = {"enforce": state.enforce}
        payload["enforce"] = True
    return payload


def _without_actor(reason: str) -> str:
    """The reason without " (by <actor>)". From the first " (by ": a user name may hold
    parentheses (and " (by " itself); cutting an operator's own words short is the safe way."""
    start = reason.find(ACTOR_START)
    return reason[:start] if start != -1 and reason.endswith(")") else reason


#: The challenge endpoint's answer while enforcing: a challenge is for an outage only.
CHALLENGE_ENFORCING: dict[str, Any] = {"error": {
    "code": "enforcing",
    "message": "Enforcement is on: send the enforcement token; no challenge is needed.",
}}


def challenge_answer(state: FlagState, challenges: ChallengeSource | None, *,
                     mode: str = "enforce") -> tuple[int, dict[str, Any]]:
    """``GET <prefix>/challenge``: 200 and a fresh ALTCHA challenge while enforcement is off,
    409 ``enforcing`` while it is on (and always in shadow mode, which enforces), 404 when no
    route's outage policy is ``fallback``. No I/O; answered with :data:`FLAG_HEADERS` (never
    cached)."""
    if challenges is None:
        return 404, {"error": {"code": "not_found",
                               "message": "No route's outage policy is fallback."}}
    if state.enforce or mode == "shadow":
        return 409, CHALLENGE_ENFORCING
    # Bound to this outage: a challenge from an earlier one is refused in the next.
    return 200, challenges.issue(off_since=state.since)
