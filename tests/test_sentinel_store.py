"""The Redis store behind a real Sentinel (issue 22, items 7 and 8): it finds the primary, says
when no replica confirmed an override, names what failed without the password, ignores a rogue
sentinel that does not know the password, and ``failopen check``, ``fleet`` and ``watch`` work
on it."""

# The kit's fixtures are imported by name, and each test takes one as an argument.
# ruff: noqa: F811

from __future__ import annotations

import json
import logging
import time
from typing import Any

import pytest
from _check_kit import env, lines, loopback_only  # noqa: F401
from _redis_kit import needs_redis, wait_for
from _sentinel_kit import SENTINEL_PASSWORD, SERVICE, SentinelSet, wait_failover

from failopen.engine.flag import EnforcementFlag
from failopen.exceptions import StoreError
from failopen.fallback.used import MemoryUsedSolutions, RedisUsedSolutions
from failopen.stores import open_store
from failopen.stores.redis import RedisStore
from failopen.testing import FakeClock, FakeStatusPage

pytestmark = [needs_redis, pytest.mark.timeout(90)]


def _store(url: str, **kwargs: Any) -> RedisStore:
    store = open_store(url, **kwargs)
    assert isinstance(store, RedisStore)
    return store


def test_the_store_writes_on_the_primary_the_sentinel_names(
    sentinel_set_with_password: SentinelSet, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    servers = sentinel_set_with_password
    # A generous wait for the replica (the store's timeout): what is tested is that save()
    # waits for it, not how fast a loaded machine replicates (0.5 s was missed under CI's load).
    store = RedisStore(servers.url, timeout=5.0)
    EnforcementFlag(store=store).force_on("drill", ttl=300)
    primary, replica = servers.client("primary"), servers.client("replica")
    assert primary.get("failopen:override") is not None
    # save() waited for the replica: it holds the override as soon as save returns.
    assert replica.get("failopen:override") == primary.get("failopen:override")
    assert "no replica confirmed" not in caplog.text
    assert SENTINEL_PASSWORD not in caplog.text + repr(store) + store.describe()


def test_an_override_no_replica_confirmed_is_said(
    sentinel_set: SentinelSet, caplog: pytest.LogCaptureFixture
) -> None:
    store = _store(sentinel_set.url)
    sentinel_set.servers["replica"].pause()
    try:
        # The replica stays frozen until save() returns: a WAIT without a bound would hang here.
        began = time.monotonic()
        EnforcementFlag(store=store).force_on("drill", ttl=300)
        waited = time.monotonic() - began
    finally:
        sentinel_set.servers["replica"].resume()
    assert "no replica confirmed it within 0.5 s" in caplog.text
    # The replica catches up once it runs again (its link may take a moment to come back).
    assert wait_for(lambda: sentinel_set.client("replica").get("failopen:override")
                    == sentinel_set.client("primary").get("failopen:override"), timeout=10)
    assert waited < 10  # the store's 0.5 s, with room for a loaded machine; never unbounded
    # The override is on the primary all the same: the write is done, only unconfirmed.
    assert sentinel_set.client("primary").get("failopen:override") is not None
    caplog.clear()
    EnforcementFlag(store=store).force_on("drill again", ttl=300)
    assert "no replica confirmed" not in caplog.text


def test_a_lifted_override_stays_lifted_after_a_failover(sentinel_set: SentinelSet) -> None:
    store = _store(sentinel_set.url)
    flag = EnforcementFlag(store=store)
    flag.force_off("INC-1", ttl=300)
    flag.automatic("over")  # the lift waits for the replica too: a force-off must not come back
    sentinel_set.servers["primary"].kill()
    wait_failover(sentinel_set)
    assert wait_for(lambda: _answers(store), timeout=20)
    assert store.load() is None
    assert sentinel_set.client("replica").get("failopen:override") is None


def _answers(store: RedisStore) -> bool:
    try:
        store.call("PING", store.client.ping)
    except StoreError:
        time.sleep(0.1)
        return False
    return True


def test_a_claim_near_expiry_holds_while_redis_clock_is_ahead(
    sentinel_set: SentinelSet,
) -> None:
    """Issue 31, item 4, through a sentinel: the servers' clock 10 minutes behind Redis's, a
    solution with 5 s left is claimed once (SET NX PXAT stored it already expired)."""
    sentinel_set.client("primary").set("failopen:fallback:since", "0")
    clock = FakeClock(start=time.time() - 600)
    made = [RedisUsedSolutions(sentinel_set.url, password=None, prefix="failopen:", timeout=0.5,
                               fallback=MemoryUsedSolutions(clock=clock), clock=clock)
            for _ in range(2)]
    try:
        expires = clock.time() + 5
        assert made[0].claim("s5", expires, issued_at=expires - 300) is True
        assert made[1].claim("s5", expires, issued_at=expires - 300) is False
        assert sentinel_set.client("primary").pttl("failopen:fallback:used:s5") > 5_000
    finally:
        for used in made:
            used.close()


def test_a_wrong_password_is_named_without_it(sentinel_set_with_password: SentinelSet) -> None:
    wrong = "wrong-sentinel-password-recognisable"
    url = f"redis+sentinel://:{wrong}@{sentinel_set_with_password.hosts}/{SERVICE}/0"
    store = _store(url)
    with pytest.raises(StoreError) as raised:
        store.load()
    text = str(raised.value)
    assert "a sentinel refused the password" in text and "requirepass" in text
    hosts = sentinel_set_with_password.hosts.replace(",", ", ")
    assert f"the primary of {SERVICE!r} (sentinels {hosts})" in text
    assert "recognisable" not in text and SENTINEL_PASSWORD not in text


def test_an_unknown_service_and_no_sentinel_at_all_are_told_apart(
    sentinel_set: SentinelSet
) -> None:
    with pytest.raises(StoreError, match="name no healthy primary for that service: is that the "
                                         "name in 'sentinel monitor'"):
        _store(f"redis+sentinel://{sentinel_set.hosts}/othermaster/0").load()
    dead = f"127.0.0.1:{sentinel_set.dead_sentinel_port}"
    with pytest.raises(StoreError, match="no sentinel answered: are they up"):
        _store(f"redis+sentinel://{dead}/{SERVICE}/0").load()


def test_a_sentinel_that_wants_a_password_the_store_does_not_give(
    sentinel_set_with_password: SentinelSet
) -> None:
    url = f"redis+sentinel://{sentinel_set_with_password.hosts}/{SERVICE}/0"
    with pytest.raises(StoreError, match="a sentinel wants a password and the store gives "
                                         "none: add it to FAILOPEN_STORE_PASSWORD"):
        _store(url).load()


def test_an_unauthenticated_sentinel_is_warned_about(
    run: Any, env: pytest.MonkeyPatch, sentinel_set: SentinelSet
) -> None:
    # Anyone who reaches it can name another primary: check says so.
    env.setenv("FAILOPEN_STORE", sentinel_set.url)
    status, detail = lines(run("check").out)["store"]
    assert status == "warning"
    assert f"(sentinels 127.0.0.1:{sentinel_set.sentinel_port} answer without a password: " \
        "anyone who reaches them can name another primary; give them requirepass)" in detail


# --- the commands ---------------------------------------------------------------------------


def test_check_on_a_sentinel_store(run: Any, env: pytest.MonkeyPatch,
                                   sentinel_set_with_password: SentinelSet) -> None:
    servers = sentinel_set_with_password
    env.setenv("FAILOPEN_STORE", servers.url)
    for argv in (["check"], ["check", "--json"], ["check", "-v"]):
        shown = run(*argv)
        assert shown.code == 0, shown.out
        assert SENTINEL_PASSWORD not in shown.out + shown.err
    status, detail = lines(run("check").out)["store"]
    assert status == "ok"
    assert detail.startswith(f"redis+sentinel://:***@{servers.hosts}/{SERVICE}/0 (prefix "
                             f"'failopen:'): connected, authenticated, to the primary "
                             f"127.0.0.1:{servers.ports['primary']} named by the sentinels")
    assert lines(run("check").out)["fleet identity"][1].startswith(
        f"fleet member on redis+sentinel://:***@{servers.hosts}/{SERVICE}/0")


def test_check_with_the_wrong_password_is_a_clear_problem(
    run: Any, env: pytest.MonkeyPatch, sentinel_set_with_password: SentinelSet
) -> None:
    env.setenv("FAILOPEN_STORE", f"redis+sentinel://{sentinel_set_with_password.hosts}/"
                                 f"{SERVICE}/0")
    env.setenv("FAILOPEN_STORE_PASSWORD", "wrong-sentinel-password-recognisable")
    for argv in (["check"], ["check", "--json"], ["check", "-v"]):
        shown = run(*argv)
        assert shown.code == 1
        assert "recognisable" not in shown.out + shown.err
    status, detail = lines(run("check").out)["store"]
    assert status == "problem" and "a sentinel refused the password" in detail


def test_fleet_and_watch_json_on_a_sentinel_store(
    run: Any, sentinel_set_with_password: SentinelSet, fake_status_page: FakeStatusPage,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    url = sentinel_set_with_password.url
    watched = run("watch", "--status-url", fake_status_page.url, "--interval", "0.05", "--json",
                  "--count", "3", "--store", url, "-v")
    assert watched.code == 0, watched.err
    shown = [json.loads(line) for line in watched.out.splitlines()]
    assert all(line["store"] == "redis" and line["leader"] is True for line in shown)
    fleet = run("fleet", "--store", url, "--json")
    assert fleet.code == 0, fleet.err
    assert json.loads(fleet.out)["store"].startswith("redis+sentinel://:***@")
    text = run("fleet", "--store", url)
    for output in (watched.out, watched.err, fleet.out, fleet.err, text.out, text.err,
                   caplog.text):
        assert SENTINEL_PASSWORD not in output
