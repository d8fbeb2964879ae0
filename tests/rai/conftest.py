from __future__ import annotations

import functools
from collections.abc import Iterator
from pathlib import Path

import pytest
from _sync_helpers import SECRET, Runner, cli_runner

from failopen.testing._server import LoopbackServer
from failopen.testing.rai_emulator import RaiEmulator


@pytest.fixture
def anyio_backend() -> str:
    # The async client is built on asyncio (asyncio.Lock, tasks), not on trio.
    return "asyncio"


# The sync tests' common fixtures; a module that needs another emulator defines its own
# ``emulator``, and ``server``, ``sync`` and ``rai`` serve that one.


@pytest.fixture
def emulator() -> RaiEmulator:
    return RaiEmulator(client_secret=SECRET)


@pytest.fixture
def server(emulator: RaiEmulator) -> Iterator[LoopbackServer]:
    with emulator.serve() as served:
        yield served


@pytest.fixture
def sync(
    monkeypatch: pytest.MonkeyPatch, server: LoopbackServer,
    capsysbinary: pytest.CaptureFixture[bytes],
) -> Runner:  # fmt: skip
    return cli_runner(monkeypatch, server.url, capsysbinary)


@pytest.fixture
def rai(sync: Runner) -> Runner:
    """The same, with the ``rai`` of ``failopen rai ...`` given: ``rai("sessions", ...)``."""
    return functools.partial(sync, "rai")


@pytest.fixture
def state(tmp_path: Path) -> Path:
    return tmp_path / "state.json"


@pytest.fixture
def out(tmp_path: Path) -> Path:
    folder = tmp_path / "out"
    folder.mkdir()
    return folder
