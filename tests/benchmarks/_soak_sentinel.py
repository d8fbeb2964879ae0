"""The chaos soak's Redis in Sentinel mode: a primary, a replica and one sentinel started as the
Sentinel tests start them (tests/_sentinel_kit.py: free loopback ports, the run's directory,
``down-after-milliseconds`` 600), and the hands the Redis faults need. Every fault acts on the
server the sentinel names as the primary at that moment (after a failover, the other one).

A killed server comes back as a replica of the primary the sentinel names then (empty, it syncs
from it), so the set is whole again and a later failover can happen; if the sentinel still names
the killed server (no failover yet), it comes back as the primary, empty, as a plain Redis does.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _sentinel_kit import DOWN_AFTER_MS, SERVICE, SentinelSet, _Server

__all__ = ["DOWN_AFTER", "SentinelRedis"]

#: The sentinel's ``down-after-milliseconds``, in seconds (what the oracle's docs name).
DOWN_AFTER = DOWN_AFTER_MS / 1000
#: How long a failover may take before the fault counts as not applied (the sentinel's
#: failover-timeout is 3 s; a promotion needs a replica the sentinel saw in sync).
PROMOTION_DEADLINE = 30.0


class SentinelRedis:
    """The fleet's Redis behind a sentinel: ``url`` is the ``redis+sentinel://`` store URL."""

    def __init__(self, directory: Path) -> None:
        self.set = SentinelSet(directory)
        self.url = self.set.url
        self.clients: list[Any] = []
        self._killed: str | None = None
        self._paused: str | None = None
        self._sentinel_client: Any = None

    def start(self) -> None:
        self.set.start()

    def stop(self) -> None:
        for client in self.clients:
            client.close()
        self.clients.clear()
        for server in self.set.servers.values():
            if server.process is not None:
                server.resume()  # a paused one must hear the TERM
        self.set.stop()

    # -- who is who ----------------------------------------------------------------------------

    def primary(self) -> str:
        """The server the sentinel names as the primary now, by the name it was first started
        under (``primary`` or ``replica``: after a failover, the names no longer say the roles;
        the reports give the port too)."""
        port = self._named_port()
        for name, known in self.set.ports.items():
            if known == port:
                return name
        raise RuntimeError(f"the sentinel names no known primary ({port})")

    def _sentinel(self) -> Any:
        """One client of the sentinel for the whole run (the kit's opens one per question: a
        sampler asking every second would hold thousands of sockets in a long soak)."""
        if self._sentinel_client is None:
            self._sentinel_client = self.set.sentinel_client()
        return self._sentinel_client

    def _named_port(self) -> int | None:
        try:
            return int(self._sentinel().sentinel_get_master_addr_by_name(SERVICE)[1])
        except Exception:
            return None

    def client(self) -> Any:
        """A plain client of the current primary (closed by ``stop``, or by the caller)."""
        import redis

        client = redis.Redis(host="127.0.0.1", port=self.set.ports[self.primary()],
                             socket_timeout=2)
        self.clients.append(client)
        return client

    # -- the faults ------------------------------------------------------------------------------

    def kill(self) -> dict[str, str]:
        """SIGKILL of the current primary."""
        name = self.primary()
        self.set.servers[name].kill()
        self._killed = name
        return {"server": name, "port": str(self.set.ports[name])}

    def restart(self) -> dict[str, str]:
        """The killed server back: a replica of the primary the sentinel names now, or the
        primary again (empty) if the sentinel has not promoted another."""
        assert self._killed is not None, "nothing was killed"
        name, self._killed = self._killed, None
        try:
            primary = self.primary()
        except RuntimeError:
            primary = name
        replica_of = None if primary == name else self.set.ports[primary]
        argv = _without_replicaof(self.set.servers[name].argv)
        if replica_of is not None:
            argv += ["--replicaof", "127.0.0.1", str(replica_of)]
        self.set.servers[name] = _Server(argv)
        self.set.servers[name].start()
        return {"restarted": name, "as": "primary" if replica_of is None else "replica"}

    def signal(self, sig: signal.Signals) -> dict[str, str]:
        """SIGSTOP to the current primary; SIGCONT to the one that was stopped (by then the
        sentinel may have promoted the other: it turns this one into a replica)."""
        if sig == signal.SIGSTOP:
            name = self._paused = self.primary()
            self.set.servers[name].pause()
            return {"server": name, "port": str(self.set.ports[name])}
        name, self._paused = self._paused, None
        assert name is not None, "nothing was paused"
        self.set.servers[name].resume()
        return {}

    def failover(self, now: Callable[[], float]) -> dict[str, str]:
        """SIGKILL of the primary, the time the sentinel names another, and the killed server
        restarted as a replica of it. Times in the soak's clock (``now``)."""
        # A failover needs a replica the sentinel sees in sync: a server restarted just before
        # is not one yet, and a paused primary that resumed after a failover stays a primary
        # until the sentinel's next INFO of it (up to 10 s) demotes it.
        deadline = time.monotonic() + PROMOTION_DEADLINE
        while not self._replica_ready():
            if time.monotonic() > deadline:
                raise RuntimeError(f"no replica of {SERVICE} in sync: no failover possible")
            time.sleep(0.1)
        killed = self.kill()
        killed_at = now()
        deadline = time.monotonic() + PROMOTION_DEADLINE
        while self._named_port() in (None, int(killed["port"])):
            if time.monotonic() > deadline:
                self.restart()
                raise RuntimeError(f"the sentinel promoted no replica of {SERVICE} within "
                                   f"{PROMOTION_DEADLINE:g} s")
            time.sleep(0.02)
        promoted_at = now()
        restarted = self.restart()
        return {**killed, **restarted, "killed_at": f"{killed_at:.3f}",
                "promoted_at": f"{promoted_at:.3f}",
                "promotion_seconds": f"{promoted_at - killed_at:.2f}"}


    def _replica_ready(self) -> bool:
        try:
            primary_port = self.set.ports[self.primary()]
            replicas = self._sentinel().sentinel_slaves(SERVICE)
        except Exception:
            return False
        return any(r.get("master-link-status") == "ok" and not r.get("is_sdown")
                   and not r.get("is_disconnected") and int(r.get("master-port", 0)) == primary_port
                   for r in replicas)


def _without_replicaof(argv: list[str]) -> list[str]:
    if "--replicaof" not in argv:
        return list(argv)
    i = argv.index("--replicaof")
    return argv[:i] + argv[i + 3:]
