"""The Django middleware's fast path: a method that neither a path nor a view is protected for
skips every check, and no other does (``conf.Loaded.unguarded_methods``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from failopen.integrations._shared import METHODS
from failopen.integrations.django import conf

from failopen import Config

SPELLED = (*METHODS, "get", "post", "Head", "PROPFIND", "")


@pytest.fixture
def client(make_client: Callable[..., Any], client_kind: str) -> Any:
    return make_client()


@pytest.mark.parametrize("methods", [("POST",), ("GET",), ("HEAD",), ("POST", "PUT"),
                                     ("GET", "POST", "OPTIONS")])
def test_the_method_tests_agree_so_the_fast_path_follows_both(methods: tuple[str, ...]) -> None:
    """Paths are judged by ``Config.is_protected``, views by ``protects_method``: the fast path
    is taken only for a method both refuse, and the two must say the same of every spelling."""
    config = Config(protected_paths=("/login/",), protected_methods=frozenset(methods))
    protects = conf.method_test(config.protected_methods)
    for method in SPELLED:
        assert protects(method) == config.is_protected(method, "/login/"), method
    loaded = conf.Loaded(config=config, is_protected=config.is_protected,
                         protects_method=protects, views=conf.ProtectedViews(()))
    assert loaded.unguarded_methods == {m for m in METHODS if not protects(m)}
    assert "HEAD" not in loaded.unguarded_methods or "GET" in loaded.unguarded_methods


def test_settings_that_protect_get_take_no_fast_path_for_get_or_head(
        client: Any, use_failopen: Any) -> None:
    use_failopen(PROTECTED_METHODS=["GET"])
    assert conf.loaded().unguarded_methods.isdisjoint({"GET", "HEAD"})
    assert client.get("/login/").status_code == 403
    assert client.head("/login/").status_code == 403
    assert client.get("/open/").status_code == 200
    assert client.post("/login/").status_code == 200  # POST is not protected here


def test_the_default_settings_skip_get_but_not_post(client: Any, use_failopen: Any) -> None:
    use_failopen()
    assert {"GET", "HEAD", "OPTIONS"} <= conf.loaded().unguarded_methods
    assert "POST" not in conf.loaded().unguarded_methods
    assert client.get("/login/").json()["failopen"] is None
    assert client.post("/login/").status_code == 403


def test_unreadable_settings_leave_only_the_safe_methods_unguarded(
        client: Any, use_failopen: Any) -> None:
    use_failopen(PROTECTED_PATHS="login")  # not a path: every unsafe method is refused
    assert conf.loaded().unguarded_methods == {"GET", "HEAD", "OPTIONS", "TRACE"}
    assert client.get("/open/").status_code == 200
    assert client.post("/open/").status_code == 503


def test_broken_settings_with_readable_paths_keep_their_protected_methods(
        client: Any, use_failopen: Any) -> None:
    use_failopen(POLL_INTERVAL="soon", PROTECTED_METHODS=["GET", "POST"])
    assert conf.loaded().config is None
    assert conf.loaded().unguarded_methods.isdisjoint({"GET", "HEAD", "POST"})
    assert client.get("/login/").status_code == 503
    assert client.get("/open/").status_code == 200
