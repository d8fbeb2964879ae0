"""The chaos soak's oracle and schedule (tests/benchmarks/_soak_*.py), without servers: the oracle
must be able to fail, and fail only where the documents say the promise was broken."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent / "benchmarks"))

from _soak_oracle import Oracle, Request  # noqa: E402
from _soak_report import Measures, build_report  # noqa: E402
from _soak_schedule import (  # noqa: E402
    FAILOVER_GAP,
    FAULT_KINDS,
    LEADER_KILL,
    OVERRIDE_OFF_LAPSING,
    OVERRIDE_OFF_LIFTED,
    OVERRIDE_ON,
    OVERRIDES,
    REDIS_FLUSHALL,
    REDIS_KILL,
    REDIS_PAUSE,
    SENTINEL_FAILOVER,
    STATUS_500,
    STATUS_OUTAGE,
    STATUS_REGIONAL,
    STATUS_UNREADABLE,
    VERIFY_429,
    VERIFY_DOWN,
    WORKERS_RECYCLE,
    Fault,
    Knobs,
    build_schedule,
)

from failopen.observe.audit_file import hash_user_agent  # noqa: E402

K = Knobs()
OUTAGE = Fault(STATUS_OUTAGE, 100.0, 120.0)


def request(t: float, *, app: str = "django", route: str = "login", kind: str = "invalid",
            status: int | None = 200, outcome: str = "bypassed_flag_off",
            took: float = 0.05, challenged: float | None = None) -> Request:
    policy = {"login": "open", "signup": "fallback", "reset": "closed",
              "unprotected": "none"}[route]
    bypassed = outcome.startswith("bypassed")
    return Request(1, app, route, policy, kind, t, t + took, status=status, outcome=outcome,
                   bypassed=bypassed, challenged=challenged, ua=f"ua-{t}")


def verdict(faults: list[Fault], r: Request) -> str | None:
    return Oracle(faults, K).judge(r).violation


# -- bypasses ------------------------------------------------------------------------------------


def test_a_bypass_while_healthy_is_wrong() -> None:
    assert verdict([], request(50)) == "wrong_bypass"
    assert verdict([OUTAGE], request(50)) == "wrong_bypass"


def test_a_bypass_during_a_confirmed_outage_is_accepted_from_its_start() -> None:
    assert verdict([OUTAGE], request(OUTAGE.start + K.detection + 1)) is None
    # The evidence exists from the moment the page says so: a fast reading is no fault.
    assert verdict([OUTAGE], request(OUTAGE.start + 0.1)) is None
    assert verdict([OUTAGE], request(OUTAGE.start - 1)) == "wrong_bypass"


def test_a_bypass_is_accepted_within_the_recovery_tolerance_only() -> None:
    assert verdict([OUTAGE], request(OUTAGE.end + K.recovery - 0.2)) is None
    assert verdict([OUTAGE], request(OUTAGE.end + K.recovery + 0.2)) == "wrong_bypass"
    # close_after intervals (jittered) plus the status time-out plus a store refresh
    assert K.recovery == pytest.approx(2 * 1.0 * 1.1 + 1.0 + 0.5)


def test_a_fleet_disruption_during_recovery_extends_it_by_one_lease() -> None:
    kill = Fault(LEADER_KILL, OUTAGE.end + 0.5, OUTAGE.end + 0.5)
    late = request(OUTAGE.end + K.recovery + 1)
    assert verdict([OUTAGE], late) == "wrong_bypass"
    assert verdict([OUTAGE, kill], late) is None
    assert verdict([OUTAGE, kill], request(OUTAGE.end + K.recovery + K.fleet_gap + 0.2)) \
        == "wrong_bypass"


@pytest.mark.parametrize("kind", [STATUS_REGIONAL, *sorted(STATUS_UNREADABLE), VERIFY_429,
                                  REDIS_KILL, REDIS_PAUSE])
def test_faults_that_are_never_evidence_never_excuse_a_bypass(kind: str) -> None:
    fault = Fault(kind, 10, 30)
    assert verdict([fault], request(20)) == "wrong_bypass"
    assert verdict([fault], request(20, app="asgi")) == "wrong_bypass"  # the probe's server too


def test_the_probe_is_evidence_on_its_own_server_after_its_streak_only() -> None:
    down = Fault(VERIFY_DOWN, 10, 30)
    assert verdict([down], request(20, app="asgi")) is None
    assert verdict([down], request(10 + K.probe_earliest - 0.3, app="asgi")) == "wrong_bypass"
    assert verdict([down], request(20, app="django")) == "wrong_bypass"
    assert verdict([down], request(30 + K.probe_recovery + 0.3, app="asgi")) == "wrong_bypass"


def test_an_override_on_forbids_a_bypass_during_an_outage_after_propagation() -> None:
    on = Fault(OVERRIDE_ON, 105, 110, settled_at=105.6, ending_at=109.8)
    assert verdict([OUTAGE, on], request(105.2)) is None  # not propagated yet
    assert verdict([OUTAGE, on], request(107)) == "wrong_bypass"
    assert verdict([OUTAGE, on], request(110)) is None  # lifted: the outage counts again


def test_an_override_off_counts_until_its_expiry_plus_propagation() -> None:
    lapsing = Fault(OVERRIDE_OFF_LAPSING, 10, 15.6, settled_at=10.6, ending_at=15)
    assert verdict([lapsing], request(9.9)) == "wrong_bypass"
    assert verdict([lapsing], request(12)) is None
    assert verdict([lapsing], request(15.6 + K.propagation - 0.1)) is None
    assert verdict([lapsing], request(15.6 + K.propagation + 0.2)) == "wrong_bypass"


def test_a_closed_route_never_bypasses() -> None:
    assert verdict([OUTAGE], request(110, route="reset")) == "wrong_bypass"


def test_a_fallback_route_bypasses_only_with_a_fresh_solution_of_this_outage() -> None:
    def signup(kind: str, outcome: str = "bypassed_fallback",
               challenged: float | None = 109.0) -> Request:
        return request(110, route="signup", kind=kind, outcome=outcome, challenged=challenged)

    assert verdict([OUTAGE], signup("solution")) is None
    assert verdict([OUTAGE], signup("missing", "bypassed_flag_off")) == "wrong_bypass"
    assert verdict([OUTAGE], signup("replayed_solution")) == "wrong_bypass"
    assert verdict([OUTAGE], signup("stale_solution", challenged=60.0)) == "wrong_bypass"
    assert verdict([Fault(STATUS_OUTAGE, 50, 70), OUTAGE],
                   signup("stale_solution", challenged=60.0)) == "wrong_bypass"


def test_a_replayed_solution_is_excused_only_where_the_docs_allow_it() -> None:
    """While Redis is away each worker keeps used solutions in memory: a replay is refused on the
    same worker only (docs/outage-policies.md). A FLUSHALL is no excuse."""
    replay = request(110, route="signup", kind="replayed_solution", outcome="bypassed_fallback")
    assert verdict([OUTAGE], replay) == "wrong_bypass"
    assert verdict([OUTAGE, Fault(REDIS_PAUSE, 105, 109.5)], replay) is None
    assert verdict([OUTAGE, Fault(REDIS_PAUSE, 101, 104)], replay) == "wrong_bypass"
    replay.first_used = 102.0
    assert verdict([OUTAGE, Fault(REDIS_PAUSE, 101, 104)], replay) is None
    assert verdict([OUTAGE, Fault(REDIS_FLUSHALL, 105, 105)], replay) == "wrong_bypass"
    assert verdict([Fault(REDIS_PAUSE, 105, 109.5)], replay) == "wrong_bypass"  # no evidence


@pytest.mark.parametrize("kind", ["invalid", "missing", "replayed"])
def test_a_bad_token_admitted_as_valid_is_a_wrong_bypass(kind: str) -> None:
    assert verdict([], request(50, kind=kind, outcome="valid")) == "wrong_bypass"
    assert verdict([OUTAGE], request(110, kind=kind, outcome="valid")) == "wrong_bypass"


# -- refusals ------------------------------------------------------------------------------------


def test_a_valid_token_refused_while_healthy_is_a_wrong_refusal() -> None:
    refused = request(50, kind="valid", status=503, outcome="cannot_verify")
    assert verdict([], refused) == "wrong_refusal"
    assert verdict([], request(50, kind="valid", status=403, outcome="invalid_token")) \
        == "wrong_refusal"
    assert verdict([], request(50, kind="valid", status=200, outcome="valid")) is None


def test_a_valid_token_refused_while_the_verify_api_fails_is_no_wrong_refusal() -> None:
    refused = request(50, kind="valid", status=503, outcome="rate_limited")
    assert verdict([Fault(VERIFY_429, 40, 60)], refused) is None
    # ... nor just after it healed (a call begun before may still be answered badly)
    assert verdict([Fault(VERIFY_429, 40, 49.5)], refused) is None
    assert verdict([Fault(VERIFY_429, 40, 45)], refused) == "wrong_refusal"


def test_a_refusal_where_a_bypass_was_required_is_a_missed_bypass() -> None:
    late = request(OUTAGE.start + K.detection + 1, status=403, outcome="invalid_token")
    assert verdict([OUTAGE], late) == "missed_bypass"
    early = request(OUTAGE.start + 1, status=403, outcome="invalid_token")
    assert verdict([OUTAGE], early) is None
    # a closed route refuses by design; a rate-limited one is within the policy
    assert verdict([OUTAGE], request(110, route="reset", status=503, outcome="outage_closed")) \
        is None
    assert verdict([OUTAGE], request(110, status=429, outcome="outage_rate_limited")) is None


def test_a_fresh_solution_refused_as_issued_before_a_key_loss_is_no_missed_bypass() -> None:
    refused = request(110, route="signup", kind="solution", status=403,
                      outcome="fallback_invalid", challenged=109.5)
    assert verdict([OUTAGE], refused) == "missed_bypass"
    assert verdict([OUTAGE, Fault(REDIS_FLUSHALL, 109.8, 109.8)], refused) is None
    assert verdict([OUTAGE, Fault(REDIS_FLUSHALL, 100.5, 100.5)], refused) == "missed_bypass"
    # A killed Redis loses its keys somewhere between the kill and the restart the injector
    # records once the new server answers: the record may begin again before that is recorded
    # (CI's run: refused at 13.51 s, restart recorded at 13.55 s).
    # The bypass comes from an override, which a Redis fault does not excuse.
    off = Fault(OVERRIDE_OFF_LIFTED, 10, 20, settled_at=10.7, ending_at=19.5)
    during = request(13.51, route="signup", kind="solution", status=403,
                     outcome="fallback_invalid", challenged=12.2, took=0.0)
    assert verdict([off, Fault(REDIS_KILL, 10.5, 13.55)], during) is None
    assert verdict([off, Fault(REDIS_KILL, 14.0, 16.0)], during) == "missed_bypass"


def test_a_required_bypass_is_excused_while_the_fleet_regains_its_poller() -> None:
    late = request(110, status=403, outcome="invalid_token")
    assert verdict([OUTAGE, Fault(REDIS_KILL, 108, 112)], late) is None
    assert verdict([OUTAGE, Fault(WORKERS_RECYCLE, 109, 109)], late) is None
    assert verdict([OUTAGE, Fault(WORKERS_RECYCLE, 100.5, 100.5)], late) == "missed_bypass"


def test_a_page_failing_during_an_outage_neither_ends_nor_excuses_the_bypass() -> None:
    failing = Fault(STATUS_500, 105, 109, {"in": "outage"})
    assert verdict([OUTAGE, failing], request(107)) is None
    assert verdict([OUTAGE, failing], request(107, status=403, outcome="invalid_token")) \
        == "missed_bypass"


def test_on_the_probes_server_healthy_probes_may_end_a_stale_page_bypass() -> None:
    """docs/probe.md: a status-page bypass whose page has gone stale ends after CLOSE_AFTER
    healthy probes, until the page shows the outage again."""
    failing = Fault(STATUS_500, 104, 110, {"in": "outage"})
    refused = request(108, app="asgi", status=403, outcome="invalid_token")
    assert verdict([OUTAGE, failing], refused) is None
    assert verdict([OUTAGE, failing], request(106, app="asgi", status=403,
                                              outcome="invalid_token")) == "missed_bypass"
    assert verdict([OUTAGE, failing], request(108, status=403, outcome="invalid_token")) \
        == "missed_bypass"  # the other server has no probe: its bypass holds
    # The page read again: the bypass is back within a detection after failures.
    assert verdict([OUTAGE, failing], request(110 + K.detection_after_failures + 0.3, app="asgi",
                                              status=403, outcome="invalid_token")) \
        == "missed_bypass"
    # Failed probes do not end it.
    assert verdict([OUTAGE, failing, Fault(VERIFY_DOWN, 100, 120)], refused) == "missed_bypass"


def test_an_override_must_hold_through_a_redis_restart() -> None:
    off = Fault(OVERRIDE_OFF_LIFTED, 10, 20, settled_at=10.7, ending_at=19.5)
    restart = Fault(REDIS_KILL, 12.5, 15.5)
    refused = request(14, status=403, outcome="invalid_token")
    assert verdict([off, restart], refused) == "missed_bypass"
    assert verdict([off, restart], request(17, status=403, outcome="invalid_token")) \
        == "missed_bypass"
    # ... except in a process started while Redis was down: it never saw the override
    recycled = Fault(WORKERS_RECYCLE, 13, 13)
    assert verdict([off, restart, recycled], refused) is None
    assert verdict([off, restart], request(21, status=403, outcome="invalid_token")) is None


def test_detection_after_a_failing_page_allows_the_backoff() -> None:
    failing = Fault(STATUS_500, 90, 99.5)
    at = OUTAGE.start + K.detection + 0.5
    assert verdict([OUTAGE], request(at, status=403, outcome="invalid_token")) == "missed_bypass"
    assert verdict([failing, OUTAGE], request(at, status=403, outcome="invalid_token")) is None


def test_5xx_and_lost_answers() -> None:
    assert verdict([], request(50, status=500, outcome="not_json")) == "failopen_5xx"
    assert verdict([], request(50, status=503, outcome="internal_error")) == "failopen_5xx"
    assert verdict([], request(50, status=None, outcome="")) == "transport_error"
    recycled = Fault(WORKERS_RECYCLE, 50.5, 50.5, {"app": "django,asgi"})
    assert verdict([recycled], request(50, status=None, outcome="")) is None
    assert verdict([], request(50, route="unprotected", status=200, outcome="")) is None
    assert verdict([], request(50, route="unprotected", status=502, outcome="")) \
        == "unprotected_failed"


# -- the report: audit lines -------------------------------------------------------------------


def test_a_bypass_without_its_audit_line_is_reported(tmp_path: Path) -> None:
    audited, lost = request(110), request(111)
    lost.seq = 2
    audit = tmp_path / "audit.jsonl"
    audit.write_text(json.dumps({"ua": hash_user_agent(audited.ua), "outcome": "x"}) + "\n")
    report = build_report(records=[audited, lost], oracle=Oracle([OUTAGE], K),
                          schedule=[OUTAGE], applied=[OUTAGE],
                          measures=Measures(audit_files={"django": audit}),
                          flag_at=lambda app, t: None, seconds=200, seed=1, minutes=3)
    assert report["violations_by_kind"]["unaudited_bypass"] == 1
    assert [v["seq"] for v in report["violations"]] == [2]
    assert report["ok"] is False


# -- the schedule ------------------------------------------------------------------------------


def test_the_same_seed_gives_the_same_schedule() -> None:
    assert build_schedule(7, 600) == build_schedule(7, 600)
    assert build_schedule(7, 600) != build_schedule(8, 600)


@pytest.mark.parametrize("seed", range(1, 40))
def test_every_fault_kind_fits_in_two_minutes(seed: int) -> None:
    schedule = build_schedule(seed, 120)
    assert {f.kind for f in schedule} == set(FAULT_KINDS)
    assert max(f.end for f in schedule) <= 110  # the soak's settle time still fits in 2 min


@pytest.mark.parametrize("seed", range(1, 15))
def test_the_schedule_keeps_apart_what_the_oracle_cannot_judge(seed: int) -> None:
    schedule = build_schedule(seed, 1800)
    outages = [f for f in schedule if f.kind == STATUS_OUTAGE]
    for f in schedule:
        if f.kind in STATUS_UNREADABLE | {STATUS_REGIONAL}:
            # inside an outage and ended before its recovery, or apart from it
            assert all((o.start < f.start and f.end <= o.end - 2)
                       or not (o.start - 1 <= f.end and f.start <= o.end + K.recovery)
                       for o in outages), f
    redis = [f for f in schedule if f.kind in (REDIS_KILL, REDIS_PAUSE)]
    for f in schedule:
        if f.kind in OVERRIDES:
            for moment in (f.start, f.end):
                assert not any(r.start - 2 <= moment <= r.end + 2 for r in redis), f


# -- Sentinel: the failover fault ----------------------------------------------------------------

#: A failover as the injector records it: killed at 108, the sentinel named the new primary at
#: 110.1 (down-after 0.6 s plus the promotion).
FAILOVER = Fault(SENTINEL_FAILOVER, 108.0, 110.1, settled_at=108.0, ending_at=110.1)


def test_a_failover_is_never_evidence() -> None:
    alone = Fault(SENTINEL_FAILOVER, 20, 22.1)
    assert verdict([alone], request(21)) == "wrong_bypass"
    assert verdict([alone], request(21, app="asgi")) == "wrong_bypass"
    assert verdict([alone], request(21, kind="valid", status=200, outcome="valid_token")) is None


def test_a_failover_is_a_redis_outage_until_its_promotion_plus_one_lease() -> None:
    """docs/fleet.md: members fall back (poll for themselves) until their next sync after the
    promotion; a required bypass is excused until then, plus the lease and one detection."""
    excused_until = FAILOVER.end + K.fleet_gap + K.detection
    assert verdict([OUTAGE, FAILOVER], request(109, status=403, outcome="invalid_token")) is None
    assert verdict([OUTAGE, FAILOVER], request(excused_until - 0.2, status=403,
                                               outcome="invalid_token")) is None
    assert verdict([OUTAGE, FAILOVER], request(excused_until + 0.2, status=403,
                                               outcome="invalid_token")) == "missed_bypass"
    # the window is the recorded one: a slower promotion widens it, a faster one narrows it
    slow = Fault(SENTINEL_FAILOVER, 108.0, 112.0)
    assert verdict([OUTAGE, slow], request(excused_until + 0.2, status=403,
                                           outcome="invalid_token")) is None


def test_a_failover_during_recovery_extends_it_by_one_lease() -> None:
    over = Fault(SENTINEL_FAILOVER, OUTAGE.end + 0.5, OUTAGE.end + 2.5)
    late = request(OUTAGE.end + K.recovery + 1)
    assert verdict([OUTAGE], late) == "wrong_bypass"
    assert verdict([OUTAGE, over], late) is None
    assert verdict([OUTAGE, over], request(OUTAGE.end + K.recovery + K.fleet_gap + 0.2)) \
        == "wrong_bypass"


def test_an_override_must_hold_through_a_failover() -> None:
    """docs/fleet.md: each member keeps the override it last saw; only a process started
    during the failover never saw it, until it can read the new primary."""
    off = Fault(OVERRIDE_OFF_LIFTED, 10, 30, settled_at=10.7, ending_at=29.5)
    failover = Fault(SENTINEL_FAILOVER, 15, 17.2, settled_at=15, ending_at=17.2)
    for at in (15.5, 17, 19):
        assert verdict([off, failover], request(at, status=403, outcome="invalid_token")) \
            == "missed_bypass", at
    # a slow promotion (killed at 15, promoted at 22): the newcomer waits for it
    slow = Fault(SENTINEL_FAILOVER, 15, 22, settled_at=15, ending_at=22)
    killed = Fault(LEADER_KILL, 16, 16, {"app": "django", "pid": "1"})
    after = 22 + K.fleet_gap + K.detection
    assert verdict([off, slow, killed], request(after - 0.3, status=403,
                                                outcome="invalid_token")) is None
    assert verdict([off, slow, killed], request(after + 0.2, status=403,
                                                outcome="invalid_token")) == "missed_bypass"


def test_a_replayed_solution_during_a_failover_is_the_documented_degradation() -> None:
    replay = request(109, route="signup", kind="replayed_solution",
                     outcome="bypassed_fallback", challenged=104)
    assert verdict([OUTAGE], replay) == "wrong_bypass"
    assert verdict([OUTAGE, FAILOVER], replay) is None
    assert verdict([OUTAGE, FAILOVER], request(FAILOVER.end + 2, route="signup",
                                               kind="replayed_solution",
                                               outcome="bypassed_fallback",
                                               challenged=104)) == "wrong_bypass"


def test_the_injector_records_a_failover_from_its_kill_to_its_promotion() -> None:
    from _soak_inject import Injector

    planned = Fault(SENTINEL_FAILOVER, 50.0, 50.0)
    injector = Injector(None, [planned], lambda: 0.0)  # type: ignore[arg-type]
    injector._started[0] = (50.01, 53.4, {"killed_at": "50.020", "promoted_at": "52.150"})
    injector._record(0, 50.01, 53.4, None, None)
    (applied,) = injector.applied
    assert (applied.start, applied.settled, applied.ending, applied.end) == \
        (50.01, 50.02, 52.15, 52.15)


@pytest.mark.parametrize("seed", range(1, 40))
def test_sentinel_mode_adds_a_failover_apart_from_other_primary_faults(seed: int) -> None:
    plain, sentinel = build_schedule(seed, 120), build_schedule(seed, 120, sentinel=True)
    failovers = [f for f in sentinel if f.kind == SENTINEL_FAILOVER]
    assert failovers and [f for f in sentinel if f.kind != SENTINEL_FAILOVER] == plain
    assert SENTINEL_FAILOVER not in {f.kind for f in plain}
    assert max(f.end for f in sentinel) <= 110
    long = build_schedule(seed, 1800, sentinel=True)
    for f in long:
        if f.kind != SENTINEL_FAILOVER:
            continue
        for other in long:
            if other.kind in (REDIS_KILL, REDIS_PAUSE):
                assert not other.start - FAILOVER_GAP < f.start < other.end + FAILOVER_GAP
            if other.kind in OVERRIDES:  # never placed or lifted during a failover
                assert not any(f.start - 2 <= m <= f.start + 6 for m in (other.start, other.end))
