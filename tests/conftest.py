"""Shared helpers for the core tests."""

from __future__ import annotations

import os

import pytest


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """No FAILOPEN_* variable from the developer's shell leaks into a test."""
    for name in list(os.environ):
        if name.startswith("FAILOPEN_"):
            monkeypatch.delenv(name)
    # An unknown variable is named once per process: each test is a fresh process here.
    import failopen._variables

    monkeypatch.setattr(failopen._variables, "_warned", set())


# ``run``: the failopen command in-process.
from _cli_kit import run  # noqa: E402, F401
from _cluster_kit import redis_cluster  # noqa: E402, F401

# The fleet tests' real redis-server (skips, saying why, where it is not installed).
from _redis_kit import fleet, redis_server, redis_server_with_password  # noqa: E402, F401
from _sentinel_kit import sentinel_set, sentinel_set_with_password  # noqa: E402, F401
