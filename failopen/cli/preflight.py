"""``failopen check``'s result line, and its two checks of the vendor: the status page and the
verify API, each asked once, within its configured time-out, as the servers would ask it.

Each check returns a :class:`Check`: one line, ``ok``, ``warning`` (said, fails only with
``--strict``), ``problem`` (fails the run) or ``skipped`` (the settings it needs are invalid:
the configuration line says why). ``facts`` are the same findings for ``--json`` readers.

The verify check sends a token no vendor issued (``failopen-check-`` and random hex) and reads the
answer as the guard would (the vendor's adapter), then asks one more question the guard never
needs to: did our key pass? A misconfiguration (the vendor's code for a wrong secret, site key or
URL), a 401 or 403 (or an error naming the private key) says no. "Key accepted" only for an answer
that could only come from a vendor that accepted it (:meth:`Provider.confirms_key`: the token
refused by the vendor's own codes for a token); any other refusal, such as the spec's vendor's
``DENIED ACCESS``, which it also answers a wrong key with, is "key not confirmed" (a warning). A
404, 405 or a non-JSON refusal is no verify endpoint's answer to a token.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import httpx

from failopen._internal.redact import host_port, redact_url
from failopen.config import Config
from failopen.exceptions import (
    ConfigError,
    FetchError,
    FetchTimeout,
    GlobalComponentError,
    RedirectRefused,
    ResponseTooLarge,
    StatusError,
    StatusUnavailable,
)
from failopen.providers.status import StatusClient, StatusReport
from failopen.providers.status_url import COMPONENTS_PATH
from failopen.providers.verify import HttpVerifier, VerifyOutcome, VerifyResult

__all__ = ["CHECK_TOKEN_PREFIX", "Check", "Status", "Wiring", "check_status_page",
           "check_verify_api"]

Status = Literal["ok", "warning", "problem", "skipped"]

#: How the verify check's made-up token begins: no vendor issues such a token.
CHECK_TOKEN_PREFIX = "failopen-check-"
_MAX_REGIONS_SHOWN = 10


@dataclass(frozen=True)
class Check:
    """One line of ``failopen check``: which check, how it went, what it found."""

    name: str
    status: Status
    detail: str
    facts: Mapping[str, Any] = field(default_factory=dict)

    @property
    def label(self) -> str:
        """The name as the text output writes it (``status page``, ``verify API``)."""
        return self.name.replace("_", " ").replace(" api", " API")

    def passed(self, *, strict: bool) -> bool | None:
        """False when this line fails the run; None when the check did not run."""
        if self.status == "skipped":
            return None
        return self.status == "ok" or (self.status == "warning" and not strict)


@dataclass(frozen=True)
class Wiring:
    """What the checks talk through: httpx transports in tests (None: the network)."""

    status_transport: httpx.BaseTransport | None = None
    verify_transport: httpx.BaseTransport | None = None


# --- the status page ----------------------------------------------------------------------------


def check_status_page(config: Config, wiring: Wiring) -> Check:
    """Read the status page once, as the watcher does, and name the global component."""
    url = config.status_url
    provider = config.provider
    if url is None and "status" not in config.evidence:
        return Check("status_page", "ok",
                     f"none watched: FAILOPEN_EVIDENCE=probe, the verify probe is the evidence of "
                     f"a {provider.title} outage", {"url": None, "evidence": "probe"})
    if url is None and not provider.publishes_status:
        return Check("status_page", "problem",
                     f"{provider.title} publishes no status page a machine can read: set "
                     "FAILOPEN_EVIDENCE=probe to let the verify probe see an outage (without it "
                     "failopen never fails open)", {"url": None})
    if url is None:
        return Check("status_page", "problem",
                     "FAILOPEN_STATUS_URL is not set: failopen cannot see an outage, so it never "
                     "fails open", {"url": None})
    with StatusClient(url, global_component=config.global_component,
                      timeout=config.status_timeout, max_bytes=config.status_max_bytes,
                      indicator_fallback=config.indicator_fallback,
                      transport=wiring.status_transport) as client:
        try:
            report = client.fetch()
        except StatusError as exc:
            kind = _status_failure(exc, config)
            words = _status_words(exc, redact_url(client.components_url))
            return Check("status_page", "problem", f"{redact_url(url)}: {kind}{words}",
                         {"url": url, "error": kind})
    return _status_read(config, url, report)


def _status_failure(exc: StatusError, config: Config) -> str:
    """What kind of failure, in the words an operator searches for."""
    cause = exc.__cause__
    if isinstance(exc, GlobalComponentError):
        return "cannot tell the global component"
    if not isinstance(exc, StatusUnavailable):
        return "malformed"
    if exc.status_code == 429:
        return "rate limited (HTTP 429)"
    if exc.status_code is not None:
        return f"HTTP {exc.status_code}"
    if isinstance(cause, FetchTimeout):
        return f"timed out (FAILOPEN_STATUS_TIMEOUT={config.status_timeout:g}s)"
    if isinstance(cause, ResponseTooLarge):
        return f"too large (FAILOPEN_STATUS_MAX_BYTES={config.status_max_bytes})"
    if isinstance(cause, RedirectRefused):
        return "redirected elsewhere (refused)"
    if _tls_failure(cause) is not None:
        return "TLS failed"
    return "unreachable"


def _status_words(exc: StatusError, fetched: str) -> str:
    """What the failure says beyond its kind (the base address is said already); ``fetched`` is
    the document's URL, redacted."""
    if isinstance(exc, StatusUnavailable) and exc.status_code is not None:
        after = "" if exc.retry_after is None else f" (Retry-After {exc.retry_after:g}s)"
        if 400 <= exc.status_code < 500 and exc.status_code != 429:
            # A refusal of the document itself: most often a base address on the wrong server
            # (the vendor's home page, an API host), not a page that is down.
            return (f"{after} from {fetched}: is FAILOPEN_STATUS_URL the vendor's Statuspage "
                    f"base address? failopen adds {COMPONENTS_PATH} to it and expects the "
                    "page's components (one global, one per region), like "
                    "https://status.example.com")
        return after
    cause = exc.__cause__
    tls = _tls_failure(cause, host_port(fetched))
    if tls is not None:
        return f": {tls}"
    return f": {cause if isinstance(cause, FetchError) else exc}"


# What the TLS library says (OpenSSL, any version) -> what it means, in the operator's terms.
# Matched on the error's text: the exchange keeps only that (its cause is not chained).
_PLAIN_HTTP = ("WRONG_VERSION_NUMBER", "wrong version number", "record layer failure",
               "PACKET_LENGTH_TOO_LONG", "packet length too long")
_UNTRUSTED = ("CERTIFICATE_VERIFY_FAILED", "certificate verify failed")


def _tls_failure(cause: BaseException | None, where: str = "") -> str | None:
    """What a failed TLS handshake with ``where`` (host:port) means; None for no TLS failure."""
    if not isinstance(cause, FetchError):
        return None
    text = str(cause)
    if "[SSL" not in text:  # how Python's ssl module words every error it raises
        return None
    reason = text[text.index("[SSL"):].split(" (_ssl.c")[0]
    if any(mark in text for mark in _PLAIN_HTTP):
        return f"the server at {where} answered plain HTTP to https: use http:// or check the port"
    if any(mark in text for mark in _UNTRUSTED):
        why = reason.rpartition("certificate verify failed: ")[2]
        return (f"the server at {where} showed a certificate this host does not trust ({why}): "
                "is the address the vendor's status page, under the name on its certificate?")
    return f"the TLS handshake with {where} failed ({reason})"


def _status_read(config: Config, url: str, report: StatusReport) -> Check:
    glob = report.global_component
    impaired = [f"{r.description or r.name} ({r.status})" for r in report.impaired_regions()]
    facts: dict[str, Any] = {
        "url": url, "source": report.source, "global_status": report.global_status,
        "global_component": None if glob is None else {"id": glob.id, "name": glob.name},
        "chosen_by": report.chosen_by, "regions": len(report.regions),
        "impaired_regions": impaired, "would_bypass": report.global_status in config.bypass_on,
    }
    if glob is None:  # the indicator fallback answered: components.json could not be used
        return Check("status_page", "warning",
                     f"{url}: components.json could not be used; the indicator fallback "
                     f"(status.json) answered {report.global_status}: no global component, no "
                     "regions (`failopen status --components` says why)", facts)
    shown = impaired[:_MAX_REGIONS_SHOWN] + (
        [f"{len(impaired) - _MAX_REGIONS_SHOWN} more"] if len(impaired) > _MAX_REGIONS_SHOWN
        else [])
    regions = (f"impaired regions: {', '.join(shown)}" if impaired
               else f"{len(report.regions)} regions operational")
    pin = (f" (set FAILOPEN_GLOBAL_COMPONENT={glob.id} to keep it)"
           if report.chosen_by == "guess" else "")
    detail = (f"{url}: watches {glob.id} ({glob.name}), chosen by {report.chosen_by}{pin}: "
              f"{report.global_status}; {regions}")
    if facts["would_bypass"]:
        return Check("status_page", "warning",
                     f"{detail}; an outage now: failopen would bypass", facts)
    if not report.known:
        return Check("status_page", "warning",
                     f"{detail}; not a status the spec defines: failopen never bypasses on it",
                     facts)
    return Check("status_page", "ok", detail, facts)


# --- the verify API -----------------------------------------------------------------------------


def check_verify_api(config: Config, wiring: Wiring) -> Check:
    """Send the verify API a made-up token: is the key accepted, rejected, or nobody there?"""
    url = config.verify_url
    provider = config.provider
    if url is None:
        protected = config.protected_paths or config.protected_views
        missing = "FAILOPEN_PRIVATE_KEY" if provider.verify_url else "FAILOPEN_VERIFY_URL"
        return Check(
            "verify_api", "problem" if protected else "warning",
            f"{missing} is not set: no token can be verified"
            + ("; the protected routes would refuse every request" if protected else
               " (needed by every protected route)"), {"url": None, "answer": "not_configured"})
    if config.private_key is not None and config.private_key.reveal() in provider.test_secrets:
        return Check("verify_api", "problem",
                     f"{url}: FAILOPEN_PRIVATE_KEY is {provider.title}'s documented test secret, "
                     "with which every token (or the vendor's dummy token) passes: set the "
                     "site's own secret", {"url": url, "answer": "test_secret",
                                           "vendor": provider.name})
    try:
        verifier = HttpVerifier(url, config.private_key or "", timeout=config.verify_timeout,
                                require_verified=config.require_verified,
                                transport=wiring.verify_transport, provider=provider,
                                public_key=config.public_key, min_score=config.min_score)
    except ConfigError as exc:  # the key's own shape (whitespace): the message never shows it
        return Check("verify_api", "problem", str(exc), {"url": url, "answer": "not_sent"})
    token = CHECK_TOKEN_PREFIX + secrets.token_hex(8)
    try:
        result = verifier.verify(token)
    finally:
        verifier.close()
    # The vendor's own codes may vouch for the key; else a wrong key's answer must differ.
    confirmed = provider.confirms_key(result) or (
        result.outcome is VerifyOutcome.INVALID
        and _wrong_key_answers_otherwise(config, wiring, token, result))
    answer, status, detail = _verify_answer(result, config, confirmed=confirmed)
    return Check("verify_api", status, f"{url}: {detail}",
                 {"url": url, "answer": answer, "http_status": result.status_code,
                  "vendor": provider.name, "codes": list(result.codes)})


def _wrong_key_answers_otherwise(config: Config, wiring: Wiring, token: str,
                                 ours: VerifyResult) -> bool:
    """True when the same made-up token sent with a key nobody has gets another answer than
    ours: then ours could only come from a vendor that accepted our key. A vendor that answers
    both alike (the spec's vendor's ``DENIED ACCESS``) leaves the key unconfirmed."""
    assert config.verify_url is not None  # checked by the caller
    wrong = HttpVerifier(config.verify_url, "failopen-check-no-such-key-" + secrets.token_hex(8),
                         timeout=config.verify_timeout, transport=wiring.verify_transport,
                         provider=config.provider, public_key=config.public_key)
    try:
        theirs = wrong.verify(token)
    finally:
        wrong.close()
    if theirs.outcome in (VerifyOutcome.UNAVAILABLE, VerifyOutcome.RATE_LIMITED,
                          VerifyOutcome.OVERLOADED):
        return False  # no answer to compare with
    return (theirs.outcome, theirs.status_code, theirs.reason, theirs.codes) != (
        ours.outcome, ours.status_code, ours.reason, ours.codes)


def _verify_answer(result: VerifyResult, config: Config, *,
                   confirmed: bool) -> tuple[str, Status, str]:
    """(``answer`` fact, line status, what it means) for the made-up token's answer."""
    code, reason = result.status_code, result.reason
    outcome = result.outcome
    provider = config.provider
    if outcome is VerifyOutcome.MISCONFIGURED:
        return ("key_rejected", "problem",
                f"key rejected ({reason}): "
                f"{provider.advice(result.codes[0] if result.codes else '')}; every request to "
                "a protected route would be refused")
    if outcome is VerifyOutcome.INVALID:
        if code in (401, 403) or "PRIVATE KEY" in reason.upper().replace("_", " "):
            return ("key_rejected", "problem",
                    f"key rejected ({reason}): check FAILOPEN_PRIVATE_KEY; every token would be "
                    "refused")
        if code in (404, 405) or (code is not None and code >= 400 and "non-JSON" in reason):
            # No verify endpoint answers a token like this: the URL is probably not it.
            return ("not_a_verify_answer", "problem",
                    f"{reason}: is FAILOPEN_VERIFY_URL the vendor's verify endpoint?")
        if confirmed:
            site_key = " (the site key is not confirmed by a made-up token: a log-in on staging " \
                "is)" if provider.needs_public_key else ""
            return "key_accepted", "ok", f"key accepted, token invalid ({reason}){site_key}"
        return ("key_not_confirmed", "warning",
                f"key not confirmed: the made-up token was refused ({reason}), an answer "
                f"{provider.title} may give a wrong key too; a log-in on staging confirms it")
    if outcome is VerifyOutcome.VALID:
        return ("token_accepted", "problem",
                "accepted a made-up token: FAILOPEN_VERIFY_URL does not look like the vendor's "
                "verify endpoint, and would admit every request")
    if outcome is VerifyOutcome.RATE_LIMITED:
        return ("rate_limited", "problem",
                f"{reason}: cannot tell whether FAILOPEN_PRIVATE_KEY is accepted; run the check "
                "again later")
    if outcome is VerifyOutcome.OVERLOADED:
        return "not_sent", "problem", f"not sent: {reason}"
    return ("unavailable", "problem",
            f"unreachable or failing ({reason}; FAILOPEN_VERIFY_TIMEOUT="
            f"{config.verify_timeout:g}s): tokens cannot be verified")
