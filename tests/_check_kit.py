"""What the ``failopen check`` tests share: a site's variables wired to the served fakes, a
guard that fails any connection beyond loopback, and the text output read as lines."""

from __future__ import annotations

import socket
from typing import Any

import pytest

from failopen.testing import FakeStatusPage, FakeVerifyAPI

__all__ = ["LOOPBACK", "NAMES", "env", "lines", "loopback_only"]

NAMES = ["configuration", "status_page", "verify_api", "fallback_verify_api", "store",
         "fleet_identity", "outage_policies"]
LOOPBACK = {"127.0.0.1", "::1", "localhost"}


@pytest.fixture(autouse=True)
def loopback_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """A connection anywhere but loopback fails the test (a check must never leave the host)."""
    real = socket.socket.connect

    def connect(self: socket.socket, address: Any) -> Any:
        if self.family in (socket.AF_INET, socket.AF_INET6):
            assert address[0] in LOOPBACK, f"a check connected to {address!r}"
        return real(self, address)

    monkeypatch.setattr(socket.socket, "connect", connect)


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch, fake_status_page: FakeStatusPage,
        fake_verify_api: FakeVerifyAPI) -> pytest.MonkeyPatch:
    """The variables of a site wired to the served fakes, protecting /login."""
    for name, value in {
        "FAILOPEN_STATUS_URL": fake_status_page.url,
        "FAILOPEN_VERIFY_URL": fake_verify_api.verify_url,
        "FAILOPEN_PRIVATE_KEY": fake_verify_api.private_key,
        "FAILOPEN_PROTECTED_PATHS": "/login",
        "FAILOPEN_STATUS_TIMEOUT": "2", "FAILOPEN_VERIFY_TIMEOUT": "2",
    }.items():
        monkeypatch.setenv(name, value)
    for name in ("WEB_CONCURRENCY", "GUNICORN_CMD_ARGS"):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def lines(out: str) -> dict[str, tuple[str, str]]:
    """``{label: (status, detail)}`` of the text output's check lines."""
    found = {}
    for line in out.splitlines()[:-1]:
        status, rest = line.split(None, 1)
        label, _, detail = rest.partition(": ")
        found[label] = (status, detail)
    return found
