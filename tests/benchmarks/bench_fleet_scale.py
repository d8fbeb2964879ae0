"""A fleet's cost as it grows: 2, 8, 32 and 128 members on one Redis server and on a Redis Cluster.

    python tests/benchmarks/bench_fleet_scale.py           # about 5 minutes; a Markdown table
    python tests/benchmarks/bench_fleet_scale.py --quick   # about 2½: 10 s windows, 5 trials

Needs ``redis-server`` and ``redis-cli`` on PATH: a standalone server and a six-node cluster
(three primaries, a replica each) are started here on free loopback ports, as the tests start
them (tests/_redis_kit.py, tests/_cluster_kit.py), nothing saved to disk.

A member is a whole :class:`failopen.FailOpen` runtime (its own watcher thread, its own store
client and connections, its own fleet identity, heartbeat and vote), as a worker process is;
they run as threads of ``min(N, 4)`` processes (``N / 4`` runtimes each at 32 and 128 members),
so that 128 fit on a small machine. Every setting the rows depend on is pinned below, the same
for every row: the defaults for the store refresh and the lease, a 1 s poll interval. Each
size uses its own ``FAILOPEN_REDIS_PREFIX`` (on the cluster, its own hash slot: the table names
the primary that held it), so no lease or heartbeat of the size before is in the way.

Per row, measured over one window after the election settled:

* **status requests per poll interval**: requests the fake status page (failopen.testing)
  answered, over the window's poll intervals (one poller: about 1, whatever N);
* **Redis commands per second**: ``INFO commandstats`` deltas on the server, or summed over the
  cluster's three primaries (the slot's primary carries them all), without this benchmark's own
  commands and the replicas' ``REPLCONF ACK``; per member beside it, and the commands named;
* **override reach**: an override placed as ``failopen override`` places it
  (``EnforcementFlag(store=open_store(url)).force_off(...)``, at a random phase against the
  members' refresh), timed from just before the write to the moment the last member's flag
  changed (each member's listener writes the wall clock; all on one machine); p50 and p100 over
  the trials.
"""

from __future__ import annotations

import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
TESTS = ROOT / "tests"
if str(TESTS) not in sys.path:
    sys.path.insert(0, str(TESTS))

SIZES = (2, 8, 32, 128)
PROCESSES = 4  # at most: members beyond run as threads of these
INTERVAL = 1.0
#: Every FAILOPEN_* setting of a member (the rest of the environment's FAILOPEN_* is dropped).
PINNED = {
    "FAILOPEN_POLL_INTERVAL": str(INTERVAL),
    "FAILOPEN_POLL_JITTER": "0.1",       # the default
    "FAILOPEN_STORE_REFRESH": "1",       # the default: a sync twice a second
    "FAILOPEN_FLEET_LEASE": "10",        # the default: renewed every 3.3 s
    "FAILOPEN_STATUS_TIMEOUT": "2",
    "FAILOPEN_EVIDENCE": "status",       # no verify probe (no probe records)
    "FAILOPEN_OUTAGE_RATE": "none",      # no request is served here
}
#: Commands a row does not count: this benchmark's own (INFO, and finding the slot's primary),
#: and the replicas' acknowledgements (REPLCONF ACK, once a second each).
NOT_THE_FLEETS = {"info", "replconf", "cluster|nodes", "cluster|keyslot"}


# --- a worker process: N runtimes, each a member ------------------------------------------

def worker(count: int) -> None:
    """``--worker N``: N runtimes sharing this process; a JSON line per flag change."""
    import logging

    from failopen import Config, FailOpen

    logging.disable(logging.WARNING)  # a member falling back says so; not this table's business
    config = Config.from_env()
    lock = threading.Lock()

    def say(**data: Any) -> None:
        with lock:
            sys.stdout.write(json.dumps(data) + "\n")
            sys.stdout.flush()

    runtimes = []
    for index in range(count):
        runtime = FailOpen(config)
        runtime.flag.add_listener(
            lambda _old, new, index=index: say(t=time.time(), m=index, reason=new.reason))
        runtimes.append(runtime)
    for runtime in runtimes:
        runtime.start()
    say(ready=count)
    threading.Event().wait()


class Workers:
    """``n`` members in ``min(n, PROCESSES)`` worker processes, their lines read as they come."""

    def __init__(self, n: int, env: dict[str, str], directory: Path) -> None:
        processes = min(n, PROCESSES)
        shares = [n // processes + (i < n % processes) for i in range(processes)]
        self.n = n
        self.logs = [directory / f"w{n}-{i}.jsonl" for i in range(processes)]
        self.procs = [subprocess.Popen([sys.executable, __file__, "--worker", str(share)],
                                       env=env, stdout=log.open("wb"),
                                       stderr=subprocess.DEVNULL)
                      for share, log in zip(shares, self.logs, strict=True)]
        self._offsets = [0] * processes
        self.ready = 0
        #: reason -> {(worker, member): wall clock when that member's flag took it}
        self.applied: dict[str, dict[tuple[int, int], float]] = {}
        deadline = time.monotonic() + 120
        while self.ready < n:
            if time.monotonic() > deadline or any(p.poll() is not None for p in self.procs):
                self.stop()
                raise RuntimeError(f"the {n} members did not start")
            self.read()
            time.sleep(0.05)

    def read(self) -> None:
        for i, log in enumerate(self.logs):
            with log.open("rb") as handle:
                handle.seek(self._offsets[i])
                chunk = handle.read()
            complete = chunk[:chunk.rfind(b"\n") + 1]
            self._offsets[i] += len(complete)
            for line in complete.splitlines():
                data = json.loads(line)
                if "ready" in data:
                    self.ready += data["ready"]
                else:
                    self.applied.setdefault(data["reason"], {})[(i, data["m"])] = data["t"]

    def stop(self) -> None:
        for proc in self.procs:
            proc.kill()
        for proc in self.procs:
            proc.wait()


# --- the Redis side -------------------------------------------------------------------------

class Standalone:
    name = "one server"

    def __init__(self, directory: Path) -> None:
        from _redis_kit import RedisServer

        directory.mkdir()
        self.server = RedisServer(directory)
        self.server.start()
        self.url = self.server.url
        self._client = self.server.client()

    def counts(self, prefix: str) -> tuple[dict[str, dict[str, int]], str]:
        """``INFO commandstats`` by node, and the node that holds the prefix's keys."""
        return {self.server.address: _commandstats(self._client)}, self.server.address

    def stop(self) -> None:
        self.server.stop()


class Cluster:
    name = "cluster (3 primaries)"

    def __init__(self, directory: Path) -> None:
        from _cluster_kit import RedisCluster

        self.cluster = RedisCluster(directory)
        self.cluster.start()
        self.url = self.cluster.url
        self._clients = {port: self.cluster.node(port) for port in self.cluster.ports}

    def counts(self, prefix: str) -> tuple[dict[str, dict[str, int]], str]:
        """``INFO commandstats`` of each primary, and the primary holding the prefix's slot."""
        primaries = {f"127.0.0.1:{port}": _commandstats(client)
                     for port, client in self._clients.items()
                     if client.info("replication")["role"] == "master"}
        primary, _replicas = self.cluster.holders("{" + prefix.rstrip(":") + "}:override")
        return primaries, f"127.0.0.1:{primary}"

    def stop(self) -> None:
        self.cluster.stop()


def _commandstats(client: Any) -> dict[str, int]:
    return {name: int(stats["calls"]) for name, stats in client.info("commandstats").items()}


def _delta(before: dict[str, dict[str, int]], after: dict[str, dict[str, int]],
           nodes: list[str] | None = None) -> dict[str, int]:
    """The fleet's commands between two readings, by name, summed over ``nodes`` (all)."""
    total: dict[str, int] = {}
    for node in nodes or list(after):
        for name, calls in after[node].items():
            command = name.removeprefix("cmdstat_")
            count = calls - before.get(node, {}).get(name, 0)
            if count and command not in NOT_THE_FLEETS:
                total[command] = total.get(command, 0) + count
    return total


# --- one row --------------------------------------------------------------------------------

def row(redis: Standalone | Cluster, n: int, page: Any, directory: Path, *, window: float,
        trials: int) -> dict[str, Any]:
    from failopen.engine.flag import EnforcementFlag
    from failopen.stores import open_store

    prefix = f"scale{n}:"
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAILOPEN_")}
    env.update(PINNED, FAILOPEN_STATUS_URL=page.url, FAILOPEN_STORE=redis.url,
               FAILOPEN_REDIS_PREFIX=prefix)
    began = time.monotonic()
    workers = Workers(n, env, directory)
    try:
        started = time.monotonic() - began
        time.sleep(3 * INTERVAL)  # every member synced; one leader, the others follow
        commands, _holder = redis.counts(prefix)
        requests, at = page.requests, time.monotonic()
        time.sleep(window)
        elapsed = time.monotonic() - at
        polls = (page.requests - requests) / (elapsed / INTERVAL)
        after, holder = redis.counts(prefix)
        counted = _delta(commands, after)
        per_second = sum(counted.values()) / elapsed
        on_holder = sum(_delta(commands, after, [holder]).values()) / elapsed

        store = open_store(redis.url, prefix=prefix)
        flag = EnforcementFlag(store=store)
        reach = []
        for trial in range(trials):
            time.sleep(random.uniform(0.2, 1.2))  # a random phase against the refresh
            reason = f"bench {n} trial {trial}"
            placed = time.time()
            flag.force_off(reason, ttl=60)
            deadline = time.monotonic() + 15
            while len(workers.applied.get(reason, {})) < n and time.monotonic() < deadline:
                time.sleep(0.01)
                workers.read()
            seen = workers.applied.get(reason, {})
            reach.append(max(seen.values()) - placed if len(seen) == n else float("inf"))
        flag.automatic("bench over")
        store.close()  # type: ignore[attr-defined]
    finally:
        workers.stop()
    return {"members": n, "start": started, "polls": polls, "commands": per_second,
            "per_member": per_second / n, "named": counted, "window": elapsed,
            "holder": holder, "on_holder": on_holder, "p50": statistics.median(reach),
            "p100": max(reach)}


@contextmanager
def redises(directory: Path) -> Iterator[list[Standalone | Cluster]]:
    made: list[Standalone | Cluster] = []
    try:
        made.append(Standalone(directory / "standalone"))
        made.append(Cluster(directory / "cluster"))
        yield made
    finally:
        for redis in made:
            redis.stop()


def _named(named: dict[str, int], seconds: float, n: int) -> str:
    ranked = sorted(named.items(), key=lambda kv: -kv[1])
    return ", ".join(f"{name} {count / seconds / n:.2f}" for name, count in ranked
                     if count / seconds / n >= 0.005)


def main() -> None:
    import logging

    from failopen.testing import FakeStatusPage

    logging.disable(logging.WARNING)  # the overrides placed and lifted: the table says enough

    quick = "--quick" in sys.argv
    # Windows of whole heartbeat periods (a third of the lease, 10/3 s): the members, started
    # together, beat together, and a window cut mid-period would count a beat more or less.
    window, trials = (10.0, 5) if quick else (20.0, 10)
    sizes = SIZES
    if "--sizes" in sys.argv:  # e.g. --sizes 2,8: a subset, while trying it out
        sizes = tuple(int(s) for s in sys.argv[sys.argv.index("--sizes") + 1].split(","))
    page = FakeStatusPage()
    rows: list[tuple[str, dict[str, Any]]] = []
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp, page.serve():
        directory = Path(tmp)
        with redises(directory) as stores:
            for n in sizes:  # both stores at each size, one after the other: alike load
                for redis in stores:
                    rows.append((redis.name, row(redis, n, page, directory, window=window,
                                                 trials=trials)))
                    print(f"{redis.name}, {n} members: done", file=sys.stderr)
    print(f"\nPoll interval {INTERVAL:g} s, store refresh 1 s, lease 10 s; {window:g} s window "
          f"per row, {trials} override trials; members are runtimes in min(N, {PROCESSES}) "
          f"processes (Python {sys.version.split()[0]}, {os.cpu_count()} CPUs, load average "
          f"{load:.1f} at the start, {os.getloadavg()[0]:.1f} at the end)\n")
    print("| Redis | members | status requests per interval | Redis commands/s (on the "
          "slot's primary) | per member/s | override reaches all: p50 | p100 |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, r in rows:
        print(f"| {name} | {r['members']} | {r['polls']:.2f} | {r['commands']:.0f} "
              f"({r['on_holder']:.0f}) | {r['per_member']:.2f} | {r['p50']:.2f} s | "
              f"{r['p100']:.2f} s |")
    print("\nCommands per member per second, by name (commands a script runs count too; "
          "TIME is the scripts' clock), the slot's primary, and how long the members took to "
          "start:")
    for name, r in rows:
        print(f"- {name}, {r['members']}: {_named(r['named'], r['window'], r['members'])} "
              f"(on {r['holder']}; started in {r['start']:.1f} s)")


if __name__ == "__main__":
    if "--worker" in sys.argv:
        worker(int(sys.argv[sys.argv.index("--worker") + 1]))
    else:
        main()
