"""The outsider's review of issue 18's merged work: each test is a finding that failed on main."""

from __future__ import annotations

import dataclasses

import pytest

from failopen import Config
from failopen.exceptions import ConfigError
from failopen.stores import split_password
from failopen.stores.redis import RedisStore

SECRET = "Pa55-word-Tail"


@pytest.mark.parametrize("url", [
    f"redis://:ab/{SECRET}@127.0.0.1:6379/0",  # a base64 password's "/", unescaped
    f"redis://app:ab/{SECRET}@127.0.0.1:6379/0",
    f"redis://:ab?{SECRET}@127.0.0.1:6379/0",
    f"redis://:ab#{SECRET}@127.0.0.1:6379/0",
    f"redis://app:ab@cd/{SECRET}@127.0.0.1:6379/0",
], ids=["slash", "user-slash", "question-mark", "hash", "at-then-slash"])
def test_a_store_url_whose_password_does_not_parse_is_refused_without_showing_it(
        url: str) -> None:
    # urlsplit (and redis-py) end the userinfo at the "/": the URL "had no password", stayed in
    # Config.store as written, and dataclasses.asdict(config) printed it in clear.
    with pytest.raises(ConfigError) as caught:
        Config(store=url)
    assert "percent-encode" in str(caught.value)
    assert SECRET not in str(caught.value)
    with pytest.raises(ConfigError) as caught:
        RedisStore(url)  # no attribute of a store may hold it in clear either
    assert SECRET not in str(caught.value)


def test_a_blank_query_password_before_the_real_one_does_not_keep_it_in_the_url() -> None:
    # redis-py reads the first non-blank ?password= (parse_qs drops blank values).
    url = f"redis://127.0.0.1:6379/0?password=&password={SECRET}"
    assert split_password(url) == ("redis://127.0.0.1:6379/0", SECRET)
    config = Config(store=url)
    assert SECRET not in str(dataclasses.asdict(config))
    assert config.store_password is not None and config.store_password.reveal() == SECRET
