"""``failopen override`` says where an override arrived: "reached N of M processes" of this
deployment, a warning and exit code 3 when it reached none, and never a number it cannot know."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from typing import Any

import pytest
from _redis_kit import RedisServer, keys_back_since, same_deployment, wait_for

from failopen.config import Config
from failopen.engine.override_reach import override_id
from failopen.runtime import FailOpen
from failopen.stores.redis import parse_override

pytestmark = pytest.mark.timeout(60)

OTHER_PAGE = "0123456789abcdef"  # the page hash of another deployment sharing the store


@pytest.fixture
def cli_env(monkeypatch: pytest.MonkeyPatch, failopen_config: Config,
            redis_server: RedisServer) -> Config:
    """The command run as an operator of this deployment: its store and its status page."""
    monkeypatch.setenv("FAILOPEN_STORE", redis_server.url)
    assert failopen_config.status_url is not None
    monkeypatch.setenv("FAILOPEN_STATUS_URL", failopen_config.status_url)
    return failopen_config


def plant(redis_server: RedisServer, name: str, *, page: str | None, beat: float = 1.0,
          age: float = 0.0, **fields: Any) -> None:
    """A heartbeat as a member writes it (``age``: seconds since it beat, by Redis's clock)."""
    value = {"id": name, "pid": 1, "leader": False, "seen": 0, "polls": 0, "page": page,
             "beat": beat, **fields}
    redis_server.client().set(f"failopen:proc:{name}", json.dumps(value),
                              px=int((60 - age) * 1000))


def test_off_reports_every_live_process_reached(
    run: Any, fleet: Callable[..., list[FailOpen]], cli_env: Config, redis_server: RedisServer
) -> None:
    runtimes = fleet(3)
    for runtime in runtimes:
        runtime.start()
    # Started before the command, as a fleet is: each has said it is alive.
    assert wait_for(lambda: len(redis_server.client().keys("failopen:proc:*")) == 3)
    result = run("override", "off", "--ttl", "10m", "--reason", "INC-9", "--wait", "10s")
    assert result.code == 0, result.err
    assert "reached 3 of 3 processes" in result.out.splitlines()
    assert result.err == ""
    # Every one of them is bypassing on the operator's word.
    assert all(r.state.source == "override" and not r.state.enforce for r in runtimes)


def test_json_adds_reached_and_processes_beside_the_override(
    run: Any, fleet: Callable[..., list[FailOpen]], cli_env: Config, redis_server: RedisServer
) -> None:
    runtimes = fleet(2)
    for runtime in runtimes:
        runtime.start()
    assert wait_for(lambda: len(redis_server.client().keys("failopen:proc:*")) == 2)
    data = run("override", "on", "--ttl", "1h", "--json").json()
    assert data["override"]["enforce"] is True  # the existing field, unchanged
    assert (data["reached"], data["processes"], data["reach"]) == (2, 2, "measured")
    assert "warning" not in data
    stored = parse_override(redis_server.client().get("failopen:override"))
    # The members report the very override the command placed, by its hash.
    assert all(json.loads(v)["override"] == override_id(stored)
               for v in redis_server.client().mget(redis_server.client().keys("failopen:proc:*")))
    # failopen fleet shows it per process, for an operator who asked not to wait.
    shown = run("fleet", "--json").json()["processes"]
    assert [p["override"] for p in shown] == [override_id(stored)] * 2
    assert all(p["reports_override"] for p in shown)
    assert f"applied override {override_id(stored)}" in run("fleet").out


def test_no_live_process_is_a_warning_and_exit_code_3(
    run: Any, cli_env: Config, redis_server: RedisServer
) -> None:
    result = run("override", "off", "--ttl", "5m", "--wait", "0.3s")
    assert result.code == 3
    assert "reached 0 of 0 processes" in result.out
    assert "warning: no live process of this deployment was seen" in result.err
    # Stored all the same: the command says what happened, it does not undo it.
    assert redis_server.client().get("failopen:override") is not None


def test_a_member_that_does_not_apply_it_leaves_it_unreached(
    run: Any, cli_env: Config, redis_server: RedisServer
) -> None:
    page = same_deployment(cli_env)["page"]
    plant(redis_server, "stuck", page=page, override="ffffffffffffffff")
    result = run("override", "off", "--ttl", "5m", "--wait", "0.5s", "--json")
    assert result.code == 3
    data = result.json()
    assert (data["reached"], data["processes"]) == (0, 1)
    assert "no process applied the override within" in result.err
    assert data["warning"].startswith("no process applied the override")


def test_another_deployments_processes_are_never_counted(
    run: Any, cli_env: Config, redis_server: RedisServer
) -> None:
    page = same_deployment(cli_env)["page"]
    # Another deployment's member says it applied exactly the lift: its word counts for nothing.
    plant(redis_server, "staging", page=OTHER_PAGE, override=None)
    result = run("override", "auto", "--wait", "0.3s")
    assert result.code == 3 and "reached 0 of 0 processes" in result.out
    plant(redis_server, "ours", page=page, override=None)
    result = run("override", "auto", "--wait", "0.3s")
    assert result.code == 0 and "reached 1 of 1 processes" in result.out


def test_an_older_member_that_does_not_say_is_never_reached(
    run: Any, cli_env: Config, redis_server: RedisServer
) -> None:
    page = same_deployment(cli_env)["page"]
    # An older failopen's heartbeat has no "override": it must not pass for "applied none".
    plant(redis_server, "old", page=page)
    result = run("override", "auto", "--wait", "0.3s")
    assert result.code == 3 and "reached 0 of 1 processes" in result.out


def test_a_member_gone_quiet_is_not_counted(
    run: Any, cli_env: Config, redis_server: RedisServer
) -> None:
    page = same_deployment(cli_env)["page"]
    plant(redis_server, "alive", page=page, override=None)
    # Killed 5s ago: its key lingers a minute, but it missed more than two beats of 1s.
    plant(redis_server, "killed", page=page, override="ffffffffffffffff", age=5)
    result = run("override", "auto", "--wait", "0.3s")
    assert result.code == 0 and "reached 1 of 1 processes" in result.out


def test_partial_reach_warns_but_exits_0(
    run: Any, cli_env: Config, redis_server: RedisServer
) -> None:
    page = same_deployment(cli_env)["page"]
    plant(redis_server, "a", page=page, override=None)
    plant(redis_server, "b", page=page, override="ffffffffffffffff")
    result = run("override", "auto", "--wait", "0.3s")
    assert result.code == 0 and "reached 1 of 2 processes" in result.out
    assert "1 of 2 live processes had not applied it" in result.err


def test_wait_0_does_not_wait_nor_guess(run: Any, cli_env: Config) -> None:
    result = run("override", "off", "--ttl", "5m", "--wait", "0", "--json")
    assert result.code == 0
    data = result.json()
    assert (data["reached"], data["processes"], data["reach"]) == (None, None, "not_waited")


def test_the_file_store_says_reach_is_not_measured(run: Any, tmp_path: Any) -> None:
    store = (tmp_path / "override.json").as_uri()
    result = run("override", "off", "--ttl", "5m", "--store", store)
    assert result.code == 0
    assert "reach not measured: the file store keeps no heartbeats" in result.out
    assert "reached" not in result.out.replace("reach not", "")
    data = run("override", "auto", "--store", store, "--json").json()
    assert (data["reached"], data["processes"], data["reach"]) == (None, None, "unmeasured")


@pytest.mark.parametrize("argv", [("show", "--wait", "5s"), ("off", "--wait", "soon"),
                                  ("off", "--wait", "-1s")])
def test_bad_or_misplaced_wait_is_refused(run: Any, tmp_path: Any, argv: tuple[str, ...]) -> None:
    result = run("override", *argv, "--store", (tmp_path / "o.json").as_uri())
    assert result.code == 2
    assert "--wait" in result.err


def test_redis_gone_while_counting_is_not_success(
    run: Any, cli_env: Config, redis_server: RedisServer
) -> None:
    plant(redis_server, "stuck", page=same_deployment(cli_env)["page"],
          override="ffffffffffffffff")
    killer = threading.Timer(0.5, redis_server.kill)
    killer.start()
    try:
        result = run("override", "off", "--ttl", "5m", "--wait", "10s", "--json")
    finally:
        killer.join()
    # Written, then Redis died before any process was seen to apply it: it may be lost.
    assert result.code == 3
    assert result.json()["reach"] == "unknown" and result.json()["reached"] is None
    assert "whether any process applied the override is unknown" in result.err


def test_right_after_lost_keys_the_count_waits_for_members_yet_to_beat(
    run: Any, cli_env: Config, redis_server: RedisServer
) -> None:
    page = same_deployment(cli_env)["page"]
    # Redis came back empty a moment ago: one member has beaten since, the other beats later.
    keys_back_since(redis_server, ago=0.0)
    plant(redis_server, "early", page=page, beat=0.5, override=None)

    def beat() -> None:  # the early one beats again, and the late one for the first time
        for name in ("early", "late"):
            plant(redis_server, name, page=page, beat=0.5, override=None)

    late = threading.Timer(0.8, beat)
    late.start()
    try:
        result = run("override", "auto", "--wait", "10s", "--json")
    finally:
        late.join()
    # Not "1 of 1": the count is final only once every live member had its chance to beat.
    assert result.code == 0, result.err
    assert (result.json()["reached"], result.json()["processes"]) == (2, 2)
    assert "warning" not in result.json() and result.err == ""


def test_a_wait_ending_before_the_count_is_final_says_it_may_be_short(
    run: Any, cli_env: Config, redis_server: RedisServer
) -> None:
    keys_back_since(redis_server, ago=0.0)
    plant(redis_server, "early", page=same_deployment(cli_env)["page"], beat=5, override=None)
    result = run("override", "auto", "--wait", "0.3s")
    assert result.code == 0 and "reached 1 of 1 processes" in result.out
    assert "a live process that has not beaten since is not counted yet" in result.err


def test_keys_long_back_let_the_count_end_as_soon_as_all_applied(
    run: Any, cli_env: Config, redis_server: RedisServer
) -> None:
    keys_back_since(redis_server, ago=30.0)  # more than two beats and a second ago
    plant(redis_server, "a", page=same_deployment(cli_env)["page"], beat=5, override=None)
    data = run("override", "auto", "--wait", "10s", "--json").json()
    assert (data["reached"], data["processes"]) == (1, 1)
    assert data["waited_seconds"] < 10 and "warning" not in data


def test_the_count_waits_two_of_the_longest_beats_and_a_second(
    run: Any, cli_env: Config, redis_server: RedisServer
) -> None:
    keys_back_since(redis_server, ago=3.0)  # within 2 x 2 s + 1 s of a member beating every 2 s
    plant(redis_server, "slow", page=same_deployment(cli_env)["page"], beat=2, override=None)
    result = run("override", "auto", "--wait", "0.3s")
    assert result.code == 0 and "reached 1 of 1 processes" in result.out
    assert "the store's keys were put back 3." in result.err


@pytest.mark.parametrize(("beat", "since"), [
    (1e300, -30.0),     # a beat no member has: believed only up to ten seconds
    (10 ** 400, -30.0),  # a number JSON allows and no float holds
    (1.0, +3600.0),     # a start later than Redis's clock: not one failopen wrote
    (1.0, "soon"),      # not a number at all
], ids=["huge-float", "huge-integer", "future", "not-a-number"])
def test_no_value_in_redis_stretches_the_count_or_breaks_it(
    run: Any, cli_env: Config, redis_server: RedisServer, beat: Any, since: Any
) -> None:
    if isinstance(since, str):
        redis_server.client().set("failopen:epoch", "restored")
        redis_server.client().set("failopen:fallback:since", since)
    else:
        keys_back_since(redis_server, ago=-since)
    redis_server.client().set("failopen:proc:odd", json.dumps(
        {"id": "odd", "pid": 1, "leader": False, "seen": 0, "polls": 0, "override": None,
         "page": same_deployment(cli_env)["page"]})[:-1] + f', "beat": {beat}}}', px=60_000)
    data = run("override", "auto", "--wait", "10s", "--json").json()
    # Counted at once, as a fleet whose keys are long back, with nothing to warn about.
    assert (data["reached"], data["processes"], data["reach"]) == (1, 1, "measured")
    assert data["waited_seconds"] < 10 and "warning" not in data
