"""Two worker processes on one real redis-server: a solution one admitted, the other refuses,
and the outage rate limit is counted for both together (issue 20)."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
from _redis_kit import RedisServer

from failopen.fallback import FallbackChallenges
from failopen.secret import Secret
from failopen.testing import solve_challenge

pytestmark = pytest.mark.slow

SECRET = "two-processes-" + "s" * 30

# One worker: its own runtime on the shared Redis, enforcement off through an override (what an
# operator's `failopen override off` leaves in the store), one request per argument.
WORKER = """
import json, sys
from failopen import Config, FailOpen
# The verify URL is never called: enforcement is off for the whole run.
config = Config(store=sys.argv[1], protected_paths=("/login", "/signup"),
                verify_url="http://127.0.0.1:9/verify", private_key="never-used-key",
                outage_policy_routes="/signup=fallback", fallback_secret=sys.argv[2],
                fallback_cost=2000, outage_rate="3/minute", poll_interval=30.0)
runtime = FailOpen(config)
runtime.flag.force_off("two processes", ttl=60)
answers = []
for request in json.loads(sys.argv[3]):
    decision = runtime.decide(None, path=request["path"], client="203.0.113.9",
                              solution=request.get("altcha"),
                              policy=config.outage_policy_for(request["path"]),
                              route=request["path"])
    answers.append(decision.outcome)
runtime.stop()
print(json.dumps(answers))
"""


def worker(redis_server: RedisServer, requests: list[dict[str, str]]) -> list[str]:
    done = subprocess.run(
        [sys.executable, "-c", WORKER, redis_server.url, SECRET, json.dumps(requests)],
        capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    return list(json.loads(done.stdout.strip().splitlines()[-1]))


def test_a_solution_admitted_by_one_worker_is_refused_by_the_other(
        redis_server: RedisServer) -> None:
    # As in an outage: the challenge is issued after the operator's override is in the store (a
    # challenge issued before the fleet's record of used solutions began is refused; issue
    # times are whole seconds).
    assert worker(redis_server, []) == []
    time.sleep(1.05)
    challenges = FallbackChallenges(Secret(SECRET), cost=2000, ttl=300)
    solved = solve_challenge(challenges.issue())
    assert worker(redis_server, [{"path": "/signup", "altcha": solved}]) == ["bypassed_fallback"]
    assert worker(redis_server, [{"path": "/signup", "altcha": solved}]) == ["fallback_invalid"]


def test_the_outage_rate_limit_counts_both_workers_together(redis_server: RedisServer) -> None:
    first = worker(redis_server, [{"path": "/login"}, {"path": "/login"}])
    second = worker(redis_server, [{"path": "/login"}, {"path": "/login"}])
    assert first == ["bypassed_flag_off"] * 2
    assert second == ["bypassed_flag_off", "outage_rate_limited"]
