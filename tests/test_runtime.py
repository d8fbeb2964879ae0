"""FailOpen: assembly from a Config, the lazy watcher, decisions against served fakes, stores."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from failopen import Config
from failopen.engine.flag import EnforcementFlag
from failopen.exceptions import ConfigError
from failopen.providers.verify import VerifyOutcome, VerifyResult
from failopen.runtime import FailOpen
from failopen.stores.file import FileStore
from failopen.testing import FakeClock, FakeStatusPage, FakeVerifyAPI
from failopen.web import flag_payload

WATCHER_THREAD = "failopen.status-watcher"


def watcher_threads() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.name == WATCHER_THREAD and t.is_alive()}


def wait_for(predicate: Callable[[], bool], timeout: float = 5.0) -> bool:
    """Poll until ``predicate()`` holds; the timeout only bounds a failure, it is not asserted."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)
    return True


@pytest.fixture
def make(failopen_config: Config) -> Iterator[Callable[..., FailOpen]]:
    """Build FailOpen instances from the fixture config (slow polling unless told otherwise)."""
    built: list[FailOpen] = []

    def build(*, polled: threading.Event | None = None, **changes: Any) -> FailOpen:
        changes.setdefault("poll_interval", 30.0)
        config = failopen_config.replace(**changes)

        def on_poll(result: Any) -> None:
            if polled is not None:
                polled.set()

        runtime = FailOpen(config, on_poll=on_poll)
        built.append(runtime)
        return runtime

    yield build
    for runtime in built:
        runtime.stop()


@pytest.fixture
def started(make: Callable[..., FailOpen]) -> FailOpen:
    """A running FailOpen that has read the (operational) status page once."""
    polled = threading.Event()
    runtime = make(polled=polled)
    runtime.start()
    assert polled.wait(5)
    assert runtime.state.source == "watcher"
    return runtime


# --- building ------------------------------------------------------------------------------------


def test_building_does_no_io_and_starts_no_thread(
    make: Callable[..., FailOpen], fake_status_page: FakeStatusPage,
    fake_verify_api: FakeVerifyAPI,
) -> None:
    before = watcher_threads()
    runtime = make()
    assert runtime.watcher is not None
    assert runtime.watcher.running is False
    assert watcher_threads() == before
    assert fake_status_page.requests == 0
    assert fake_verify_api.requests == 0
    state = runtime.state
    assert (state.enforce, state.source) == (True, "default")


def test_from_env_does_no_io_either(
    monkeypatch: pytest.MonkeyPatch, fake_status_page: FakeStatusPage
) -> None:
    monkeypatch.setenv("FAILOPEN_STATUS_URL", fake_status_page.url)
    monkeypatch.setenv("FAILOPEN_POLL_INTERVAL", "12.5")
    before = watcher_threads()
    runtime = FailOpen.from_env()
    try:
        assert runtime.config.poll_interval == 12.5
        assert runtime.status is not None
        assert watcher_threads() == before
        assert fake_status_page.requests == 0
    finally:
        runtime.stop()


def test_protected_paths_need_a_verify_url() -> None:
    with pytest.raises(ConfigError, match="FAILOPEN_VERIFY_URL"):
        FailOpen(Config(protected_paths=("/login",)))


def test_protected_paths_with_an_injected_verifier_are_fine() -> None:
    class Always:
        def verify(self, token: str) -> VerifyResult:
            return VerifyResult(VerifyOutcome.VALID, "ok")

        async def averify(self, token: str) -> VerifyResult:
            return self.verify(token)

    runtime = FailOpen(Config(protected_paths=("/login",)), verifier=Always())
    try:
        assert runtime.decide("anything").outcome == "valid"
        assert runtime.watcher.source is None and runtime.confirmer is None
    finally:
        runtime.stop()


def test_repr_never_shows_the_private_key(make: Callable[..., FailOpen]) -> None:
    runtime = make()
    assert runtime.config.private_key
    assert runtime.config.private_key.reveal() not in repr(runtime)
    assert runtime.config.private_key.reveal() not in repr(runtime.config)


# --- the watcher thread --------------------------------------------------------------------------


def test_ensure_started_starts_the_watcher_once(make: Callable[..., FailOpen]) -> None:
    runtime = make()
    before = watcher_threads()
    runtime.ensure_started()
    thread = runtime.watcher._thread  # type: ignore[union-attr]
    for _ in range(5):
        runtime.ensure_started()
    runtime.decide(None)
    assert runtime.watcher._thread is thread  # type: ignore[union-attr]
    assert watcher_threads() - before == {thread}


def test_decide_starts_the_watcher_lazily(
    make: Callable[..., FailOpen], fake_status_page: FakeStatusPage
) -> None:
    polled = threading.Event()
    runtime = make(polled=polled)
    assert runtime.decide(None).status_code == 403
    assert runtime.watcher is not None and runtime.watcher.running
    assert polled.wait(5)
    assert fake_status_page.requests >= 1


def test_stop_stops_the_thread(make: Callable[..., FailOpen]) -> None:
    runtime = make(poll_interval=0.02)
    before = watcher_threads()
    runtime.start()
    [thread] = watcher_threads() - before
    runtime.stop()
    assert not thread.is_alive()
    assert runtime.watcher is not None and runtime.watcher.running is False
    runtime.stop()  # idempotent


def test_no_status_url_means_no_watcher_and_no_bypass(
    failopen_config: Config, fake_verify_api: FakeVerifyAPI
) -> None:
    runtime = FailOpen(failopen_config.replace(status_url=None))
    try:
        runtime.ensure_started()
        assert runtime.watcher.source is None and runtime.confirmer is None
        fake_verify_api.set_fault("503")
        decision = runtime.decide(FakeVerifyAPI.GOOD)
        assert (decision.allow, decision.status_code) == (False, 503)
        assert runtime.confirm().enforce is True
    finally:
        runtime.stop()


# --- decisions against served fakes --------------------------------------------------------------


def test_valid_token_is_admitted(started: FailOpen) -> None:
    decision = started.decide(FakeVerifyAPI.GOOD, path="/login", client="203.0.113.7")
    assert (decision.allow, decision.bypassed, decision.outcome) == (True, False, "valid")


@pytest.mark.parametrize("token", [FakeVerifyAPI.BAD, FakeVerifyAPI.DENIED, "nobody-knows-me"])
def test_bad_token_is_403(started: FailOpen, token: str) -> None:
    decision = started.decide(token, path="/login")
    assert (decision.allow, decision.bypassed, decision.status_code) == (False, False, 403)
    assert decision.outcome == "invalid_token"


def test_missing_token_is_403(started: FailOpen) -> None:
    decision = started.decide(None, path="/login")
    assert (decision.allow, decision.status_code, decision.outcome) == (
        False, 403, "missing_token",
    )


def test_verify_fault_during_a_confirmed_outage_bypasses(
    started: FailOpen, fake_status_page: FakeStatusPage, fake_verify_api: FakeVerifyAPI
) -> None:
    fake_verify_api.set_fault("503")
    fake_status_page.set_global("major_outage")
    asked = fake_status_page.requests
    decision = started.decide(FakeVerifyAPI.GOOD, path="/login", client="198.51.100.1")
    assert (decision.allow, decision.bypassed) == (True, True)
    assert decision.outcome == "bypassed_confirmed_outage"
    assert fake_status_page.requests == asked + 1
    state = started.state
    assert (state.enforce, state.source) == (False, "confirmed")
    assert state.global_status == "major_outage"
    # The flag is now off: the next request bypasses without a verify call.
    verifies = fake_verify_api.requests
    again = started.decide(FakeVerifyAPI.BAD, path="/login")
    assert (again.allow, again.bypassed, again.outcome) == (True, True, "bypassed_flag_off")
    assert fake_verify_api.requests == verifies


def test_verify_fault_while_operational_is_503(
    started: FailOpen, fake_status_page: FakeStatusPage, fake_verify_api: FakeVerifyAPI
) -> None:
    fake_verify_api.set_fault("503")
    decision = started.decide(FakeVerifyAPI.GOOD, path="/login")
    assert (decision.allow, decision.bypassed, decision.status_code) == (False, False, 503)
    assert decision.outcome == "cannot_verify"
    assert decision.retry_after == started.config.retry_after
    assert started.state.enforce is True


@pytest.mark.parametrize("fault", ["500", "timeout"])
def test_verify_fault_with_an_unreadable_status_page_is_503(
    make: Callable[..., FailOpen], fake_status_page: FakeStatusPage,
    fake_verify_api: FakeVerifyAPI, fault: str,
) -> None:
    runtime = make(verify_timeout=0.2, status_timeout=0.2)
    fake_verify_api.set_fault(fault)
    fake_status_page.set_fault("500")
    decision = runtime.decide(FakeVerifyAPI.GOOD, path="/login")
    assert (decision.allow, decision.status_code) == (False, 503)
    assert runtime.state.enforce is True


def test_rate_limited_verify_never_bypasses(
    started: FailOpen, fake_status_page: FakeStatusPage, fake_verify_api: FakeVerifyAPI
) -> None:
    fake_verify_api.set_fault("429")
    fake_status_page.set_global("major_outage")
    decision = started.decide(FakeVerifyAPI.GOOD, path="/login")
    assert (decision.allow, decision.bypassed, decision.outcome) == (False, False, "rate_limited")
    assert started.state.enforce is True


async def _release_async_clients(runtime: FailOpen) -> None:
    await runtime.aclose()


@pytest.mark.anyio
async def test_adecide_end_to_end(
    started: FailOpen, fake_status_page: FakeStatusPage, fake_verify_api: FakeVerifyAPI
) -> None:
    try:
        assert (await started.adecide(FakeVerifyAPI.GOOD)).outcome == "valid"
        assert (await started.adecide(FakeVerifyAPI.BAD)).status_code == 403
        fake_verify_api.set_fault("503")
        fake_status_page.set_global("partial_outage")
        decision = await started.adecide(FakeVerifyAPI.GOOD, path="/login")
        assert (decision.allow, decision.bypassed) == (True, True)
        assert started.state.source == "confirmed"
    finally:
        await _release_async_clients(started)


@pytest.mark.anyio
async def test_aclose_releases_the_async_verify_client(started: FailOpen) -> None:
    assert (await started.adecide(FakeVerifyAPI.GOOD)).outcome == "valid"
    client, _ = started.verifier._async_client()  # type: ignore[attr-defined]
    await started.aclose()
    assert client.is_closed
    assert not started.watcher.running


# --- confirm() -----------------------------------------------------------------------------------


def test_confirm_reads_the_status_page_now(
    started: FailOpen, fake_status_page: FakeStatusPage
) -> None:
    fake_status_page.set_global("major_outage")
    state = started.confirm()
    assert (state.enforce, state.source) == (False, "confirmed")
    assert state.global_status == "major_outage"


def test_confirm_while_operational_keeps_enforcing(
    started: FailOpen, fake_status_page: FakeStatusPage
) -> None:
    fake_status_page.set_region("eu-west-1", "major_outage")  # regional only
    state = started.confirm()
    assert state.enforce is True
    assert state.global_status == "operational"


def test_confirm_is_cached_for_its_ttl(
    make: Callable[..., FailOpen], fake_status_page: FakeStatusPage
) -> None:
    polled = threading.Event()
    runtime = make(polled=polled, confirm_ttl=60.0)
    runtime.start()
    assert polled.wait(5)
    asked = fake_status_page.requests
    for _ in range(20):
        runtime.confirm()
    assert fake_status_page.requests == asked + 1


# --- a shared file store -------------------------------------------------------------------------


def test_file_store_override_reaches_another_instance(
    make: Callable[..., FailOpen], tmp_path: Path
) -> None:
    store = (tmp_path / "override.json").as_uri()
    a = make(store=store, store_refresh=0.02)
    b = make(store=store, store_refresh=0.02)
    a.start()
    b.start()
    assert wait_for(lambda: b.state.source == "watcher")

    a.flag.force_off("vendor outage, INC-7", ttl=3600)
    assert a.state.enforce is False
    assert wait_for(lambda: b.state.source == "override"), b.state
    state = b.state
    assert (state.enforce, state.reason) == (False, "vendor outage, INC-7")
    assert state.expires_at is not None
    assert b.decide(FakeVerifyAPI.BAD).bypassed is True

    a.flag.automatic("outage over")
    assert wait_for(lambda: b.state.source != "override"), b.state
    assert b.state.enforce is True
    assert b.decide(FakeVerifyAPI.BAD).status_code == 403


def test_file_store_override_placed_before_start_is_read_at_build(
    make: Callable[..., FailOpen], tmp_path: Path
) -> None:
    store = (tmp_path / "override.json").as_uri()
    make(store=store).flag.force_on("drill")
    late = make(store=store)
    assert (late.state.enforce, late.state.source, late.state.reason) == (True, "override", "drill")


def test_without_a_status_url_overrides_still_reach_running_processes(tmp_path: Path) -> None:
    url = (tmp_path / "override.json").as_uri()
    runtime = FailOpen(Config(store=url, store_refresh=0.02))
    try:
        runtime.ensure_started()
        EnforcementFlag(store=FileStore(tmp_path / "override.json")).force_off("ops", ttl=60)
        assert wait_for(lambda: not runtime.state.enforce), runtime.state
        assert runtime.decide(None).bypassed
    finally:
        runtime.stop()


def test_an_override_reaches_a_running_process_within_seconds_at_the_default_refresh(
    tmp_path: Path,
) -> None:
    # docs/operations.md promises "within about a second" with the default FAILOPEN_STORE_REFRESH.
    config = Config(store=(tmp_path / "override.json").as_uri())
    assert config.store_refresh == 1.0
    runtime = FailOpen(config)
    try:
        runtime.ensure_started()
        time.sleep(0.1)  # past the thread's first look at the store: the change must be polled
        assert (runtime.state.enforce, runtime.state.source) == (True, "default")
        operator = EnforcementFlag(store=FileStore(tmp_path / "override.json"))
        written = time.monotonic()
        operator.force_off("vendor ticket 1234", ttl=1800)
        assert wait_for(lambda: runtime.state.source == "override", timeout=3.0), runtime.state
        assert time.monotonic() - written < 3.0
        assert (runtime.state.enforce, runtime.state.reason) == (False, "vendor ticket 1234")
    finally:
        runtime.stop()


def test_the_watcher_gets_the_proportional_backoff_and_the_stale_limit(
    make: Callable[..., FailOpen],
) -> None:
    runtime = make(poll_interval=5.0)
    assert runtime.watcher.backoff_max == 50.0
    assert runtime.watcher.max_stale_bypass == 900.0
    runtime = make(poll_interval=5.0, backoff_max=20.0, max_stale_bypass=60.0)
    assert (runtime.watcher.backoff_max, runtime.watcher.max_stale_bypass) == (20.0, 60.0)


def test_the_flag_endpoint_payload_shows_why_the_reading_is_stale(
    failopen_config: Config,
) -> None:
    clock = FakeClock()
    page = FakeStatusPage(clock=clock)
    runtime = FailOpen(failopen_config.replace(poll_interval=10.0, stale_after=30.0),
                       status_transport=page.transport(), clock=clock)
    try:
        runtime.poll_now()
        page.set_fault("503")
        runtime.poll_now()
        runtime.watcher.tick()
        assert flag_payload(runtime.state)["error"] is None, "not stale yet"
        clock.advance(31.0)
        runtime.watcher.tick()
        payload = flag_payload(runtime.state)
        assert payload["stale"] is True
        assert "HTTP 503" in payload["error"]
        page.set_fault(None)
        runtime.poll_now()
        assert flag_payload(runtime.state)["error"] is None
    finally:
        runtime.stop()


def test_confirm_during_a_slow_check_answers_from_the_flag_at_once(
    failopen_config: Config,
) -> None:
    """The flag endpoint's ``?confirm=1`` under a flood, with a status page that hangs: one
    caller makes the check and is held at most the status timeout; everyone else gets the flag as
    it is after the short wait, instead of queueing on the check."""
    gate = threading.Event()
    asked = threading.Event()
    page = FakeStatusPage()
    page.set_global("major_outage")

    def slow(request: httpx.Request) -> httpx.Response:
        asked.set()
        gate.wait(10)
        return page.transport().handle_request(request)

    runtime = FailOpen(failopen_config.replace(status_timeout=0.2),
                       status_transport=httpx.MockTransport(slow))
    assert runtime.confirmer is not None
    assert runtime.confirmer.wait == 0.2, "never longer than the status timeout"
    runtime.confirmer.wait = 0.01
    runtime.ensure_started = lambda: None  # type: ignore[method-assign]  # no watcher polls
    answers: list[bool] = []
    try:
        first = threading.Thread(target=lambda: answers.append(runtime.confirm().enforce))
        first.start()
        assert asked.wait(5)
        for _ in range(20):  # the flood, while the check hangs
            assert runtime.confirm().enforce is True
        first.join(5)
        assert not first.is_alive(), "the checking caller outlived the status timeout"
        assert answers == [True], "a check that timed out is no evidence"
    finally:
        gate.set()
        runtime.stop()
