"""The spec's vendor (``FAILOPEN_VENDOR=enforcement``, the default): its enforcement token.

Its verify call is ``POST {FAILOPEN_VERIFY_URL}`` with ``{"private_key", "session_token"}`` as
JSON; what each answer means is :func:`failopen.providers.verify_answers.classify`, unchanged
from before there were other vendors (a wrong private key is ``invalid`` there, logged at ERROR:
the vendor answers it as it answers a denied token). Its status page is the spec's, at
``FAILOPEN_STATUS_URL``, with the global component chosen as the spec describes
(:mod:`failopen.providers.global_component`): no preset, since every customer's page is its own.
"""

from __future__ import annotations

from failopen.providers.base import Expectation, Provider, VerifyCall
from failopen.providers.exchange import Fetched
from failopen.providers.verify_answers import VerifyOutcome, VerifyResult, classify

__all__ = ["Enforcement"]

# Refusals read from an answer's session_details: the vendor looked the session up, which it
# does only for a request whose private key it accepted. Its "DENIED ACCESS", by contrast, is
# what it answers a wrong private key with as well.
_SESSION_REFUSALS = frozenset({"challenge not solved", "solved but not verified",
                               "token replayed: verified before", "session timed out"})


class Enforcement(Provider):
    """The spec's vendor: an enforcement token, verified with the private key."""

    name = "enforcement"
    title = "the vendor"
    token_field = "enforcement-token"
    widgets = ()
    token_lifetime = 1800.0  # the spec's session: 30 minutes
    credentials_statuses = frozenset({401, 403})
    widget_posts_field = False  # failopen's snippet fills failopen's own input

    def call(self, token: str, *, secret: str, verify_url: str, public_key: str | None,
             remote_ip: str | None, action: str | None, attempt: str) -> VerifyCall:
        return VerifyCall(verify_url, json={"private_key": secret, "session_token": token})

    def classify(self, fetched: Fetched, *, expect: Expectation,
                 secrets: tuple[str, ...]) -> VerifyResult:
        return classify(fetched, require_verified=expect.require_verified, secrets=secrets)

    def confirms_key(self, result: VerifyResult) -> bool:
        return result.outcome is VerifyOutcome.INVALID and result.reason in _SESSION_REFUSALS
