"""``failopen demo --web`` without a browser: what it serves, to whom, and what its routes do.

The page itself is driven in Chromium by tests/browser/test_demo_web.py.
"""

from __future__ import annotations

import importlib.util
import io
import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from failopen.cli.command import main
from failopen.cli.demo_web import run_web_demo
from failopen.cli.demo_web._app import build_app
from failopen.cli.demo_web._site import DemoSite
from failopen.testing import FakeVerifyAPI, free_port, solve_challenge

FAILOPEN = Path(sys.executable).with_name("failopen")
WAIT = 15.0


def wait_for(predicate: Any, what: str) -> None:
    done = threading.Event()
    for _ in range(int(WAIT / 0.05)):
        if predicate():
            return
        done.wait(0.05)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture(scope="module")
def demo() -> Iterator[str]:
    """The web demo in this process, on a free loopback port."""
    port, stop, out = free_port(), threading.Event(), io.StringIO()
    codes: list[int] = []
    thread = threading.Thread(target=lambda: codes.append(run_web_demo(port=port, out=out,
                                                                       stop=stop)))
    thread.start()
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: f"open {url}/" in out.getvalue() or codes, "the demo to serve")
        assert not codes, out.getvalue()
        yield url
    finally:
        stop.set()
        thread.join(timeout=20)
    assert codes == [0]
    assert out.getvalue().endswith("failopen demo --web: stopped\n")


def flag(url: str) -> dict[str, Any]:
    answer: dict[str, Any] = httpx.get(url + "/failopen/flag", timeout=5).json()
    return answer


def act(url: str, route: str, body: Any, **kwargs: Any) -> httpx.Response:
    return httpx.post(f"{url}/demo/{route}", json=body, timeout=5, **kwargs)


def log_in(url: str, token: str | None = None) -> httpx.Response:
    data = {"username": "demo"} if token is None else {"username": "demo",
                                                       "enforcement-token": token}
    return httpx.post(url + "/login", data=data, timeout=5)


def send(url: str, path: str, **data: str) -> httpx.Response:
    """A form's POST as a script sends it (JSON answers, whatever the outcome)."""
    return httpx.post(url + path, data=data, headers={"Accept": "application/json"}, timeout=5)


def state(url: str) -> dict[str, Any]:
    answer: dict[str, Any] = httpx.get(url + "/demo/state", timeout=5).json()
    return answer


# --- without a running demo (first: the module's demo starts with the first test using it) ---


def test_a_busy_port_is_one_line_and_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        assert run_web_demo(port=port, stop=threading.Event()) == 2
    err = capsys.readouterr().err
    assert f"cannot listen on 127.0.0.1:{port}" in err and "--port" in err


def test_a_missing_dependency_names_the_extra(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "uvicorn", None)
    assert run_web_demo(port=0, stop=threading.Event()) == 2
    assert 'pip install "failopen[demo]"' in capsys.readouterr().err


def test_without_the_fallback_extra_the_log_in_runs_and_the_page_names_the_extra(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # An older .venv made with `pip install -e ".[demo]"` has neither altcha nor limits.
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None
                        if name in ("altcha", "limits") else find_spec(name, *a))
    port, stop, out = free_port(), threading.Event(), io.StringIO()
    codes: list[int] = []
    thread = threading.Thread(target=lambda: codes.append(run_web_demo(port=port, out=out,
                                                                       stop=stop)))
    thread.start()
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: f"open {url}/" in out.getvalue() or codes, "the demo to serve")
        assert not codes, out.getvalue()
        assert "forms and their outage policies: /login open\n" in out.getvalue()
        assert 'password-reset (closed) forms need the fallback extra: pip install ' \
            '"failopen[fallback]"' in out.getvalue()
        page = httpx.get(url + "/", timeout=5).text
        assert 'id="fallback-missing"' in page and 'pip install &quot;failopen[fallback]&quot;' \
            in page
        assert '<section data-form="login"' in page and '<section data-form="signup"' not in page
        assert httpx.get(url + "/form/signup", timeout=5).status_code == 404
        shown = state(url)
        assert [form["name"] for form in shown["forms"]] == ["login"]
        assert "needs altcha, which is not installed" in shown["fallback_missing"]
        assert shown["settings"] == {"FAILOPEN_PROTECTED_PATHS": "/login"}
        assert log_in(url).status_code == 403  # the log-in is guarded as ever
    finally:
        stop.set()
        thread.join(timeout=20)
    assert codes == [0]


def test_the_fallback_secret_is_never_shown() -> None:
    # Made for each run and given to the runtime only: not on the page, in the state, the forms
    # or the challenge, whether enforcing or not.
    site = DemoSite(poll_interval=0.2)
    runtime = site.start()
    try:
        assert runtime.config.fallback_secret is not None
        secret = runtime.config.fallback_secret.reveal()
        assert len(secret) >= 32
        transport = httpx.ASGITransport(build_app(site), client=("127.0.0.1", 4711))
        seen = []

        async def visit() -> None:
            async with httpx.AsyncClient(transport=transport,
                                         base_url="http://127.0.0.1") as client:
                for path in ("/", "/demo/state", "/form/login", "/form/signup",
                             "/form/password-reset", "/failopen/flag", "/failopen/challenge"):
                    seen.append((await client.get(path)).text)

        anyio.run(visit)
        runtime.flag.force_off("demo test: off")
        anyio.run(visit)
        assert "signature" in seen[-1]  # a challenge was issued, signed with the secret
        assert all(secret not in text for text in seen)
        assert "FAILOPEN_FALLBACK_SECRET=...   # made for this run; never shown" in seen[0]
    finally:
        runtime.stop()
        site.stop()


def test_port_without_web_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--port", "8400"]) == 2
    assert "--port goes with --web" in capsys.readouterr().err


@pytest.mark.slow
def test_the_command_serves_until_ctrl_c_and_exits_0() -> None:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAILOPEN_")}
    proc = subprocess.Popen([str(FAILOPEN), "demo", "--web", "--port", str(port)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().startswith(f"failopen demo --web: open "
                                                 f"http://127.0.0.1:{port}/")
        assert httpx.get(f"http://127.0.0.1:{port}/", timeout=5).status_code == 200
    finally:
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=20)
    assert proc.returncode == 0, err
    assert "failopen demo --web: stopped" in out
    assert "Traceback" not in err


# --- against a running demo ----------------------------------------------------------------------


def test_the_page_uses_the_real_snippet_and_a_nonce(demo: str) -> None:
    page = httpx.get(demo + "/", timeout=5)
    assert page.status_code == 200
    csp = page.headers["content-security-policy"]
    nonce = csp.split("'nonce-", 1)[1].split("'", 1)[0]
    assert f'<script nonce="{nonce}">' in page.text
    for scene in ("regional", "global", "status_errors", "vendor_down", "verify_down",
                  "recovery"):
        assert f'data-scene="{scene}"' in page.text
    for verb in ("off", "on", "auto"):
        assert f'data-override="{verb}"' in page.text
    # A form per outage policy, configured as a site would be: the settings are on the page.
    for name, path, policy in (("login", "/login", "open"), ("signup", "/signup", "fallback"),
                               ("password-reset", "/password-reset", "closed")):
        assert (f'<section data-form="{name}" data-policy="{policy}" data-action="{path}"'
                in page.text)
        form = httpx.get(f"{demo}/form/{name}", timeout=5).text
        assert ('<script src="/failopen/failopen.js" data-failopen-flag-url="/failopen/flag"'
                in form)
        assert f'<form method="post" action="{path}">' in form
    assert 'id="solve-signup"' in page.text  # where the proof-of-work solve is timed
    assert ("FAILOPEN_OUTAGE_POLICY_ROUTES=/login=open,<wbr>/signup=fallback,<wbr>"
            "/password-reset=closed") in page.text
    assert httpx.get(demo + "/form/other", timeout=5).status_code == 404
    snippet = httpx.get(demo + "/failopen/failopen.js", timeout=5)
    assert snippet.status_code == 200 and "window.FailOpen" in snippet.text
    solver = httpx.get(demo + "/failopen/failopen-solver.js", timeout=5)
    assert solver.status_code == 200 and "crypto.subtle" in solver.text


def test_an_outage_lets_log_ins_through_and_recovery_ends_it(demo: str) -> None:
    assert act(demo, "scene", {"scene": "recovery"}).status_code == 200
    wait_for(lambda: flag(demo)["enforce"] and flag(demo)["source"] == "watcher", "enforcing")
    assert log_in(demo).status_code == 403

    assert act(demo, "scene", {"scene": "global"}).json()["fakes"]["status"]["global"] == \
        "major_outage"
    wait_for(lambda: not flag(demo)["enforce"], "the watcher to see the outage")
    admitted = log_in(demo)
    assert admitted.status_code == 200 and admitted.json()["bypassed"] is True

    act(demo, "scene", {"scene": "recovery"})
    wait_for(lambda: flag(demo)["enforce"], "the watcher to see the recovery")
    assert log_in(demo).status_code == 403
    decisions = state(demo)["decisions"]
    assert [d["kind"] for d in decisions[:3]] == ["refused", "bypassed", "refused"]
    assert decisions[0]["verdict"] == "refused 403: no challenge token"
    assert decisions[1]["verdict"] == "admitted without a challenge: enforcement is off"
    transitions = state(demo)["transitions"]
    assert any(not t["enforce"] and t["reason"] == "global component major_outage"
               for t in transitions)


def test_each_form_follows_its_routes_outage_policy_during_an_outage(demo: str) -> None:
    act(demo, "scene", {"scene": "recovery"})
    wait_for(lambda: flag(demo)["enforce"] and flag(demo)["source"] == "watcher", "enforcing")
    assert httpx.get(demo + "/failopen/challenge", timeout=5).status_code == 409
    assert send(demo, "/signup").json()["error"]["code"] == "missing_token"
    for path, policy in (("/login", "open"), ("/signup", "fallback"),
                         ("/password-reset", "closed")):
        asked = httpx.get(demo + "/failopen/flag", params={"path": path}, timeout=5).json()
        assert asked["outage_policy"] == policy

    act(demo, "scene", {"scene": "global"})
    wait_for(lambda: not flag(demo)["enforce"], "the watcher to see the outage")
    challenge = httpx.get(demo + "/failopen/challenge", timeout=5)
    assert challenge.status_code == 200 and challenge.json()["maxnumber"] == 100_000
    solution = solve_challenge(challenge.json())  # what the page's Web Worker does
    signed_up = send(demo, "/signup", username="new-user", altcha=solution)
    assert signed_up.status_code == 200, signed_up.text
    assert signed_up.json()["decision"]["outcome"] == "bypassed_fallback"
    assert send(demo, "/signup", altcha=solution).json()["error"]["code"] == "fallback_invalid"
    assert send(demo, "/signup").json()["error"]["code"] == "fallback_required"
    closed = send(demo, "/password-reset", email="demo@example.com")
    assert (closed.status_code, closed.json()["error"]["code"]) == (503, "outage_closed")
    assert closed.headers["retry-after"]
    page = httpx.post(demo + "/password-reset", headers={"Accept": "text/html"}, timeout=5)
    assert page.status_code == 503 and "briefly unavailable" in page.text.lower()
    assert send(demo, "/login").json()["decision"]["outcome"] == "bypassed_flag_off"

    latest = state(demo)["decisions"][:6]
    assert [(d["route"], d["outcome"], d["kind"]) for d in latest] == [
        ("/login", "bypassed_flag_off", "bypassed"),
        ("/password-reset", "outage_closed", "refused"),
        ("/password-reset", "outage_closed", "refused"),
        ("/signup", "fallback_required", "refused"),
        ("/signup", "fallback_invalid", "refused"),
        ("/signup", "bypassed_fallback", "bypassed"),
    ]
    assert latest[-1]["verdict"] == "admitted without the vendor: proof of work solved"
    assert latest[1]["verdict"] == "refused 503: closed during the outage"
    act(demo, "scene", {"scene": "recovery"})
    wait_for(lambda: flag(demo)["enforce"], "the watcher to see the recovery")


def test_verify_api_down_is_503_never_a_bypass(demo: str) -> None:
    act(demo, "scene", {"scene": "recovery"})
    wait_for(lambda: flag(demo)["enforce"], "enforcing")
    act(demo, "scene", {"scene": "verify_down"})
    answer = log_in(demo, FakeVerifyAPI.GOOD)
    assert answer.status_code == 503
    assert answer.json()["error"]["code"] == "cannot_verify"
    latest = state(demo)["decisions"][0]
    assert latest["kind"] == "refused" and "cannot verify now" in latest["reason"]
    assert flag(demo)["enforce"] is True
    act(demo, "scene", {"scene": "recovery"})


def test_the_override_buttons_place_and_lift_an_expiring_override(demo: str) -> None:
    placed = act(demo, "override", {"verb": "off"}).json()["flag"]
    assert placed["enforce"] is False and placed["source"] == "override"
    assert placed["expires_at"] is not None
    assert log_in(demo).json()["bypassed"] is True
    assert act(demo, "override", {"verb": "on"}).json()["flag"]["enforce"] is True
    lifted = act(demo, "override", {"verb": "auto"}).json()["flag"]
    assert lifted["source"] != "override" and lifted["expires_at"] is None


def test_the_reset_button_starts_the_demo_over(demo: str) -> None:
    # The scene lives in the server (a reloaded page keeps it): reset puts the vendor right,
    # lifts the override and empties the timelines.
    act(demo, "scene", {"scene": "global"})
    act(demo, "override", {"verb": "off"})
    log_in(demo)
    assert state(demo)["decisions"]
    answer = act(demo, "reset", {"reset": "all"})
    assert answer.status_code == 200
    after = answer.json()
    assert after["flag"]["source"] != "override" and after["decisions"] == []
    assert after["fakes"]["status"]["global"] == "operational"
    assert after["fakes"]["verify"]["fault"] is None and after["fakes"]["vendor"]["down"] is False
    # The timeline starts at the reset (the watcher may have flipped the flag once since).
    assert 1 <= len(after["transitions"]) <= 2 and after["transitions"][-1]["changed"]
    wait_for(lambda: flag(demo)["enforce"] is True, "enforcement after the reset")
    # A cross-site simple POST cannot reset it (no CORS preflight for text/plain).
    refused = httpx.post(demo + "/demo/reset", content=b'{"reset": "all"}',
                         headers={"Content-Type": "text/plain"}, timeout=5)
    assert refused.status_code == 415


def test_failopens_own_override_endpoint_stays_off(demo: str) -> None:
    answer = httpx.post(demo + "/failopen/override", json={"enforce": False}, timeout=5)
    assert answer.status_code == 404
    assert flag(demo)["source"] != "override"


@pytest.mark.parametrize(("route", "body", "kwargs", "status", "message"), [
    ("scene", {"scene": "global"}, {"headers": {"Host": "evil.example"}}, 403, "loopback Host"),
    ("override", {"verb": "off"}, {"headers": {"Host": "attacker.test:80"}}, 403,
     "loopback Host"),
    ("scene", {"scene": "meteor"}, {}, 400, "regional, global, status_errors"),
    ("override", {"verb": "forever"}, {}, 400, "off, on, auto"),
    ("reset", {"reset": "all"}, {"headers": {"Host": "evil.example"}}, 403, "loopback Host"),
    ("reset", {"reset": "everything"}, {}, 400, '{"reset": one of all}'),
])
def test_demo_routes_refuse_what_is_not_the_page(
    demo: str, route: str, body: Any, kwargs: Any, status: int, message: str
) -> None:
    answer = act(demo, route, body, **kwargs)
    assert answer.status_code == status
    assert message in answer.json()["error"]
    assert flag(demo)["source"] != "override"


def test_demo_routes_refuse_a_cross_site_simple_post(demo: str) -> None:
    # text/plain needs no CORS preflight: any page could send it.
    answer = httpx.post(demo + "/demo/override", content=b'{"verb": "off"}',
                        headers={"Content-Type": "text/plain"}, timeout=5)
    assert answer.status_code == 415
    assert flag(demo)["source"] != "override"


def _own_non_loopback_address() -> str | None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.1", 9))  # picks a route; sends nothing
        except OSError:
            return None
        address = str(probe.getsockname()[0])
    return None if address.startswith("127.") else address


def test_it_listens_on_loopback_only(demo: str) -> None:
    address = _own_non_loopback_address()
    if address is None:
        pytest.skip("this machine has no non-loopback address to try")
    port = int(demo.rsplit(":", 1)[1])
    with socket.socket() as sock, pytest.raises(OSError):
        sock.settimeout(2)
        sock.connect((address, port))


def test_step_with_web_is_refused_not_ignored(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--web", "--step", "2"]) == 2
    assert "--step goes with the terminal story" in capsys.readouterr().err
