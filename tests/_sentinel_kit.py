"""A real Redis Sentinel for the Sentinel tests: a primary, a replica (``--replicaof``) and one
sentinel (``redis-server --sentinel``, the same binary), each on a free loopback port, with short
timings so a failover takes seconds. Tests skip (saying why) without redis-server."""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _redis_kit import REDIS_SERVER, stores_closed_after, wait_for

from failopen.testing import free_port

__all__ = ["SERVICE", "SENTINEL_PASSWORD", "SentinelSet", "sentinel_set",
           "sentinel_set_with_password"]

SERVICE = "mymaster"
#: What :func:`sentinel_set_with_password` wants, from the servers and the sentinel alike.
SENTINEL_PASSWORD = "s3nt1nel-Pa55-word"
#: Sentinel timings: the primary is down after this long without an answer.
DOWN_AFTER_MS = 600


class _Server:
    """One redis-server process (a Redis or a sentinel) on 127.0.0.1."""

    def __init__(self, argv: list[str]) -> None:
        self.argv = argv
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.process = subprocess.Popen(self.argv, stdout=subprocess.DEVNULL,
                                        stderr=subprocess.DEVNULL)

    def kill(self) -> None:
        if self.process is not None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(10)
            self.process = None

    def pause(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGCONT)

    def stop(self) -> None:
        if self.process is not None:
            self.process.send_signal(signal.SIGCONT)  # a paused one must hear the TERM
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
            self.process = None


class SentinelSet:
    """A primary, a replica and a sentinel monitoring them as :data:`SERVICE`.

    ``url`` lists a sentinel that is not running first (redis-py must skip it) and the real one
    second. With ``password``, the servers and the sentinel all want it."""

    def __init__(self, directory: Path, *, password: str | None = None) -> None:
        assert REDIS_SERVER is not None
        self.directory = directory
        self.password = password
        self.ports = {"primary": free_port(), "replica": free_port()}
        self.sentinel_port = free_port()
        self.dead_sentinel_port = free_port()  # nothing listens there
        auth = [] if password is None else ["--requirepass", password, "--masterauth", password]
        self.servers = {name: _Server([
            REDIS_SERVER, "--port", str(port), "--bind", "127.0.0.1", "--dir", str(directory),
            "--save", "", "--appendonly", "no", "--loglevel", "warning", *auth,
            "--repl-diskless-sync-delay", "0",  # the replica syncs at once, not after 5 s
            *(["--replicaof", "127.0.0.1", str(self.ports["primary"])] if name == "replica"
              else []),
        ]) for name, port in self.ports.items()}
        conf = directory / "sentinel.conf"  # the sentinel rewrites it: a file of its own
        conf.write_text("\n".join([
            f"port {self.sentinel_port}", "bind 127.0.0.1", f"dir {directory}",
            *([] if password is None else [f"requirepass {password}"]),
            f"sentinel monitor {SERVICE} 127.0.0.1 {self.ports['primary']} 1",
            *([] if password is None else [f"sentinel auth-pass {SERVICE} {password}"]),
            f"sentinel down-after-milliseconds {SERVICE} {DOWN_AFTER_MS}",
            f"sentinel failover-timeout {SERVICE} 3000",
            f"sentinel parallel-syncs {SERVICE} 1", "",
        ]))
        self.sentinel = _Server([REDIS_SERVER, str(conf), "--sentinel", "--loglevel", "warning"])
        secret = "" if password is None else f":{password}@"
        self.hosts = f"127.0.0.1:{self.dead_sentinel_port},127.0.0.1:{self.sentinel_port}"
        self.url = f"redis+sentinel://{secret}{self.hosts}/{SERVICE}/0"
        self.clients: list[Any] = []

    def start(self) -> None:
        for server in self.servers.values():
            server.start()
        # The replica in sync first: the sentinel's first INFO of the primary then lists it
        # (the next one comes ten seconds later).
        assert wait_for(self._replicated, timeout=30), "the replica never synced"
        self.sentinel.start()
        # Ready: the sentinel names the primary and knows a replica in sync with it.
        assert wait_for(self._ready, timeout=30), "the sentinel never saw the replica in sync"

    def _replicated(self) -> bool:
        try:
            replication = self.client("replica").info("replication")
        except Exception:
            return False
        return replication.get("master_link_status") == "up"

    def _ready(self) -> bool:
        try:
            replicas = self.sentinel_client().sentinel_slaves(SERVICE)
            primary = self.client("primary").info("replication")
        except Exception:
            return False
        return bool(replicas) and replicas[0].get("master-link-status") == "ok" and \
            primary.get("connected_slaves") == 1

    def client(self, name: str) -> Any:
        """A plain redis-py client of the server ``name`` (``primary``, ``replica``)."""
        import redis

        client = redis.Redis(host="127.0.0.1", port=self.ports[name], password=self.password,
                             socket_timeout=2)
        self.clients.append(client)
        return client

    def sentinel_client(self) -> Any:
        import redis

        client = redis.Redis(host="127.0.0.1", port=self.sentinel_port, password=self.password,
                             socket_timeout=2)
        self.clients.append(client)
        return client

    def named_primary(self) -> int | None:
        """The port the sentinel names as the primary now."""
        try:
            _host, port = self.sentinel_client().sentinel_get_master_addr_by_name(SERVICE)
        except Exception:
            return None
        return int(port)

    def role(self, name: str) -> str | None:
        try:
            return str(self.client(name).info("replication")["role"])
        except Exception:
            return None

    def stop(self) -> None:
        for client in self.clients:
            client.close()
        self.clients.clear()
        self.sentinel.stop()
        for server in self.servers.values():
            server.stop()


def _serve(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *,
           password: str | None) -> Iterator[SentinelSet]:
    if REDIS_SERVER is None:
        pytest.skip("redis-server is not installed (apt-get install redis-server); "
                    ".ci/run installs it")
    servers = SentinelSet(tmp_path, password=password)
    with stores_closed_after(monkeypatch):
        try:
            servers.start()
            yield servers
        finally:
            servers.stop()


@pytest.fixture
def sentinel_set(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[SentinelSet]:
    """A primary, a replica and a sentinel, without passwords."""
    yield from _serve(tmp_path, monkeypatch, password=None)


@pytest.fixture
def sentinel_set_with_password(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[SentinelSet]:
    """As ``sentinel_set``; the servers and the sentinel want :data:`SENTINEL_PASSWORD`."""
    yield from _serve(tmp_path, monkeypatch, password=SENTINEL_PASSWORD)


def wait_failover(servers: SentinelSet, timeout: float = 30.0) -> float:
    """Seconds until the sentinel names the replica as the primary (after the caller killed
    the primary); fails the test if it never does."""
    began = time.monotonic()
    assert wait_for(lambda: servers.named_primary() == servers.ports["replica"],
                    timeout=timeout), "the sentinel never promoted the replica"
    return time.monotonic() - began
