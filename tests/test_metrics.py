"""Prometheus metrics: names, labels, values driven by real decisions and polls, registries."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from typing import Any, get_args

import prometheus_client
import pytest
from prometheus_client import CollectorRegistry, generate_latest

from failopen import Config, FailOpen
from failopen.engine.flag import Source
from failopen.engine.guard import Outcome
from failopen.engine.watcher import Reading
from failopen.exceptions import ConfigError
from failopen.observe.metrics import (
    CONFIRMATION_RESULTS,
    DECISION_OUTCOMES,
    FLAG_SOURCES,
    METRIC_NAMES,
    NO_METRICS,
    POLL_RESULTS,
    Metrics,
    PrometheusMetrics,
    install,
)
from failopen.testing import FakeClock, FakeStatusPage, FakeVerifyAPI, solve_challenge

STATUS_URL = "https://status.example.com"
VERIFY_URL = "https://verify.example.com/api/v4/verify/"
PATH, CLIENT = "/login/secret-path-xyz", "203.0.113.77"


@pytest.fixture
def page() -> FakeStatusPage:
    page = FakeStatusPage()
    page.set_global("operational")
    return page


@pytest.fixture
def api() -> FakeVerifyAPI:
    return FakeVerifyAPI()


@pytest.fixture
def registry() -> CollectorRegistry:
    return CollectorRegistry()


@pytest.fixture
def fo(page: FakeStatusPage, api: FakeVerifyAPI, registry: CollectorRegistry) -> Iterator[FailOpen]:
    # The guard is called directly below: no watcher thread polls behind the test's back.
    config = Config(status_url=STATUS_URL, verify_url=VERIFY_URL, private_key=api.private_key,
                    protected_paths=("/login",), confirm_ttl=0.001, metrics="off")
    runtime = FailOpen(config, status_transport=page.transport(),
                       verify_transport=api.transport(), verify_async_transport=api.transport(),
                       clock=FakeClock(),
                       metrics=PrometheusMetrics(registry))
    yield runtime
    runtime.stop()


def value(registry: CollectorRegistry, name: str, **labels: str) -> float:
    found = registry.get_sample_value(name, labels)
    return 0.0 if found is None else found


def test_label_values_are_the_bounded_sets_the_code_uses() -> None:
    assert set(DECISION_OUTCOMES) == set(get_args(Outcome))
    assert set(FLAG_SOURCES) == set(get_args(Source))
    assert set(POLL_RESULTS) == set(get_args(Reading))


def test_every_metric_is_exposed_under_its_contract_name(
    fo: FailOpen, registry: CollectorRegistry
) -> None:
    types = {family.name: family.type for family in registry.collect()}
    samples = {sample.name for family in registry.collect() for sample in family.samples}
    assert types == {
        "failopen_decisions": "counter", "failopen_flag_transitions": "counter",
        "failopen_status_polls": "counter", "failopen_confirmations": "counter",
        "failopen_status_poll_seconds": "histogram", "failopen_verify_seconds": "histogram",
        "failopen_enforcing": "gauge", "failopen_override_active": "gauge",
        "failopen_verify_probes": "counter",
        "failopen_fallback_admissions": "counter",  # issue 29: by the challenge passed
    }
    for name in METRIC_NAMES:
        assert name in samples or f"{name}_count" in samples, name
    text = generate_latest(registry).decode()
    # Every outcome shows from the start (0), so a rate() over it works before the first one.
    for outcome in DECISION_OUTCOMES:
        assert f'failopen_decisions_total{{outcome="{outcome}"}} 0.0' in text


def test_decisions_are_counted_by_outcome(fo: FailOpen, registry: CollectorRegistry) -> None:
    fo.guard.decide(None, path=PATH, client=CLIENT)
    fo.guard.decide(FakeVerifyAPI.GOOD, path=PATH, client=CLIENT)
    fo.guard.decide(FakeVerifyAPI.BAD, path=PATH, client=CLIENT)
    fo.flag.force_off("vendor ticket 1")
    assert fo.guard.bypass(path=PATH, client=CLIENT) is not None
    fo.guard.decide(None, path=PATH, client=CLIENT)
    counts = {o: value(registry, "failopen_decisions_total", outcome=o) for o in DECISION_OUTCOMES}
    assert counts == {**dict.fromkeys(DECISION_OUTCOMES, 0.0), "missing_token": 1.0, "valid": 1.0,
                      "invalid_token": 1.0, "bypassed_flag_off": 2.0}
    assert value(registry, "failopen_verify_seconds_count") == 2.0
    # Labels carry outcome names only: never a path, a client or a reason.
    text = generate_latest(registry).decode()
    assert PATH not in text and CLIENT not in text and "vendor ticket" not in text


@pytest.mark.anyio
async def test_async_decisions_count_and_time_the_verify_call_too(
    fo: FailOpen, registry: CollectorRegistry
) -> None:
    await fo.guard.adecide(FakeVerifyAPI.GOOD)
    assert value(registry, "failopen_decisions_total", outcome="valid") == 1.0
    assert value(registry, "failopen_verify_seconds_count") == 1.0
    await fo.aclose()


def test_gauges_and_transitions_follow_the_flag(
    fo: FailOpen, registry: CollectorRegistry
) -> None:
    assert value(registry, "failopen_enforcing") == 1.0
    assert value(registry, "failopen_override_active") == 0.0
    fo.flag.force_off("vendor ticket 1", ttl=60)
    assert value(registry, "failopen_enforcing") == 0.0
    assert value(registry, "failopen_override_active") == 1.0
    assert value(registry, "failopen_flag_transitions_total", source="override") == 1.0
    fo.flag.force_off("vendor ticket 1, longer", ttl=120)  # same value: not a transition
    assert value(registry, "failopen_flag_transitions_total", source="override") == 1.0
    fo.flag.automatic()
    assert value(registry, "failopen_enforcing") == 1.0
    assert value(registry, "failopen_override_active") == 0.0
    assert value(registry, "failopen_flag_transitions_total", source="default") == 1.0


def test_an_override_that_lapses_resets_the_gauges(
    fo: FailOpen, registry: CollectorRegistry
) -> None:
    clock = fo.clock
    assert isinstance(clock, FakeClock)
    fo.flag.force_off("short", ttl=10)
    clock.advance(11)
    fo.watcher.tick()  # the watcher's turn reads the flag: the override lapses there
    assert value(registry, "failopen_enforcing") == 1.0
    assert value(registry, "failopen_override_active") == 0.0


def test_polls_are_counted_by_reading_and_timed(
    fo: FailOpen, page: FakeStatusPage, registry: CollectorRegistry
) -> None:
    fo.poll_now()
    page.set_global("major_outage")
    fo.poll_now()
    page.set_fault("500")
    fo.poll_now()
    assert value(registry, "failopen_status_polls_total", result="operational") == 1.0
    assert value(registry, "failopen_status_polls_total", result="impaired") == 1.0
    assert value(registry, "failopen_status_polls_total", result="failed") == 1.0
    assert value(registry, "failopen_status_poll_seconds_count") == 3.0
    assert value(registry, "failopen_flag_transitions_total", source="watcher") == 1.0
    assert value(registry, "failopen_enforcing") == 0.0


def test_confirmations_are_counted_by_result(
    fo: FailOpen, page: FakeStatusPage, api: FakeVerifyAPI, registry: CollectorRegistry
) -> None:
    clock = fo.clock
    assert isinstance(clock, FakeClock)
    api.set_fault("503")
    assert fo.guard.decide(FakeVerifyAPI.GOOD).outcome == "cannot_verify"
    clock.advance(1)
    page.set_fault("500")
    assert fo.guard.decide(FakeVerifyAPI.GOOD).outcome == "cannot_verify"
    clock.advance(1)
    page.set_fault(None)
    page.set_global("major_outage")
    assert fo.guard.decide(FakeVerifyAPI.GOOD).outcome == "bypassed_confirmed_outage"
    assert {r: value(registry, "failopen_confirmations_total", result=r)
            for r in CONFIRMATION_RESULTS} == {
        "no_outage": 1.0, "failed": 1.0, "outage": 1.0, "fleet": 0.0}
    assert value(registry, "failopen_flag_transitions_total", source="confirmed") == 1.0


def test_metrics_that_fail_never_change_a_decision(page: FakeStatusPage,
                                                   api: FakeVerifyAPI) -> None:
    class Broken(Metrics):
        def verify_call(self, seconds: float) -> None:
            raise RuntimeError("boom")

        def flush(self) -> None:
            raise RuntimeError("boom")

        def confirmation(self, result: str) -> None:
            raise RuntimeError("boom")

        def status_poll(self, result: str, seconds: float) -> None:
            raise RuntimeError("boom")

    config = Config(status_url=STATUS_URL, verify_url=VERIFY_URL, private_key=api.private_key,
                    protected_paths=("/login",), metrics="off")
    runtime = FailOpen(config, status_transport=page.transport(),
                       verify_transport=api.transport(), metrics=Broken())
    try:
        assert runtime.decide(FakeVerifyAPI.GOOD).outcome == "valid"
        assert runtime.decide(None).outcome == "missing_token"
        assert runtime.poll_now().reading == "operational"
    finally:
        runtime.stop()


# --- registries ------------------------------------------------------------------------------


def _auto(page: FakeStatusPage) -> FailOpen:
    return FailOpen(Config(status_url=STATUS_URL), status_transport=page.transport())


def test_auto_reports_to_the_global_registry_and_two_runtimes_never_clash(
    page: FakeStatusPage,
) -> None:
    before = value(prometheus_client.REGISTRY, "failopen_status_polls_total",
                   result="operational")
    first, second = _auto(page), _auto(page)  # registering twice must not raise
    try:
        assert first.metrics.enabled and second.metrics.enabled
        first.poll_now()
        second.poll_now()
        after = value(prometheus_client.REGISTRY, "failopen_status_polls_total",
                      result="operational")
        assert after - before == 2.0  # one set of collectors, shared
        text = generate_latest(prometheus_client.REGISTRY).decode()
        assert text.count("\nfailopen_status_polls_total{result=\"operational\"}") == 1
    finally:
        first.stop()
        second.stop()


def test_install_moves_the_metrics_to_another_registry(
    page: FakeStatusPage, registry: CollectorRegistry
) -> None:
    old_registry = CollectorRegistry()
    runtime = FailOpen(Config(status_url=STATUS_URL, metrics="off"),
                       status_transport=page.transport(), metrics=PrometheusMetrics(old_registry))
    try:
        install(runtime, registry=registry)
        install(runtime, registry=registry)  # again: still no error, still counted once
        runtime.poll_now()
        assert value(registry, "failopen_status_polls_total", result="operational") == 1.0
        # Nobody reports to the old registry any more: its failopen collectors are gone.
        assert "failopen_" not in generate_latest(old_registry).decode()
        runtime.flag.force_off("x")
        assert value(registry, "failopen_enforcing") == 0.0
    finally:
        runtime.stop()


def test_metrics_off_reports_nothing(page: FakeStatusPage) -> None:
    runtime = FailOpen(Config(status_url=STATUS_URL, metrics="off"),
                       status_transport=page.transport())
    try:
        assert runtime.metrics is NO_METRICS
        assert runtime.guard.metrics is NO_METRICS
    finally:
        runtime.stop()


def test_the_setting_is_read_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAILOPEN_METRICS", "off")
    assert Config.from_env().metrics == "off"
    monkeypatch.setenv("FAILOPEN_METRICS", "sometimes")
    with pytest.raises(ConfigError, match="FAILOPEN_METRICS: expected one of auto, on, off"):
        Config.from_env()


def _python(code: str) -> subprocess.CompletedProcess[str]:
    # prometheus_client made unimportable, as in an install without the extra.
    blocker = "import sys; sys.modules['prometheus_client'] = None\n"
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAILOPEN_")}
    return subprocess.run([sys.executable, "-c", blocker + textwrap.dedent(code)],
                          capture_output=True, text=True, env=env, timeout=60)


def test_core_never_imports_prometheus_client_at_import_time() -> None:
    done = subprocess.run(
        [sys.executable, "-c",
         "import sys, failopen, failopen.metrics, failopen.runtime, failopen.engine.guard;"
         "print('prometheus_client' in sys.modules)"],
        capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == "False", done.stderr


def test_without_prometheus_client_everything_works_as_before() -> None:
    done = _python("""
        from failopen import Config, FailOpen
        from failopen.exceptions import ConfigError
        from failopen.observe.metrics import NO_METRICS
        fo = FailOpen(Config(verify_url="https://v.example/", private_key="k",
                             protected_paths=("/login",)))
        assert fo.metrics is NO_METRICS
        assert fo.guard.decide(None).outcome == "missing_token"
        fo.flag.force_off("x")
        assert fo.guard.decide(None).outcome == "bypassed_flag_off"
        try:
            Config(metrics="on")
        except ConfigError as exc:
            print(exc)
    """)
    assert done.returncode == 0, done.stderr
    assert "FAILOPEN_METRICS: 'on' needs prometheus_client" in done.stdout
    assert 'pip install "failopen[prometheus]"' in done.stdout


def test_the_prometheus_extra_is_part_of_all() -> None:
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    from pathlib import Path

    project: dict[str, Any] = tomllib.loads(
        (Path(__file__).parent.parent / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    assert extras["prometheus"] == ["prometheus_client>=0.17"]
    assert "prometheus" in extras["all"][0]


def test_a_multi_process_collector_sees_decisions_within_a_watcher_turn(tmp_path: Any) -> None:
    # gunicorn with PROMETHEUS_MULTIPROC_DIR: values live in files, scrapes never reach the
    # worker's own collectors, so the watcher's turn is what brings the counts there.
    code = """
        from failopen import Config, FailOpen
        from prometheus_client import CollectorRegistry
        from prometheus_client.multiprocess import MultiProcessCollector
        fo = FailOpen(Config(verify_url="https://v.example/", private_key="k",
                             protected_paths=("/login",)))
        fo.guard.decide(None)
        fo.guard.decide(None)
        fo.flag.force_off("x")
        fo.watcher.tick()
        registry = CollectorRegistry()
        MultiProcessCollector(registry)
        print(registry.get_sample_value("failopen_decisions_total", {"outcome": "missing_token"}))
        enforcing = [s for m in registry.collect() for s in m.samples
                     if s.name == "failopen_enforcing"]
        print([s.value for s in enforcing])
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAILOPEN_")}
    env["PROMETHEUS_MULTIPROC_DIR"] = str(tmp_path)
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:2] == ["2.0", "[0.0]"]


def test_a_name_already_taken_in_the_registry_costs_that_metric_not_the_start(
    registry: CollectorRegistry, caplog: pytest.LogCaptureFixture
) -> None:
    prometheus_client.Gauge("failopen_enforcing", "someone else's", registry=registry)
    metrics = PrometheusMetrics(registry)  # no exception
    assert [r.event for r in caplog.records] == ["failopen.metrics_conflict"]  # type: ignore[attr-defined]
    metrics.status_poll("operational", 0.1)
    assert value(registry, "failopen_status_polls_total", result="operational") == 1.0
    metrics.detach()


def test_every_outage_outcome_is_counted_under_its_own_label(
    api: FakeVerifyAPI, registry: CollectorRegistry,
) -> None:
    # Issue 20's outcomes, each made by the real gate: rate limit, challenge, used solutions.
    config = Config(verify_url=VERIFY_URL, private_key=api.private_key,
                    protected_paths=("/login", "/signup", "/password-reset"),
                    outage_policy_routes="/login=open,/signup=fallback,/password-reset=closed",
                    fallback_secret="metrics-test-fallback-secret-0123456789",
                    fallback_cost=2_000, outage_rate="2/minute", metrics="off")
    runtime = FailOpen(config, verify_transport=api.transport(), clock=FakeClock(),
                       metrics=PrometheusMetrics(registry))
    try:
        runtime.flag.force_off("vendor ticket 9")
        assert runtime.challenges is not None
        solution = solve_challenge(runtime.challenges.issue())

        def decide(path: str, policy: str, solution: str | None = None) -> str:
            # The guard, as in ``fo``: no watcher thread moves the fake clock meanwhile.
            return runtime.guard.decide(None, path=path, client=CLIENT, policy=policy,
                                        route=path, solution=solution).outcome

        made = [decide("/signup", "fallback", solution), decide("/signup", "fallback", solution),
                decide("/signup", "fallback"), decide("/password-reset", "closed")]
        made += [decide("/login", "open") for _ in range(3)]
        assert made == ["bypassed_fallback", "fallback_invalid", "fallback_required",
                        "outage_closed", "bypassed_flag_off", "bypassed_flag_off",
                        "outage_rate_limited"]
        counts = {o: value(registry, "failopen_decisions_total", outcome=o)
                  for o in DECISION_OUTCOMES}
        assert counts == {**dict.fromkeys(DECISION_OUTCOMES, 0.0), "bypassed_fallback": 1.0,
                          "fallback_invalid": 1.0, "fallback_required": 1.0,
                          "outage_closed": 1.0, "bypassed_flag_off": 2.0,
                          "outage_rate_limited": 1.0}
        text = generate_latest(registry).decode()
        assert "/signup" not in text and "vendor ticket" not in text
    finally:
        runtime.stop()
