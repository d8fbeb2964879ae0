"""Prometheus metrics, and the narrow interface the guard and the watcher report through.

The guard, the watcher and the outage confirmer each hold a :class:`Metrics`; the default one
(:data:`NO_METRICS`) does nothing, so a process without ``prometheus_client`` runs exactly as it
did. The runtime picks the real one from ``FAILOPEN_METRICS``:

- ``auto`` (default): :class:`PrometheusMetrics` in ``prometheus_client.REGISTRY`` when
  ``prometheus_client`` is installed (``pip install "failopen[prometheus]"``), else none;
- ``on``: the same, and start-up fails when ``prometheus_client`` is missing;
- ``off``: none. Use :func:`install` to report into another registry.

Registering is idempotent per registry: every runtime of a process (tests, a Django settings
change, two apps) shares one set of collectors there, so building a second one never raises.
Counters add up across runtimes; the two gauges show the last change any of them saw.

Labels only ever take the bounded values listed in this module (outcome names, flag sources,
poll readings, confirmation results), never a path, a client or a reason.

Decisions cost the request path nothing more: the guard already counts them per outcome (under
the lock it always took), and those counts reach ``failopen_decisions_total`` as increments of
pre-bound children when the registry is scraped and on every turn of the watcher (about once a
second), which a multi-process collector (``PROMETHEUS_MULTIPROC_DIR``) relies on. A pre-bound
``Counter.inc()`` per request would make a decision 1.2 to 1.8 times as costly
(tests/benchmarks/bench_metrics.py, side by side).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import weakref
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from failopen._internal.forksafe import renew_locks_after_fork

__all__ = [
    "CONFIRMATION_RESULTS", "DECISION_OUTCOMES", "FALLBACK_CHALLENGES", "FLAG_SOURCES",
    "METRIC_NAMES", "Metrics", "NO_METRICS", "POLL_RESULTS", "PROBE_RESULTS", "PrometheusMetrics",
    "available", "install", "metrics_for",
]

logger = logging.getLogger("failopen.metrics")


# The shapes metrics need of the engine and the runtime above them (observe/ never imports them).
class EnforcementState(Protocol):
    """What a flag change reports: ``failopen.FlagState`` has these two fields."""

    @property
    def enforce(self) -> bool: ...

    @property
    def source(self) -> str: ...


class Reporting(Protocol):
    """What :func:`install` needs of a runtime: ``failopen.FailOpen`` is one."""

    def use_metrics(self, metrics: Metrics) -> None: ...

#: The guard's outcomes (``failopen.guard.Outcome``): the ``outcome`` label.
DECISION_OUTCOMES = (
    "valid", "bypassed_flag_off", "bypassed_confirmed_outage", "bypassed_fallback",
    "missing_token", "invalid_token", "rate_limited", "cannot_verify", "internal_error",
    "outage_closed", "outage_rate_limited", "fallback_required", "fallback_invalid",
    "misconfigured", "low_score", "fallback_unavailable",
)
#: Where the flag's value came from (``failopen.flag.Source``): the ``source`` label.
FLAG_SOURCES = ("default", "watcher", "confirmed", "probe", "override")
#: What one status poll read (``failopen.watcher.Reading``): the ``result`` label.
POLL_RESULTS = ("impaired", "operational", "neutral", "failed")
#: What one on-demand outage check found: the page showed an outage (the flag is now off), it
#: did not, it could not be read, or another process of the fleet had just checked.
CONFIRMATION_RESULTS = ("outage", "no_outage", "failed", "fleet")
#: What one verify probe of this process found (``FAILOPEN_EVIDENCE=status,probe``).
PROBE_RESULTS = ("healthy", "failed", "skipped")
#: What a ``fallback`` route's admitted request passed: the self-hosted ALTCHA challenge or a
#: second vendor (``FAILOPEN_FALLBACK_VENDOR``; the registry's names, pinned by a test).
FALLBACK_CHALLENGES = ("altcha", "turnstile", "hcaptcha", "recaptcha", "recaptcha-enterprise",
                       "friendly-captcha")

METRIC_NAMES = (
    "failopen_decisions_total", "failopen_enforcing", "failopen_flag_transitions_total",
    "failopen_status_polls_total", "failopen_status_poll_seconds", "failopen_verify_seconds",
    "failopen_confirmations_total", "failopen_override_active", "failopen_verify_probes_total",
    "failopen_fallback_admissions_total",
)


class Metrics:
    """What failopen reports as it works. This base counts nothing: the default."""

    enabled = False

    def bind_decisions(self, counts: Callable[[], Mapping[str, int]]) -> None:
        """Where the decisions are counted (``Guard.counts``): read by :meth:`flush`."""

    def flush(self) -> None:
        """Bring the decision counters up to date (the watcher's turn; a scrape)."""

    def status_poll(self, result: str, seconds: float) -> None:
        """One status page poll by the watcher, and how long it took."""

    def verify_call(self, seconds: float) -> None:
        """One verify call, and how long it took."""

    def confirmation(self, result: str) -> None:
        """One on-demand outage check (see :data:`CONFIRMATION_RESULTS`)."""

    def verify_probe(self, result: str) -> None:
        """One verify probe sent by this process (see :data:`PROBE_RESULTS`)."""

    def fallback_admitted(self, challenge: str) -> None:
        """A ``fallback`` route admitted a request that passed ``challenge`` (see
        :data:`FALLBACK_CHALLENGES`); counted as it happens: each one paid a challenge, so
        they are few next to an open route's bypasses."""

    def flag_changed(self, old: EnforcementState, new: EnforcementState) -> None:
        """The flag's visible state changed (called synchronously by the flag)."""

    def detach(self) -> None:
        """This runtime stops reporting here."""


#: The do-nothing default.
NO_METRICS = Metrics()


def available() -> bool:
    """True when ``prometheus_client`` can be imported (called when a runtime is built, never
    at import time)."""
    try:
        import prometheus_client  # noqa: F401
    except ImportError:
        return False
    return True


class _Instruments:
    """One set of collectors in one registry, shared by every runtime reporting there."""

    def __init__(self, registry: Any) -> None:
        from prometheus_client import Counter, Gauge, Histogram

        self.registry = registry
        self.users: weakref.WeakSet[PrometheusMetrics] = weakref.WeakSet()
        # Built unregistered, then registered one by one: a name someone else already holds in
        # this registry costs that one metric (logged), never an exception at start-up.
        self.decisions = Counter(
            "failopen_decisions", "Decisions of the guard, by outcome.", ["outcome"],
            registry=None)
        self.transitions = Counter(
            "failopen_flag_transitions",
            "Times enforcement turned on or off, by the source of the new state.", ["source"],
            registry=None)
        self.polls = Counter(
            "failopen_status_polls", "Status page polls by the watcher, by what they read.",
            ["result"], registry=None)
        self.confirmations = Counter(
            "failopen_confirmations", "On-demand outage checks, by what they found.", ["result"],
            registry=None)
        self.probes = Counter(
            "failopen_verify_probes", "Verify probes sent by this process, by what they found.",
            ["result"], registry=None)
        self.fallbacks = Counter(
            "failopen_fallback_admissions",
            "Requests a fallback route admitted during an outage, by the challenge they passed.",
            ["challenge"], registry=None)
        self.poll_seconds = Histogram(
            "failopen_status_poll_seconds", "Duration of the watcher's status page polls.",
            registry=None)
        self.verify_seconds = Histogram(
            "failopen_verify_seconds", "Duration of verify calls to the vendor.", registry=None)
        # liveall: under a multi-process collector every live worker shows its own value.
        self.enforcing = Gauge(
            "failopen_enforcing", "1 while enforcement tokens are validated, 0 while bypassing.",
            registry=None, multiprocess_mode="liveall")
        self.override_active = Gauge(
            "failopen_override_active", "1 while an operator override is in force, else 0.",
            registry=None, multiprocess_mode="liveall")
        self.collectors = [
            _FlushOnScrape(self.users),  # first: a scrape sees the counts brought up to date
            self.decisions, self.enforcing, self.transitions, self.polls, self.poll_seconds,
            self.verify_seconds, self.confirmations, self.override_active, self.probes,
            self.fallbacks,
        ]
        self.registered: list[Any] = []
        if registry is not None:
            for collector in self.collectors:
                try:
                    registry.register(collector)
                except ValueError as exc:
                    logger.warning(
                        "failopen metric not registered (%s); the others are", exc,
                        extra={"event": "failopen.metrics_conflict"})
                else:
                    self.registered.append(collector)

    def unregister(self) -> None:
        for collector in self.registered:
            with contextlib.suppress(KeyError):  # removed by someone else meanwhile
                self.registry.unregister(collector)
        self.registered = []


_lock = threading.Lock()
_instruments: weakref.WeakKeyDictionary[Any, _Instruments] = weakref.WeakKeyDictionary()


class _FlushOnScrape:
    """A collector with no metrics of its own: collecting it flushes the decision counts."""

    def __init__(self, users: weakref.WeakSet[PrometheusMetrics]) -> None:
        self._users = users

    def describe(self) -> list[Any]:
        return []

    def collect(self) -> list[Any]:
        for user in list(self._users):
            user.flush()
        return []


def _attach(registry: Any, user: PrometheusMetrics) -> _Instruments:
    with _lock:
        shared = _instruments.get(registry)
        if shared is None:
            shared = _instruments[registry] = _Instruments(registry)
        shared.users.add(user)
        return shared


def _release(shared: _Instruments, user: PrometheusMetrics) -> None:
    with _lock:
        shared.users.discard(user)
        if not shared.users and _instruments.get(shared.registry) is shared:
            del _instruments[shared.registry]
            shared.unregister()


class PrometheusMetrics(Metrics):
    """Counts into ``prometheus_client`` collectors in ``registry`` (default: the global one)."""

    enabled = True

    def __init__(self, registry: Any = None) -> None:
        if registry is None:
            from prometheus_client import REGISTRY

            registry = REGISTRY
        self.registry = registry
        self._counts: Callable[[], Mapping[str, int]] | None = None
        self._flushed: dict[str, int] = {}
        self._flush_lock = threading.Lock()
        renew_locks_after_fork(self, "_flush_lock")
        self._shared = shared = _attach(registry, self)
        self._attached = True
        # Children resolved once: the request path never calls .labels().
        self._decided: dict[str, Callable[..., None]] = {
            o: shared.decisions.labels(outcome=o).inc for o in DECISION_OUTCOMES}
        self._turned: dict[str, Callable[..., None]] = {
            s: shared.transitions.labels(source=s).inc for s in FLAG_SOURCES}
        self._polled: dict[str, Callable[..., None]] = {
            r: shared.polls.labels(result=r).inc for r in POLL_RESULTS}
        self._confirmed: dict[str, Callable[..., None]] = {
            r: shared.confirmations.labels(result=r).inc for r in CONFIRMATION_RESULTS}
        self._probed: dict[str, Callable[..., None]] = {
            r: shared.probes.labels(result=r).inc for r in PROBE_RESULTS}
        self._fell_back: dict[str, Callable[..., None]] = {
            c: shared.fallbacks.labels(challenge=c).inc for c in FALLBACK_CHALLENGES}
        self._poll_seconds = shared.poll_seconds.observe
        self._verify_seconds = shared.verify_seconds.observe
        self._enforcing = shared.enforcing.set
        self._override_active = shared.override_active.set

    def __repr__(self) -> str:
        return f"PrometheusMetrics(registry={type(self.registry).__name__})"

    def bind_decisions(self, counts: Callable[[], Mapping[str, int]]) -> None:
        self._counts = counts

    def flush(self) -> None:
        counts = self._counts
        if counts is None:
            return
        with self._flush_lock:  # the watcher's turn and a scrape may meet here
            for outcome, total in counts().items():
                delta = total - self._flushed.get(outcome, 0)
                inc = self._decided.get(outcome)
                if delta > 0 and inc is not None:
                    inc(delta)
                    self._flushed[outcome] = total

    def status_poll(self, result: str, seconds: float) -> None:
        inc = self._polled.get(result)
        if inc is not None:
            inc()
        self._poll_seconds(max(seconds, 0.0))

    def verify_call(self, seconds: float) -> None:
        self._verify_seconds(max(seconds, 0.0))

    def confirmation(self, result: str) -> None:
        inc = self._confirmed.get(result)
        if inc is not None:
            inc()

    def verify_probe(self, result: str) -> None:
        inc = self._probed.get(result)
        if inc is not None:
            inc()

    def fallback_admitted(self, challenge: str) -> None:
        inc = self._fell_back.get(challenge)
        if inc is not None:
            inc()

    def flag_changed(self, old: EnforcementState, new: EnforcementState) -> None:
        self._enforcing(1 if new.enforce else 0)
        self._override_active(1 if new.source == "override" else 0)
        if old.enforce != new.enforce:
            inc = self._turned.get(new.source)
            if inc is not None:
                inc()

    def detach(self) -> None:
        """Stop sharing this registry's collectors; the last user unregisters them."""
        if self._attached:
            self.flush()
            self._attached = False
            _release(self._shared, self)


def metrics_for(setting: str) -> Metrics:
    """The metrics a ``FAILOPEN_METRICS`` value asks for (``auto``, ``on``, ``off``)."""
    if setting == "off" or (setting == "auto" and not available()):
        return NO_METRICS
    return PrometheusMetrics()


def install(runtime: Reporting, registry: Any = None) -> PrometheusMetrics:
    """Report ``runtime``'s metrics into ``registry`` (default: ``prometheus_client.REGISTRY``)
    from now on, instead of wherever they went before. Safe to call again."""
    metrics = PrometheusMetrics(registry)
    runtime.use_metrics(metrics)
    return metrics
