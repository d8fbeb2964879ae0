from __future__ import annotations

import pytest


@pytest.fixture
def anyio_backend() -> str:
    # The async client is built on asyncio (asyncio.Lock, tasks), not on trio.
    return "asyncio"
