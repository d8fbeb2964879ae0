"""A Hypothesis state machine over one fleet member and a real Redis that comes and goes.

An operator places and lifts overrides in Redis; Redis goes down and comes back, is flushed, or
holds garbage. The member turns as its watcher thread would (sync with the fleet, then refresh
the flag). After every step:

* while Redis answers properly, the member applies exactly the override Redis holds;
* while it does not (down, garbage), the member follows its own polling ("local") and keeps the
  override it last saw until that override's own expiry; it never invents one;
* after lost keys (FLUSHALL), the override the member knew is put back in Redis;
* enforcement is off only under a force-off override the operator placed (no status page here).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from _redis_kit import REDIS_SERVER, RedisServer
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from failopen.engine.flag import EnforcementFlag
from failopen.engine.fleet import Fleet
from failopen.engine.watcher import StatusWatcher
from failopen.stores.redis import RedisStore
from failopen.testing import free_port

pytestmark = pytest.mark.skipif(REDIS_SERVER is None, reason="redis-server is not installed")


class FleetMachine(RuleBasedStateMachine):
    server: RedisServer
    counter = 0

    def __init__(self) -> None:
        super().__init__()
        FleetMachine.counter += 1
        prefix = f"sm{FleetMachine.counter}:"
        self.store = RedisStore(self.server.url, prefix=prefix)
        self.up_client = self.store.client
        self.down_store = RedisStore(f"redis://127.0.0.1:{free_port()}/0")
        self.down_client = self.down_store.client
        self.operator_store = RedisStore(self.server.url, prefix=prefix)
        self.operator = EnforcementFlag(store=self.operator_store)
        self.flag = EnforcementFlag(store=self.store)
        self.watcher = StatusWatcher(None, self.flag)
        self.fleet = Fleet(self.store, self.watcher, lease=10.0)
        self.watcher.fleet = self.fleet
        self.redis = self.server.client()
        self.prefix = prefix
        self.up = True
        self.garbage = False
        self.placed: list[tuple[bool, str]] = []  # what the operator placed (enforce, reason)
        self.seen: Any = None  # (enforce, reason) the member last saw from a working Redis

    def teardown(self) -> None:
        self.store.client = self.up_client
        for store in (self.store, self.down_store, self.operator_store):
            store.close()
        self.redis.close()

    def turn(self) -> None:
        self.fleet.sync()
        self.watcher.tick()

    @rule(enforce=st.booleans(), ttl=st.sampled_from([None, 60.0, 3600.0]))
    def place(self, enforce: bool, ttl: float | None) -> None:
        if not self.up:
            return
        self.garbage = False
        reason = f"op {len(self.placed)}"
        if enforce:
            self.operator.force_on(reason, ttl=ttl)
        else:
            self.operator.force_off(reason, ttl=ttl)
        self.placed.append((enforce, reason))

    @rule()
    def lift(self) -> None:
        if self.up:
            self.garbage = False
            self.operator.automatic("lifted")

    @rule()
    def redis_down(self) -> None:
        self.up = False
        self.store.client = self.down_client

    @rule()
    def redis_up(self) -> None:
        self.up = True
        self.store.client = self.up_client

    @rule()
    def flushall(self) -> None:
        if self.up:
            for key in self.redis.scan_iter(self.prefix + "*"):
                self.redis.delete(key)
            self.garbage = False
            self.turn()
            # The member put back what it knew (and then reads it again).
            stored = self.redis.get(self.prefix + "override")
            mine = self.flag.override
            assert (stored is None) == (mine is None)
            if mine is not None:
                assert json.loads(stored)["reason"] == mine.reason

    @rule(value=st.sampled_from([b"{", b"\xff", b'{"enforce": false, "set_at": 1}']))
    def garbage_override(self, value: bytes) -> None:
        if self.up:
            self.redis.set(self.prefix + "override", value)
            self.garbage = True

    @rule(turns=st.integers(1, 2))
    def turns(self, turns: int) -> None:
        for _ in range(turns):
            self.turn()
        working = self.up and not self.garbage
        assert self.fleet.store_state == ("redis" if working else "local")
        current = self.flag.override
        shown = None if current is None else (current.enforce, current.reason)
        if working:
            raw = self.redis.get(self.prefix + "override")
            stored = None if raw is None else json.loads(raw)
            assert shown == (None if stored is None else (stored["enforce"], stored["reason"]))
            self.seen = shown
        else:
            assert shown == self.seen  # kept, never invented (no TTL here lapses in a run)

    @invariant()
    def off_only_under_a_placed_force_off(self) -> None:
        state = self.flag.state
        if not state.enforce:
            assert state.source == "override"
            assert (False, state.reason) in self.placed


def test_fleet_member_state_machine(tmp_path_factory: pytest.TempPathFactory) -> None:
    server = RedisServer(tmp_path_factory.mktemp("redis"))
    server.start()
    FleetMachine.server = server
    try:
        from hypothesis.stateful import run_state_machine_as_test

        run_state_machine_as_test(FleetMachine, settings=settings(
            max_examples=25, stateful_step_count=25, deadline=None,
            suppress_health_check=[HealthCheck.too_slow]))
    finally:
        server.stop()
