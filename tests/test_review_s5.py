"""Security review of the session-5 changes: each test failed on the code before its fix."""

from __future__ import annotations

import json
import os
import re
import threading
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _redis_kit import RedisServer
from test_probe import Site

from failopen import Config
from failopen.exceptions import ConfigError
from failopen.observe.audit_file import AuditFile, check_audit_path, hash_user_agent
from failopen.providers.verify import VerifyOutcome, VerifyResult
from failopen.runtime import FailOpen
from failopen.stores.redis import RedisStore


@pytest.fixture
def sites() -> Iterator[list[Site]]:
    built: list[Site] = []
    yield built
    for s in built:
        s.close()


class _Wedged:
    """The probe's worker pool stuck (a hung DNS lookup holds both workers): no request sent."""

    def verify(self, token: str) -> VerifyResult:
        return VerifyResult(VerifyOutcome.OVERLOADED, "no free probe worker within 3s")

    async def averify(self, token: str) -> VerifyResult:
        return self.verify(token)


def test_a_probe_bypass_ends_when_the_probe_stops_giving_results(sites: list[Site]) -> None:
    # Evidence ends when failed probes stop arriving: a probe that says nothing (skipped, or no
    # result from the fleet's leader) must not keep a bypass open while the page reads
    # operational, and never past FAILOPEN_MAX_STALE_BYPASS.
    s = Site(max_stale_bypass=300.0)
    sites.append(s)
    s.api.set_fault("timeout")
    s.run(61, requests=2)
    assert not s.state.enforce and s.state.source == "probe"
    probe = s.runtime.probe
    assert probe is not None
    probe.verifier = _Wedged()
    s.run(400, requests=2)
    assert probe.counted["skipped"] > 0
    assert s.state.enforce, "a probe bypass outlived its evidence and the stale limit"


def test_the_public_flag_endpoint_shows_no_traffic_counts_in_a_probe_bypass_reason(
    sites: list[Site],
) -> None:
    # The probe block keeps request counts off the public endpoint; the flag's reason carried
    # them anyway ("37 of 40 requests' verify calls in the last 60s were unavailable"): anyone
    # could read the site's log-in volume, and the probe's error text, during an outage.
    import asyncio

    import httpx
    from failopen.integrations.asgi import FailOpenMiddleware

    s = Site()
    sites.append(s)
    s.api.set_fault("timeout")
    s.run(100, requests=7)
    assert not s.state.enforce and s.state.source == "probe"
    assert "of " in s.state.reason and "requests" in s.state.reason  # operators keep the detail

    async def app(scope: Any, receive: Any, send: Any) -> None:  # pragma: no cover - not reached
        raise AssertionError

    async def get() -> Any:
        transport = httpx.ASGITransport(app=FailOpenMiddleware(app, runtime=s.runtime))
        async with httpx.AsyncClient(transport=transport, base_url="http://site.test") as client:
            return (await client.get("/failopen/flag")).json()

    body = asyncio.run(get())
    assert body["source"] == "probe" and body["enforce"] is False
    reason = body["reason"]
    assert "verify probe failed 3 times in a row" in reason
    assert "still reads operational" in reason
    assert not re.search(r"\d+ of \d+", reason) and "verify calls in the last" not in reason
    assert "no complete answer" not in reason, "the probe's error text stays off the endpoint"


def test_audit_lines_waiting_for_a_stalled_disk_do_not_hold_what_the_attacker_sent(
    tmp_path: Path,
) -> None:
    # During a bypass every request is queued for the audit file; a line keeps 512 characters of
    # the path and a hash of the User-Agent, yet the queue (10,000 lines) and the User-Agent hash
    # cache (4,096) held the whole strings: with a stalled disk, or none at all for the cache,
    # requests with long paths and unique long User-Agents pinned hundreds of MB per worker.
    release, entered = threading.Event(), threading.Event()

    def stalled(fd: int, data: bytes) -> int:
        entered.set()
        release.wait(10)
        return os.write(fd, data)

    audit = AuditFile(str(tmp_path / "audit.jsonl"), write=stalled)
    audit.record("/login", "a", "", "bypassed_flag_off", "outage", "w")
    assert entered.wait(5)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for n in range(200):
            audit.record(f"/login/{n}" + "p" * 50_000, "203.0.113.9" + "c" * 50_000,
                         f"agent {n} " + "u" * 50_000, "bypassed_flag_off", "outage", "w")
        queued = tracemalloc.get_traced_memory()[0] - before
        release.set()
        audit.close()
        kept = tracemalloc.get_traced_memory()[0] - before
    finally:
        release.set()
        tracemalloc.stop()
    assert audit.stats()["written"] == 201
    assert queued < 2_000_000, f"200 queued lines hold {queued} bytes"
    assert kept < 2_000_000, f"{kept} bytes kept after the lines were written"
    lines = (tmp_path / "audit.jsonl").read_text().splitlines()
    last = json.loads(lines[-1])
    assert last["ua"] == hash_user_agent("agent 199 " + "u" * 50_000)
    assert len(last["path"]) <= 515 and len(last["client"]) <= 103


def test_the_audit_file_never_writes_through_a_symlink_planted_at_its_path(
    tmp_path: Path,
) -> None:
    # The writer follows its file's name (a logrotate moved it away): whoever can write to the
    # log directory could plant a link there, and each bypassed request would append a line
    # (path and client of the attacker's choosing) to any file the server's user may write.
    logs, victim = tmp_path / "logs", tmp_path / "app_settings.py"
    logs.mkdir()
    victim.write_text("DEBUG = False\n")
    path = logs / "audit.jsonl"
    audit = AuditFile(str(path))
    try:
        audit.record("/login", "a", "", "bypassed_flag_off", "outage", "w")
        audit.drain()
        os.replace(path, logs / "audit.jsonl.rotated")  # logrotate's move
        path.symlink_to(victim)
        audit.record("/login", "b", "", "bypassed_flag_off", "outage", "w")
        audit.drain()
    finally:
        audit.close()
    assert victim.read_text() == "DEBUG = False\n"
    assert audit.stats()["failed"] == 1


def test_a_symlinked_audit_file_is_refused_at_start_up(tmp_path: Path) -> None:
    target = tmp_path / "real.jsonl"
    target.write_text("")
    link = tmp_path / "audit.jsonl"
    link.symlink_to(target)
    with pytest.raises(ConfigError, match="FAILOPEN_AUDIT_FILE: .* is a symbolic link"):
        check_audit_path(str(link))


def test_a_sync_read_while_a_local_override_is_being_written_does_not_drop_it(
    failopen_config: Config, redis_server: RedisServer,
) -> None:
    # The write counter stopped a sync read before a write from being adopted, but not one read
    # while the write was on its way (counted, not yet applied by Redis): that read held the old
    # value, passed the check, and replaced what the write had just recorded. The process then
    # dropped the operator's override until the next sync (a force-on undone, alerts flapping),
    # and a FLUSHALL at that moment made it restore the store without the override.
    runtime = FailOpen(failopen_config.replace(store=redis_server.url))
    try:
        store = runtime.store
        assert isinstance(store, RedisStore)
        runtime.flag.force_off("INC-7", ttl=600)
        real_save = store._save  # the script that writes the override and the marker
        read: list[Any] = []

        def save(*args: Any, **kwargs: Any) -> Any:
            read.append(store.snapshot())  # the watcher's MGET reaches Redis first
            return real_save(*args, **kwargs)

        store._save = save
        runtime.flag.force_on("INC-7 is over: enforce", ttl=600)
        store._save = real_save
        store.note_synced(read[0][1])  # the sync goes on with what it read
        runtime.watcher.tick()
        assert (runtime.state.enforce, runtime.state.reason) == (True, "INC-7 is over: enforce")
    finally:
        runtime.stop()


def test_a_probe_interval_below_the_watcher_turn_still_weighs_the_requests(
    sites: list[Site],
) -> None:
    # The requests' window spanned (open_after - 1) x FAILOPEN_PROBE_INTERVAL, but probes run at
    # most once per watcher turn (FAILOPEN_STORE_REFRESH) and a failing one takes up to the
    # verify timeout: with an interval below those, the window covered a sliver of the streak,
    # held no requests, and the probe alone opened ("too few to weigh") while every request's
    # verify call succeeded: "a probe failing while requests succeed: never a bypass".
    s = Site(probe_interval=0.01, separate_probe=True)
    sites.append(s)
    s.probe_api.set_fault("timeout")  # only the probe's path is broken
    s.run(120, requests=2)
    assert s.runtime.probe is not None and s.runtime.probe.counted["failed"] >= 100
    assert s.bypassed() == 0 and s.state.enforce
    assert {d.outcome for d in s.decisions} == {"valid"}


@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")
def test_a_fork_while_the_redis_store_records_a_write_leaves_the_child_usable(
    fleet: Any,
) -> None:
    # The store's new write-counter lock was not renewed in a forked child (every other lock of
    # the fleet is): a gunicorn fork while the watcher thread held it (a sync's snapshot) left
    # the child's watcher stuck for good on its first sync, so its flag never changed again
    # (a bypass inherited from the parent never ended), and an override placed there hung.
    import signal

    (runtime,) = fleet(1)
    store = runtime.store
    assert isinstance(store, RedisStore) and runtime.fleet is not None
    store._raw_lock.acquire()  # as if the watcher thread were in snapshot() at fork()
    try:
        pid = os.fork()
        if pid == 0:
            signal.alarm(5)  # a hang kills the child (SIGALRM), which fails the test
            try:
                runtime.fleet.sync()
                runtime.flag.force_on("INC-9", ttl=60)
                os._exit(0 if runtime.fleet.store_state == "redis" else 1)
            except BaseException:
                os._exit(2)
    finally:
        store._raw_lock.release()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
