"""reCAPTCHA with FAILOPEN_EVIDENCE=probe and no status page: junk never opens, the vendor down
for everyone opens within the probe's streak, recovery closes.

The real runtime (flag, watcher, guard, probe, HttpVerifier with the reCAPTCHA adapter) over the
reCAPTCHA fake on a FakeClock, one watcher step at a time.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest

from failopen import Config, ConfigError, Decision
from failopen.runtime import FailOpen
from failopen.testing import FakeClock, FakeRequest, Reply, as_transport
from failopen.testing.providers import FakeRecaptchaVerify

INTERVAL = 30.0


class Site:
    """One process of a reCAPTCHA site, evidence from the probe alone, stepped by hand."""

    def __init__(self, **changes: Any) -> None:
        self.clock = FakeClock()
        self.api = FakeRecaptchaVerify(clock=self.clock)
        settings: dict[str, Any] = {
            "vendor": "recaptcha", "evidence": frozenset({"probe"}),
            "private_key": self.api.private_key,
            "verify_url": "https://verify.test" + self.api.path,
            "protected_paths": ("/login",), "poll_interval": INTERVAL, "poll_jitter": 0.0,
            "outage_rate": "none",
        }
        settings.update(changes)
        #: True: only the probe's calls fail (its path to the vendor is cut); users' pass.
        self.probe_path_cut = False
        transport = as_transport(self._route)
        self.runtime = FailOpen(Config(**settings), verify_transport=transport,
                                verify_async_transport=transport, clock=self.clock)
        self.decisions: list[Decision] = []

    def _route(self, request: FakeRequest) -> Reply:
        if self.probe_path_cut and b"failopen-probe-" in request.body:
            return Reply(status=503)
        return self.api.handler(request)

    def step(self, *, requests: int = 0, token: str | None = None) -> None:
        probe = self.runtime.probe
        assert probe is not None
        probe.run_due()
        self.runtime.watcher.tick()
        for _ in range(requests):
            self.decisions.append(self.runtime.guard.decide(
                token if token is not None else self.api.issue_token(score=0.9),
                path="/login", client="203.0.113.9"))
        self.clock.advance(1.0)

    def run(self, seconds: int, **kwargs: Any) -> None:
        for _ in range(seconds):
            self.step(**kwargs)

    @property
    def enforcing(self) -> bool:
        return self.runtime.flag.state.enforce


@pytest.fixture
def site() -> Iterator[Site]:
    built = Site()
    yield built
    built.runtime.stop()


def test_no_status_page_is_read_and_the_probe_runs(site: Site) -> None:
    assert site.runtime.status is None and site.runtime.confirmer is None
    site.run(5, requests=1)
    assert [d.outcome for d in site.decisions] == ["valid"] * 5
    assert site.runtime.probe is not None and site.runtime.probe.sent == 1


def test_junk_tokens_never_open(site: Site) -> None:
    # Hours of junk: the probe gets its answer (invalid-input-response) every time.
    site.run(3600, requests=3, token="junk-" + "x" * 40)
    assert site.enforcing
    assert {d.outcome for d in site.decisions} == {"invalid_token"}


@pytest.mark.parametrize("fault", ["503", "timeout", "not_json", "reset"])
def test_the_vendor_down_for_everyone_opens_within_the_streak_and_recovery_closes(
        site: Site, fault: str) -> None:
    site.run(60, requests=1)
    site.api.set_fault(fault)
    opened_after = None
    for second in range(600):
        site.step(requests=1)
        if not site.enforcing:
            opened_after = second
            break
    # Three failed probes in a row (FAILOPEN_PROBE_OPEN_AFTER), 30 s apart, with the requests'
    # own calls failing beside them.
    assert opened_after is not None and opened_after <= 3 * INTERVAL + 1
    state = site.runtime.flag.state
    assert state.source == "probe" and "no status page is watched" in state.reason
    before = len(site.decisions)
    site.run(10, requests=1)
    assert {d.outcome for d in site.decisions[before:]} == {"bypassed_flag_off"}
    site.api.set_fault(None)
    site.run(3 * int(INTERVAL))  # FAILOPEN_CLOSE_AFTER healthy probes
    assert site.enforcing
    site.run(1, requests=1)
    assert site.decisions[-1].outcome == "valid"


def test_a_429_and_a_wrong_secret_never_open(site: Site) -> None:
    site.api.set_fault("429")
    site.run(600, requests=1)
    assert site.enforcing
    wrong = Site(private_key="not-the-secret")
    try:
        wrong.run(600, requests=1)
        assert wrong.enforcing
        assert {d.outcome for d in wrong.decisions} == {"misconfigured"}
    finally:
        wrong.runtime.stop()


def test_the_vendor_down_but_tokens_verified_in_between_never_opens(site: Site) -> None:
    # Only the probe's path fails (its junk token meets 503s); real users' tokens verify.
    site.probe_path_cut = True
    site.run(600, requests=1)
    assert site.enforcing
    assert site.runtime.probe is not None and site.runtime.probe.counted["failed"] >= 15


def test_start_up_warns_when_the_probe_alone_drives_an_open_route(
        caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="failopen.probe"):
        Site().runtime.stop()
    assert any(getattr(r, "event", "") == "failopen.probe_alone_opens" for r in caplog.records)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="failopen.probe"):
        Site(outage_policy="closed").runtime.stop()
    assert not [r for r in caplog.records if getattr(r, "event", "") ==
                "failopen.probe_alone_opens"]


def test_probe_alone_refuses_a_status_page_it_would_ignore() -> None:
    with pytest.raises(ConfigError, match="leaves the status page out"):
        Config(vendor="recaptcha", evidence=frozenset({"probe"}), private_key="k",
               status_url="https://status.test")
    with pytest.raises(ConfigError, match="probe needs FAILOPEN_VERIFY_URL"):
        Config(vendor="recaptcha", evidence=frozenset({"probe"}))
    # Turnstile's preset page is left out when the probe alone is the evidence.
    turnstile = Config(vendor="turnstile", evidence=frozenset({"probe"}), private_key="k")
    assert turnstile.status_url is None


def test_a_probe_bypass_after_a_long_uptime_lasts_until_its_own_limit(site: Site) -> None:
    # The watcher's thread counted staleness from its start even without a page: once up longer
    # than FAILOPEN_MAX_STALE_BYPASS (900 s), the stale rule ended each probe bypass the moment
    # it opened. The thread's start is what the watcher does before its first turn.
    site.runtime.watcher._before_start()
    site.run(1000, requests=1)
    assert site.runtime.flag.state.stale is False  # no page: nothing to grow stale
    site.api.set_fault("503")
    site.run(3 * int(INTERVAL) + 5, requests=1)
    assert not site.enforcing
    site.run(300, requests=1)  # the outage goes on: so does the bypass
    assert not site.enforcing and site.runtime.flag.state.source == "probe"
