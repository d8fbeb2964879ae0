"""The chaos soak's oracle: what the promise says about each request, from the faults as they
were applied (their real times) and the documented tolerances of :class:`Knobs`.

Evidence (per server: one of the two runs the verify probe):

* the page's global component in an outage: from the moment it is set (a bypass needs a reading,
  so none can come earlier) until recovery, FAILOPEN_CLOSE_AFTER intervals plus the status
  time-out after the page reads operational again (docs/configuration.md); a bypass must have
  begun one interval plus the status time-out after it was set (longer after the page failed:
  FAILOPEN_BACKOFF_MAX);
* an override forcing enforcement off: from the command's start until it is lifted or lapses,
  plus the propagation of an override (docs/fleet.md); a bypass must hold from its propagation on;
* the verify probe (its server only): no sooner than FAILOPEN_PROBE_OPEN_AFTER failed probes
  after the verify API began to fail (5xx, time-outs; never a 429), until one probe after it
  recovered (docs/probe.md). The probe may also never open (it needs the requests' own verify
  calls to fail too): nothing is required of it.

On the probe's server, a page unreadable for longer than FAILOPEN_STALE_AFTER while the verify
API answers may end a status-page bypass (healthy probes, docs/probe.md) until it is read again.
An override forcing enforcement on forbids every bypass from its propagation until it is lifted.
Regional impairments, unreadable pages (500s, time-outs, malformed and oversized documents),
verify failures and 429s are never evidence. Redis faults, a killed leader and recycled workers
change nothing for requests (docs/fleet.md: "requests are unaffected"); only a *required* bypass
is excused while the fleet regains its poller (one lease plus a Redis command time-out), and a
bypass an override requires only for a process started meanwhile: members keep the override
they saw while Redis is down, and put it back when its keys are lost (docs/fleet.md).

A Sentinel failover is a Redis outage for its duration (docs/fleet.md, "During a failover": each
member falls back, polls for itself and keeps the override it last saw; its next sync after the
promotion rejoins on the new primary). Its window is measured, not assumed: from the SIGKILL of
the primary to the moment the sentinel named the new one, i.e. ``down-after-milliseconds`` plus
the promotion as they took; after it, the fleet regains its poller within the same lease plus
command time-out as after any Redis outage. A failover is never evidence.

Per request, over its whole time in flight ``[sent, received]``:

* **wrong bypass**: admitted unchecked without evidence at any moment of the request; on a
  ``closed`` route at all; on a ``fallback`` route without a fresh solution; or a bad token
  (invalid, missing, replayed) admitted as ``valid``;
* **wrong refusal**: a fresh valid token refused while no evidence could apply and the verify API
  was healthy (from the verify time-out before ``sent``); or a request on an ``open`` route
  refused (not rate limited) while a bypass was required throughout;
* **failopen 5xx**: a 5xx that is not one of failopen's designed refusals (503 ``cannot_verify``,
  ``rate_limited``, ``outage_closed``);
* **transport error**: no answer at all, outside a kill or recycle of that server's processes.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from _soak_schedule import (
    FLEET_DISRUPTIONS,
    LEADER_KILL,
    OVERRIDE_OFF_LAPSING,
    OVERRIDE_OFF_LIFTED,
    OVERRIDE_ON,
    PROBE_FAILING,
    REDIS_AWAY,
    REDIS_FLUSHALL,
    REDIS_KILL,
    STATUS_OUTAGE,
    STATUS_UNREADABLE,
    VERIFY_FAULTS,
    WORKERS_RECYCLE,
    Fault,
    Knobs,
)

__all__ = ["DESIGNED_5XX", "Judgement", "Oracle", "Request", "Span"]

#: 503s that are failopen's answers by design, not failures (docs/outage-policies.md, the guard).
DESIGNED_5XX = frozenset({"cannot_verify", "rate_limited", "outage_closed"})
BYPASS_OUTCOMES = frozenset({"bypassed_flag_off", "bypassed_confirmed_outage",
                             "bypassed_fallback"})
BAD_KINDS = frozenset({"invalid", "missing", "replayed", "solution", "replayed_solution",
                       "stale_solution"})

Span = tuple[float, float]


@dataclass
class Request:
    """One request the soak sent, what it carried (its truth) and what came back."""

    seq: int
    app: str            # "django" | "asgi"
    route: str          # "login" | "signup" | "reset" | "unprotected"
    policy: str         # the route's outage policy: "open" | "fallback" | "closed" | "none"
    kind: str           # valid | invalid | missing | replayed | solution | replayed_solution |
                        # stale_solution (a solution from an earlier outage) | none
    sent: float         # seconds after the soak's start
    received: float
    status: int | None = None  # None: no answer (transport error)
    outcome: str = ""   # the decision's outcome, or the refusal's error code
    bypassed: bool = False
    reason: str = ""
    pid: int | None = None
    error: str = ""
    #: When the fallback challenge was fetched (a solution's request), else None.
    challenged: float | None = None
    #: The request's own User-Agent: its audit line carries the hash of it.
    ua: str = ""
    #: A replayed solution's first admission (seconds after the start), else None.
    first_used: float | None = None


@dataclass(frozen=True)
class Judgement:
    """The oracle's word on one request."""

    expected: str               # "enforce" | "may_bypass" | "must_bypass" | "must_refuse" | ...
    violation: str | None = None
    why: str = ""


@dataclass
class Oracle:
    """Judges requests against the applied faults (times in seconds after the soak's start)."""

    faults: list[Fault]
    knobs: Knobs
    probe_app: str = "asgi"
    _may: dict[str, list[Span]] = field(init=False, repr=False)
    _must: dict[str, list[Span]] = field(init=False, repr=False)
    _verify_sick: list[Span] = field(init=False, repr=False)
    _disturbed: list[Span] = field(init=False, repr=False)
    _killed: dict[str, list[float]] = field(init=False, repr=False)
    _memory_only: list[Span] = field(init=False, repr=False)
    _losses: list[tuple[float, float]] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        k = self.knobs
        by_kind: dict[str, list[Fault]] = {}
        for fault in self.faults:
            by_kind.setdefault(fault.kind, []).append(fault)
        self._disturbed = [(f.start, f.end + k.fleet_gap) for f in self.faults
                           if f.kind in FLEET_DISRUPTIONS]
        forced_on = [(f.settled + k.propagation, f.ending) for f in by_kind.get(OVERRIDE_ON, [])]
        on_any = [(f.start, f.end + k.propagation) for f in by_kind.get(OVERRIDE_ON, [])]
        may: list[Span] = []
        must_status: list[Span] = []
        must_override: list[Span] = []
        unreadable_ends = [f.end for f in self.faults if f.kind in STATUS_UNREADABLE]
        for f in by_kind.get(STATUS_OUTAGE, []):
            recovery = k.recovery + (k.fleet_gap if _overlaps(
                self._disturbed, f.end - k.fleet_gap, f.end + k.recovery) else 0.0)
            may.append((f.start, f.end + recovery))
            failed_before = any(f.start - k.backoff_max - k.status_timeout <= end <= f.start
                                for end in unreadable_ends)
            detect = k.detection_after_failures if failed_before else k.detection
            must_status.append((f.start + detect, f.ending))
        for f in by_kind.get(OVERRIDE_OFF_LIFTED, []) + by_kind.get(OVERRIDE_OFF_LAPSING, []):
            may.append((f.start, f.end + k.propagation))
            must_override.append((f.settled + k.propagation, f.ending))
        probe_may = [(f.start + k.probe_earliest, f.end + k.probe_recovery + (
            k.fleet_gap if _overlaps(self._disturbed, f.end, f.end + k.probe_recovery) else 0.0))
            for f in self.faults if f.kind in PROBE_FAILING]
        self._may = {app: _subtract(_merge(may + (probe_may if app == self.probe_app else [])),
                                    forced_on) for app in ("django", "asgi")}
        # A bypass the page requires is excused while the fleet regains its poller after a
        # disruption (plus one detection), and around an operator forcing enforcement on.
        excused = [(a, b + k.detection) for a, b in self._disturbed] + on_any
        # One an override requires is not: a member keeps the override it saw while Redis is
        # down and puts it back when the keys are lost (docs/fleet.md). Only a process that
        # starts meanwhile (recycled, or replacing a killed one) has not seen it: excused until
        # it can read Redis again.
        born = [f for f in self.faults if f.kind in (LEADER_KILL, WORKERS_RECYCLE)]
        redis_down = [(f.start, f.end) for f in self.faults if f.kind in REDIS_AWAY]
        newcomers = []
        for f in born:
            until = max([f.end] + [b for a, b in redis_down if a - k.fleet_gap <= f.start <= b])
            newcomers.append((f.start, until + k.fleet_gap + k.detection))
        required = _merge(_subtract(_merge(must_status), excused)
                          + _subtract(_merge(must_override), newcomers + on_any))
        self._must = dict.fromkeys(("django", "asgi"), required)
        # docs/probe.md: "A status-page bypass whose page has gone stale ends after
        # FAILOPEN_CLOSE_AFTER healthy probes": on the probe's server, a page that cannot be read
        # for longer than FAILOPEN_STALE_AFTER inside an outage, while the verify API answers,
        # may end the bypass until the page is read again.
        failing_verify = [(f.start, f.end) for f in self.faults if f.kind in PROBE_FAILING]
        stale = [(f.start + k.stale_after, f.end + k.detection_after_failures)
                 for f in self.faults if f.kind in STATUS_UNREADABLE
                 and f.end - f.start > k.stale_after
                 and not _overlaps(failing_verify, f.start, f.end)]
        self._must[self.probe_app] = _subtract(required, stale)
        # When the keys are lost, earliest and latest: a FLUSHALL at once; a killed Redis from
        # the kill until the restart the injector records once the new server answers (the
        # record can begin again as soon as it accepts commands, before that is recorded).
        self._losses = [(f.start, f.end) for f in self.faults
                        if f.kind in (REDIS_KILL, REDIS_FLUSHALL)]
        # While Redis is away, and for RETRY_AFTER (1 s) after a failed call, the fallback keeps
        # used solutions in each process's memory (failopen/fallback/_redis.py).
        self._memory_only = [(f.start - 0.1, f.end + 1.0 + 0.2)
                             for f in self.faults if f.kind in REDIS_AWAY]
        self._verify_sick = _merge([(f.start, f.end + k.verify_timeout)
                                    for f in self.faults if f.kind in VERIFY_FAULTS])
        self._killed = {}
        for f in self.faults:
            if f.kind in (LEADER_KILL, WORKERS_RECYCLE):
                for app in (f.detail.get("app", "django,asgi")).split(","):
                    self._killed.setdefault(app, []).append(f.start)

    # -- the windows ---------------------------------------------------------------------------

    def may_bypass(self, app: str, start: float, end: float) -> bool:
        """Could a bypass be justified at some moment of ``[start, end]``?"""
        return _overlaps(self._may[app], start, end)

    def must_bypass(self, app: str, start: float, end: float) -> bool:
        """Was a bypass required throughout ``[start, end]``?"""
        return any(a <= start and end <= b for a, b in self._must[app])

    def verify_healthy(self, start: float, end: float) -> bool:
        """Did the verify API answer normally for the whole of ``[start, end]``?"""
        return not _overlaps(self._verify_sick, start, end)

    def process_ended(self, app: str, start: float, end: float, slack: float = 1.0) -> bool:
        """Was one of ``app``'s processes killed or recycled around ``[start, end]``?"""
        return any(start - slack <= t <= end + slack for t in self._killed.get(app, []))

    # -- the verdict ---------------------------------------------------------------------------

    def judge(self, r: Request) -> Judgement:
        """What the promise says about ``r``, and the violation if it was broken."""
        k = self.knobs
        may = self.may_bypass(r.app, r.sent, r.received)
        if r.status is None:
            if self.process_ended(r.app, r.sent, r.received):
                return Judgement("no_answer_excused", None, "a server process was ended")
            return Judgement("answer", "transport_error", r.error)
        if r.route == "unprotected":
            if r.status != 200:
                return Judgement("unprotected", "unprotected_failed", f"HTTP {r.status}")
            return Judgement("unprotected")
        if r.status >= 500 and r.outcome not in DESIGNED_5XX:
            return Judgement("answer", "failopen_5xx", f"HTTP {r.status} {r.outcome}")
        if r.status == 200 and not r.bypassed:
            if r.kind != "valid":
                return Judgement("must_refuse", "wrong_bypass",
                                 f"a {r.kind} request admitted as {r.outcome or 'checked'}")
            return Judgement("enforce")
        if r.status == 200:
            return self._judge_bypass(r, may)
        expected = "may_bypass" if may else "enforce"
        if r.kind == "valid" and not may and self.verify_healthy(r.sent - k.verify_timeout,
                                                                 r.received):
            return Judgement(expected, "wrong_refusal",
                             f"valid token refused while healthy: {r.status} {r.outcome}")
        if r.policy == "open" and r.outcome != "outage_rate_limited" \
                and self.must_bypass(r.app, r.sent, r.received):
            return Judgement("must_bypass", "missed_bypass",
                             f"refused {r.status} {r.outcome} while a bypass was required")
        if r.policy == "fallback" and r.kind == "solution" and r.challenged is not None \
                and r.outcome not in ("outage_rate_limited",) \
                and self.must_bypass(r.app, r.challenged, r.received) \
                and not self._issued_before_a_loss(r.challenged, r.received):
            return Judgement("must_bypass", "missed_bypass",
                             f"fresh solution refused {r.status} {r.outcome} during an outage")
        return Judgement(expected)

    def _issued_before_a_loss(self, challenged: float, received: float) -> bool:
        """docs/outage-policies.md: when Redis loses its keys, a solution issued before the
        record of used solutions began again (when a member notices: within a store refresh and
        a command time-out; issue times are whole seconds) is refused as possibly used."""
        return any(challenged <= latest + self.knobs.propagation + 1.0 and received >= earliest
                   for earliest, latest in self._losses)

    def _judge_bypass(self, r: Request, may: bool) -> Judgement:
        if r.policy == "closed":
            return Judgement("must_refuse", "wrong_bypass", "a closed route admitted unchecked")
        if r.policy == "fallback" and r.kind == "replayed_solution" \
                and r.outcome == "bypassed_fallback" and may and (
                    _overlaps(self._memory_only, r.sent, r.received)
                    or (r.first_used is not None
                        and _overlaps(self._memory_only, r.first_used, r.first_used))):
            # docs/outage-policies.md: while Redis does not answer, each process keeps its used
            # solutions in its own memory, "a replay is refused on the same worker only".
            return Judgement("replay_in_redis_degradation", None,
                             "a replay admitted by another worker while Redis was skipped")
        if r.policy == "fallback":
            if r.outcome != "bypassed_fallback" or r.kind not in ("solution", "stale_solution"):
                return Judgement("must_refuse", "wrong_bypass",
                                 f"fallback route admitted {r.kind} as {r.outcome}")
            # A solution stands in only during the outage its challenge was issued in: one span
            # of evidence from the challenge to the request (docs/outage-policies.md).
            issued = r.sent if r.challenged is None else r.challenged
            if not any(a <= issued and r.sent <= b for a, b in self._may[r.app]):
                return Judgement("must_refuse", "wrong_bypass",
                                 f"a {r.kind} from {issued:.1f}s admitted outside its outage")
        if r.outcome not in BYPASS_OUTCOMES:
            return Judgement("must_refuse", "wrong_bypass", f"unknown bypass {r.outcome}")
        if not may:
            return Judgement("enforce", "wrong_bypass",
                             f"bypassed without evidence ({r.kind}): {r.reason}")
        return Judgement("may_bypass")

    def evidence_spans(self, app: str) -> list[Span]:
        """The spans in which ``app`` may bypass (for the report)."""
        return list(self._may[app])


def _merge(spans: Iterable[Span]) -> list[Span]:
    merged: list[Span] = []
    for a, b in sorted(s for s in spans if s[1] >= s[0]):
        if merged and a <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], b))
        else:
            merged.append((a, b))
    return merged


def _subtract(spans: list[Span], holes: list[Span]) -> list[Span]:
    out = spans
    for ha, hb in holes:
        if hb <= ha:
            continue
        cut: list[Span] = []
        for a, b in out:
            if b < ha or a > hb:
                cut.append((a, b))
                continue
            if a < ha:
                cut.append((a, ha))
            if b > hb:
                cut.append((hb, b))
        out = cut
    return out


def _overlaps(spans: Iterable[Span], start: float, end: float) -> bool:
    return any(a <= end and start <= b for a, b in spans)
