"""Every kind of refusal, for the ASGI and WSGI refusal tests: how to bring a stack to it, and
the log-in page a site's ``reject=`` renders again.

``REFUSALS`` names each kind by its outcome: the Config fields its stack is built with, what to
do to the stack first (an outage, a failing verify API), the token to send, and what failopen
answers. ``ready()`` then returns how many requests the route admits before refusing (the outage
rate limit's allowance), which a test sends first.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from failopen.testing import FakeVerifyAPI

BROWSER = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"
SECRET = "s" * 40
PASSWORD = "hunter2-do-not-log"  # a body field no log line may carry
FORM = {"username": "ann", "password": PASSWORD}
# The site's log-in page (a Jinja template, for Starlette and Flask alike) and its messages.
LOGIN = ('<!doctype html><title>Log in</title><p class="error">{{ message }}</p>'
         '<form method="post"><input name="username" value="{{ username }}"></form>')
MESSAGES = {403: "Please complete the security check and try again.",
            429: "Too many attempts; wait a minute.",
            503: "We cannot check this right now; try again in a moment."}


@dataclass(frozen=True)
class Refusal:
    """One kind of refusal and how to cause it."""

    status: int
    title: str  # the heading of failopen's HTML page
    token: str | None = None
    changes: dict[str, Any] = field(default_factory=dict)
    verify_fault: str | None = None
    outage: bool = False
    admitted_first: int = 0

    def ready(self, stack: Any) -> int:
        """Bring ``stack`` (ASGI or WSGI) to this refusal; the requests to send before it."""
        if self.verify_fault is not None:
            stack.verify.set_fault(self.verify_fault)
        if self.outage:
            stack.page.set_global("major_outage")
            for _ in range(stack.runtime.config.open_after):
                stack.runtime.poll_now()
            assert not stack.runtime.state.enforce
        return self.admitted_first


REFUSALS = {
    "missing_token": Refusal(403, "Request refused"),
    "invalid_token": Refusal(403, "Request refused", token=FakeVerifyAPI.BAD),
    "cannot_verify": Refusal(503, "Please retry shortly", token=FakeVerifyAPI.GOOD,
                             verify_fault="503"),
    "outage_closed": Refusal(503, "Briefly unavailable", outage=True,
                             changes={"outage_policy_routes": "/login=closed,/raw=closed"}),
    "outage_rate_limited": Refusal(429, "Too many attempts", outage=True, admitted_first=1,
                                   changes={"outage_rate": "1/minute"}),
    "fallback_required": Refusal(403, "Request refused", outage=True, changes={
        "outage_policy_routes": "/login=fallback,/raw=fallback", "fallback_secret": SECRET}),
}
