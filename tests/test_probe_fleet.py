"""The verify probe in fleet mode: one probe per fleet, shared through Redis like the reading.

Several FailOpen instances (each its own fleet member) share one real redis-server; the fakes are
served on loopback, and the watcher threads run for real.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable

import pytest
from _redis_kit import RedisServer, same_deployment, wait_for

from failopen.engine.probe_record import ProbeResult, parse_probe
from failopen.exceptions import StoreError
from failopen.runtime import FailOpen
from failopen.testing import FakeVerifyAPI

pytestmark = pytest.mark.timeout(60)

PROBING = {"evidence": frozenset({"status", "probe"}), "probe_interval": 0.5}


def leaders(runtimes: list[FailOpen]) -> list[FailOpen]:
    return [r for r in runtimes if r.fleet is not None and r.fleet.leader]


def probe_of(runtime: FailOpen) -> object:
    assert runtime.probe is not None
    return runtime.probe


def test_one_probe_per_fleet_and_every_member_counts_it(
    fleet: Callable[..., list[FailOpen]],
) -> None:
    runtimes = fleet(3, **PROBING)
    for runtime in runtimes:
        runtime.start()
    assert wait_for(lambda: len(leaders(runtimes)) == 1)
    leader = leaders(runtimes)[0]
    followers = [r for r in runtimes if r is not leader]
    assert wait_for(lambda: all(r.probe is not None and r.probe.counted["healthy"] >= 3
                                for r in runtimes))
    assert [r.probe.sent for r in followers if r.probe is not None] == [0, 0]
    assert leader.probe is not None and leader.probe.sent >= 3


def test_a_verify_outage_under_a_green_page_opens_every_member_on_the_leaders_probe(
    fleet: Callable[..., list[FailOpen]], fake_verify_api: FakeVerifyAPI,
) -> None:
    runtimes = fleet(3, **PROBING)
    for runtime in runtimes:
        runtime.start()
    assert wait_for(lambda: len(leaders(runtimes)) == 1)
    fake_verify_api.set_fault("503")

    def traffic() -> bool:
        for runtime in runtimes:
            for _ in range(3):
                runtime.decide(FakeVerifyAPI.GOOD, path="/login")
        return all(not r.state.enforce for r in runtimes)

    assert wait_for(traffic, timeout=20), [r.state for r in runtimes]
    assert all(r.state.source == "probe" for r in runtimes)
    assert all("still reads operational" in r.state.reason for r in runtimes)
    assert sum(r.probe.sent for r in runtimes if r.probe is not None) == sum(
        r.probe.sent for r in leaders(runtimes) if r.probe is not None)
    fake_verify_api.set_fault(None)
    assert wait_for(lambda: all(r.state.enforce for r in runtimes), timeout=20)


def test_garbage_in_the_probe_key_falls_back_then_rejoins(
    fleet: Callable[..., list[FailOpen]], redis_server: RedisServer,
) -> None:
    runtimes = fleet(2, **PROBING)
    for runtime in runtimes:
        runtime.start()
    assert wait_for(lambda: len(leaders(runtimes)) == 1)
    follower = next(r for r in runtimes if r not in leaders(runtimes))
    assert follower.fleet is not None and follower.probe is not None
    redis_server.client().set("failopen:probe", b"\x00garbage", px=700)
    assert wait_for(lambda: follower.fleet is not None and follower.fleet.store_state == "local")
    assert wait_for(lambda: follower.probe is not None and follower.probe.sent > 0)
    assert wait_for(lambda: all(r.fleet is not None and r.fleet.store_state == "redis"
                                for r in runtimes))
    assert all(r.state.enforce for r in runtimes)


def test_forged_failed_probes_never_open_a_member_whose_requests_are_answered(
    fleet: Callable[..., list[FailOpen]], redis_server: RedisServer,
) -> None:
    """Whoever writes Redis can place an override anyway; still, a forged result alone is one of
    the two conditions only: requests that the vendor answers keep enforcement on."""
    (member,) = fleet(1, **PROBING)
    ours = same_deployment(member.config)  # not secret: whoever reads Redis can copy them
    client = redis_server.client()
    client.set("failopen:epoch", "1")
    client.set("failopen:leader", json.dumps({"id": "elsewhere", "since": 1, **ours}),
               px=60_000)
    member.start()
    for n in range(12):
        forged = ProbeResult("failed", "unavailable", "timeout", time.time(),
                             id=f"elsewhere:{n}", by="elsewhere", verify=ours["verify"])
        client.set("failopen:probe", forged.to_json(), px=60_000)
        for _ in range(5):
            member.decide("junk-token-answered-400", path="/login")
        time.sleep(0.3)
    assert member.probe is not None and member.probe.counted["failed"] >= 6
    assert member.state.enforce


@pytest.mark.parametrize("raw", [
    b"\x00garbage",
    b"[]",
    b'{"at": 1, "verdict": "failed", "outcome": "invalid", "reason": "", "id": "a", "by": "a"}',
    b'{"at": 1, "verdict": "broken", "outcome": "unavailable", "reason": "", "id": "a", '
    b'"by": "a"}',
    b'{"at": 1e300, "verdict": "failed", "outcome": "unavailable", "reason": "", "id": "a", '
    b'"by": "a"}',
    b'{"at": NaN, "verdict": "failed", "outcome": "unavailable", "reason": "", "id": "a", '
    b'"by": "a"}',
    b'{"at": true, "verdict": "failed", "outcome": "unavailable", "reason": "", "id": "a", '
    b'"by": "a"}',
    b'{"at": 1, "verdict": "failed", "outcome": "unavailable", "reason": "\\u001b[2J", '
    b'"id": "a", "by": "a"}',
    b"x" * 5000,
])
def test_a_probe_result_failopen_did_not_write_is_refused(raw: bytes) -> None:
    with pytest.raises(StoreError):
        parse_probe(raw, now=1_800_000_000.0)


def test_no_probe_key_read_without_the_probe(
    fleet: Callable[..., list[FailOpen]], redis_server: RedisServer,
) -> None:
    (runtime,) = fleet(1)
    redis_server.client().set("failopen:probe", b"\x00garbage")
    runtime.start()
    assert wait_for(lambda: runtime.fleet is not None and runtime.fleet.leader)
    time.sleep(0.2)
    assert runtime.fleet is not None and runtime.fleet.store_state == "redis"
