"""FailOpen: the flag, the store, the watcher, the verifier and the guard, assembled from a Config.

Adapters hold one FailOpen per process. Building it makes no network call and starts no thread
(a ``file://`` or ``redis://`` store is read once: one GET, 0.5 s at most); the watcher starts on
first use (``ensure_started``), which keeps management commands, import-time code and pre-fork
masters free of background threads. With a ``redis://`` store the process is a fleet member
(:mod:`failopen.engine.fleet`) once its watcher runs; ``stop`` leaves the fleet (releasing the
lease). Until the watcher's first turn has ended, a request that would be refused waits for it,
bounded by the status timeout, one request thread per process at a time
(:mod:`failopen.engine.first_reading`): a worker started during an outage admits its first
requests as the running ones do.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import httpx

from failopen.clock import SYSTEM_CLOCK, Clock
from failopen.config import Config
from failopen.engine.first_reading import FirstReading
from failopen.engine.flag import EnforcementFlag, FlagState, Listener
from failopen.engine.fleet import Fleet
from failopen.engine.fleet_identity import Watched
from failopen.engine.guard import CONFIRM_WAIT, Decision, Guard, OutageConfirmer
from failopen.engine.listeners import ChangeListeners
from failopen.engine.outage_setup import outage_gate, per_worker_memory, second_vendor
from failopen.engine.probe import VerifyProbe, warn_probe_alone
from failopen.engine.watcher import PollResult, StatusWatcher
from failopen.exceptions import ConfigError
from failopen.fallback import FallbackChallenges
from failopen.observe.audit import BypassAudit
from failopen.observe.audit_file import AuditFile
from failopen.observe.metrics import NO_METRICS, Metrics, metrics_for
from failopen.providers.status import StatusClient
from failopen.providers.verify import HttpVerifier, Verifier, VerifyOutcome, VerifyResult
from failopen.stores import OverrideStore, open_store
from failopen.stores.redis import RedisStore

__all__ = ["FailOpen"]

logger = logging.getLogger("failopen")


class _NoVerifier:
    """Stands in when no verify URL is configured (no protected paths): refuses every token."""

    def verify(self, token: str) -> VerifyResult:
        return VerifyResult(VerifyOutcome.INVALID, "no verify URL configured")

    async def averify(self, token: str) -> VerifyResult:
        return self.verify(token)


class FailOpen:
    """Everything failopen does for one process."""

    def __init__(
        self,
        config: Config,
        *,
        store: OverrideStore | None = None,
        verifier: Verifier | None = None,
        status_transport: httpx.BaseTransport | None = None,
        verify_transport: httpx.BaseTransport | None = None,
        verify_async_transport: httpx.AsyncBaseTransport | None = None,
        clock: Clock = SYSTEM_CLOCK,
        on_poll: Callable[[PollResult], None] | None = None,
        metrics: Metrics | None = None,
        probe_verifier: Verifier | None = None,
    ) -> None:
        if (config.protected_paths or config.protected_views) and config.verify_url is None \
                and verifier is None:
            if config.provider.verify_url is not None:  # the vendor's URL waits for its key
                raise ConfigError(
                    f"FAILOPEN_PRIVATE_KEY: required when FAILOPEN_PROTECTED_PATHS or "
                    f"FAILOPEN_PROTECTED_VIEWS is set ({config.provider.title}'s secret, with "
                    f"which protected routes verify tokens)")
            raise ConfigError(
                "FAILOPEN_VERIFY_URL: required when FAILOPEN_PROTECTED_PATHS or "
                "FAILOPEN_PROTECTED_VIEWS is set (protected routes validate tokens with the "
                "verify call)"
            )
        self.config = config
        self.clock = clock
        self._stopped = False
        self.store = store if store is not None else open_store(
            config.store, prefix=config.redis_prefix, password=config.store_password)
        self.flag = EnforcementFlag(
            store=self.store, clock=clock,
            load=not getattr(self.store, "loads_in_background", False),
        )
        self.status: StatusClient | None = None
        confirmer: OutageConfirmer | None = None
        if config.status_url is not None:
            self.status = StatusClient(
                config.status_url,
                global_component=config.global_component,
                timeout=config.status_timeout,
                max_bytes=config.status_max_bytes,
                indicator_fallback=config.indicator_fallback,
                transport=status_transport,
                clock=clock,
            )
        # Without a status URL the watcher thread only keeps overrides from the store current:
        # the flag then enforces unless an operator says otherwise.
        self.watcher = StatusWatcher(
            self.status, self.flag,
            poll_interval=config.poll_interval, jitter=config.poll_jitter,
            bypass_on=config.bypass_on, open_after=config.open_after,
            close_after=config.close_after, stale_after=config.stale_after,
            backoff_max=config.backoff_max_seconds,
            max_stale_bypass=config.max_stale_bypass_seconds, store_refresh=config.store_refresh,
            clock=clock, on_poll=on_poll,
        )
        self.watcher.vendor = config.vendor
        self.watcher.watch_component(config.global_component)
        if self.status is not None:
            # A caller never waits on another's check longer than the check itself may take.
            confirmer = OutageConfirmer(
                self.status, self.watcher, ttl=config.confirm_ttl, clock=clock,
                wait=min(CONFIRM_WAIT, config.status_timeout),
            )
        #: Fleet mode (a Redis store): one poller per fleet, shared readings; else None.
        self.fleet: Fleet | None = None
        if isinstance(self.store, RedisStore):
            self.fleet = Fleet(self.store, self.watcher, lease=config.fleet_lease,
                               confirm_ttl=config.confirm_ttl, clock=clock,
                               watched=Watched.of(config.status_url, config.global_component,
                                                  config.verify_url if config.probe else None))
            self.watcher.fleet = self.fleet
            if confirmer is not None:
                confirmer.fleet = self.fleet
        if verifier is None and config.verify_url is not None:
            assert config.private_key is not None  # Config guarantees it
            verifier = HttpVerifier(
                config.verify_url, config.private_key.reveal(),
                timeout=config.verify_timeout, require_verified=config.require_verified,
                transport=verify_transport, async_transport=verify_async_transport,
                provider=config.provider, public_key=config.public_key,
                min_score=config.min_score,
            )
        self.verifier: Verifier = verifier if verifier is not None else _NoVerifier()
        self.confirmer = confirmer
        audit = BypassAudit(config.audit, clock=clock, file=self._audit_file(config),
                            window=lambda: self.flag.state)
        if audit.file is not None:
            self.flag.add_listener(audit.flag_changed)  # when each window ended, in the file
        self.guard = Guard(
            self.flag, self.verifier, confirmer, mode=config.mode, retry_after=config.retry_after,
            audit=audit,
        )
        self.guard.actions = dict(config.expected_actions)
        first = self._first_reading(config)
        self.guard.first_reading = self.watcher.first_reading = first
        if confirmer is not None:
            first.on_end.append(confirmer.first_poll_made)
        #: Where the guard, watcher and confirmer report (``FAILOPEN_METRICS``; ``use_metrics``).
        self.metrics: Metrics = NO_METRICS
        self.use_metrics(metrics if metrics is not None else metrics_for(config.metrics))
        self._changes = ChangeListeners(clock=clock)
        self.flag.add_listener(self._changes.publish)
        #: The second vendor as the fallback challenge (FAILOPEN_FALLBACK_VENDOR), else None.
        self.second_vendor = second_vendor(config, clock=clock, transport=verify_transport,
                                           async_transport=verify_async_transport)
        self.challenges: FallbackChallenges | None
        #: ``challenges`` issues the ALTCHA challenge (``GET <prefix>/challenge``) when a
        #: route's outage policy is ``fallback`` without a second vendor, else None.
        self.guard.gate, self.challenges = outage_gate(
            config, clock=clock, fleet=isinstance(self.store, RedisStore),
            vendor=self.second_vendor)
        #: Warns once when the server runs several workers, each with its own count (item 10).
        self.per_worker = per_worker_memory(self.guard.gate, config)
        #: The verify probe (``FAILOPEN_EVIDENCE=status,probe``), else None.
        self.probe: VerifyProbe | None = None
        if config.probe:
            self.probe = self._build_probe(probe_verifier, verify_transport)
            if self.status is None:
                warn_probe_alone(config.outage_policy, config.outage_policy_routes,
                                 config.provider.title)

    def _first_reading(self, config: Config) -> FirstReading:
        """What this process's first refused requests wait for (failopen.engine.first_reading)."""
        watcher = self.watcher
        # Worth waiting for when the first turn can lift enforcement: one outage reading is
        # enough (FAILOPEN_OPEN_AFTER=1: with more, a fresh process needs as many readings as
        # any other, spaced a poll apart), or the store's override (or the fleet's readings)
        # arrive only in that turn. Bounded by the status timeout, as a confirmation is.
        return FirstReading(
            wait=config.status_timeout,
            worth_waiting=(self.status is not None and config.open_after == 1)
            or getattr(self.store, "loads_in_background", False),
            running=lambda: watcher.started,
        )

    @staticmethod
    def _audit_file(config: Config) -> AuditFile | None:
        if config.audit_file is None:
            return None
        return AuditFile(config.audit_file, max_bytes=config.audit_max_bytes,
                         backups=config.audit_backups)

    @property
    def wants_user_agent(self) -> bool:
        """True when the audit file records a hash of the User-Agent (adapters pass it then)."""
        return self.guard.audit.file is not None

    def _build_probe(self, verifier: Verifier | None,
                     transport: httpx.BaseTransport | None) -> VerifyProbe:
        config = self.config
        if verifier is None:
            assert config.verify_url is not None and config.private_key is not None  # Config
            # A client and a worker pool of its own: request traffic cannot delay the probe.
            verifier = HttpVerifier(
                config.verify_url, config.private_key.reveal(), timeout=config.verify_timeout,
                require_verified=config.require_verified, transport=transport,
                clock=self.clock, lane="probe", provider=config.provider,
                public_key=config.public_key, min_score=config.min_score,
            )
        probe = VerifyProbe(
            verifier, self.watcher, interval=config.probe_interval_seconds,
            open_after=config.probe_open_after, max_bypass=config.max_stale_bypass_seconds,
            clock=self.clock, slowest=max(config.verify_timeout, config.store_refresh),
            with_page=self.status is not None,
        )
        self.watcher.probe = probe
        self.guard.outcome_window = probe.window
        return probe

    @classmethod
    def from_env(cls, **kwargs: Any) -> FailOpen:
        """Build from ``FAILOPEN_*`` environment variables."""
        return cls(Config.from_env(), **kwargs)

    def __repr__(self) -> str:
        return f"FailOpen(flag={self.flag!r}, watcher={self.watcher!r})"

    @property
    def state(self) -> FlagState:
        """The flag's current state."""
        return self.flag.state

    def on_change(self, callback: Listener) -> Callable[[], None]:
        """Call ``callback(old, new)`` with two FlagStates whenever the flag's visible state
        changes; returns a function that unsubscribes it.

        Callbacks run in order on one background thread (``failopen.listeners``), never on the
        watcher's thread nor on a request's: a slow one delays only the callbacks after it, one
        that raises is logged (one line per minute) and skipped. Each process calls its own.
        """
        return self._changes.add(callback)

    def flush_listeners(self, timeout: float = 5.0) -> bool:
        """Wait until every change so far has reached the ``on_change`` callbacks (tests,
        shutdown); False when ``timeout`` seconds pass first."""
        return self._changes.flush(timeout)

    def use_metrics(self, metrics: Metrics) -> None:
        """Report to ``metrics`` from now on, instead of where reports went so far (see
        :func:`failopen.metrics.install`)."""
        old = self.metrics
        if old is not NO_METRICS:
            self.flag.remove_listener(old.flag_changed)
            old.detach()
        self.metrics = metrics
        self.guard.metrics = self.watcher.metrics = metrics
        if self.confirmer is not None:
            self.confirmer.metrics = metrics
        if metrics is not NO_METRICS:
            metrics.bind_decisions(self.guard.counts)
            self.flag.add_listener(metrics.flag_changed)
            state = self.flag.state
            metrics.flag_changed(state, state)  # the gauges start from the flag as it is

    def ensure_started(self) -> None:
        """Start the watcher in this process if it is not running (cheap; call per request).

        After :meth:`stop` it stays stopped: decisions go on from the flag as it was left.
        """
        if not self._stopped:
            self.watcher.ensure_running()

    def start(self) -> None:
        """Start the watcher now."""
        self._stopped = False
        self._changes.resume()
        self.watcher.start()

    def stop(self) -> None:
        """Stop the watcher and release the sync connections."""
        self._stopped = True
        self.watcher.stop()
        if self.fleet is not None:
            self.fleet.stop()
        if isinstance(self.store, RedisStore):
            self.store.close()  # its sockets; a later start() connects again
        for part in (self.guard.gate.rate, self.guard.gate.used):
            close = getattr(part, "close", None)
            if close is not None:
                close()
        self.guard.audit.close()  # the summary, and the audit file written and closed
        try:
            self.metrics.flush()  # the last decisions, before the counters stop moving
        except Exception:
            logger.exception("metrics failed", extra={"event": "failopen.metrics_failed"})
        self._changes.stop(timeout=1.0)
        if self.status is not None:
            self.status.close()
        close = getattr(self.verifier, "close", None)
        if close is not None:
            close()
        probe_close = getattr(self.probe.verifier, "close", None) if self.probe else None
        if probe_close is not None:
            probe_close()
        if self.second_vendor is not None:
            getattr(self.second_vendor.verifier, "close", lambda: None)()

    async def aclose(self) -> None:
        """Stop, and release the async connections too (call on the loop that used them)."""
        self.stop()
        for verifier in (self.verifier, getattr(self.second_vendor, "verifier", None)):
            aclose = getattr(verifier, "aclose", None)
            if aclose is not None:
                await aclose()
        if self.status is not None:
            await self.status.aclose()

    def bypass(self, *, path: str = "", client: str = "", user_agent: str = "",
               policy: str = "open", route: str = "", solution: str | None = None
               ) -> Decision | None:
        """The decision when no token is needed right now, else None (see Guard.bypass).

        Adapters call this before reading a body for the token::

            decision = fo.bypass(path=p, client=c) or fo.decide(read_token(), path=p, client=c)

        ``policy`` is the route's outage policy (``open``, ``fallback``, ``closed``), ``route``
        the protected route it counts under and ``solution`` a fallback solution the request
        carries; they matter only while enforcement is off.
        """
        if not self._stopped:  # ensure_started, without a call of its own per request
            self.watcher.ensure_running()
        return self.guard.bypass(path=path, client=client, user_agent=user_agent,
                                 policy=policy, route=route, solution=solution)

    async def abypass(self, *, path: str = "", client: str = "", user_agent: str = "",
                      policy: str = "open", route: str = "", solution: str | None = None
                      ) -> Decision | None:
        """Async twin of :meth:`bypass`: the fleet's Redis, if the route's outage policy asks
        it, is asked off the event loop."""
        if not self._stopped:
            self.watcher.ensure_running()
        return await self.guard.abypass(path=path, client=client, user_agent=user_agent,
                                        policy=policy, route=route, solution=solution)

    def decide(self, token: str | None, *, path: str = "", client: str = "",
               user_agent: str = "", policy: str = "open", route: str = "",
               solution: str | None = None, action: str | None = None) -> Decision:
        """The guard's decision for one request to a protected route (``action``: the one its
        token must carry, over ``FAILOPEN_EXPECTED_ACTIONS``)."""
        if not self._stopped:
            self.watcher.ensure_running()
        return self.guard.decide(token, path=path, client=client, user_agent=user_agent,
                                 policy=policy, route=route, solution=solution, action=action)

    async def adecide(self, token: str | None, *, path: str = "", client: str = "",
                      user_agent: str = "", policy: str = "open", route: str = "",
                      solution: str | None = None, action: str | None = None) -> Decision:
        """Async twin of :meth:`decide`."""
        self.ensure_started()
        return await self.guard.adecide(token, path=path, client=client, user_agent=user_agent,
                                        policy=policy, route=route, solution=solution,
                                        action=action)

    def confirm(self) -> FlagState:
        """Check for an outage now (single-flight, cached) and return the fresh state."""
        self.ensure_started()
        if self.confirmer is not None:
            self.confirmer.confirm()
        return self.flag.state

    async def aconfirm(self) -> FlagState:
        """Async twin of :meth:`confirm`: the rare uncached check runs on a worker thread."""
        self.ensure_started()
        if self.confirmer is not None:
            await self.confirmer.aconfirm()
        return self.flag.state

    def poll_now(self) -> PollResult:
        """One status poll, outside the thread (for the CLI and tests)."""
        return self.watcher.poll_once()
