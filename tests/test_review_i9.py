"""Findings of the security review of issue #9: each test failed on the merged main."""

from __future__ import annotations

import pytest

from failopen.engine.flag import EnforcementFlag, FlagState
from failopen.engine.watcher import StatusWatcher
from failopen.exceptions import StatusUnavailable
from failopen.providers.status import StatusReport
from failopen.testing.clock import FakeClock


def _report(status: str) -> StatusReport:
    return StatusReport(global_status=status, global_component=None, regions=(), fetched_at=0.0,
                        source="components")


class _Page:
    """Fails (costing a whole timeout) until ``operational_from``, then reads operational."""

    def __init__(self, clock: FakeClock, operational_from: float, timeout: float) -> None:
        self.clock, self.operational_from, self.timeout = clock, operational_from, timeout

    def fetch(self) -> StatusReport:
        if self.clock.monotonic() < self.operational_from:
            self.clock.advance(self.timeout)
            raise StatusUnavailable("connection reset by peer")
        self.clock.advance(1.0)
        return _report("operational")


def test_a_confirmed_bypass_opened_during_backoff_is_polled_every_interval() -> None:
    """While the watcher backs off (enforcing, page failing), a request's confirmation reads an
    outage and turns enforcement off. The page then reads operational: the watcher must not sleep
    out its backoff (up to backoff_max) before it looks again, or the bypass outlives the outage
    by minutes (issue #9 B4: back within close_after intervals plus one status timeout)."""
    clock = FakeClock()
    interval, timeout, close_after = 30.0, 5.0, 2
    confirm_at = clock.monotonic() + 1631.0  # just after a poll, deep in the backoff
    back = confirm_at + 1.0
    page = _Page(clock, operational_from=back, timeout=timeout)
    watcher = StatusWatcher(page, EnforcementFlag(clock=clock), poll_interval=interval,
                            jitter=0.1, close_after=close_after, backoff_max=300.0, clock=clock,
                            random_fraction=lambda: 1.0, max_stale_bypass=None)
    resumed: list[float] = []
    confirmed: list[float] = []

    def on_change(old: FlagState, new: FlagState) -> None:
        if new.enforce and not old.enforce:
            resumed.append(clock.monotonic())
            watcher._stop.set()

    real_tick = watcher.tick

    def tick() -> None:
        # What OutageConfirmer does on a request thread: one good reading, source "confirmed".
        if not confirmed and clock.monotonic() >= confirm_at:
            confirmed.append(clock.monotonic())
            watcher.observe(_report("major_outage"), source="confirmed",
                            started=clock.monotonic())
            assert watcher.flag.enforce is False
        real_tick()
        if clock.monotonic() > back + 3600:
            watcher._stop.set()  # a bound for a failing run

    watcher.tick = tick  # type: ignore[method-assign]
    watcher.flag.add_listener(on_change)
    watcher._loop()
    assert confirmed and resumed, "enforcement never came back"
    assert resumed[-1] <= back + close_after * interval + timeout, (
        f"enforcement resumed {resumed[-1] - back:g}s after the page recovered"
    )


def test_a_huge_content_disposition_is_not_parsed_on_the_event_loop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A multipart part whose Content-Disposition holds a 1 MiB unterminated quoted string held
    the ASGI loop ~150 ms per MiB in the parameter parser (item 12 bounded JSON and urlencoded,
    not this). The token's own header is ``form-data; name="<field>"``: a long one is never the
    token, so it is not parsed at all, and the token in a later part is still found."""
    from failopen import web
    from failopen.web import body_tokens as _body_tokens

    seen: list[int] = []
    real = _body_tokens._header_param

    def spy(value: str, param: str) -> str | None:
        seen.append(len(value))
        return real(value, param)

    monkeypatch.setattr(_body_tokens, "_header_param", spy)
    body = (b'--XX\r\nContent-Disposition: form-data; x=1; name="' + b"a" * (1 << 20)
            + b'\r\n\r\nv\r\n--XX\r\nContent-Disposition: form-data; name="tok"\r\n\r\n'
            b"T0KEN\r\n--XX--\r\n")
    assert web.token_from_body("multipart/form-data; boundary=XX", body, "tok") == "T0KEN"
    assert max(seen) <= 1024, f"parsed a {max(seen)}-character header on the loop"


@pytest.mark.parametrize("status", ["degraded_performance", "under_maintenance", "recovering"])
def test_a_bypass_ends_when_the_page_stops_reporting_an_outage(status: str) -> None:
    """After a major outage, Statuspage operators commonly hold the component at
    degraded_performance for hours while monitoring. The spec says degraded means the platform
    still functions, and bypass_on says it is no outage: enforcement must come back, not wait
    for the word "operational" (evidence of an outage ended with the last impaired reading)."""
    clock = FakeClock()
    readings = [_report("major_outage")] + [_report(status)] * 20

    class Page:
        def fetch(self) -> StatusReport:
            return readings.pop(0)

    watcher = StatusWatcher(Page(), EnforcementFlag(clock=clock), poll_interval=30.0,
                            jitter=0.0, close_after=2, clock=clock)
    watcher.poll_once()
    assert watcher.flag.enforce is False
    for _ in range(20):
        clock.advance(30.0)
        watcher.poll_once()
        watcher.tick()
    assert watcher.flag.enforce is True, watcher.flag.state.reason


def test_the_bypass_summary_keeps_paths_and_clients_bounded(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """During an outage every protected request is counted by path and client, both chosen by
    the caller: 1000 distinct 16 KiB paths held ~16 MiB until the summary, and the summary line
    quoted five of them whole (80 KiB per line)."""
    import logging

    from failopen.observe.audit import BypassAudit

    clock = FakeClock()
    audit = BypassAudit(clock=clock)
    with caplog.at_level(logging.WARNING, logger="failopen.audit"):
        for i in range(1000):
            audit.record(f"/login/{i:04d}" + "x" * 16384, "203.0.113.7" + "y" * 16384, "outage")
        held = sum(map(len, audit._paths)) + sum(map(len, audit._clients))
        audit.flush()
    assert held <= 1000 * 2 * 512, f"{held} characters of paths and clients held"
    assert max(len(r.getMessage()) for r in caplog.records) <= 8192


@pytest.mark.parametrize("actor", [
    "staff:ann (ops)", "staff:o'brien(at)example.com", "admin-token"])
def test_the_public_flag_never_names_who_placed_an_override(actor: str) -> None:
    """The flag endpoint answers anyone; who placed an override (a staff user name) is for the
    audit log. A user name with a parenthesis slipped past the pattern that removes it."""
    from failopen import web
    from failopen.stores.file import FileStore

    class Shared(FileStore):  # any store other processes see; never written here
        def __init__(self) -> None:
            pass

        def save(self, override: object) -> None:
            pass

        def load(self) -> None:
            return None

        def changed(self) -> bool:
            return False

    flag = EnforcementFlag(clock=FakeClock())
    status, answer = web.handle_override(flag, b'{"enforce": false, "reason": "vendor down"}',
                                         actor=actor, store=Shared())
    assert status == 200
    assert answer["flag"]["reason"] == "vendor down"
    assert web.flag_payload(flag.state)["reason"] == "vendor down"


def test_a_pinned_global_component_that_became_a_group_does_not_count() -> None:
    """A group reports the worst status of its members, so a regional outage reads as global:
    the configured path refuses a group; the pinned one (a guess kept for the process's life)
    must too, or a page reorganised under a running process bypasses on a regional outage."""
    import json

    from failopen.exceptions import StatusError
    from failopen.providers.status_documents import parse_components

    def page(global_is_group: bool) -> bytes:
        return json.dumps({"page": {"id": "p"}, "components": [
            {"id": "g", "name": "Platform", "status": "major_outage", "description": None,
             "group": global_is_group, "group_id": None},
            {"id": "r1", "name": "US", "status": "major_outage", "description": "us-east-1",
             "group": False, "group_id": "g" if global_is_group else None},
            {"id": "r2", "name": "EU", "status": "operational", "description": "eu-west-1",
             "group": False, "group_id": "g" if global_is_group else None},
        ]}).encode()

    first = parse_components(page(False), fetched_at=0.0)
    assert first.global_component is not None and first.global_component.id == "g"
    with pytest.raises(StatusError):
        parse_components(page(True), fetched_at=0.0, pinned=("g", "Platform"))
