"""The verify probe: failopen's own verify call as outage evidence (opt-in).

Status pages are written by people and lag: in the first minutes of a vendor outage the page
still reads ``operational`` while every verify call fails. With ``FAILOPEN_EVIDENCE=status,probe``
the watcher thread (the leader's, in fleet mode: one probe per fleet) sends a verify call with a
synthetic token of its own every ``FAILOPEN_PROBE_INTERVAL`` (default: the poll interval), in a
worker pool of its own. Requests' tokens never feed it, so nothing a caller sends can make it fail.

The probe's verdict reuses the verifier's classification
(:func:`failopen.engine.probe_record.verdict_of`): UNAVAILABLE (timeout, transport error, 5xx,
unusable body) is a failure; any answer the vendor gave in time, an "invalid token" one included, is
healthy.

Enforcement turns off (source ``probe``) only when both hold, while the status page has a fresh
reading that is not an outage:

* the probe failed ``FAILOPEN_PROBE_OPEN_AFTER`` times in a row (default 3), counted since
  enforcement last began, and
* the requests' own verify calls in the span of that streak, ``max(open_after - 1, 1) x interval``
  seconds (the interval no shorter than the verify timeout and FAILOPEN_STORE_REFRESH: probes are
  never closer; the :class:`~failopen.engine.outcome_window.OutcomeWindow` the guard feeds), were
  mostly unavailable: at least :data:`PROBE_MIN_CALLS` calls, at least
  :data:`PROBE_MOSTLY_UNAVAILABLE` of them unavailable. A quiet site (fewer calls) relies on the
  probe alone only after :data:`PROBE_QUIET_FACTOR` x ``open_after`` failures in a row, and still
  only when the few calls it had were mostly unavailable. Either way, not one of them may have
  verified a token: a valid answer proves the verify API works for real users (a vendor that answers
  the probe's unknown token with a 5xx, while attackers' junk meets the same 5xx, must not open the
  gate).

Neither alone opens: requests failing while the probe answers (junk or crafted tokens, our own
overload) and a probe failing while requests get answers (a broken probe path) both keep
enforcing. Enforcement comes back at the first healthy probe while the page reads operational,
after ``close_after`` healthy probes otherwise, and after ``FAILOPEN_MAX_STALE_BYPASS`` at the
latest (a re-check: requests cannot be weighed while they are bypassed, so both conditions must
be met again). The status page keeps priority where it speaks: an outage reading bypasses as
without the probe. Recovery evidence while stale: a status-driven bypass whose page cannot be read
ends after ``close_after`` healthy probes in a row (moving towards enforcement needs no
attacker-proof evidence).

Without a status page (``FAILOPEN_EVIDENCE=probe``, for vendors that publish none a machine can
read: reCAPTCHA, reCAPTCHA Enterprise, Friendly Captcha) the same rule applies minus the page:
the failing streak and the requests' own calls, none verified, open; ``close_after`` healthy
probes in a row, or ``FAILOPEN_MAX_STALE_BYPASS``, close. Its threat model is worse: whoever can
cut the path from the servers to the vendor (and nothing else) can turn ``open`` routes open
after about a minute, which is why start-up warns when an ``open`` route relies on it alone.

Cost: one verify call per probe interval per fleet (2,880 a day at the default 30 s; with
reCAPTCHA Enterprise, each is a billed assessment).
"""

from __future__ import annotations

import logging
import secrets
from typing import TYPE_CHECKING, Any, Literal

from failopen.clock import SYSTEM_CLOCK, Clock
from failopen.engine.flag import FlagState, rfc3339
from failopen.engine.outcome_window import OutcomeWindow
from failopen.engine.probe_record import ProbeResult, Verdict, verdict_of
from failopen.providers.verify import Verifier

if TYPE_CHECKING:
    from failopen.engine.watcher import Reading, StatusWatcher

__all__ = [
    "OutcomeWindow", "PROBE_MIN_CALLS", "PROBE_MOSTLY_UNAVAILABLE", "PROBE_QUIET_FACTOR",
    "PROBE_TOKEN_PREFIX", "ProbeResult", "VerifyProbe", "warn_probe_alone",
]

logger = logging.getLogger("failopen.probe")

#: Requests' verify calls the window must hold before they count as evidence.
PROBE_MIN_CALLS = 10
#: The share of those calls that must have been unavailable ("mostly").
PROBE_MOSTLY_UNAVAILABLE = 0.8
#: A quiet site (fewer calls than PROBE_MIN_CALLS) needs this many times the failure streak.
PROBE_QUIET_FACTOR = 2
#: How the probe's synthetic tokens begin (a random part follows): no vendor issues such a token.
PROBE_TOKEN_PREFIX = "failopen-probe-"


def warn_probe_alone(policy: str, routes: tuple[tuple[str, str], ...], vendor: str) -> None:
    """Say at start-up that an ``open`` route's bypass rests on the probe alone
    (FAILOPEN_EVIDENCE=probe): whoever can block the path from these servers to the vendor can
    then open it. ``policy`` is the default outage policy, ``routes`` the routes' own."""
    open_routes = [route for route, own in routes if own == "open"]
    if policy != "open" and not open_routes:
        return
    which = "every protected route without a policy of its own (FAILOPEN_OUTAGE_POLICY=open)" \
        if policy == "open" else ", ".join(open_routes)
    logger.warning(
        "FAILOPEN_EVIDENCE=probe: the verify probe alone can turn enforcement off, and %s then "
        "admits requests unchecked; whoever can block the path from these servers to %s can "
        "bring that about. Prefer the fallback or closed outage policy there.",
        which, vendor, extra={"event": "failopen.probe_alone_opens"})


class VerifyProbe:
    """Sends the probe (leader), counts its results (every process) and applies the rule."""

    def __init__(
        self,
        verifier: Verifier,
        watcher: StatusWatcher,
        *,
        interval: float,
        open_after: int = 3,
        max_bypass: float | None = 900.0,
        window: OutcomeWindow | None = None,
        clock: Clock = SYSTEM_CLOCK,
        slowest: float = 0.0,
        with_page: bool = True,
    ) -> None:
        self.verifier = verifier
        #: False with FAILOPEN_EVIDENCE=probe: no status page is watched, so none is waited for.
        self.with_page = with_page
        self.watcher = watcher
        self.interval = interval
        self.open_after = open_after
        self.max_bypass = max_bypass
        self._clock = clock
        # How far apart probes may really be: ``slowest`` is what the runtime knows can hold one
        # back (a failing probe takes the verify timeout; probes run on watcher turns, one per
        # FAILOPEN_STORE_REFRESH). An interval below that must not shrink the requests' window
        # to a sliver of the streak (no requests in it: "too few to weigh", the probe alone).
        self.spacing = max(interval, slowest)
        # The span the failing streak covers (its first to its last probe), one spacing at
        # least: "the same window" as the probe's evidence.
        self.window = window if window is not None else OutcomeWindow(
            max(open_after - 1, 1) * self.spacing, clock=clock)
        self._failed = self._healthy = 0
        self._healthy_stale = 0  # healthy probes in a row while the status page is stale
        self._enforcing_since: float | None = None
        self._opened_at: float | None = None
        self._failed_at: float | None = None  # when the latest failed probe was counted
        self._evidence = ""  # what opened the running probe bypass, for its reason
        # The same without request counts or the probe's error text, for the public endpoint.
        self._public_evidence = ""
        self._next_due = float("-inf")
        #: The latest conclusive result (sent here or published by the fleet's leader).
        self.last: ProbeResult | None = None
        #: Counters: probes this process sent, and results of each verdict it counted.
        self.sent = 0
        self.counted: dict[Verdict, int] = {"healthy": 0, "failed": 0, "skipped": 0}

    def __repr__(self) -> str:
        return f"VerifyProbe(interval={self.interval:g}s, open_after={self.open_after})"

    # --- the watcher's turn ------------------------------------------------------------------

    def due(self) -> bool:
        """True when the next probe is due."""
        return self._clock.monotonic() >= self._next_due

    def run_due(self) -> ProbeResult | None:
        """Send the probe if it is due, count it, and publish it to the fleet. Never raises."""
        try:
            now = self._clock.monotonic()
            if now < self._next_due:
                return None
            self._next_due = now + self.interval  # from the start: a slow probe is not a delay
            result = self.send()
            self.observe(result)
            self.watcher.metrics.verify_probe(result.verdict)
            fleet = self.watcher.fleet
            if fleet is not None and fleet.leader and result.verdict != "skipped":
                fleet.published_probe(result)
            return result
        except Exception:
            logger.exception("verify probe failed unexpectedly; not evidence either way",
                             extra={"event": "failopen.probe_error"})
            return None

    def send(self) -> ProbeResult:
        """One verify call with a fresh synthetic token (no I/O error ever raises)."""
        token = PROBE_TOKEN_PREFIX + secrets.token_hex(16)
        at = self._clock.time()
        self.sent += 1
        try:
            answer = self.verifier.verify(token)
        except Exception:  # a bug is no evidence about the vendor
            logger.exception("verify probe raised; counted as skipped",
                             extra={"event": "failopen.probe_error"})
            return ProbeResult("skipped", "error", "the probe raised (a bug)", at)
        return ProbeResult(verdict_of(answer), answer.outcome.value, answer.reason, at)

    # --- the rule ----------------------------------------------------------------------------

    def observe(self, result: ProbeResult) -> None:
        """Count one probe result (this process's or the leader's) and act on it."""
        watcher = self.watcher
        with watcher._observe_lock:
            self.counted[result.verdict] = self.counted.get(result.verdict, 0) + 1
            if result.verdict == "skipped":
                return
            auto = watcher.flag.automatic_state
            if auto.enforce and auto.since != self._enforcing_since:
                # Enforcement (re)began: failures before it are no evidence for the next bypass.
                self._enforcing_since, self._failed = auto.since, 0
            if result.verdict == "failed":
                self._failed, self._healthy, self._healthy_stale = self._failed + 1, 0, 0
                self._failed_at = self._clock.monotonic()
            else:
                self._failed, self._healthy = 0, self._healthy + 1
                self._healthy_stale = self._healthy_stale + 1 if auto.stale else 0
            self.last = result
            if not auto.enforce and auto.source == "probe":
                self._while_open(result, auto)
            elif auto.enforce:
                if result.verdict == "failed":
                    self._maybe_open(result, auto)
            elif auto.source in ("watcher", "confirmed") and result.verdict == "healthy":
                self._maybe_end_stale_bypass(auto)

    def on_reading(
        self, reading: Reading, status: str, enforce: bool,
        source: Literal["watcher", "confirmed"], reason: str,
    ) -> tuple[bool, Literal["watcher", "confirmed", "probe"], str]:
        """What a status reading does to a probe bypass (called by the watcher, under its lock).

        An outage on the page decides as without the probe. Anything else keeps a probe bypass,
        except ``operational`` with the latest probe healthy, which ends it at once.
        """
        auto = self.watcher.flag.automatic_state
        if not enforce or auto.enforce or auto.source != "probe":
            return enforce, source, reason
        last = self.last
        if reading == "operational" and last is not None and last.verdict == "healthy":
            self._opened_at = None
            return True, source, f"{reason}, and the verify probe answers"
        return False, "probe", self._reason(status)

    def _maybe_open(self, result: ProbeResult, auto: FlagState) -> None:
        status = auto.global_status
        if self.with_page and (auto.stale or status is None):
            return  # the page must have a fresh reading (that is not an outage)
        calls, unavailable, valid = self.window.tally()
        busy = calls >= PROBE_MIN_CALLS
        needed = self.open_after if busy else PROBE_QUIET_FACTOR * self.open_after
        if self._failed < needed or unavailable < PROBE_MOSTLY_UNAVAILABLE * calls or valid:
            # A token verified in the window: the verify API works for real users, whatever
            # the probe's token meets (a vendor answering unknown tokens with a 5xx, say) and
            # however much junk fails beside it. Nobody can take a real user's answer away.
            return
        seconds = f"{self.window.seconds:g}s"
        requests = (
            f"{unavailable} of {calls} requests' verify calls in the last {seconds} were "
            "unavailable" if busy else
            f"requests too few to weigh ({calls} verify calls in the last {seconds}, "
            f"{unavailable} unavailable)"
        )
        self._evidence = (f"verify probe failed {self._failed} times in a row ({result.reason}) "
                          f"and {requests}")
        self._public_evidence = (
            f"verify probe failed {self._failed} times in a row and requests' verify calls were "
            + ("mostly unavailable" if busy else "too few to weigh"))
        self._opened_at = self._clock.monotonic()
        self.watcher.flag.set_automatic(enforce=False, source="probe",
                                        reason=self._reason(status), global_status=status)

    def _reason(self, status: str | None) -> str:
        if not self.with_page:
            return f"{self._evidence}; no status page is watched (FAILOPEN_EVIDENCE=probe)"
        if status == "operational":
            page = "still reads operational"
        elif status in self.watcher.bypass_on:
            page = f"reads {status}, fewer times in a row than FAILOPEN_OPEN_AFTER asks"
        else:
            page = f"reads {status} (not an outage)"
        return f"{self._evidence}; the status page {page}"

    def _while_open(self, result: ProbeResult, auto: FlagState) -> None:
        if result.verdict == "healthy":
            if auto.global_status == "operational" and not auto.stale:
                self._close(auto, "the verify probe answered and the status page reads "
                                  "operational")
            elif self._healthy >= self.watcher.close_after:
                self._close(auto, f"the verify probe answered {self._healthy} times in a row")
            return
        opened, limit = self._opened_at, self.max_bypass
        if opened is None:  # opened by another instance, or before a restart: start counting
            self._opened_at = self._clock.monotonic()
        elif limit is not None and self._clock.monotonic() - opened >= limit:
            self._close(auto, (
                f"probe bypass re-checked after {limit:g}s (FAILOPEN_MAX_STALE_BYPASS); enforcing "
                "until the probe and requests show the outage again"))

    def check_open(self) -> None:
        """End a probe bypass whose evidence stopped (the watcher's tick). Never raises.

        The rule above acts on results; a probe that stops giving any (its pool wedged, a fleet
        leader that no longer probes) would otherwise keep the bypass open for good. Without a
        failed result for three probe spacings, or at ``max_bypass``, enforcement comes back.
        """
        try:
            with self.watcher._observe_lock:
                auto = self.watcher.flag.automatic_state
                if auto.enforce or auto.source != "probe":
                    return
                now = self._clock.monotonic()
                if self._opened_at is None:  # opened by another instance: start counting
                    self._opened_at = now
                if self._failed_at is None or self._failed_at < self._opened_at:
                    self._failed_at = self._opened_at
                silent, limit = now - self._failed_at, self.max_bypass
                if limit is not None and now - self._opened_at >= limit:
                    self._close(auto, (
                        f"probe bypass re-checked after {limit:g}s (FAILOPEN_MAX_STALE_BYPASS); "
                        "enforcing until the probe and requests show the outage again"))
                elif silent > 3 * self.spacing:
                    self._close(auto, f"no failed verify probe for {silent:.0f}s (the probe "
                                      "gave no result); enforcing until it shows the outage again")
        except Exception:
            logger.exception("verify probe check failed; continuing",
                             extra={"event": "failopen.probe_error"})

    def _close(self, auto: FlagState, why: str) -> None:
        self._opened_at = None
        self.watcher.flag.set_automatic(
            enforce=True, source="probe", reason=f"enforcement back: {why}",
            global_status=auto.global_status, stale=auto.stale, error=auto.error)

    def _maybe_end_stale_bypass(self, auto: FlagState) -> None:
        # "Cannot be read" is the stale mark (no good reading for FAILOPEN_STALE_AFTER), not one
        # failed poll: a blip must not end a bypass the page still confirms once it answers.
        watcher = self.watcher
        if self._healthy_stale < watcher.close_after:
            return
        watcher.forget_streaks()  # opening again needs new outage readings
        reason = (
            f"bypass ended: the status page cannot be read and the verify probe answered "
            f"{self._healthy_stale} times in a row since; enforcing until the page shows an "
            "outage again")
        logger.warning("%s", reason, extra={"event": "failopen.probe_stale_bypass_ended",
                                            "healthy_probes": self._healthy_stale})
        watcher.flag.set_automatic(enforce=True, source="probe", reason=reason,
                                   global_status=auto.global_status, stale=auto.stale,
                                   error=auto.error)

    # --- what it shows ------------------------------------------------------------------------

    def public_reason(self, reason: str) -> str:
        """A probe bypass's reason as the public flag endpoint shows it: the request counts
        (the site's traffic) and the probe's error text stay in the logs and ``watch --json``."""
        evidence = self._evidence
        return reason.replace(evidence, self._public_evidence) if evidence else reason

    def public(self) -> dict[str, Any]:
        """The flag endpoint's ``probe`` block (public: no request counts, no error text)."""
        last = self.last
        return {
            "enabled": True,
            "last": None if last is None else last.verdict,
            "last_at": None if last is None else rfc3339(last.at),
            "failures_in_a_row": self._failed,
            "healthy_in_a_row": self._healthy,
        }

    def describe(self) -> dict[str, Any]:
        """Everything about the probe, for ``failopen watch --json`` and operators."""
        calls, unavailable, valid = self.window.tally()
        last = self.last
        return {
            **self.public(),
            "reason": None if last is None else last.reason,
            "interval": self.interval,
            "open_after": self.open_after,
            "sent": self.sent,
            "counted": dict(self.counted),
            "requests": {"window_seconds": self.window.seconds, "verify_calls": calls,
                         "unavailable": unavailable, "valid": valid},
        }
