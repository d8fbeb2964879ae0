"""examples/flask_app.py: its log-in page carries the snippet tag, and /login is guarded."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from failopen.testing import FakeStatusPage, FakeVerifyAPI

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def example(
    monkeypatch: pytest.MonkeyPatch, fake_status_page: FakeStatusPage,
    fake_verify_api: FakeVerifyAPI,
) -> Iterator[ModuleType]:
    for name, value in {
        "FAILOPEN_STATUS_URL": fake_status_page.url, "FAILOPEN_VERIFY_URL":
        fake_verify_api.verify_url, "FAILOPEN_PRIVATE_KEY": fake_verify_api.private_key,
        "FAILOPEN_PUBLIC_KEY": "test-public-key", "FAILOPEN_VENDOR_URL": "https://vendor.test/x",
    }.items():
        monkeypatch.setenv(name, value)
    monkeypatch.syspath_prepend(str(ROOT / "examples"))
    sys.modules.pop("flask_app", None)
    module = importlib.import_module("flask_app")
    yield module
    module.app.wsgi_app.runtime.stop()
    sys.modules.pop("flask_app", None)


def test_login_page_carries_the_snippet_and_login_is_guarded(
    example: ModuleType, fake_status_page: FakeStatusPage, fake_verify_api: FakeVerifyAPI
) -> None:
    client = example.app.test_client()
    page = client.get("/")
    assert page.status_code == 200
    assert 'src="/failopen/failopen.js"' in page.text
    assert 'data-failopen-flag-url="/failopen/flag"' in page.text
    assert 'data-failopen-public-key="test-public-key"' in page.text
    assert fake_verify_api.private_key not in page.text
    assert page.headers["Content-Security-Policy"] == "script-src 'self' https://vendor.test"
    assert client.get("/failopen/failopen.js").status_code == 200
    refused = client.post("/login", data={"username": "ann"})
    assert refused.status_code == 403 and b"Request refused" in refused.data
    admitted = client.post("/login", data={"username": "ann",
                                           "enforcement-token": fake_verify_api.issue_token()})
    assert admitted.status_code == 200
    assert admitted.get_json()["user"] == "ann"
    assert admitted.get_json()["decision"]["outcome"] == "valid"
    assert client.get("/health").text == "ok"
    fake_status_page.set_global("major_outage")
    assert client.get("/failopen/flag?confirm=1").get_json()["enforce"] is False
    bypassed = client.post("/login", data={"username": "ann"})
    assert (bypassed.status_code, bypassed.get_json()["bypassed"]) == (200, True)
