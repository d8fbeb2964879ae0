"""Shadow mode (``FAILOPEN_MODE=shadow``): every request is enforced, and what enforce mode would
have done differently is logged.

While enforcement is off (or an outage was just confirmed), enforce mode lets a request through
without a token only on an ``open`` route (free) or a ``fallback`` route (with a solved challenge);
on a ``closed`` route it refuses. A fallback route's line names its challenge (``challenge``:
``altcha`` or the second vendor's name). The log says which, per route: ``failopen.shadow_bypass``
("would bypass") for an open route, ``failopen.shadow_outage_policy`` ("would ask for the fallback
challenge", "would refuse") for the others. Counting ``failopen.shadow_bypass`` thus counts the
requests enforce mode would have let through free, not every request to every protected route.

Shadow mode never asks the outage gate (:mod:`failopen.engine.outage`): the rate limit would spend
a client's allowance and a solution's check would use the solution up. So an ``open`` route's
count is an upper bound when a rate limit is set, and whether a fallback request's solution would
have passed is not known. While the verify call fails shadow mode answers 503, on every route.
"""

from __future__ import annotations

import logging
from dataclasses import replace

from failopen.engine.decision import Decision

__all__ = ["shadow_decision"]

audit = logging.getLogger("failopen.audit")

_INSTEAD = {
    "fallback": "would ask for the fallback challenge",
    # closed, and an unknown policy, which enforce mode's gate treats as closed
    "closed": "would refuse",
}


def shadow_decision(decision: Decision, *, enforce: bool, flag_reason: str, path: str,
                    client: str, policy: str, retry_after: int, challenge: str = "") -> Decision:
    """``decision`` as shadow mode answers it, logging what enforce mode would have done when
    that differs (``enforce``: the flag now; ``policy``: the route's outage policy;
    ``challenge``: what a fallback route would ask for, ``altcha`` or the second vendor)."""
    if not decision.bypassed and enforce:
        return decision
    why = decision.reason if decision.bypassed else f"enforcement off: {flag_reason}"
    if policy == "open":
        audit.warning("shadow: would bypass path=%r client=%r reason=%s", path, client, why,
                      extra={"event": "failopen.shadow_bypass", "path": path, "client": client,
                             "policy": policy, "reason": why})
    else:
        instead = _INSTEAD.get(policy, _INSTEAD["closed"])
        if policy == "fallback" and challenge:
            instead = f"{instead} ({challenge})"
        audit.warning("shadow: %s (outage policy %s) path=%r client=%r reason=%s", instead,
                      policy, path, client, why, extra={
                       "event": "failopen.shadow_outage_policy", "path": path, "client": client,
                       "policy": policy, "reason": why,
                       "challenge": challenge if policy == "fallback" else None})
    if decision.bypassed:  # enforced instead: the token could not be verified
        return Decision(allow=False, bypassed=False, outcome="cannot_verify",
                        reason=f"shadow mode enforces: {decision.reason}", status_code=503,
                        retry_after=retry_after)
    return replace(decision, shadow=True)
