"""The real thing on loopback for the chaos soak: a redis-server, the test kit's fakes (``failopen
emulate status|verify``, each its own process so the soak's own load never slows their answers),
the Django example under gunicorn (2 workers) and the ASGI example under uvicorn (2 workers), one
fleet on the one Redis; and the hands that inject each fault.

Every process is started in a session of its own and its whole group is ended at the end; logs
go to files in the run's directory (a full pipe would block a worker).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from _servers import free_port

from failopen.testing.control import read_control, send_control

ROOT = Path(__file__).resolve().parents[2]
TESTS = ROOT / "tests"
if str(TESTS) not in sys.path:
    sys.path.insert(0, str(TESTS))

from _redis_kit import RedisServer  # noqa: E402  (tests/ is put on the path just above)

__all__ = ["App", "Fleet", "PREFIX", "PRIVATE_KEY", "FALLBACK_SECRET"]

#: Test-only values: the fakes' key and the fallback challenge's signing secret. Never printed.
PRIVATE_KEY = "soak-private-key"
FALLBACK_SECRET = "soak-fallback-secret-of-at-least-32-characters"
PREFIX = "soak:failopen:"
# The console script beside this interpreter (the package has no __main__).
FAILOPEN = [sys.executable, "-c", "import sys; from failopen.cli import main; sys.exit(main())"]


@dataclass
class App:
    """One example under its real server."""

    name: str
    argv: list[str]
    env: dict[str, str]
    port: int
    audit: Path
    log: Path
    paths: dict[str, str]          # route -> path
    policies: dict[str, str]       # route -> outage policy
    csrf: bool = False
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(self.argv, cwd=ROOT, env=self.env, stdout=log,
                                         stderr=subprocess.STDOUT, start_new_session=True)
        _wait_http(self.url + self.paths["unprotected"], self.proc, self.log)

    def workers(self) -> list[int]:
        """The pids of the master's live children (its workers)."""
        assert self.proc is not None
        return [pid for pid in _children(self.proc.pid) if not _is_helper(pid)]

    def stop(self) -> None:
        if self.proc is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


@dataclass
class Fleet:
    """Everything the soak runs, and the operations the faults need."""

    directory: Path
    probe_app: str
    knobs_env: dict[str, str]
    probe_env: dict[str, str]
    #: The store a ``redis+sentinel://`` URL over a primary, a replica and a sentinel.
    sentinel: bool = False
    #: FAILOPEN_VENDOR: whose fake verify API the servers call (the spec's by default).
    vendor: str = "enforcement"
    redis: Any = field(init=False)  # a RedisServer, or a SentinelRedis
    status_url: str = field(init=False)
    verify_url: str = field(init=False)
    apps: dict[str, App] = field(init=False, default_factory=dict)
    last_leader: tuple[str, int] | None = field(init=False, default=None)
    _fakes: list[subprocess.Popen[bytes]] = field(init=False, default_factory=list)

    # -- start and stop ------------------------------------------------------------------------

    def start(self) -> None:
        if self.sentinel:
            from _soak_sentinel import SentinelRedis

            self.redis = SentinelRedis(self.directory)
        else:
            self.redis = RedisServer(self.directory)
        self.redis.start()
        self.status_url = self._fake("status", [])
        verify_base = self._fake("verify", ["--private-key", PRIVATE_KEY, "--vendor",
                                            self.vendor])
        self.verify_url = verify_base + _verify_path(self.vendor)
        self.verify_base = verify_base
        for app in (self._django(), self._asgi()):
            self.apps[app.name] = app
            app.start()

    def stop(self) -> None:
        for app in self.apps.values():
            app.stop()
        for proc in self._fakes:
            proc.terminate()
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        with contextlib.suppress(Exception):
            if not self.sentinel and self.redis.process is not None:
                os.kill(self.redis.process.pid, signal.SIGCONT)  # a paused one cannot stop
        with contextlib.suppress(Exception):
            self.redis.stop()

    def _fake(self, kind: str, extra: list[str]) -> str:
        port = free_port()
        log = (self.directory / f"fake-{kind}.log").open("ab")
        proc = subprocess.Popen([*FAILOPEN, "emulate", kind, "--port", str(port), *extra],
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        self._fakes.append(proc)
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 20
        while True:
            with contextlib.suppress(Exception):
                read_control(url, timeout=1)
                return url
            assert proc.poll() is None and time.monotonic() < deadline, f"fake {kind} failed"
            time.sleep(0.05)

    def _env(self, name: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("FAILOPEN_", "DJANGO_"))}
        settings = {
            "STATUS_URL": self.status_url, "VERIFY_URL": self.verify_url,
            "PRIVATE_KEY": PRIVATE_KEY, "PUBLIC_KEY": "soak-public-key",
            "STORE": self.redis.url, "REDIS_PREFIX": PREFIX,
            "AUDIT_FILE": str(self.directory / f"audit-{name}.jsonl"),
            "FALLBACK_SECRET": FALLBACK_SECRET,
            # The soak's few clients would meet the default 20/minute per address at once; the
            # limit stays on (its Redis round trips are part of what is soaked), out of reach.
            "OUTAGE_RATE": "100000/minute",
            **_vendor_env(self.vendor),
            **self.knobs_env, **(self.probe_env if name == self.probe_app else {}),
        }
        env.update({f"FAILOPEN_{k}": v for k, v in settings.items()})
        return env

    def _django(self) -> App:
        port = free_port()
        env = self._env("django")
        # login follows the default (open); password_reset is closed by its @protect mark.
        env["FAILOPEN_OUTAGE_POLICY_ROUTES"] = "signup=fallback"
        argv = [sys.executable, "-m", "gunicorn", "-w", "2", "-k", "sync",
                "-b", f"127.0.0.1:{port}", "--graceful-timeout", "5", "--timeout", "30",
                "--chdir", str(ROOT / "examples" / "django_site"), "django_site.wsgi"]
        return App("django", argv, env, port, Path(env["FAILOPEN_AUDIT_FILE"]),
                   self.directory / "gunicorn.log",
                   {"login": "/login/", "signup": "/signup/", "reset": "/password-reset/",
                    "unprotected": "/signup/"},  # GET: only POST is protected
                   {"login": "open", "signup": "fallback", "reset": "closed",
                    "unprotected": "none"}, csrf=True)

    def _asgi(self) -> App:
        port = free_port()
        env = self._env("asgi")
        env["FAILOPEN_OUTAGE_POLICY_ROUTES"] = "/signup=fallback,/password-reset=closed"
        argv = [sys.executable, "-m", "uvicorn", "--app-dir", str(ROOT / "examples"),
                "asgi_app:app", "--host", "127.0.0.1", "--port", str(port), "--workers", "2",
                "--lifespan", "on", "--log-level", "warning", "--timeout-graceful-shutdown", "5"]
        return App("asgi", argv, env, port, Path(env["FAILOPEN_AUDIT_FILE"]),
                   self.directory / "uvicorn.log",
                   {"login": "/login", "signup": "/signup", "reset": "/password-reset",
                    "unprotected": "/health"},
                   {"login": "open", "signup": "fallback", "reset": "closed",
                    "unprotected": "none"})

    # -- the fakes -----------------------------------------------------------------------------

    def status(self, **body: Any) -> None:
        send_control(self.status_url, body)

    def verify(self, fault: str | None) -> None:
        send_control(self.verify_base, {"fault": fault})

    def status_requests(self) -> int:
        return int(read_control(self.status_url)["requests"])

    # -- Redis -----------------------------------------------------------------------------------

    # On Sentinel each acts on the primary the sentinel names, and says which.

    def redis_signal(self, sig: signal.Signals) -> dict[str, str]:
        if self.sentinel:
            return dict(self.redis.signal(sig))
        assert self.redis.process is not None
        os.kill(self.redis.process.pid, sig)
        return {}

    def redis_kill(self) -> dict[str, str]:
        return dict(self.redis.kill() or {})

    def redis_restart(self) -> dict[str, str]:
        if self.sentinel:
            return dict(self.redis.restart())
        self.redis.start()  # the same port, empty: nothing is saved to disk
        return {}

    def redis_failover(self, now: Callable[[], float]) -> dict[str, str]:
        """Sentinel only: kill the primary, wait for the promotion, restart it as a replica."""
        return dict(self.redis.failover(now))

    def redis_flushall(self) -> None:
        client = self.redis.client()
        try:
            client.flushall()
        finally:
            client.close()
            self.redis.clients.remove(client)

    def leader(self) -> tuple[str, int] | None:
        """(app, pid) of the process holding the lease, None when nobody does; remembered as
        :attr:`last_leader` (what a leader kill uses while Redis does not answer)."""
        client = self.redis.client()
        try:
            raw = client.get(PREFIX + "leader")
        finally:
            client.close()
            self.redis.clients.remove(client)
        if raw is None:
            return None
        pid = int(json.loads(raw)["id"].rsplit(":", 2)[1])
        for app in self.apps.values():
            if pid in app.workers():
                self.last_leader = (app.name, pid)
                return app.name, pid
        return None

    # -- the operators ----------------------------------------------------------------------------

    def override(self, verb: str, *, ttl: str | None = None) -> subprocess.CompletedProcess[str]:
        """``failopen override VERB`` against the fleet's store, as an operator runs it."""
        argv = [*FAILOPEN, "override", verb, "--store", self.redis.url, "--json",
                "--reason", f"soak {verb}"]
        if ttl is not None:
            argv += ["--ttl", ttl]
        env = {k: v for k, v in os.environ.items() if not k.startswith("FAILOPEN_")}
        env["FAILOPEN_REDIS_PREFIX"] = PREFIX
        return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=20)

    # -- the processes ----------------------------------------------------------------------------

    def recycle(self) -> list[str]:
        """HUP to both masters: gunicorn and uvicorn replace every worker."""
        done = []
        for app in self.apps.values():
            assert app.proc is not None
            os.kill(app.proc.pid, signal.SIGHUP)
            done.append(app.name)
        return done

    def worker_rss(self) -> Iterator[tuple[str, int, int]]:
        """(app, pid, VmRSS in kB) of every live worker."""
        for app in self.apps.values():
            for pid in app.workers():
                with contextlib.suppress(OSError, ValueError):
                    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                        if line.startswith("VmRSS:"):
                            yield app.name, pid, int(line.split()[1])


def _children(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        with contextlib.suppress(OSError):
            found += [int(c) for c in (task / "children").read_text().split()]
    return found


def _is_helper(pid: int) -> bool:
    """multiprocessing's resource tracker, which uvicorn's spawned workers may leave beside
    them: a child of the master, not a worker."""
    try:
        return b"resource_tracker" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return True


def _wait_http(url: str, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 60
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"{proc.args!r} exited: {log.read_text()[-2000:]}")
        with contextlib.suppress(httpx.TransportError):
            if httpx.get(url, timeout=2).status_code == 200:
                return
        if time.monotonic() > deadline:
            raise RuntimeError(f"{url} did not come up: {log.read_text()[-2000:]}")
        time.sleep(0.1)


def _verify_path(vendor: str) -> str:
    """Where the vendor's fake verifies (the spec's vendor: /api/v4/verify/)."""
    if vendor == "enforcement":
        return "/api/v4/verify/"
    from failopen.testing.providers import fake_verify_api

    return str(fake_verify_api(vendor).path)


def _vendor_env(vendor: str) -> dict[str, str]:
    """Another vendor's settings: its name and site key; the soak's status page (the spec's
    shape, whatever the vendor) decides by its global component, named so no preset applies."""
    if vendor == "enforcement":
        return {}
    from failopen.testing.providers import FAKES

    return {"VENDOR": vendor, "PUBLIC_KEY": FAKES[vendor].DEFAULT_PUBLIC_KEY,
            "GLOBAL_COMPONENT": "fakeglobal00"}
