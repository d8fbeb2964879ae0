"""A real redis-server for the fleet tests: started on a free loopback port in a temporary
directory, nothing saved to disk, stopped afterwards. Tests skip (saying why) without it."""

from __future__ import annotations

import contextlib
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from failopen import Config
from failopen.engine.fleet_identity import Watched
from failopen.runtime import FailOpen
from failopen.testing import free_port

REDIS_SERVER = shutil.which("redis-server")
needs_redis = pytest.mark.skipif(
    REDIS_SERVER is None,
    reason="redis-server is not installed (apt-get install redis-server); .ci/run installs it",
)


class RedisServer:
    """One redis-server process on 127.0.0.1; ``kill``, ``start`` again on the same port.

    With ``password`` it wants that password (``--requirepass``), and ``url`` gives it."""

    def __init__(self, directory: Path, *, password: str | None = None) -> None:
        self.directory = directory
        self.port = free_port()
        self.password = password
        self.address = f"127.0.0.1:{self.port}"
        self.url = f"redis://{'' if password is None else f':{password}@'}{self.address}/0"
        self.process: subprocess.Popen[bytes] | None = None
        self.clients: list[Any] = []

    def start(self) -> None:
        assert REDIS_SERVER is not None
        self.process = subprocess.Popen(
            [REDIS_SERVER, "--port", str(self.port), "--bind", "127.0.0.1",
             "--dir", str(self.directory), "--save", "", "--appendonly", "no",
             "--protected-mode", "yes", "--loglevel", "warning",
             *([] if self.password is None else ["--requirepass", self.password])],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        client = self.client()
        deadline = time.monotonic() + 10
        while True:
            try:
                client.ping()
                break
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.02)
        client.close()

    def client(self) -> Any:
        """A redis-py client for the test's own reads and writes (closed by ``stop``)."""
        import redis

        client = redis.Redis.from_url(self.url, socket_timeout=2)
        self.clients.append(client)
        return client

    def kill(self) -> None:
        """SIGKILL: the server vanishes mid-conversation, as in a crash."""
        if self.process is not None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(10)
            self.process = None

    def stop(self) -> None:
        for client in self.clients:
            client.close()
        self.clients.clear()
        if self.process is not None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
            self.process = None


@pytest.fixture
def redis_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[RedisServer]:
    """A fresh redis-server for one test; every RedisStore the test opened is closed after it
    (their sockets would otherwise be reported unclosed, at random, by the garbage collector)."""
    yield from _serve(tmp_path, monkeypatch, password=None)


#: What :func:`redis_server_with_password` wants.
REDIS_PASSWORD = "s3cret-redis-Pa55"


@pytest.fixture
def redis_server_with_password(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[RedisServer]:
    """As ``redis_server``, started with ``--requirepass REDIS_PASSWORD``."""
    yield from _serve(tmp_path, monkeypatch, password=REDIS_PASSWORD)


def _serve(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *,
           password: str | None) -> Iterator[RedisServer]:
    if REDIS_SERVER is None:
        pytest.skip("redis-server is not installed (apt-get install redis-server); "
                    ".ci/run installs it")
    server = RedisServer(tmp_path, password=password)
    with stores_closed_after(monkeypatch):
        server.start()
        try:
            yield server
        finally:
            server.stop()


@contextlib.contextmanager
def stores_closed_after(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every RedisStore opened inside is closed on the way out, and stays closed."""
    from failopen.stores.redis import RedisStore

    opened: list[RedisStore] = []
    init = RedisStore.__init__

    def recording_init(self: RedisStore, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        opened.append(self)

    monkeypatch.setattr(RedisStore, "__init__", recording_init)
    try:
        yield
    finally:
        for store in opened:
            store.close()
            # A runtime this test leaked would keep reconnecting, and a later test's server may
            # get the same port: it would join that fleet as a stranger (and, after a FLUSHALL,
            # restore the keys without that fleet's override). Its store stays closed instead.
            store.call = _closed  # type: ignore[method-assign]


def _closed(what: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
    from failopen.exceptions import StoreError

    raise StoreError(f"this test's Redis store is closed ({what})")


def wait_for(predicate: Callable[[], bool], timeout: float = 10.0) -> bool:
    """Poll until ``predicate()`` holds; the timeout only bounds a failure."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


# --- several fleet members in one process ----------------------------------------------------


def keys_back_since(redis_server: RedisServer, ago: float) -> None:
    """Say the store's keys were put back ``ago`` seconds ago (Redis's clock), as a member's
    restore writes it: a fleet started just now then reads as one that has run that long, whose
    every live member has beaten since (``failopen override`` counts it without waiting)."""
    client = redis_server.client()
    seconds, micros = client.time()
    client.set("failopen:epoch", client.get("failopen:epoch") or "restored")
    client.set("failopen:fallback:since", str(int(seconds * 1000 + micros // 1000 - ago * 1000)))


def same_deployment(config: Config) -> dict[str, str | None]:
    """The ``page`` and ``verify`` a member of ``config`` writes in its records: what a record
    planted for another process of the same deployment (a leader, a reading) must carry."""
    watched = Watched.of(config.status_url, config.global_component,
                         config.verify_url if config.probe else None)
    return {"page": watched.page, "verify": watched.verify}



class Counted:
    """Wraps a runtime's status client: how many readings this process itself made."""

    def __init__(self, runtime: FailOpen) -> None:
        assert runtime.status is not None
        self.inner = runtime.status.fetch
        self.count = 0
        runtime.status.fetch = self  # type: ignore[method-assign]
        runtime.watcher.source = runtime.status
        if runtime.confirmer is not None:
            runtime.confirmer._source = runtime.status

    def __call__(self) -> Any:
        self.count += 1
        return self.inner()


@pytest.fixture
def fleet(
    failopen_config: Config, redis_server: RedisServer
) -> Iterator[Callable[..., list[FailOpen]]]:
    built: list[FailOpen] = []

    def build(n: int, **changes: Any) -> list[FailOpen]:
        changes.setdefault("poll_interval", 0.2)
        changes.setdefault("store_refresh", 0.05)
        changes.setdefault("fleet_lease", 1.0)
        config = failopen_config.replace(store=redis_server.url, **changes)
        made = [FailOpen(config) for _ in range(n)]
        for runtime in made:
            runtime.counted = Counted(runtime)  # type: ignore[attr-defined]
            built.append(runtime)
        return made

    yield build
    for runtime in built:
        runtime.stop()
