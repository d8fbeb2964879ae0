"""End to end: ``uvicorn examples.asgi_app:app`` in a subprocess, against the fakes on loopback.

A load loop of token-less log-ins and unprotected requests runs while the fake status page goes
into a major outage and back: no request may be lost or answered with a 5xx, log-ins are refused
before, admitted (bypassed) during, and refused again after the outage.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from failopen.testing import FakeStatusPage, FakeVerifyAPI, free_port

ROOT = Path(__file__).resolve().parents[2]
POLL = 0.1


@dataclass
class Server:
    url: str
    page: FakeStatusPage
    verify: FakeVerifyAPI
    log: Path



def wait_until(predicate: Callable[[], bool], timeout: float, what: str) -> float:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)
    return time.monotonic()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    page, verify = FakeStatusPage(), FakeVerifyAPI()
    log = tmp_path_factory.mktemp("uvicorn") / "server.log"
    with page.serve(), verify.serve(), log.open("wb") as out:
        env = {k: v for k, v in os.environ.items() if not k.startswith("FAILOPEN_")}
        env.update({
            "FAILOPEN_STATUS_URL": page.url, "FAILOPEN_VERIFY_URL": verify.verify_url,
            "FAILOPEN_PRIVATE_KEY": verify.private_key, "FAILOPEN_PUBLIC_KEY": "test-public-key",
            "FAILOPEN_POLL_INTERVAL": str(POLL), "FAILOPEN_POLL_JITTER": "0",
            "FAILOPEN_MAX_BODY_BYTES": "65536",
            # Load from one client: the outage rate limit would cut it (tests/fallback/).
            "FAILOPEN_OUTAGE_RATE": "none",
        })
        port = free_port()
        process = subprocess.Popen(
            [sys.executable, "-m", "uvicorn", "examples.asgi_app:app", "--host", "127.0.0.1",
             "--port", str(port), "--lifespan", "on", "--log-level", "warning"],
            cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
        )
        try:
            url = f"http://127.0.0.1:{port}"

            def ready() -> bool:
                assert process.poll() is None, log.read_text()
                try:
                    return httpx.get(url + "/health", timeout=1).status_code == 200
                except httpx.TransportError:
                    return False

            wait_until(ready, 30, "uvicorn to answer")
            yield Server(url, page, verify, log)
        finally:
            process.terminate()
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(10)


@dataclass(frozen=True)
class Result:
    kind: str
    started: float
    finished: float
    status: int | None
    bypassed: bool | None
    error: str | None = None


def load_loop(url: str, stop: threading.Event, results: list[Result]) -> None:
    with httpx.Client(base_url=url, timeout=10) as client:
        while not stop.is_set():
            for kind in ("login", "health"):
                started = time.monotonic()
                try:
                    if kind == "login":
                        response = client.post("/login", data={"username": "ann"})
                    else:
                        response = client.get("/health")
                except httpx.HTTPError as exc:
                    results.append(Result(kind, started, time.monotonic(), None, None, repr(exc)))
                    continue
                bypassed = response.json().get("bypassed") if response.status_code == 200 and \
                    kind == "login" else None
                results.append(Result(kind, started, time.monotonic(), response.status_code,
                                      bypassed))


def enforcing(url: str) -> bool:
    body = httpx.get(url + "/failopen/flag", timeout=5).json()
    return bool(body["enforce"])


@pytest.mark.slow
def test_outage_and_recovery_under_load(server: Server) -> None:
    url = server.url
    assert httpx.post(url + "/login", headers={"X-Enforcement-Token": FakeVerifyAPI.GOOD},
                      timeout=5).json()["decision"]["outcome"] == "valid"
    wait_until(lambda: enforcing(url), 10, "the first status reading")
    stop = threading.Event()
    results: list[Result] = []
    workers = [threading.Thread(target=load_loop, args=(url, stop, results)) for _ in range(4)]
    for worker in workers:
        worker.start()
    try:
        time.sleep(0.5)
        outage_set = time.monotonic()
        server.page.set_global("major_outage")
        bypassing = wait_until(lambda: not enforcing(url), 10, "the watcher to see the outage")
        time.sleep(0.7)
        recovery_set = time.monotonic()
        server.page.set_global("operational")
        enforcing_again = wait_until(lambda: enforcing(url), 10, "the watcher to see recovery")
        time.sleep(0.7)
    finally:
        stop.set()
        for worker in workers:
            worker.join(30)
    assert not any(worker.is_alive() for worker in workers)

    lost = [r for r in results if r.status is None]
    assert lost == [], f"requests without an answer: {lost[:5]}"
    server_errors = [r for r in results if r.status is not None and r.status >= 500]
    assert server_errors == [], server.log.read_text()
    assert {r.status for r in results if r.kind == "health"} == {200}

    logins = [r for r in results if r.kind == "login"]
    # Each request is judged only when the flag was steady for all of its life.
    before = [r for r in logins if r.finished < outage_set]
    during = [r for r in logins if bypassing < r.started and r.finished < recovery_set]
    after = [r for r in logins if r.started > enforcing_again]
    assert before and during and after, (len(before), len(during), len(after))
    assert {r.status for r in before} == {403}
    assert {(r.status, r.bypassed) for r in during} == {(200, True)}
    assert {r.status for r in after} == {403}
    # Only the switch-overs may see either answer; nothing else ever shows up.
    assert {r.status for r in logins} <= {200, 403}


@pytest.mark.slow
def test_a_declared_body_over_the_cap_is_refused_before_it_is_sent(server: Server) -> None:
    host, port = server.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=5) as sock:
        sock.sendall(b"POST /login HTTP/1.1\r\nHost: x\r\n"
                     b"Content-Type: application/x-www-form-urlencoded\r\n"
                     b"Content-Length: 100000000\r\n\r\nenforcement-token=")
        answer = b""
        while b"\r\n\r\n" not in answer:
            chunk = sock.recv(65536)
            assert chunk, answer
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 413 ")
    assert b"connection: close" in answer.lower()
    assert httpx.get(server.url + "/health", timeout=5).status_code == 200


@pytest.mark.slow
def test_login_page_carries_the_snippet_tag_and_the_flag_is_served(server: Server) -> None:
    page = httpx.get(server.url + "/", timeout=5)
    assert page.status_code == 200
    assert 'src="/failopen/failopen.js"' in page.text
    assert 'data-failopen-flag-url="/failopen/flag"' in page.text
    assert 'data-failopen-public-key="test-public-key"' in page.text
    assert "test-private-key" not in page.text
    flag = httpx.get(server.url + "/failopen/flag", timeout=5)
    assert flag.headers["cache-control"] == "no-store"


@pytest.mark.slow
def test_refusals_are_a_page_for_a_browser_and_json_for_an_api_client(server: Server) -> None:
    browser = httpx.post(server.url + "/login", data={"username": "ann"}, timeout=5, headers={
        "Accept": "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"})
    assert browser.status_code == 403
    assert browser.headers["content-type"] == "text/html; charset=utf-8"
    assert "<h1>Request refused</h1>" in browser.text
    assert browser.headers["cache-control"] == "no-store"
    api = httpx.post(server.url + "/login", data={"username": "ann"}, timeout=5,
                     headers={"Accept": "application/json"})
    assert (api.status_code, api.json()["error"]["code"]) == (403, "missing_token")
