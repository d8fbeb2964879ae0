"""Review of issue 20 in Django: FAILOPEN_TRUSTED_PROXIES reaches the outage rate limit."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.test import override_settings

from failopen.runtime import FailOpen
from failopen.testing import FakeStatusPage

JSON = {"headers": {"accept": "application/json"}}


@pytest.fixture(autouse=True)
def _urls() -> Any:
    with override_settings(ROOT_URLCONF="django_test_urls_outage"):
        yield


def test_behind_a_trusted_proxy_each_forwarded_client_has_its_own_limit(
        use_failopen: Callable[..., FailOpen | None], fake_status_page: FakeStatusPage,
        make_client: Callable[..., Any], client_kind: str) -> None:
    runtime = use_failopen(PROTECTED_PATHS=["/login/"], OUTAGE_RATE="1/minute",
                           TRUSTED_PROXIES="127.0.0.1")
    assert runtime is not None
    fake_status_page.set_global("major_outage")
    runtime.poll_now()
    client = make_client()
    first = {"accept": "application/json", "x-forwarded-for": "198.51.100.1"}
    assert client.post("/login/", {}, headers=first).status_code == 200
    assert client.post("/login/", {}, headers=first).status_code == 429
    other = client.post("/login/", {}, headers={"accept": "application/json",
                                                "x-forwarded-for": "198.51.100.2"})
    assert other.status_code == 200
