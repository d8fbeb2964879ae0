"""Sentinel store URLs (issue 22, items 7 and 8), read without I/O: the forms accepted, a clear
start-up error for each bad one, and the password shown nowhere."""

from __future__ import annotations

import dataclasses
import json
import logging

import pytest

from failopen import Config, Secret
from failopen.exceptions import ConfigError
from failopen.stores import check_store_url, mask_url, open_store, shown_url, split_password
from failopen.stores.redis import RedisStore
from failopen.stores.sentinel import SentinelURL, is_sentinel_url, parse_sentinel_url

PASSWORD = "Sentinel-Pa55-w0rd-7"
URL = f"redis+sentinel://:{PASSWORD}@10.0.0.1:26379,10.0.0.2:26380,sentinel-3/mymaster/2"


def test_the_forms_accepted() -> None:
    assert parse_sentinel_url(URL) == SentinelURL(
        sentinels=(("10.0.0.1", 26379), ("10.0.0.2", 26380), ("sentinel-3", 26379)),
        service="mymaster", db=2)
    tls = parse_sentinel_url(
        "rediss+sentinel://app:pw@[::1]:5000/cache.main?ssl_cert_reqs=required"
        "&ssl_ca_certs=/etc/ca.pem&ssl_check_hostname=false")
    assert tls == SentinelURL(sentinels=(("::1", 5000),), service="cache.main", db=0, tls=True,
                              username="app",
                              tls_options={"ssl_cert_reqs": "required",
                                           "ssl_ca_certs": "/etc/ca.pem",
                                           "ssl_check_hostname": False})
    assert parse_sentinel_url("REDIS+SENTINEL://h/svc/").db == 0
    assert is_sentinel_url(URL) and not is_sentinel_url("redis://h/0")
    assert not is_sentinel_url("redis+sentinel:h")


@pytest.mark.parametrize(("url", "says"), [
    ("redis+sentinel:///mymaster/0", "a sentinel host is missing"),
    (f"redis+sentinel://:{PASSWORD}@/mymaster/0", "a sentinel host is missing"),
    ("redis+sentinel://h1:26379,,h2/mymaster", "a sentinel host is missing"),
    ("redis+sentinel://h1:26379", "no service name"),
    (f"redis+sentinel://:{PASSWORD}@h1:26379/", "no service name"),
    ("redis+sentinel://h1:0/mymaster", "not a port from 1 to 65535"),
    ("redis+sentinel://h1:65536/mymaster", "not a port from 1 to 65535"),
    ("redis+sentinel://h1:abc/mymaster", "not a port from 1 to 65535"),
    ("redis+sentinel://h1:٣/mymaster", "not a port from 1 to 65535"),
    ("redis+sentinel://h1/mymaster/x", "'x' is not a database number"),
    ("redis+sentinel://h1/mymaster/-1", "is not a database number"),
    ("redis+sentinel://h1/mymaster/123456", "is not a database number"),
    ("redis+sentinel://h1/my master", "is not a name a sentinel monitors"),
    ("redis+sentinel://h1/my\x00master", "the service name is not printable"),
    ("redis+sentinel://bad_host!/mymaster", "is not a host name or address"),
    ("redis+sentinel://[fe80::1%eth0]:1/mymaster", "is not an IPv6 address"),
    ("redis+sentinel://h1/mymaster?ssl_cert_reqs=none", "applies to TLS only"),
    ("rediss+sentinel://h1/mymaster?ssl_cert_reqs=maybe", "none, optional or required"),
    ("rediss+sentinel://h1/mymaster?ssl_check_hostname=perhaps", "true or false"),
    ("redis+sentinel://h1/mymaster?socket_timeout=1", "not one a Sentinel URL takes"),
    ("redis+sentinel://h1/mymaster#frag", "fragment"),
])
def test_a_bad_sentinel_url_stops_start_up_saying_what_to_change(url: str, says: str) -> None:
    with pytest.raises(ConfigError, match="expected redis\\+sentinel://") as raised:
        Config(store=url)
    assert says in str(raised.value)
    assert str(raised.value).startswith("FAILOPEN_STORE: ")
    assert PASSWORD not in str(raised.value)
    with pytest.raises(ConfigError):
        check_store_url(url)


def test_a_password_that_would_be_read_otherwise_is_refused_masked() -> None:
    # The "/" in the password ends the userinfo for urlsplit and redis-py alike.
    with pytest.raises(ConfigError, match="percent-encode") as raised:
        Config(store="redis+sentinel://:pass/word@h1:26379,h2:26379/mymaster/0")
    assert "pass/word" not in str(raised.value) and "word@" not in str(raised.value)


@pytest.mark.parametrize("url", [
    "redis+sentinel://[zz]:1/mymaster", f"redis+sentinel://:{PASSWORD}@[::1/mymaster",
    "redis://[zz]:6379/0", f"redis://:{PASSWORD}@[::1/0",
])
def test_a_host_urlsplit_cannot_read_is_a_config_error_not_a_value_error(url: str) -> None:
    # It was a ValueError out of Config (redis:// too): a crash at start-up, not a message.
    with pytest.raises(ConfigError, match="an IPv6 host goes in brackets") as raised:
        Config(store=url)
    assert PASSWORD not in str(raised.value)


def test_an_at_sign_in_a_query_value_is_not_a_password_cut_short() -> None:
    url = "rediss+sentinel://h1:26379,h2:26379/mymaster/0?ssl_ca_certs=/etc/a@b.pem"
    assert split_password(url) == (url, None)
    assert Config(store=url).store == url


def test_the_password_moves_out_of_the_url_and_is_shown_nowhere(
    caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    config = Config(store=URL)
    assert config.store == "redis+sentinel://10.0.0.1:26379,10.0.0.2:26380,sentinel-3/mymaster/2"
    assert config.store_password == Secret(PASSWORD)
    described = json.dumps(config.describe())
    assert "redis+sentinel://:***@10.0.0.1:26379" in described
    store = open_store(config.store, password=config.store_password)
    assert isinstance(store, RedisStore)
    shown = [repr(config), str(config), described, repr(store), store.describe(), store.shown,
             str(vars(config)), mask_url(URL), shown_url(URL, password=True)]
    for text in shown:
        assert PASSWORD not in text, text
    assert PASSWORD not in str(vars(store))  # no attribute of the store holds it in clear
    assert repr(store) == ("RedisStore('redis+sentinel://:***@10.0.0.1:26379,10.0.0.2:26380,"
                           "sentinel-3/mymaster/2', prefix='failopen:')")
    with pytest.raises(TypeError, match="not JSON serializable"):
        json.dumps(dataclasses.asdict(config))
    assert PASSWORD not in caplog.text
    store.close()


def test_the_store_password_setting_works_with_a_sentinel_url() -> None:
    config = Config.from_env({"FAILOPEN_STORE": "redis+sentinel://h1,h2/mymaster/0",
                              "FAILOPEN_STORE_PASSWORD": PASSWORD})
    assert config.store_password == Secret(PASSWORD)
    assert config.describe()["store"] == "redis+sentinel://:***@h1,h2/mymaster/0"
    with pytest.raises(ConfigError, match="give it once") as raised:
        Config.from_env({"FAILOPEN_STORE": URL, "FAILOPEN_STORE_PASSWORD": "another-one"})
    assert PASSWORD not in str(raised.value) and "another-one" not in str(raised.value)


def test_a_user_name_stays_and_its_password_is_masked() -> None:
    config = Config(store=f"rediss+sentinel://app:{PASSWORD}@h1:26379/mymaster/0")
    assert config.store == "rediss+sentinel://app@h1:26379/mymaster/0"
    assert config.describe()["store"] == "rediss+sentinel://app:***@h1:26379/mymaster/0"
    assert parse_sentinel_url(config.store).username == "app"


def test_the_password_in_a_query_is_read_and_masked() -> None:
    url = f"redis+sentinel://h1:26379/mymaster/0?password={PASSWORD}"
    assert mask_url(url) == "redis+sentinel://h1:26379/mymaster/0?password=***"
    config = Config(store=url)
    assert config.store == "redis+sentinel://h1:26379/mymaster/0"
    assert config.store_password == Secret(PASSWORD)
