"""The chaos soak's traffic: a few closed-loop clients per server, each request with a known truth
(what it carries) and a User-Agent of its own, so that its audit line can be found.

What a request carries (its ``kind``): a fresh ``valid`` token (signed as the fake verify API's
vendor script signs a solve), an ``invalid`` one, none (``missing``), a ``replayed`` token (one a
previous request had verified: the vendor now says ``previously_verified``); on the ``fallback``
route also a fresh ``solution`` of the server's own challenge (fetched just before, solved at the
soak's low cost), a ``replayed_solution`` (one a previous request was admitted with) or a
``stale_solution`` (solved during an earlier outage, sent while the challenge endpoint says it is
enforcing). Plus unprotected requests. The flag endpoints are sampled too, for the report.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
from _soak_oracle import Request

from failopen.testing import solve_challenge
from failopen.testing.verify_api import signed_token

__all__ = ["FlagSample", "Traffic"]

ROUTE_WEIGHTS = {"login": 35, "signup": 30, "reset": 20, "unprotected": 15}
TOKEN_KINDS = {"valid": 45, "invalid": 20, "missing": 15, "replayed": 20}
FALLBACK_KINDS = {"valid": 25, "invalid": 10, "missing": 10, "replayed": 10, "solution": 30,
                  "replayed_solution": 10, "stale_solution": 5}
CLIENTS_PER_APP = 3
PAUSE = (0.05, 0.3)  # seconds between one client's requests
TIMEOUT = 20.0       # a request waits this long: longer than any verify time-out the soak sets


@dataclass
class FlagSample:
    """One read of a server's flag endpoint."""

    t: float
    app: str
    enforce: bool | None
    source: str
    reason: str


@dataclass
class _Pools:
    """Tokens and solutions to replay, shared by one server's clients."""

    verified: list[str] = field(default_factory=list)
    used_solutions: list[tuple[float, str]] = field(default_factory=list)
    unused_solutions: list[tuple[float, str]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def take(self, pool: list[Any]) -> Any:
        with self.lock:
            return pool.pop(random.randrange(len(pool))) if pool else None

    def put(self, pool: list[Any], item: Any, cap: int = 200) -> None:
        with self.lock:
            pool.append(item)
            del pool[:-cap]


class Traffic:
    """Clients for each server; ``records`` holds every request made, ``flags`` the samples."""

    def __init__(self, apps: dict[str, Any], *, private_key: str, t0: float, seed: int,
                 run_id: str, vendor: str = "enforcement") -> None:
        self.apps = apps
        self._key = private_key  # the fakes' test key; signs valid tokens, never printed
        self._vendor = vendor
        self.t0 = t0
        self.seed = seed
        self.run_id = run_id
        self.records: list[Request] = []
        self.flags: list[FlagSample] = []
        self._seq = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._pools = {name: _Pools() for name in apps}

    def now(self) -> float:
        return time.monotonic() - self.t0

    def start(self) -> None:
        for name in self.apps:
            for i in range(CLIENTS_PER_APP):
                rng = random.Random(f"{self.seed}:{name}:{i}")
                self._spawn(f"soak-{name}-{i}", lambda n=name, r=rng: self._client(n, r))
            self._spawn(f"soak-flag-{name}", lambda n=name: self._sample_flag(n))

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(TIMEOUT + 5)

    def _spawn(self, name: str, target: Callable[[], None]) -> None:
        thread = threading.Thread(target=target, name=name, daemon=True)
        thread.start()
        self._threads.append(thread)

    # -- one client ------------------------------------------------------------------------------

    def _client(self, name: str, rng: random.Random) -> None:
        app = self.apps[name]
        with httpx.Client(base_url=app.url, timeout=TIMEOUT) as client:
            while not self._stop.is_set():
                route = _pick(rng, ROUTE_WEIGHTS)
                kinds = FALLBACK_KINDS if app.policies[route] == "fallback" else TOKEN_KINDS
                kind = "none" if route == "unprotected" else _pick(rng, kinds)
                try:
                    self._one(client, app, route, kind)
                except Exception as exc:  # the soak's own bug: say so, keep going
                    print(f"soak client {name}: {type(exc).__name__}: {exc}", flush=True)
                self._stop.wait(rng.uniform(*PAUSE))

    def _one(self, client: httpx.Client, app: Any, route: str, kind: str) -> None:
        pools = self._pools[app.name]
        with self._lock:
            self._seq += 1
            seq = self._seq
        ua = f"failopen-soak/{self.run_id}/{seq}"
        headers = {"User-Agent": ua, "Accept": "application/json"}
        challenged: float | None = None
        first_used: float | None = None
        if app.csrf:
            if "csrftoken" not in client.cookies:
                client.get(app.paths["unprotected"], headers={"User-Agent": ua + "/csrf"})
            headers["X-CSRFToken"] = client.cookies.get("csrftoken", "")
        if kind == "valid":
            headers["X-Enforcement-Token"] = self._fresh_token()
        elif kind == "invalid":
            headers["X-Enforcement-Token"] = f"not-a-token-{seq}"
        elif kind == "replayed":
            token = pools.take(pools.verified)
            if token is None:
                kind, token = "invalid", f"not-a-token-{seq}"
            headers["X-Enforcement-Token"] = token
        elif kind in ("solution", "stale_solution"):
            challenged = self.now()
            answer = client.get("/failopen/challenge", headers={"User-Agent": ua + "/challenge"})
            if answer.status_code == 200:
                kind = "solution"
                headers["X-Altcha"] = solve_challenge(answer.json())
                # A second one, kept unused: sent after the outage, it must not stand in.
                pools.put(pools.unused_solutions, (challenged, solve_challenge(answer.json())))
            else:
                kept = pools.take(pools.unused_solutions)
                if kept is None:
                    kind = "missing"
                else:
                    kind, (challenged, headers["X-Altcha"]) = "stale_solution", kept
        elif kind == "replayed_solution":
            used = pools.take(pools.used_solutions)
            if used is None:
                kind = "missing"
            else:
                first_used, headers["X-Altcha"] = used
        record = Request(seq, app.name, route, app.policies[route], kind, self.now(), 0.0,
                         challenged=challenged, ua=ua, first_used=first_used)
        path = app.paths[route]
        try:
            if route == "unprotected":
                answer = client.get(path, headers=headers)
            else:
                answer = client.post(path, data={"email": "soak@example.test"}, headers=headers)
        except httpx.HTTPError as exc:
            record.received, record.error = self.now(), f"{type(exc).__name__}: {exc}"
        else:
            record.received = self.now()
            _read(record, answer)
            if record.outcome == "valid" and kind == "valid":
                pools.put(pools.verified, headers["X-Enforcement-Token"])
            if record.outcome == "bypassed_fallback" and "X-Altcha" in headers:
                pools.put(pools.used_solutions, (record.received, headers["X-Altcha"]))
        with self._lock:
            self.records.append(record)

    def _fresh_token(self) -> str:
        """A solve's token the vendor's fake accepts once (a v3 score for reCAPTCHA's)."""
        if self._vendor == "enforcement":
            return signed_token(self._key)
        from failopen.testing.providers import FAKES, mint_token

        claims = {"score": 0.9} if "score" in FAKES[self._vendor].CLAIMS else {}
        return mint_token(self._vendor, self._key, **claims)

    # -- the flag ---------------------------------------------------------------------------------

    def _sample_flag(self, name: str) -> None:
        app = self.apps[name]
        with httpx.Client(base_url=app.url, timeout=5) as client:
            while not self._stop.wait(0.5):
                t = self.now()
                try:
                    data = client.get("/failopen/flag").json()
                    sample = FlagSample(t, name, data.get("enforce"), str(data.get("source")),
                                        str(data.get("reason")))
                except Exception as exc:
                    sample = FlagSample(t, name, None, "unreachable", type(exc).__name__)
                with self._lock:
                    self.flags.append(sample)

    def flag_at(self, app: str, t: float) -> FlagSample | None:
        """The flag sample of ``app`` nearest to ``t`` (for a violation's report)."""
        samples = [s for s in self.flags if s.app == app]
        return min(samples, key=lambda s: abs(s.t - t)) if samples else None


def _read(record: Request, answer: httpx.Response) -> None:
    record.status = answer.status_code
    pid = answer.headers.get("X-Worker-Pid")
    record.pid = int(pid) if pid and pid.isdigit() else None
    try:
        body = answer.json()
    except ValueError:
        record.outcome = "" if record.route == "unprotected" else "not_json"
        return
    if isinstance(body, dict) and isinstance(body.get("decision"), dict):
        decision = body["decision"]
        record.outcome = str(decision.get("outcome"))
        record.bypassed = bool(decision.get("bypassed"))
        record.reason = str(decision.get("reason"))
    elif isinstance(body, dict) and isinstance(body.get("error"), dict):
        record.outcome = str(body["error"].get("code"))
        record.reason = str(body["error"].get("message"))


def _pick(rng: random.Random, weights: dict[str, int]) -> str:
    return rng.choices(list(weights), weights=list(weights.values()))[0]
