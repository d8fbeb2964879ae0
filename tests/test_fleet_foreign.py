"""Records of another deployment in the fleet's keys (issue 18, item 1), on a real Redis.

Another deployment sharing the Redis database and prefix writes the same keys: its leader's
lease, its readings, its probe results, its confirmation lock. A member acts only on records of
its own status page and global component (and, for probe results, its own verify URL); anything
else (another page, no page at all: an older failopen) is ignored, said once as an ERROR, and the
member polls its own page. See tests/test_fleet_foreign_processes.py for the same with processes.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from typing import Any

import pytest
from _redis_kit import RedisServer, same_deployment, wait_for

from failopen import Config
from failopen.runtime import FailOpen
from failopen.testing import FakeStatusPage, FakeVerifyAPI

pytestmark = pytest.mark.timeout(60)

OTHER_PAGE = "0123456789abcdef"  # what another deployment's records carry
PROBING = {"evidence": frozenset({"status", "probe"}), "probe_interval": 0.2}


def fetches(runtime: FailOpen) -> int:
    return int(runtime.counted.count)  # type: ignore[attr-defined]


def reading(n: int, status: str, **identity: Any) -> str:
    return json.dumps({"id": f"laptop:{n}", "by": "laptop", "at": time.time(), "kind": "watcher",
                       "global_status": status, "source": "components", "regions": [],
                       **identity})


def plant_leader(client: Any, **identity: Any) -> None:
    client.set("failopen:epoch", "1")
    client.set("failopen:leader", json.dumps({"id": "laptop", "since": 1, **identity}),
               px=60_000)


def foreign_lines(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if getattr(r, "event", None) == "failopen.fleet_foreign"]


@pytest.mark.parametrize("identity", [{"page": OTHER_PAGE}, {}, {"page": "not a hash"}],
                         ids=["another page", "an older failopen", "garbage"])
def test_another_deployments_leader_and_outage_readings_are_ignored(
    fleet: Callable[..., list[FailOpen]], redis_server: RedisServer,
    caplog: pytest.LogCaptureFixture, identity: dict[str, str],
) -> None:
    (runtime,) = fleet(1)
    client = redis_server.client()
    plant_leader(client, **identity)
    with caplog.at_level(logging.WARNING, logger="failopen.fleet"):
        started = time.monotonic()
        runtime.start()
        for n in range(10):  # a fresh outage reading every poll, as a leader publishes them
            client.set("failopen:reading", reading(n, "major_outage", **identity))
            time.sleep(0.1)
        assert runtime.state.enforce, runtime.state
        assert runtime.state.global_status == "operational"
        # It polls its own page, one request per interval (0.2 s) at most.
        assert 1 <= fetches(runtime) <= (time.monotonic() - started) / 0.2 + 2
        assert runtime.fleet is not None and runtime.fleet.foreign_leader == "laptop"
        assert not runtime.fleet.leader and runtime.fleet.store_state == "redis"
        (line,) = foreign_lines(caplog)  # ten readings and twenty syncs: one line
    assert line.levelno == logging.ERROR
    message = line.getMessage()
    assert "FAILOPEN_REDIS_PREFIX" in message and "'failopen:'" in message
    assert "'laptop'" in message and runtime.config.status_url in message


def test_a_reading_without_a_page_under_our_own_leader_is_ignored(
    fleet: Callable[..., list[FailOpen]], redis_server: RedisServer,
) -> None:
    """An older failopen (or anyone) writing a reading while our leader leads: not acted on."""
    (follower,) = fleet(1)
    client = redis_server.client()
    plant_leader(client, **same_deployment(follower.config))
    follower.start()
    for n in range(5):
        client.set("failopen:reading", reading(n, "major_outage"))
        time.sleep(0.1)
    assert follower.state.enforce
    assert fetches(follower) == 0  # our own leader polls: this one follows
    assert follower.fleet is not None and follower.fleet.foreign_leader is None
    # A reading of its own page from that leader is applied as before.
    client.set("failopen:reading", reading(9, "major_outage", **same_deployment(follower.config)))
    assert wait_for(lambda: not follower.state.enforce)


def test_probe_results_of_another_verify_url_are_not_counted(
    fleet: Callable[..., list[FailOpen]], redis_server: RedisServer,
) -> None:
    (member,) = fleet(1, **PROBING)
    ours = same_deployment(member.config)
    client = redis_server.client()
    plant_leader(client, **ours)
    member.start()
    assert member.probe is not None
    for n in range(6):
        client.set("failopen:probe", json.dumps({
            "id": f"laptop:{n}", "by": "laptop", "at": time.time(), "verdict": "failed",
            "outcome": "unavailable", "reason": "timeout", "verify": OTHER_PAGE}))
        time.sleep(0.1)
    assert member.probe.counted["failed"] == 0
    assert member.fleet is not None and member.fleet.foreign_leader is None
    # The same result with this process's verify URL counts (the leader's, shared).
    client.set("failopen:probe", json.dumps({
        "id": "laptop:9", "by": "laptop", "at": time.time(), "verdict": "failed",
        "outcome": "unavailable", "reason": "timeout", "verify": ours["verify"]}))
    assert wait_for(lambda: member.probe is not None and member.probe.counted["failed"] == 1)


def test_a_leader_that_probes_another_verify_url_is_not_followed(
    fleet: Callable[..., list[FailOpen]], redis_server: RedisServer,
) -> None:
    (member,) = fleet(1, **PROBING)
    plant_leader(redis_server.client(), page=same_deployment(member.config)["page"],
                 verify=OTHER_PAGE)
    member.start()
    assert wait_for(lambda: member.probe is not None and member.probe.sent >= 2)
    assert member.fleet is not None and member.fleet.foreign_leader == "laptop"
    assert fetches(member) >= 1


def test_a_probing_member_under_a_poller_that_does_not_probe_says_to_set_evidence_alike(
    fleet: Callable[..., list[FailOpen]], redis_server: RedisServer,
    caplog: pytest.LogCaptureFixture,
) -> None:
    (member,) = fleet(1, **PROBING)
    # The poller of this very deployment (its page), without the probe: FAILOPEN_EVIDENCE unset.
    plant_leader(redis_server.client(), page=same_deployment(member.config)["page"])
    with caplog.at_level(logging.WARNING, logger="failopen.fleet"):
        member.start()
        assert wait_for(lambda: [r for r in caplog.records
                                 if getattr(r, "event", None) == "failopen.fleet_evidence_differs"])
    # It polls and probes for itself, as before, and says why without calling it another
    # deployment (whose advice, another prefix, would split this one's overrides).
    assert member.fleet is not None and member.fleet.foreign_leader == "laptop"
    assert fetches(member) >= 1
    assert foreign_lines(caplog) == []
    (line,) = [r for r in caplog.records
               if getattr(r, "event", None) == "failopen.fleet_evidence_differs"]
    assert line.levelno == logging.WARNING
    assert "not following the poller 'laptop': it watches this status page but does not " \
        "probe the verify API" in line.getMessage()
    assert "Set FAILOPEN_EVIDENCE the same in every process" in line.getMessage()


def test_the_error_is_paced_and_says_how_many_were_ignored(
    failopen_config: Config, redis_server: RedisServer, caplog: pytest.LogCaptureFixture,
) -> None:
    from failopen.engine.fleet_identity import FOREIGN_LOG_INTERVAL
    from failopen.testing import FakeClock

    clock = FakeClock(start=time.time())
    runtime = FailOpen(failopen_config.replace(store=redis_server.url, store_refresh=0.05,
                                               fleet_lease=1.0), clock=clock)
    client = redis_server.client()
    plant_leader(client, page=OTHER_PAGE)
    fleet = runtime.fleet
    assert fleet is not None
    with caplog.at_level(logging.WARNING, logger="failopen.fleet"):
        for n in range(5):
            client.set("failopen:reading", reading(n, "major_outage", page=OTHER_PAGE))
            fleet.sync()
        assert len(foreign_lines(caplog)) == 1
        clock.advance(FOREIGN_LOG_INTERVAL)
        client.set("failopen:reading", reading(5, "major_outage", page=OTHER_PAGE))
        fleet.sync()
    first, second = foreign_lines(caplog)
    assert "the poller's lease" in first.getMessage()
    # The five readings after the first line were counted, not written.
    assert "'major_outage'" in second.getMessage() and "[5 more ignored" in second.getMessage()
    assert runtime.flag.state.enforce
    runtime.stop()


def test_another_deployments_confirmation_lock_does_not_stop_ours(
    fleet: Callable[..., list[FailOpen]], redis_server: RedisServer,
    fake_status_page: FakeStatusPage,
) -> None:
    """Its check says nothing about our page: during a real outage we check ours."""
    (runtime,) = fleet(1, confirm_ttl=30.0)
    # The watcher's first turn (an operational reading) ends first: a check made during that turn
    # would share the watcher's poll (failopen.engine.first_reading), and this test is about the
    # confirmer.
    runtime.start()
    assert runtime.watcher.first_reading is not None
    assert runtime.watcher.first_reading.await_sync()
    assert runtime.flag.state.enforce
    client = redis_server.client()
    client.set("failopen:epoch", "1")
    client.set("failopen:confirm", json.dumps({"id": "laptop", "page": OTHER_PAGE}), px=60_000)
    fake_status_page.set_global("major_outage")
    assert runtime.confirmer is not None
    assert not runtime.confirm().enforce
    assert runtime.confirmer.requests == 1


def test_our_own_deployments_confirmation_lock_still_holds(
    fleet: Callable[..., list[FailOpen]], redis_server: RedisServer,
) -> None:
    (runtime,) = fleet(1, confirm_ttl=30.0)
    client = redis_server.client()
    client.set("failopen:epoch", "1")
    client.set("failopen:confirm", json.dumps({"id": "p", **same_deployment(runtime.config)}),
               px=60_000)
    runtime.confirm()
    assert runtime.confirmer is not None and runtime.confirmer.requests == 0


def test_a_process_without_a_status_page_acts_on_no_reading(
    failopen_config: Config, redis_server: RedisServer, fake_status_page: FakeStatusPage,
) -> None:
    config = failopen_config.replace(store=redis_server.url, status_url=None,
                                     store_refresh=0.05, fleet_lease=1.0)
    runtime = FailOpen(config)
    client = redis_server.client()
    plant_leader(client, page=OTHER_PAGE)
    try:
        runtime.start()
        for n in range(5):
            client.set("failopen:reading", reading(n, "major_outage", page=OTHER_PAGE))
            time.sleep(0.1)
        assert runtime.state.enforce
        assert runtime.decide(FakeVerifyAPI.BAD, path="/login").outcome == "invalid_token"
    finally:
        runtime.stop()


def test_what_a_member_watches_is_a_hash_of_its_normalised_settings() -> None:
    from failopen.engine.fleet_identity import Watched, stored_hash

    page = Watched.of("https://status.example.com", None, None).page
    assert page is not None and stored_hash(page) == page
    assert Watched.of("HTTPS://Status.Example.com:443/", None, None).page == page
    assert Watched.of("https://status.example.com", "global", None).page != page
    assert Watched.of("https://status.example.net", None, None).page != page
    verify = Watched.of("https://status.example.com", None, "https://verify.example.com/v/")
    assert verify.page == page and verify.verify is not None and verify.verify != page
    assert "example" not in (page + verify.verify)  # nothing readable about the settings
    for stored in (None, 1, "", "0123456789ABCDEF", "0123456789abcdef0", "x" * 16):
        assert stored_hash(stored) is None


def test_failopen_fleet_marks_the_processes_that_watch_another_page(
    run: Any, redis_server: RedisServer, failopen_config: Config,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    client = redis_server.client()
    ours = same_deployment(failopen_config)["page"]
    plant_leader(client, page=OTHER_PAGE)
    now = time.time()
    for proc, page in (("ours", ours), ("laptop", OTHER_PAGE), ("older", None)):
        client.set(f"failopen:proc:{proc}", json.dumps({"id": proc, "seen": now, "page": page}),
                   px=60_000)
    monkeypatch.setenv("FAILOPEN_STATUS_URL", str(failopen_config.status_url))
    report = run("fleet", "--store", redis_server.url, "--json").json()
    assert {p["id"]: p["other_page"] for p in report["processes"]} == {
        "ours": False, "laptop": True, "older": True}
    assert report["leader"]["other_page"] is True and report["page"] == ours
    text = run("fleet", "--store", redis_server.url)
    assert text.code == 0
    assert "warning: 2 of these watch another status page than " \
           f"{failopen_config.status_url}" in text.out
    # Without the settings, the leader's page is the one compared with.
    monkeypatch.delenv("FAILOPEN_STATUS_URL")
    report = run("fleet", "--store", redis_server.url, "--json").json()
    assert {p["id"]: p["other_page"] for p in report["processes"]} == {
        "ours": True, "laptop": False, "older": True}
    assert "than the leader" in run("fleet", "--store", redis_server.url).out


def test_the_error_never_shows_the_store_password(
    caplog: pytest.LogCaptureFixture, failopen_config: Config,
) -> None:
    from failopen.engine.flag import EnforcementFlag
    from failopen.engine.fleet import Fleet
    from failopen.engine.fleet_identity import Watched
    from failopen.engine.watcher import StatusWatcher
    from failopen.stores.redis import RedisStore
    from failopen.testing import free_port

    secret = "s3cret-Pa55-foreign"
    store = RedisStore(f"redis://:{secret}@127.0.0.1:{free_port()}/0")  # never reached
    watcher = StatusWatcher(None, EnforcementFlag(store=store, load=False))
    watched = Watched.of(failopen_config.status_url, None, None)
    fleet = Fleet(store, watcher, watched=watched)
    with caplog.at_level(logging.WARNING, logger="failopen.fleet"):
        fleet._check_leader(json.dumps({"id": "laptop", "page": OTHER_PAGE}).encode())
    (line,) = foreign_lines(caplog)
    assert secret not in line.getMessage() and "***" in line.getMessage()
    assert fleet.foreign_leader == "laptop" and fleet.polls
    store.close()
