"""Shared helpers for the core tests."""

from __future__ import annotations

import pytest


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


# The fleet tests' real redis-server (skips, saying why, where it is not installed).
from _redis_kit import fleet, redis_server  # noqa: E402, F401
