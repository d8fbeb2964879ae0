"""What the form fields of every framework share (Django's, WTForms'): no framework here.

A form field asks the guard what the middleware would ask, for the one request the form was
posted in, and turns a refusal into a message on that field. These helpers keep the fields'
answers alike: which earlier decision of the same request a field may reuse, how it asks, and
what the person filling the form is told (the detailed reason goes to the log, never to them).
"""

from __future__ import annotations

from collections.abc import Iterable

from failopen.engine.decision import Decision, fail_closed, public_outcome
from failopen.engine.outage import strictest
from failopen.fallback.settings import OUTAGE_POLICIES
from failopen.runtime import FailOpen

__all__ = ["MESSAGES", "WIDGET_MARK", "answers", "check_outage", "decide", "failed", "first",
           "message"]

#: What a form field renders for another vendor than the spec's: the element the snippet renders
#: the vendor's widget into, which also marks the form as one it protects.
WIDGET_MARK = "<div data-failopen-captcha></div>"

#: What a person reads under the form, per outcome. Fixed texts: a refusal's details (which
#: verify failure, whether an outage was confirmed) would help someone probing for a way in.
MESSAGES: dict[str, str] = {
    "missing_token": "The security check did not finish. Please wait a moment and submit "
                     "again.",
    "invalid_token": "The security check was not accepted. Please try again.",
    "rate_limited": "We cannot verify this form right now. Please try again in a moment.",
    "cannot_verify": "We cannot verify this form right now. Please try again in a moment.",
    "internal_error": "We cannot verify this form right now. Please try again in a moment.",
    "outage_closed": "This action is briefly unavailable. Please try again in a few minutes.",
    "outage_rate_limited": "Too many attempts. Please wait a minute and try again.",
    "fallback_required": "The security check did not finish. Please wait a moment and submit "
                         "again.",
    "fallback_invalid": "The security check was not accepted. Please try again.",
}


def message(decision: Decision) -> str:
    """The text shown for a refusal (an outcome without its own text reads as "cannot verify"),
    by the outcome a client may be told (a low score reads as any refused token)."""
    return MESSAGES.get(public_outcome(decision.outcome), MESSAGES["cannot_verify"])


def check_outage(outage: str | None) -> str | None:
    """A field's ``outage=`` argument, or a ValueError naming the choices."""
    if outage is not None and outage not in OUTAGE_POLICIES:
        raise ValueError(f"EnforcementTokenField(outage={outage!r}): choose one of "
                         f"{', '.join(OUTAGE_POLICIES)}")
    return outage


def answers(earlier: Decision, outage: str | None) -> bool:
    """True when a decision already made for this request answers a field whose own outage
    policy is ``outage``.

    A verified token was verified once and must not be sent again (the vendor refuses a replay),
    and a refusal stands. A bypass was allowed under its route's policy: it answers the field
    unless the field asks for a stricter one (the middleware let it through as ``open``, the
    field says ``fallback`` or ``closed``), which the field then applies itself.
    """
    if not earlier.bypassed or outage is None:
        return True
    applied = "fallback" if earlier.outcome == "bypassed_fallback" else "open"
    return strictest({applied, outage}) == applied


def decide(runtime: FailOpen, token: str | None, *, path: str, client: str, user_agent: str,
           policy: str, route: str, solution: str | None) -> Decision:
    """The guard's decision, as the middleware asks it: the bypass first (with enforcement off
    the token is never sent to the vendor), then the verify call."""
    bypass = runtime.bypass(path=path, client=client, user_agent=user_agent, policy=policy,
                            route=route, solution=solution)
    if bypass is not None:
        return bypass
    return runtime.decide(token, path=path, client=client, user_agent=user_agent,
                          policy=policy, route=route, solution=solution)


def failed(retry_after: int = 5) -> Decision:
    """The refusal when the field itself cannot decide (no request, a bug): never a bypass."""
    return fail_closed("failopen form field could not decide", retry_after=retry_after)


def first(values: Iterable[object] | None) -> str | None:
    """The first value posted under a name, if it is text; None otherwise.

    The first, as the middleware's body search takes it: a second value under the same name
    (a token field added twice) is never verified, so it can neither help nor hurt.
    """
    for value in values or ():
        return value if isinstance(value, str) and value else None
    return None
