"""Run-time control of the fakes: ``GET``/``POST /_control`` on real loopback servers, and
``failopen emulate status|verify|vendor --set ...`` changing a fake that is already running."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from failopen.cli.command import main
from failopen.testing import FakeStatusPage, FakeVendorScript, FakeVerifyAPI, LoopbackServer
from failopen.testing._server import FakeRequest
from failopen.testing.control import (
    StatusPageControls,
    answer_control,
    send_control,
    with_control,
)

FAILOPEN = Path(sys.executable).with_name("failopen")


@pytest.fixture
def page() -> Iterator[FakeStatusPage]:
    fake = FakeStatusPage(regions=("us-east-1", "eu-west-1"))
    with fake.serve(control=True):
        yield fake


def post(url: str, body: Any, **kwargs: Any) -> httpx.Response:
    return httpx.post(url + "/_control", json=body, timeout=5, **kwargs)


def components(url: str) -> httpx.Response:
    return httpx.get(url + "/api/v2/components.json", timeout=5)


def statuses(url: str) -> dict[str | None, str]:
    return {c["description"]: c["status"] for c in components(url).json()["components"]}


# --- the control route ------------------------------------------------------------------------


def test_get_control_answers_the_status_page_state(page: FakeStatusPage) -> None:
    answer = httpx.get(page.url + "/_control", timeout=5)
    assert answer.status_code == 200
    assert answer.json() == {"fake": "status", "global": "operational", "fault": None,
                             "regions": {"us-east-1": "operational", "eu-west-1": "operational"},
                             "requests": 0}


def test_post_control_changes_what_the_status_page_serves(page: FakeStatusPage) -> None:
    answer = post(page.url, {"global": "major_outage"})
    assert answer.status_code == 200
    assert answer.json()["global"] == "major_outage"
    assert statuses(page.url)[None] == "major_outage"

    post(page.url, {"region": "eu-west-1", "status": "degraded_performance"})
    assert statuses(page.url) == {None: "major_outage", "us-east-1": "operational",
                                  "eu-west-1": "degraded_performance"}
    post(page.url, {"regions": {"us-east-1": "partial_outage"}, "global": "operational"})
    assert statuses(page.url) == {None: "operational", "us-east-1": "partial_outage",
                                  "eu-west-1": "degraded_performance"}


def test_control_sets_and_clears_a_fault_and_answers_during_it(page: FakeStatusPage) -> None:
    assert post(page.url, {"fault": "500"}).json()["fault"] == "500"
    assert components(page.url).status_code == 500
    # A page that "times out" must still hear the request that ends the time-out.
    post(page.url, {"fault": "timeout"})
    assert httpx.get(page.url + "/_control", timeout=2).json()["fault"] == "timeout"
    assert post(page.url, {"fault": None}).json()["fault"] is None
    assert components(page.url).status_code == 200


@pytest.mark.parametrize(("body", "message"), [
    ({"global": "major_oops"}, "global: 'major_oops' is not a status; choose from "
                               "degraded_performance, major_outage"),
    ({"region": "mars-1", "status": "major_outage"}, "no region 'mars-1'; the page has "
                                                     "us-east-1, eu-west-1"),
    ({"region": "eu-west-1"}, '"region" and "status" go together'),
    ({"region": ["eu-west-1"], "status": "major_outage"}, "region: a region label"),
    ({"regions": ["eu-west-1"]}, '"regions" is an object'),
    ({"fault": "meltdown"}, "fault: 'meltdown' is not a fault; choose from 429, 500"),
    ({"fault": ["500"]}, "fault: ['500'] is not a fault"),
    ({"global": {"status": "major_outage"}}, "global: {'status': 'major_outage'} is not a status"),
    ({"regions": {"eu-west-1": ["major_outage"]}}, "region 'eu-west-1': ['major_outage'] is not"),
    ({"colour": "red"}, "unknown key 'colour'; the status fake takes global, region, status"),
    ({}, 'nothing to change; send e.g. {"global": "major_outage"}'),
    (["global", "major_outage"], "the body is a JSON object like"),
    # Checked whole before anything changes: the valid half is not applied either.
    ({"global": "major_outage", "fault": "meltdown"}, "'meltdown' is not a fault"),
])
def test_bad_bodies_are_400_naming_the_problem_and_change_nothing(
    page: FakeStatusPage, body: Any, message: str
) -> None:
    answer = post(page.url, body)
    assert answer.status_code == 400, answer.text
    assert message in answer.json()["error"]
    assert httpx.get(page.url + "/_control", timeout=5).json()["global"] == "operational"
    assert page.fault is None


def test_a_body_that_is_not_json_is_400(page: FakeStatusPage) -> None:
    answer = httpx.post(page.url + "/_control", content=b"global=major_outage",
                        headers={"Content-Type": "application/json"}, timeout=5)
    assert answer.status_code == 400
    assert "the body is not JSON" in answer.json()["error"]


def test_a_post_that_is_not_json_typed_is_415(page: FakeStatusPage) -> None:
    # text/plain is what a web page may POST cross-origin without a preflight.
    answer = httpx.post(page.url + "/_control", content=b'{"global": "major_outage"}',
                        headers={"Content-Type": "text/plain"}, timeout=5)
    assert answer.status_code == 415
    assert page.components_document()["components"][0]["status"] == "operational"


def test_a_host_that_is_not_loopback_is_403(page: FakeStatusPage) -> None:
    # DNS rebinding: evil.example resolving to 127.0.0.1 reaches the socket, not the control.
    answer = post(page.url, {"global": "major_outage"}, headers={"Host": "evil.example:8401"})
    assert answer.status_code == 403
    assert "loopback Host" in answer.json()["error"]
    for host in ("localhost:1", "127.0.0.1", "[::1]:8401"):
        assert post(page.url, {"global": "operational"}, headers={"Host": host}).status_code == 200


def _own_non_loopback_address() -> str | None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.1", 9))  # no packet is sent: this only picks a route
        except OSError:
            return None
        address = str(probe.getsockname()[0])
    return None if address.startswith("127.") else address


def test_a_client_that_is_not_loopback_is_403() -> None:
    fake = FakeStatusPage()
    request = FakeRequest("POST", "/_control", {}, {"host": "127.0.0.1:8401",
                          "content-type": "application/json"}, b'{"global": "major_outage"}',
                          client="198.51.100.7")  # fmt: skip
    assert answer_control(request, StatusPageControls(fake)).status == 403
    address = _own_non_loopback_address()
    if address is None:
        pytest.skip("this machine has no non-loopback address to connect from")
    # A fake someone served on every interface still refuses control from the network.
    with LoopbackServer(with_control(fake.handle, StatusPageControls(fake)), host="0.0.0.0") as s:
        port = s.url.rsplit(":", 1)[1]
        answer = httpx.post(f"http://{address}:{port}/_control", json={"global": "major_outage"},
                            headers={"Host": "127.0.0.1"}, timeout=5)
    assert answer.status_code == 403
    assert f"not {address}" in answer.json()["error"]
    assert fake.components_document()["components"][0]["status"] == "operational"


def test_other_methods_are_405(page: FakeStatusPage) -> None:
    assert httpx.delete(page.url + "/_control", timeout=5).status_code == 405


def test_without_control_the_route_does_not_exist() -> None:
    fake = FakeStatusPage()
    with fake.serve():
        assert httpx.get(fake.url + "/_control", timeout=5).status_code == 404
        assert post(fake.url, {"global": "major_outage"}).status_code == 405
    assert fake.components_document()["components"][0]["status"] == "operational"


def test_control_requests_are_not_counted_as_status_polls(page: FakeStatusPage) -> None:
    post(page.url, {"global": "major_outage"})
    components(page.url)
    assert page.requests == 1


def test_verify_api_control() -> None:
    api = FakeVerifyAPI()
    with api.serve(control=True):
        assert httpx.get(api.url + "/_control", timeout=5).json() == {
            "fake": "verify", "fault": None, "requests": 0}
        assert post(api.url, {"fault": "503"}).json()["fault"] == "503"
        verify = httpx.post(api.verify_url, json={"private_key": api.private_key,
                                                  "session_token": api.GOOD}, timeout=5)
        assert verify.status_code == 503
        assert post(api.url, {"fault": "nope"}).status_code == 400
        assert post(api.url, {"down": True}).status_code == 400
        assert post(api.url, {"fault": None}).json()["fault"] is None
    assert api.fault is None


def test_vendor_script_control() -> None:
    script = FakeVendorScript()
    with script.serve(control=True):
        js = script.url + "/v2/test-public-key/api.js"
        assert post(script.url, {"down": True}).json() == {
            "fake": "vendor", "mode": "http404", "down": True, "script_requests": 0}
        assert httpx.get(js, timeout=5).status_code == 404
        assert post(script.url, {"down": False}).json()["mode"] == "ok"
        assert httpx.get(js, timeout=5).status_code == 200
        assert post(script.url, {"mode": "error_then_ok:2"}).json()["mode"] == "error_then_ok:2"
        refused = post(script.url, {"mode": "sometimes"})
        assert refused.status_code == 400 and "unknown vendor script mode" in refused.text
        assert post(script.url, {"down": "yes"}).status_code == 400
        assert post(script.url, {"down": True, "mode": "ok"}).status_code == 400
    assert script.mode == "error_then_ok:2"


# --- failopen emulate ... --set -----------------------------------------------------------------


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_set_changes_a_running_status_page(
    page: FakeStatusPage, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(capsys, "emulate", "status", "--url", page.url,
                         "--set", "global=major_outage", "--set", "eu-west-1=degraded_performance")
    assert code == 0, err
    assert statuses(page.url) == {None: "major_outage", "us-east-1": "operational",
                                  "eu-west-1": "degraded_performance"}
    assert "global=major_outage" in out and "eu-west-1=degraded_performance" in out
    assert run(capsys, "emulate", "status", "--url", page.url, "--set", "fault=500")[0] == 0
    assert components(page.url).status_code == 500
    assert run(capsys, "emulate", "status", "--url", page.url, "--set", "fault=none")[0] == 0
    assert page.fault is None


def test_set_targets_port_when_no_url_is_given(
    page: FakeStatusPage, capsys: pytest.CaptureFixture[str]
) -> None:
    port = page.url.rsplit(":", 1)[1]
    code, _, err = run(capsys, "emulate", "status", "--port", port, "--set", "global=major_outage")
    assert code == 0, err
    assert statuses(page.url)[None] == "major_outage"


def test_set_defaults_to_the_emulators_default_port() -> None:
    from failopen.cli.command import build_parser
    from failopen.testing._control_cli import control_target

    for fake, port in (("status", 8401), ("verify", 8402), ("vendor", 8404)):
        args = build_parser().parse_args(["emulate", fake, "--set", "fault=500"])
        assert control_target(args) == f"http://127.0.0.1:{port}"


@pytest.mark.parametrize(("argv", "message"), [
    (["--set", "global=major_oops"], "--set global=major_oops: 'major_oops' is not a status"),
    (["--set", "fault=meltdown"], "--set fault=meltdown: 'meltdown' is not a fault"),
    (["--set", "global"], "--set global: expected NAME=VALUE"),
    (["--set", "mars-1=major_outage"], "no region 'mars-1'; the page has us-east-1, eu-west-1"),
    (["--set", "global=major_outage", "--global", "operational"],
     "--set changes a running fake; --global configures a new one"),
])
def test_set_refuses_invalid_values_with_exit_2(
    page: FakeStatusPage, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    code, out, err = run(capsys, "emulate", "status", "--url", page.url, *argv)
    assert code == 2
    assert message in err, err
    assert "Traceback" not in err
    assert statuses(page.url)[None] == "operational"


def test_set_with_nothing_listening_says_so_with_exit_2(
    capsys: pytest.CaptureFixture[str]
) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{sock.getsockname()[1]}"  # bound, not listening: refused
        code, _, err = run(capsys, "emulate", "status", "--url", url, "--set", "global=operational")
    assert code == 2
    assert f"nothing listens at {url}" in err


def test_set_against_a_fake_without_control_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    fake = FakeStatusPage()
    with fake.serve():
        code, _, err = run(capsys, "emulate", "status", "--url", fake.url, "--set",
                           "global=major_outage")
    assert code == 2
    assert "not a failopen fake with control" in err


def test_send_control_reports_refusals() -> None:
    from failopen.testing.control import ControlError

    fake = FakeStatusPage()
    with fake.serve(control=True), pytest.raises(ControlError, match="is not a status"):
        send_control(fake.url, {"global": "down"})


def _start(*argv: str, lines: int) -> tuple[subprocess.Popen[str], list[str]]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAILOPEN_")}
    proc = subprocess.Popen([str(FAILOPEN), *argv], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)
    assert proc.stdout is not None
    return proc, [proc.stdout.readline() for _ in range(lines)]


def _stop(proc: subprocess.Popen[str]) -> tuple[int, str]:
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=10)
    return proc.returncode, err


def _set(*argv: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAILOPEN_")}
    return subprocess.run([str(FAILOPEN), *argv], capture_output=True, text=True, timeout=30,
                          env=env)


def test_the_emulate_commands_change_each_other_across_processes() -> None:
    """The recipe: a fake in one terminal, ``--set`` in another, no restart."""
    status, banner = _start("emulate", "status", "--port", "0", lines=1)
    verify, verify_banner = _start("emulate", "verify", "--port", "0", lines=1)
    vendor, vendor_banner = _start("emulate", "vendor", "--port", "0", lines=1)
    try:
        status_url = banner[0].split(": ", 1)[1].strip()
        verify_url = verify_banner[0].split(": ", 1)[1].strip().removesuffix(FakeVerifyAPI.path)
        vendor_url = vendor_banner[0].split(": ", 1)[1].strip().split("/v2/", 1)[0]

        done = _set("emulate", "status", "--url", status_url, "--set", "global=major_outage")
        assert done.returncode == 0, done.stderr
        assert statuses(status_url)[None] == "major_outage"
        done = _set("emulate", "verify", "--url", verify_url, "--set", "fault=503")
        assert done.returncode == 0, done.stderr
        assert httpx.post(verify_url + FakeVerifyAPI.path, json={}, timeout=5).status_code == 503
        done = _set("emulate", "vendor", "--url", vendor_url, "--set", "down=true")
        assert done.returncode == 0, done.stderr
        assert httpx.get(vendor_url + "/v2/k/api.js", timeout=5).status_code == 404
        shown = _set("emulate", "vendor", "--url", vendor_url, "--show")
        assert shown.returncode == 0 and "mode=http404" in shown.stdout
        done = _set("emulate", "status", "--url", status_url, "--set", "global=operational")
        assert done.returncode == 0 and statuses(status_url)[None] == "operational"
    finally:
        codes = [_stop(proc) for proc in (status, verify, vendor)]
    assert [code for code, _ in codes] == [0, 0, 0], codes


def test_verify_and_vendor_set_refuse_what_they_do_not_take(
    capsys: pytest.CaptureFixture[str]
) -> None:
    api, script = FakeVerifyAPI(), FakeVendorScript()
    with api.serve(control=True), script.serve(control=True):
        code, _, err = run(capsys, "emulate", "verify", "--url", api.url, "--set", "global=x")
        assert code == 2 and "--set global=x: the verify fake takes fault=FAULT" in err
        code, _, err = run(capsys, "emulate", "vendor", "--url", script.url, "--set", "down=maybe")
        assert code == 2 and "--set down=maybe: true or false" in err
        code, out, err = run(capsys, "emulate", "vendor", "--url", script.url, "--set", "down=true")
        assert code == 0, err
        assert script.mode == "http404"
        code, out, err = run(capsys, "emulate", "verify", "--url", api.url,
                             "--set", "fault=timeout")
        assert code == 0, err
        assert api.fault == "timeout"


def test_emulate_vendor_with_a_vendor_serves_its_browser_script_under_control() -> None:
    vendor, banner = _start("emulate", "vendor", "--vendor", "hcaptcha", "--port", "0",
                            "--mode", "expire:500", lines=4)
    try:
        script_url = banner[0].split(": ", 1)[1].strip()
        assert script_url.endswith("/1/api.js")  # hCaptcha's own path
        assert banner[2].strip() == "FAILOPEN_VENDOR=hcaptcha"
        base = banner[3].split("=", 1)[1].strip()
        served = httpx.get(script_url, timeout=5)
        assert served.status_code == 200 and '"mode": "expire"' in served.text
        done = _set("emulate", "vendor", "--url", base, "--set", "down=true")
        assert done.returncode == 0, done.stderr
        assert httpx.get(script_url, timeout=5).status_code == 404
        # The spec's script's `failed` is no mode of a captcha widget: the running fake says so.
        refused = _set("emulate", "vendor", "--url", base, "--set", "mode=failed")
        assert refused.returncode == 2 and "expire:MS" in refused.stderr
    finally:
        code, err = _stop(vendor)
    assert code == 0, err


def test_emulate_vendor_with_a_vendor_refuses_a_mode_it_cannot_play(
    capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(capsys, "emulate", "vendor", "--vendor", "turnstile", "--mode", "failed",
                       "--port", "0")
    assert code == 2 and "--mode: unknown vendor script mode 'failed'" in err


def _served_tokens(vendor_url: str) -> list[str]:
    script = httpx.get(vendor_url + "/v2/k/api.js", timeout=5).text
    config = json.loads(script.split("var cfg = ", 1)[1].split(", me = ", 1)[0])
    return list(config["tokens"])


def _verify(verify_url: str, token: str, key: str = "test-private-key") -> Any:
    return httpx.post(verify_url + FakeVerifyAPI.path, timeout=5,
                      json={"private_key": key, "session_token": token}).json()


def test_every_solve_of_the_vendor_emulator_is_good_once_at_the_verify_emulator() -> None:
    """Two emulator processes, as a developer runs them: every log-in solves a fresh challenge.
    Both used to agree only on ``good-token``, which the verify fake takes once, so each log-in
    after the first was refused as a replay until the verify fake restarted."""
    verify, verify_banner = _start("emulate", "verify", "--port", "0", lines=1)
    vendor, vendor_banner = _start("emulate", "vendor", "--port", "0", lines=1)
    try:
        verify_url = verify_banner[0].split(": ", 1)[1].strip().removesuffix(FakeVerifyAPI.path)
        vendor_url = vendor_banner[0].split(": ", 1)[1].strip().split("/v2/", 1)[0]
        first, second = _served_tokens(vendor_url)[0], _served_tokens(vendor_url)[0]
        assert first != second
        for token in (first, second):
            details = _verify(verify_url, token)["session_details"]
            assert details["session_is_legit"] and not details["previously_verified"]
        again = _verify(verify_url, first)["session_details"]
        assert again["previously_verified"] and not again["session_is_legit"]
        # A token the vendor fake did not sign (another key, an edited signature) is unknown.
        forged = first[:-1] + ("0" if first[-1] != "0" else "1")
        assert _verify(verify_url, forged) == {"error": "DENIED ACCESS"}
    finally:
        codes = [_stop(proc) for proc in (verify, vendor)]
    assert [code for code, _ in codes] == [0, 0], codes


def test_a_token_signed_with_another_key_is_unknown() -> None:
    vendor = FakeVendorScript(signing_key="key-a")
    api = FakeVerifyAPI(private_key="key-b")
    with vendor.serve(), api.serve():
        token = _served_tokens(vendor.url)[0]
        assert _verify(api.url, token, key="key-b") == {
            "error": "DENIED ACCESS"}


# --- failopen emulate token -----------------------------------------------------------------


@pytest.mark.parametrize("key", [None, "another-test-key"])
def test_emulate_token_prints_fresh_tokens_the_running_fake_accepts_once(
    capsys: pytest.CaptureFixture[str], key: str | None
) -> None:
    # What a person testing by hand needs to log in twice: tokens the fake verify API (its
    # default key, or the one it was started with) accepts, each once, as a real solve.
    from failopen.testing.cli import DEFAULT_PRIVATE_KEY

    private_key = key or DEFAULT_PRIVATE_KEY
    code, out, _err = run(capsys, "emulate", "token", "--count", "2",
                          *(("--private-key", key) if key else ()))
    assert code == 0
    tokens = out.split()
    assert len(tokens) == 2 and tokens[0] != tokens[1]
    api = FakeVerifyAPI(private_key=private_key, session_lifetime=None)
    with httpx.Client(transport=api.transport(), base_url="http://verify.test") as http:
        def details(token: str, by: str = private_key) -> dict[str, Any]:
            answer = http.post(api.path, json={"private_key": by, "session_token": token})
            return dict(answer.json())

        first = details(tokens[0])["session_details"]
        assert first["solved"] and first["verified"] and not first["previously_verified"]
        assert details(tokens[0])["session_details"]["previously_verified"] is True
        assert not details(tokens[1])["session_details"]["previously_verified"]
    other = FakeVerifyAPI(private_key="not-the-same-key", session_lifetime=None)
    with httpx.Client(transport=other.transport(), base_url="http://verify.test") as http:
        answer = http.post(other.path, json={"private_key": "not-the-same-key",
                                             "session_token": tokens[1]})
        assert "session_details" not in answer.json()  # signed for another fake: refused


def test_emulate_token_refuses_a_count_out_of_range(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["emulate", "token", "--count", "0"])
    assert exit_.value.code == 2
    assert "--count" in capsys.readouterr().err
