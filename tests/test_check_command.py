"""``failopen check``: the preflight, against the test kit's fakes of the vendor (in-process and on
loopback). The store's lines, with a real redis-server, are in tests/test_check_store.py.

No test here reaches beyond loopback: every socket connection is checked (``_loopback_only``).
"""

# The kit's fixtures are imported by name, and each test takes one as an argument.
# ruff: noqa: F811

from __future__ import annotations

import functools
import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
from _check_kit import env, lines, loopback_only  # noqa: F401

from failopen.cli import check as check_module
from failopen.cli.check import run_checks
from failopen.cli.preflight import CHECK_TOKEN_PREFIX, Check, Wiring
from failopen.config import Config
from failopen.exceptions import ConfigError
from failopen.testing import FakeStatusPage, FakeVerifyAPI, LoopbackServer, Reply

NAMES = ["configuration", "status_page", "verify_api", "fallback_verify_api", "store",
         "fleet_identity", "outage_policies"]


# --- the whole run ------------------------------------------------------------------------------


def test_all_good_is_exit_0_with_one_line_per_check(run: Any, env: Any,
                                                    fake_verify_api: FakeVerifyAPI) -> None:
    shown = run("check")
    assert shown.code == 0, shown.out + shown.err
    found = lines(shown.out)
    assert list(found) == ["configuration", "status page", "verify API", "fallback verify API",
                           "store",
                           "fleet identity", "outage policies"]
    assert {status for status, _ in found.values()} == {"ok"}
    assert shown.out.splitlines()[-1] == "failopen check passed"
    assert "watches fakeglobal00 (Global), chosen by guess" in found["status page"][1]
    assert "key accepted, token invalid" in found["verify API"][1]
    assert "memory: this process only" in found["store"][1]
    assert found["fleet identity"][1].startswith("standalone (memory store")
    assert "default open" in found["outage policies"][1]
    # The made-up token went to the verify API with our key, and once more with a key nobody
    # has (the answers differ: ours could only come from a good key); no vendor issues it.
    assert len(fake_verify_api.tokens_seen) == 2
    assert fake_verify_api.tokens_seen[0].startswith(CHECK_TOKEN_PREFIX)
    assert fake_verify_api.tokens_seen[0] == fake_verify_api.tokens_seen[1]
    assert shown.err == ""


def test_json_is_one_object_with_stable_keys(run: Any, env: Any) -> None:
    shown = run("check", "--json")
    assert shown.code == 0
    data = shown.json()
    assert set(data) == {"ok", "strict", "problems", "warnings", "checks"}
    assert (data["ok"], data["strict"], data["problems"], data["warnings"]) == (True, False, 0, 0)
    assert [c["name"] for c in data["checks"]] == NAMES
    for item in data["checks"]:
        assert set(item) == {"name", "status", "ok", "detail", "facts"}
        assert item["status"] == "ok" and item["ok"] is True
    facts = {c["name"]: c["facts"] for c in data["checks"]}
    assert facts["status_page"]["global_component"] == {"id": "fakeglobal00", "name": "Global"}
    assert facts["verify_api"]["answer"] == "key_accepted"
    assert facts["verify_api"]["http_status"] == 400
    assert facts["store"]["kind"] == "memory"
    assert facts["fleet_identity"]["fleet"] is False
    assert facts["outage_policies"]["outage_policy"] == "open"


def test_bad_arguments_are_exit_2(run: Any) -> None:
    assert run("check", "--nope").code == 2


# --- configuration ------------------------------------------------------------------------------


def test_a_bad_setting_is_the_configuration_line_and_the_rest_still_runs(
    run: Any, env: pytest.MonkeyPatch,
) -> None:
    env.setenv("FAILOPEN_OUTAGE_POLICY", "bogus")
    shown = run("check")
    assert shown.code == 1
    found = lines(shown.out)
    assert found["configuration"][0] == "problem"
    assert "FAILOPEN_OUTAGE_POLICY" in found["configuration"][1]
    # The vendor is still checked: a deploy learns everything in one run.
    assert found["status page"][0] == found["verify API"][0] == "ok"
    assert found["outage policies"] == ("skipped", "needs a setting a configuration line names")
    assert shown.out.splitlines()[-1] == "failopen check failed: 1 problem"


def test_every_bad_setting_is_a_configuration_line(run: Any, env: pytest.MonkeyPatch) -> None:
    # Config stops at its first error; the check names the next ones too, in one run.
    env.setenv("FAILOPEN_OUTAGE_POLICY", "bogus")
    env.setenv("FAILOPEN_VERIFY_TIMEOUT", "-3")
    env.setenv("FAILOPEN_STORE", "mongodb://db")
    data = run("check", "--json").json()
    assert data["problems"] == 3
    configuration = [c["detail"] for c in data["checks"] if c["name"] == "configuration"]
    assert [text.split(":")[0] for text in configuration] == [
        "FAILOPEN_VERIFY_TIMEOUT", "FAILOPEN_STORE", "FAILOPEN_OUTAGE_POLICY"]
    by = {c["name"]: c for c in data["checks"]}
    assert by["status_page"]["status"] == "ok"
    for name in ("verify_api", "store", "fleet_identity", "outage_policies"):
        assert (by[name]["status"], by[name]["ok"]) == ("skipped", None)


def test_a_bad_setting_the_configuration_line_missed_is_a_problem_of_its_own() -> None:
    # An error that names no setting stops the search for more: a check's own settings then
    # say theirs.
    def factory(**overrides: Any) -> Config:
        if not overrides:
            raise ConfigError("the settings are broken in a way no variable names")
        return Config.from_mapping({"VERIFY_TIMEOUT": -3}, environ={}, **overrides)

    by = {c.name: c for c in run_checks(factory, environ={})}
    assert by["configuration"].detail == "the settings are broken in a way no variable names"
    assert by["verify_api"].status == "problem"
    assert by["verify_api"].detail.startswith("FAILOPEN_VERIFY_TIMEOUT: ")
    assert by["status_page"].status == "problem"  # ran: no status URL in these settings


def test_a_misspelt_variable_is_a_warning_that_strict_fails(
    run: Any, env: pytest.MonkeyPatch,
) -> None:
    env.setenv("FAILOPEN_PROTECTED_PATH", "/signup")
    shown = run("check")
    assert shown.code == 0
    status, detail = lines(shown.out)["configuration"]
    assert status == "warning" and "did you mean FAILOPEN_PROTECTED_PATHS?" in detail
    assert shown.out.splitlines()[-1] == "failopen check passed: 1 warning"
    strict = run("check", "--strict", "--json")
    assert strict.code == 1
    assert strict.json()["checks"][0]["ok"] is False and strict.json()["ok"] is False


# --- the status page ----------------------------------------------------------------------------


def _config(**settings: Any) -> functools.partial[Config]:
    """A Config factory for run_checks: these settings, no environment."""
    return functools.partial(Config.from_mapping, settings, environ={})


def _in_process(page: FakeStatusPage, api: FakeVerifyAPI, **settings: Any) -> dict[str, Check]:
    factory = _config(STATUS_URL="https://status.test", VERIFY_URL="https://verify.test"
                      + api.path, PRIVATE_KEY=api.private_key, **settings)
    wiring = Wiring(status_transport=page.transport(), verify_transport=api.transport())
    return {c.name: c for c in run_checks(factory, wiring=wiring, environ={})}


@pytest.mark.parametrize("fault,said", [
    ("503", "HTTP 503"),
    ("500", "HTTP 500"),
    ("429", "rate limited (HTTP 429)"),
    ("malformed", "malformed"),
    ("not_json", "malformed"),
    ("empty", "malformed"),
    ("wrong_shape", "malformed"),
    ("huge", "too large (FAILOPEN_STATUS_MAX_BYTES=1048576)"),
    ("missing_global", "cannot tell the global component"),
    ("reset", "unreachable"),
    ("timeout", "timed out (FAILOPEN_STATUS_TIMEOUT=5s)"),
])
def test_each_status_page_failure_is_named(fault: str, said: str) -> None:
    page, api = FakeStatusPage(), FakeVerifyAPI()
    page.set_fault(fault)
    found = _in_process(page, api)["status_page"]
    assert found.status == "problem"
    assert found.detail.startswith(f"https://status.test: {said}"), found.detail
    assert found.facts["error"] == said


def test_an_outage_now_is_a_warning(run: Any, env: Any,
                                    fake_status_page: FakeStatusPage) -> None:
    fake_status_page.set_global("major_outage")
    shown = run("check")
    assert shown.code == 0
    status, detail = lines(shown.out)["status page"]
    assert status == "warning" and "major_outage" in detail and "would bypass" in detail
    assert run("check", "--strict").code == 1


def test_an_unknown_status_and_impaired_regions_are_said() -> None:
    page, api = FakeStatusPage(regions=("us-east-1", "eu-west-1")), FakeVerifyAPI()
    page.set_region("eu-west-1", "partial_outage")
    found = _in_process(page, api)["status_page"]
    assert found.status == "ok"  # failover complete: the global component is operational
    assert "impaired regions: eu-west-1 (partial_outage)" in found.detail
    page.set_fault("unknown_status")
    found = _in_process(page, api)["status_page"]
    assert found.status == "warning" and "never bypasses on it" in found.detail


def test_a_configured_global_component_is_chosen_by_id() -> None:
    page, api = FakeStatusPage(), FakeVerifyAPI()
    found = _in_process(page, api, GLOBAL_COMPONENT=page.global_id)["status_page"]
    assert "chosen by id:" in found.detail and "to keep it" not in found.detail
    wrong = _in_process(page, api, GLOBAL_COMPONENT="nope")["status_page"]
    assert wrong.status == "problem" and "cannot tell the global component" in wrong.detail


def test_only_the_indicator_answering_is_a_warning() -> None:
    page, api = FakeStatusPage(), FakeVerifyAPI()
    page.set_fault("503", endpoint="components")
    found = _in_process(page, api, INDICATOR_FALLBACK=True)["status_page"]
    assert found.status == "warning"
    assert "components.json could not be used; the indicator fallback (status.json) answered " \
           "operational" in found.detail
    assert found.facts["source"] == "indicator" and found.facts["global_component"] is None


def test_names_from_the_page_are_shown_as_text(run: Any, env: Any,
                                               fake_status_page: FakeStatusPage) -> None:
    fake_status_page.set_name("Glob\x1b[2J\u202eal")
    shown = run("check")
    assert "watches fakeglobal00 (Glob\\x1b[2J\\u202eal)" in shown.out
    assert "\x1b" not in shown.out and "\u202e" not in shown.out
    facts = run("check", "--json").json()["checks"][1]["facts"]
    assert facts["global_component"]["name"] == "Glob\x1b[2J\u202eal"  # exact in JSON


def test_no_status_url_is_a_problem(run: Any, env: pytest.MonkeyPatch) -> None:
    env.delenv("FAILOPEN_STATUS_URL")
    shown = run("check")
    assert shown.code == 1
    assert lines(shown.out)["status page"] == (
        "problem", "FAILOPEN_STATUS_URL is not set: failopen cannot see an outage, so it never "
                   "fails open")


def test_a_status_page_that_hangs_is_given_up_at_its_time_out(
    run: Any, env: pytest.MonkeyPatch, fake_status_page: FakeStatusPage,
) -> None:
    env.setenv("FAILOPEN_STATUS_TIMEOUT", "0.3")
    fake_status_page.set_fault("timeout")  # holds the answer for an hour
    started = time.monotonic()
    shown = run("check")
    assert time.monotonic() - started < 3
    assert shown.code == 1
    assert lines(shown.out)["status page"][1].startswith(
        f"{fake_status_page.url}: timed out (FAILOPEN_STATUS_TIMEOUT=0.3s): no complete answer "
        f"from {fake_status_page.url.removeprefix('http://')} within 0.3s")


def test_a_status_page_redirecting_elsewhere_is_refused(run: Any, env: pytest.MonkeyPatch,
                                                        fake_status_page: FakeStatusPage) -> None:
    # The page moved to another host (or an attacker's): failopen never follows it there.
    target = fake_status_page.url + "/api/v2/components.json"
    with LoopbackServer(lambda request: Reply(status=302, headers=[("Location", target)])
                        ) as moved:  # another port: another origin
        env.setenv("FAILOPEN_STATUS_URL", moved.url)
        shown = run("check")
    assert shown.code == 1
    status, detail = lines(shown.out)["status page"]
    assert status == "problem" and "redirected elsewhere (refused)" in detail
    assert fake_status_page.requests == 0


# --- the verify API -----------------------------------------------------------------------------


def test_a_rejected_key_is_a_problem_naming_the_setting(
    run: Any, env: pytest.MonkeyPatch,
) -> None:
    env.setenv("FAILOPEN_PRIVATE_KEY", "wrong-key-0123456789-recognisable")
    shown = run("check")
    assert shown.code == 1
    status, detail = lines(shown.out)["verify API"]
    assert status == "problem"
    assert "key rejected (vendor rejected our credentials (HTTP 401))" in detail
    assert "check FAILOPEN_PRIVATE_KEY" in detail
    assert "recognisable" not in shown.out + shown.err
    assert run("check", "--json").json()["checks"][2]["facts"]["answer"] == "key_rejected"


@pytest.mark.parametrize("fault,answer,said", [
    ("500", "unavailable", "vendor answered HTTP 500"),
    ("503", "unavailable", "vendor answered HTTP 503"),
    ("502", "unavailable", "vendor answered HTTP 502"),
    ("429", "rate_limited", "vendor rate limit (HTTP 429): cannot tell whether "
                            "FAILOPEN_PRIVATE_KEY is accepted"),
    ("timeout", "unavailable", "timeout"),
    ("reset", "unavailable", "transport error"),
    ("not_json", "unavailable", "non-JSON body"),
    ("empty", "unavailable", "empty body"),
    ("wrong_shape", "unavailable", "neither session_details nor error"),
])
def test_each_verify_failure_is_a_problem(fault: str, answer: str, said: str) -> None:
    page, api = FakeStatusPage(), FakeVerifyAPI()
    api.set_fault(fault)
    found = _in_process(page, api)["verify_api"]
    assert found.status == "problem", found.detail
    assert found.facts["answer"] == answer
    assert said in found.detail


def _verify_server(reply: Reply) -> LoopbackServer:
    return LoopbackServer(lambda request: reply).start()


@pytest.mark.parametrize("reply,answer,said", [
    # Not the verify endpoint: a site's 404 page says nothing about the key.
    (Reply(status=404, body=b"<h1>Not Found</h1>"), "not_a_verify_answer",
     "is FAILOPEN_VERIFY_URL the vendor's verify endpoint?"),
    (Reply.json({"error": "INVALID PRIVATE KEY"}, status=400), "key_rejected", "key rejected"),
    (Reply.json({"session_details": {"solved": True, "verified": True}}), "token_accepted",
     "accepted a made-up token"),
    # What the spec's vendor answers a made-up token and a wrong key alike: the key passed no
    # test (it said "key accepted" for a wrong key before).
    (Reply.json({"error": "DENIED ACCESS"}), "key_not_confirmed", "key not confirmed"),
    (Reply.json({"session_details": {"solved": False}}), "key_accepted", "challenge not solved"),
])
def test_what_the_answer_says_about_the_key(run: Any, env: pytest.MonkeyPatch, reply: Reply,
                                            answer: str, said: str) -> None:
    server = _verify_server(reply)
    try:
        env.setenv("FAILOPEN_VERIFY_URL", server.url + "/api/v4/verify/")
        data = run("check", "--json").json()
    finally:
        server.stop()
    verify = data["checks"][2]
    assert verify["facts"]["answer"] == answer
    assert said in verify["detail"]
    assert verify["ok"] is (answer in ("key_accepted", "key_not_confirmed"))
    assert verify["status"] == {"key_accepted": "ok", "key_not_confirmed": "warning"}.get(
        answer, "problem")


def test_a_private_key_config_takes_but_the_verifier_refuses(run: Any,
                                                            env: pytest.MonkeyPatch) -> None:
    # A trailing newline from a secrets file: the server would stop at start-up; the preflight
    # says so first, without echoing the key.
    env.setenv("FAILOPEN_PRIVATE_KEY", "test-private-key\n")
    found = lines(run("check").out)
    assert found["configuration"][0] == "ok"
    assert found["verify API"] == ("problem", "FAILOPEN_PRIVATE_KEY: has surrounding whitespace "
                                              "or characters outside printable ASCII (a trailing "
                                              "newline from a secrets file?)")


def test_a_verify_api_that_hangs_is_given_up_at_its_time_out(
    run: Any, env: pytest.MonkeyPatch, fake_verify_api: FakeVerifyAPI,
) -> None:
    env.setenv("FAILOPEN_VERIFY_TIMEOUT", "0.3")
    fake_verify_api.set_fault("timeout")  # no answer for a minute
    started = time.monotonic()
    shown = run("check")
    assert time.monotonic() - started < 3
    status, detail = lines(shown.out)["verify API"]
    assert status == "problem" and shown.code == 1
    assert "unreachable or failing (timeout: no complete answer" in detail
    assert "FAILOPEN_VERIFY_TIMEOUT=0.3s" in detail


def test_a_huge_verify_answer_is_cut(run: Any, env: pytest.MonkeyPatch) -> None:
    server = _verify_server(Reply(body=b"{" + b" " * 200_000 + b"}"))
    try:
        env.setenv("FAILOPEN_VERIFY_URL", server.url + "/api/v4/verify/")
        detail = lines(run("check").out)["verify API"]
    finally:
        server.stop()
    assert detail[0] == "problem" and "answer too large" in detail[1]


def test_no_verify_url(run: Any, env: pytest.MonkeyPatch) -> None:
    env.delenv("FAILOPEN_VERIFY_URL")
    env.delenv("FAILOPEN_PRIVATE_KEY")
    shown = run("check")
    assert lines(shown.out)["verify API"][0] == "problem"  # /login would refuse everyone
    assert "the protected routes would refuse every request" in shown.out
    env.delenv("FAILOPEN_PROTECTED_PATHS")
    assert lines(run("check").out)["verify API"][0] == "warning"


# --- deadlines and the unexpected ---------------------------------------------------------------


def test_a_check_that_never_returns_is_given_up(run: Any, env: pytest.MonkeyPatch) -> None:
    def frozen(config: Any, environ: Any) -> Check:
        time.sleep(30)  # a daemon thread: abandoned, as a frozen store would be
        raise AssertionError("unreachable")

    env.setattr(check_module, "check_store", frozen)
    env.setattr(check_module, "STORE_DEADLINE", 0.2)
    started = time.monotonic()
    shown = run("check")
    assert time.monotonic() - started < 3
    assert lines(shown.out)["store"] == ("problem", "no answer within 0.2s")
    assert shown.code == 1


def test_a_check_that_breaks_is_its_own_line(run: Any, env: pytest.MonkeyPatch) -> None:
    def broken(config: Any, environ: Any) -> Check:
        raise RuntimeError("the text may quote what it was given: s3cr3t")

    env.setattr(check_module, "check_fleet_identity", broken)
    shown = run("check")
    assert lines(shown.out)["fleet identity"] == (
        "problem", "unexpected error: RuntimeError (run with -v)")
    assert lines(shown.out)["outage policies"][0] == "ok"  # the others still ran
    assert "s3cr3t" not in shown.out + shown.err


# --- outage policies ----------------------------------------------------------------------------


def test_outage_policies_list_the_routes_and_never_the_secret(
    run: Any, env: pytest.MonkeyPatch,
) -> None:
    secret = "fallback-secret-recognisable-0123456789abcdef"
    env.setenv("FAILOPEN_PROTECTED_PATHS", "/login,/signup,/reset")
    env.setenv("FAILOPEN_OUTAGE_POLICY_ROUTES", "/signup=fallback,/reset=closed")
    env.setenv("FAILOPEN_FALLBACK_SECRET", secret)
    env.setenv("FAILOPEN_OUTAGE_RATE", "5/minute")
    shown = run("check")
    status, detail = lines(shown.out)["outage policies"]
    assert status == "ok", detail
    assert detail == ("protected: /login, /signup, /reset; default open; routes of their own: "
            "/signup=fallback, /reset=closed; outage rate 5/minute per client and route, counted "
            "in each process; fallback: secret set, altcha installed")
    facts = {c["name"]: c["facts"] for c in run("check", "--json").json()["checks"]}[
        "outage_policies"]
    assert facts["fallback_secret"] is True
    assert facts["outage_policy_routes"] == {"/signup": "fallback", "/reset": "closed"}
    assert secret not in shown.out


def test_the_default_rate_without_limits_is_counted_in_each_process(
        run: Any, env: pytest.MonkeyPatch) -> None:
    # Issue 31, item 11: it was "off: it needs the limits package", a warning on every site
    # installed with [django] alone; memory counts it now without any extra.
    import failopen.cli.preflight_settings as settings

    env.setattr(settings, "find_spec", lambda name: None)
    status, detail = lines(run("check").out)["outage policies"]
    assert status == "ok", detail
    assert "outage rate 20/minute per client and route, counted in each process" in detail


def test_a_misspelt_protected_paths_is_a_problem_naming_the_fix(run: Any,
                                                                 env: pytest.MonkeyPatch) -> None:
    # Issue 31, item 12: "failopen check passed: 2 warnings", exit 0, with nothing protected.
    env.delenv("FAILOPEN_PROTECTED_PATHS")
    env.setenv("FAILOPEN_PROTECTED_PATH", "/login")  # the S left out
    shown = run("check")
    assert shown.code == 1, shown.out
    status, detail = lines(shown.out)["outage policies"]
    assert status == "problem"
    assert detail.startswith(
        "nothing is protected: every request reaches the app unchecked (FAILOPEN_PROTECTED_PATH "
        "is set: did you mean FAILOPEN_PROTECTED_PATHS?). Set FAILOPEN_PROTECTED_PATHS to the "
        "log-in and sign-up paths (FAILOPEN_PROTECTED_PATHS=/login,/signup), or "
        "FAILOPEN_PROTECTED_BY_FIELDS=true where only form fields"), detail
    assert shown.out.splitlines()[-1].startswith("failopen check failed: 1 problem")
    assert run("check", "--json").json()["checks"][-1]["facts"]["nothing_protected"] is True


def test_a_site_protected_only_by_form_fields_declares_it(run: Any,
                                                          env: pytest.MonkeyPatch) -> None:
    env.delenv("FAILOPEN_PROTECTED_PATHS")
    env.setenv("FAILOPEN_PROTECTED_BY_FIELDS", "true")
    shown = run("check")
    assert shown.code == 0, shown.out
    status, detail = lines(shown.out)["outage policies"]
    assert (status, detail.split(";")[0]) == (
        "ok", "protected by form fields (FAILOPEN_PROTECTED_BY_FIELDS)")
    assert lines(shown.out)["configuration"][0] == "ok"


def test_several_workers_counting_in_memory_is_a_warning(run: Any,
                                                         env: pytest.MonkeyPatch) -> None:
    env.setenv("WEB_CONCURRENCY", "4")
    found = lines(run("check").out)
    assert found["store"][0] == found["outage policies"][0] == "warning"
    assert "WEB_CONCURRENCY=4" in found["store"][1]
    assert "the outage rate limit is kept in each process" in found["outage policies"][1]
    env.setenv("WEB_CONCURRENCY", "1")
    env.setenv("GUNICORN_CMD_ARGS", "--bind 0.0.0.0:80 -w 3")
    assert "GUNICORN_CMD_ARGS asks for 3 workers" in lines(run("check").out)["store"][1]


# --- secrets ------------------------------------------------------------------------------------


SECRETS = {
    "FAILOPEN_PRIVATE_KEY": "PRIVATE-KEY-recognisable-7f3a9c",
    "FAILOPEN_ADMIN_TOKEN": "ADMIN-TOKEN-recognisable-0123456789abcdef",
    "FAILOPEN_STORE_PASSWORD": "STORE-PASSWORD-recognisable-51d2",
    "FAILOPEN_FALLBACK_SECRET": "FALLBACK-SECRET-recognisable-0123456789abcdef",
    "FAILOPEN_RAI_CLIENT_SECRET": "RAI-CLIENT-SECRET-recognisable-8e1b",
}


@pytest.fixture
def every_secret(env: pytest.MonkeyPatch) -> Iterator[pytest.MonkeyPatch]:
    for name, value in SECRETS.items():
        env.setenv(name, value)
    env.setenv("FAILOPEN_OUTAGE_POLICY", "fallback")
    env.setenv("FAILOPEN_STORE", "redis://127.0.0.1:1/0")  # nobody there: an error path
    yield env


def _assert_no_secret(text: str) -> None:
    for value in SECRETS.values():
        assert value not in text
        assert "recognisable" not in text


@pytest.mark.parametrize("argv", [["check"], ["check", "--json"], ["check", "-v"]])
def test_no_secret_in_any_output(run: Any, every_secret: pytest.MonkeyPatch,
                                 argv: list[str]) -> None:
    # The private key is wrong here (the fake wants its own): the rejected-key path, and a
    # Redis nobody answers on, with the password in the URL: the store's error path.
    every_secret.setenv("FAILOPEN_STORE", "redis://:URL-PASSWORD-recognisable-9@127.0.0.1:1/0")
    every_secret.delenv("FAILOPEN_STORE_PASSWORD")
    shown = run(*argv)
    assert shown.code == 1
    assert "redis://:***@127.0.0.1:1/0" in shown.out
    assert "valid" in shown.out and "key rejected" in shown.out
    _assert_no_secret(shown.out + shown.err)


def test_no_secret_when_the_settings_are_broken(run: Any, every_secret: pytest.MonkeyPatch) -> None:
    every_secret.setenv("FAILOPEN_ADMIN_TOKEN", "SHORT-recognisable")  # refused: too short
    every_secret.setenv("FAILOPEN_STORE", "redis://:URL-PASSWORD-recognisable-9@/0")  # no host
    for argv in (["check"], ["check", "--json"]):
        shown = run(*argv)
        assert shown.code == 1
        _assert_no_secret(shown.out + shown.err)
    assert "FAILOPEN_ADMIN_TOKEN: must be at least 24 characters" in shown.out


def test_a_secret_echoed_by_a_check_is_masked(run: Any, every_secret: pytest.MonkeyPatch) -> None:
    # Defence in depth: whatever a check says, a secret value in it is masked.
    def echoing(config: Any, environ: Any) -> Check:
        key = config.private_key.reveal()
        return Check("store", "problem", f"the server said {key}", {"echo": [key]})

    every_secret.setattr(check_module, "check_store", echoing)
    shown = run("check", "--json")
    _assert_no_secret(shown.out)
    store = {c["name"]: c for c in json.loads(shown.out)["checks"]}["store"]
    assert (store["detail"], store["facts"]) == ("the server said ***", {"echo": ["***"]})


def test_no_secret_in_the_debug_log_of_the_real_command(every_secret: pytest.MonkeyPatch) -> None:
    # -v in a process of its own: the log handler is the command's, at DEBUG, with httpx's and
    # redis-py's loggers, a rejected key (logged at ERROR) and a refused Redis.
    import os
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "failopen.cli", "check", "-v"],
                          env=dict(os.environ), capture_output=True, text=True, timeout=60)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "DEBUG" in done.stderr and "key rejected" in done.stdout
    _assert_no_secret(done.stdout + done.stderr)


# --- issue 29: the second vendor's keys ---------------------------------------------------------


@pytest.fixture
def hcaptcha(env: pytest.MonkeyPatch) -> Iterator[Any]:
    from failopen.testing.providers import FakeHCaptchaVerify

    fake = FakeHCaptchaVerify()
    with fake.serve():
        env.setenv("FAILOPEN_FALLBACK_VENDOR", "hcaptcha")
        env.setenv("FAILOPEN_FALLBACK_PRIVATE_KEY", fake.private_key)
        env.setenv("FAILOPEN_FALLBACK_PUBLIC_KEY", fake.public_key)
        env.setenv("FAILOPEN_FALLBACK_VERIFY_URL", fake.verify_url)
        yield fake


def test_the_second_vendor_s_key_is_checked_as_the_first_s(run: Any, hcaptcha: Any) -> None:
    shown = run("check")
    status, detail = lines(shown.out)["fallback verify API"]
    assert status == "ok", detail
    assert "key accepted" in detail
    assert hcaptcha.private_key not in shown.out


def test_a_wrong_second_vendor_key_is_a_problem_naming_its_setting(
        run: Any, hcaptcha: Any, env: pytest.MonkeyPatch) -> None:
    env.setenv("FAILOPEN_FALLBACK_PRIVATE_KEY", "0xWRONG-fallback-recognisable-key")
    shown = run("check")
    status, detail = lines(shown.out)["fallback verify API"]
    assert status == "problem", detail
    assert "FAILOPEN_FALLBACK_PRIVATE_KEY" in detail or "key rejected" in detail
    assert "recognisable" not in shown.out
    assert shown.code == 1


def test_outage_policies_with_a_second_vendor_name_it_and_no_altcha_secret() -> None:
    # Review of issue 29: with FAILOPEN_FALLBACK_VENDOR there is no fallback secret and no
    # ALTCHA; the line said "secret set, altcha and limits installed", and warned that used
    # solutions are kept per process when the vendor itself keeps its tokens single-use.
    from failopen.cli.preflight_settings import check_outage_policies
    from failopen.testing.providers import FakeHCaptchaVerify

    config = Config(vendor="turnstile", private_key="first-key", protected_paths=("/signup",),
                    outage_policy_routes="/signup=fallback", fallback_vendor="hcaptcha",
                    fallback_private_key="0xsecond-key-never-shown",
                    fallback_public_key=FakeHCaptchaVerify.DEFAULT_PUBLIC_KEY)
    found = check_outage_policies(config, {"WEB_CONCURRENCY": "4"})
    assert "secret set" not in found.detail and "altcha" not in found.detail
    assert "fallback: hcaptcha" in found.detail
    assert "used fallback solutions" not in found.detail
    assert "0xsecond-key-never-shown" not in found.detail
