"""A real Redis Cluster for the cluster tests: six ``redis-server --cluster-enabled yes`` on free
loopback ports (each bus port, port + 10000, free too), joined by ``redis-cli --cluster create``
as three primaries with a replica each, short node timeouts so a failover takes seconds. Tests
skip (saying why) without redis-server or redis-cli."""

from __future__ import annotations

import random
import shutil
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _redis_kit import REDIS_SERVER, wait_for

__all__ = ["NODE_TIMEOUT_MS", "RedisCluster", "needs_cluster", "redis_cluster", "serve_cluster"]

REDIS_CLI = shutil.which("redis-cli")
needs_cluster = pytest.mark.skipif(
    REDIS_SERVER is None or REDIS_CLI is None,
    reason="redis-server and redis-cli are needed for a Redis Cluster "
           "(apt-get install redis-server); .ci/run installs them",
)
#: A node unreachable this long is failed, and its replica promoted (Redis's default is 15 s).
NODE_TIMEOUT_MS = 1000
_HIGHEST_PORT = 55535  # its bus port, port + 10000, must be a port too


def _free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def cluster_ports(n: int) -> list[int]:
    """``n`` loopback ports, each free with its bus port (port + 10000), at most 55535."""
    ports: list[int] = []
    while len(ports) < n:
        port = random.randint(20000, _HIGHEST_PORT)
        if port not in ports and port + 10000 not in ports and _free(port) \
                and _free(port + 10000):
            ports.append(port)
    return ports


class RedisCluster:
    """Six nodes: three primaries, a replica each. ``url`` lists two of them (any one that
    answers gives the client the whole slot map)."""

    def __init__(self, directory: Path, *, password: str | None = None) -> None:
        self.directory = directory
        self.password = password
        self.ports = cluster_ports(6)
        self.processes: dict[int, subprocess.Popen[bytes]] = {}
        secret = "" if password is None else f":{password}@"
        self.url = f"redis+cluster://{secret}127.0.0.1:{self.ports[0]},127.0.0.1:{self.ports[1]}"
        self.clients: list[Any] = []

    def start(self) -> None:
        assert REDIS_SERVER is not None and REDIS_CLI is not None
        auth = [] if self.password is None else ["--requirepass", self.password,
                                                 "--masterauth", self.password]
        for port in self.ports:
            node_dir = self.directory / f"node-{port}"
            node_dir.mkdir(parents=True, exist_ok=True)
            self.processes[port] = subprocess.Popen(
                [REDIS_SERVER, "--port", str(port), "--bind", "127.0.0.1", "--dir", str(node_dir),
                 "--cluster-enabled", "yes", "--cluster-config-file", str(node_dir / "nodes.conf"),
                 "--cluster-node-timeout", str(NODE_TIMEOUT_MS),
                 # A replica fails over however long since it last heard its primary.
                 "--cluster-replica-validity-factor", "0",
                 "--repl-diskless-sync-delay", "0", "--save", "", "--appendonly", "no",
                 "--loglevel", "warning", *auth],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        assert wait_for(lambda: all(self._pings(p) for p in self.ports), timeout=20), \
            "a cluster node never answered"
        created = subprocess.run(
            [REDIS_CLI, *([] if self.password is None else ["-a", self.password]),
             "--cluster", "create", *(f"127.0.0.1:{p}" for p in self.ports),
             "--cluster-replicas", "1", "--cluster-yes"],
            capture_output=True, timeout=60, check=False)
        assert created.returncode == 0, created.stdout.decode(errors="replace")[-2000:]
        # Ready: every node says ok, and three replicas follow their primaries in sync (a node
        # joins as a primary and becomes a replica a moment later).
        assert wait_for(lambda: self.healthy() and self.replicas_in_sync() == 3, timeout=30), \
            "the cluster never reached cluster_state:ok with three replicas in sync"

    def node(self, port: int) -> Any:
        """A plain client of one node (closed by ``stop``)."""
        import redis

        client = redis.Redis(host="127.0.0.1", port=port, password=self.password,
                             socket_timeout=2, socket_connect_timeout=2)
        self.clients.append(client)
        return client

    def _pings(self, port: int) -> bool:
        try:
            return bool(self.node(port).ping())
        except Exception:
            return False

    def healthy(self, ports: list[int] | None = None) -> bool:
        """Every running node (or those of ``ports``) says ``cluster_state:ok``, with each
        replica in sync."""
        for port in ports or [p for p in self.ports if p in self.processes]:
            try:
                node = self.node(port)
                info = node.execute_command("CLUSTER INFO")  # parsed by redis-py into a dict
                if info.get("cluster_state") != "ok":
                    return False
                replication = node.info("replication")
            except Exception:
                return False
            if replication["role"] == "slave" and replication["master_link_status"] != "up":
                return False
        return True

    def replicas_in_sync(self) -> int:
        """How many running nodes are replicas whose link to their primary is up."""
        count = 0
        for port in self.processes:
            try:
                replication = self.node(port).info("replication")
            except Exception:
                continue
            count += replication["role"] == "slave" and replication["master_link_status"] == "up"
        return count

    def holders(self, key: str) -> tuple[int, list[int]]:
        """The port of the primary that holds ``key``'s slot, and its replicas', as a running
        node sees them (CLUSTER KEYSLOT, CLUSTER NODES; nodes marked failed left out)."""
        for port in self.processes:
            try:
                node = self.node(port)
                slot = int(node.execute_command("CLUSTER KEYSLOT", key))
                nodes = node.execute_command("CLUSTER NODES")  # parsed by redis-py into a dict
            except Exception:
                continue
            for address, primary in nodes.items():
                if "master" in primary["flags"] and "fail" not in primary["flags"] and any(
                        int(r[0]) <= slot <= int(r[-1]) for r in primary["slots"]):
                    replicas = [int(a.rpartition(":")[2]) for a, n in nodes.items()
                                if n["master_id"] == primary["node_id"]
                                and "fail" not in n["flags"]]
                    return int(address.rpartition(":")[2]), replicas
        raise AssertionError(f"no running node knows the primary of {key!r}")

    def kill(self, port: int) -> None:
        """SIGKILL one node: it vanishes mid-conversation, as in a crash."""
        process = self.processes.pop(port)
        process.kill()
        process.wait(10)

    def stop(self) -> None:
        for client in self.clients:
            client.close()
        self.clients.clear()
        for process in self.processes.values():
            process.terminate()
        for process in self.processes.values():
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(10)
        self.processes.clear()


def serve_cluster(directory: Path, *, password: str | None = None) -> Iterator[RedisCluster]:
    """Start a cluster in ``directory``, yield it, stop it (skips without the binaries)."""
    if REDIS_SERVER is None or REDIS_CLI is None:
        pytest.skip("redis-server and redis-cli are needed for a Redis Cluster "
                    "(apt-get install redis-server); .ci/run installs them")
    cluster = RedisCluster(directory, password=password)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="module")
def redis_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisCluster]:
    """One cluster for a module's tests (nothing in it is killed): six nodes, no password."""
    yield from serve_cluster(tmp_path_factory.mktemp("cluster"))
