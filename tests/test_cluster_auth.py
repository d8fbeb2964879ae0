"""A Redis Cluster whose nodes want a password (``requirepass`` and ``masterauth`` on each of six
nodes; issue 30, A1): the store URL's password reaches every node the slot map names, and a
wrong or missing password is said as such (not as a failover under way), at ``failopen check``,
in the fleet's fall-back line and in the fallback's warning, never showing the password."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
from _cluster_kit import RedisCluster, needs_cluster, serve_cluster
from _redis_kit import stores_closed_after

from failopen import Config
from failopen.cli.fleet import fleet_report
from failopen.cli.preflight_store import check_store
from failopen.engine.flag import EnforcementFlag
from failopen.exceptions import StoreUnavailable
from failopen.fallback.rate import OutageRateLimit
from failopen.fallback.used import MemoryUsedSolutions, RedisUsedSolutions
from failopen.runtime import FailOpen
from failopen.stores import open_store
from failopen.stores.redis import RedisStore

pytestmark = [needs_cluster, pytest.mark.slow, pytest.mark.timeout(90)]

PASSWORD = "cluster-pw-7f3a"  # test-only
WRONG = "not-the-pw-91c2"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisCluster]:
    """One cluster for the module, every node with ``requirepass`` and ``masterauth``."""
    yield from serve_cluster(tmp_path_factory.mktemp("cluster-auth"), password=PASSWORD)


@pytest.fixture(autouse=True)
def _closed(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    with stores_closed_after(monkeypatch):
        yield


def _without(cluster: RedisCluster) -> str:
    return cluster.url.replace(f":{PASSWORD}@", "")


def _wrong(cluster: RedisCluster) -> str:
    return cluster.url.replace(PASSWORD, WRONG)


def _secret_free(text: str) -> None:
    assert PASSWORD not in text and WRONG not in text, text


def test_the_password_reaches_every_node_and_check_says_authenticated(
    cluster: RedisCluster,
) -> None:
    store = open_store(cluster.url, prefix="auth1:")
    assert isinstance(store, RedisStore)
    _secret_free(repr(store))
    EnforcementFlag(store=store).force_off("INC-30 auth", ttl=60)
    loaded = store.load()
    assert loaded is not None and loaded.reason == "INC-30 auth"
    # The nodes really want it: a client without it is refused.
    import redis

    primary, _replicas = cluster.holders("{auth1}:override")
    with pytest.raises(redis.AuthenticationError), \
            redis.Redis(port=primary, socket_timeout=2) as bare:
        bare.get("{auth1}:override")
    report = fleet_report(store)
    assert report["slot"]["primary"] == f"127.0.0.1:{primary}"
    store.save(None)
    # The URL's password, or FAILOPEN_STORE_PASSWORD beside a URL without one.
    for config in (Config(store=cluster.url),
                   Config(store=_without(cluster), store_password=PASSWORD)):
        check = check_store(config, {})
        assert check.status == "ok", check.detail
        assert "authenticated" in check.detail and "hash slot" in check.detail
        _secret_free(check.detail + repr(check.facts))


@pytest.mark.parametrize(("url", "words"), [
    (_wrong, "the nodes refused the user or password of the store URL"),
    (_without, "the nodes want a password and the store URL gives none"),
])
def test_a_wrong_or_missing_password_is_said_as_such_and_never_shown(
    cluster: RedisCluster, url: object, words: str,
) -> None:
    assert callable(url)
    target = url(cluster)
    check = check_store(Config(store=target), {})
    assert check.status == "problem"
    assert "authentication failed" in check.detail and words in check.detail, check.detail
    assert "failover" not in check.detail  # not a cluster without a primary
    _secret_free(check.detail + repr(check.facts))
    store = open_store(target)
    with pytest.raises(StoreUnavailable) as raised:
        store.load()
    assert words in str(raised.value)
    _secret_free(str(raised.value) + repr(raised.value))
    store.close()


def test_a_member_with_a_wrong_password_falls_back_and_says_why(
    cluster: RedisCluster, caplog: pytest.LogCaptureFixture,
) -> None:
    runtime = FailOpen(Config(store=_wrong(cluster)))
    assert runtime.fleet is not None
    with caplog.at_level(logging.WARNING):
        runtime.fleet.sync()  # the watcher thread's first turn, without the thread
    assert runtime.fleet.store_state == "local"
    records = [r for r in caplog.records if getattr(r, "event", None)
               == "failopen.fleet_store_unusable"]
    assert records and "authentication failed" in records[0].getMessage()
    _secret_free(caplog.text)
    assert runtime.decide(None).outcome == "missing_token"  # requests go on, enforcing
    runtime.stop()


def test_the_fallback_on_a_wrong_password_counts_in_memory_and_says_why(
    cluster: RedisCluster, caplog: pytest.LogCaptureFixture,
) -> None:
    used = RedisUsedSolutions(_wrong(cluster), password=None, prefix="auth2:", timeout=0.5,
                              fallback=MemoryUsedSolutions())
    rate = OutageRateLimit("1/minute", redis_url=_wrong(cluster), prefix="auth2:", timeout=0.5)
    try:
        with caplog.at_level(logging.WARNING):
            assert used.claim("s1", 4_102_444_800) is True  # in memory: nothing raised
            assert used.claim("s1", 4_102_444_800) is False
            assert rate.hit("198.51.100.9", "/login") is None
            assert rate.hit("198.51.100.9", "/login") is not None
        lines = [r.getMessage() for r in caplog.records
                 if getattr(r, "event", None) == "failopen.fallback_redis_failed"]
        assert lines and all("authentication failed" in line for line in lines), lines
        _secret_free(caplog.text + repr(used) + repr(rate))
        # The right password: the same calls reach the cluster.
        good = RedisUsedSolutions(cluster.url, password=None, prefix="auth2:", timeout=0.5,
                                  fallback=MemoryUsedSolutions())
        assert good.claim("s2", 4_102_444_800) is True
        primary, _ = cluster.holders("{auth2}:x")
        assert cluster.node(primary).exists("{auth2}:fallback:used:s2")
        good.close()
    finally:
        used.close()
        rate.close()
