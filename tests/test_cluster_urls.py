"""Redis Cluster store URLs and the prefix's hash tag, read without I/O (issue 30, A1)."""

from __future__ import annotations

import pytest

from failopen import Config
from failopen.exceptions import ConfigError
from failopen.stores import check_store_url, key_prefix, mask_url
from failopen.stores.cluster import ClusterURL, cluster_prefix, parse_cluster_url


def test_nodes_tls_and_user_are_read_and_the_password_is_never_shown() -> None:
    url = "rediss+cluster://app:s3cr%2Ft@h1:7000,h2,[::1]:7002?ssl_cert_reqs=required"
    assert parse_cluster_url(url) == ClusterURL(
        nodes=(("h1", 7000), ("h2", 6379), ("::1", 7002)), tls=True, username="app",
        tls_options={"ssl_cert_reqs": "required"})
    assert "s3cr" not in mask_url(url)
    config = Config(store="redis+cluster://:pw-123@h1:7000,h2:7001")
    assert config.store == "redis+cluster://h1:7000,h2:7001"
    assert "pw-123" not in repr(config) and check_store_url(config.store)


@pytest.mark.parametrize(("url", "words"), [
    ("redis+cluster://h1:7000/3", "database 0 only"),
    ("redis+cluster://h1:7000,", "host is missing"),
    ("redis+cluster://h1:99999", "not a port"),
    ("redis+cluster://h1?ssl_cert_reqs=none", "TLS only: use rediss+cluster://"),
    ("redis+cluster://:hunter2@h1:7000#x", "fragment"),
])
def test_a_url_a_cluster_cannot_take_says_what_to_change(url: str, words: str) -> None:
    with pytest.raises(ConfigError) as raised:
        Config(store=url)
    assert words in str(raised.value) and "hunter2" not in str(raised.value)


@pytest.mark.parametrize(("prefix", "keys"), [
    ("failopen:", "{failopen}:"), ("mysite:failopen:", "{mysite:failopen}:"),
    ("fo", "{fo}"), ("site:{fo}:", "site:{fo}:"), ("{a}b{c}:", "{a}b{c}:"),
])
def test_the_prefix_becomes_the_hash_tag(prefix: str, keys: str) -> None:
    assert cluster_prefix(prefix) == keys
    assert key_prefix("redis+cluster://h:7000", prefix) == keys
    assert key_prefix("redis://h:6379/0", prefix) == prefix  # one server: as written


@pytest.mark.parametrize(("prefix", "words"), [
    (":", "empty hash tag"), ("{}x:", "empty hash tag"), ("fail{open:", "does not close"),
    ("fail}open:", "without a '{'"),
])
def test_a_prefix_whose_keys_would_spread_is_refused_at_start_up(prefix: str,
                                                                 words: str) -> None:
    with pytest.raises(ConfigError) as raised:
        Config(store="redis+cluster://h:7000", redis_prefix=prefix)
    assert words in str(raised.value) and "FAILOPEN_REDIS_PREFIX" in str(raised.value)
    Config(store="redis://h:6379/0", redis_prefix=prefix)  # one server holds them all anyway
