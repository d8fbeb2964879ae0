"""The flag endpoint's ``?path=`` under a mount prefix (issue 31, A2), WSGI and ASGI.

The snippet asks with its form's action as the browser reads it (``URL.pathname``): the whole
path, mount prefix included, percent-encoded. The guard judges that same POST by the path the
server decoded, with and without ``SCRIPT_NAME`` / ``root_path``. The flag endpoint must name the
policy the guard will apply; before the fix it answered ``outage_policy: null`` under a mount, the
snippet read "open", and every fallback sign-up there was refused with ``fallback_required``.
"""

from __future__ import annotations

import json
import random
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote, unquote_to_bytes, urlencode

import httpx
import pytest
from _asgi_kit import API, CLIENT_IP, Stack, drive, http_scope
from _serving import fakes_env, served
from _wsgi_kit import WsgiStack, call
from _wsgi_kit import environ as wsgi_environ
from failopen.integrations.asgi import FailOpenMiddleware
from failopen.integrations.wsgi import FailOpenMiddleware as WsgiMiddleware
from hypothesis import example, given, settings
from hypothesis import strategies as st
from starlette.applications import Starlette
from starlette.routing import Mount

from failopen.testing import FakeStatusPage, FakeVerifyAPI, free_port, solve_challenge

Make = Callable[..., Stack]
MakeWsgi = Callable[..., WsgiStack]
POLICIES = {"outage_policy_routes": "/login=fallback,/raw=closed", "fallback_secret": "s" * 40,
            "fallback_cost": 2000}
# The mount, as gunicorn's SCRIPT_NAME or uvicorn's --root-path gives it.
MOUNT = "/app"
# What the snippet asks about, and the policy the guard gives a POST there; None: unprotected.
ASKED: list[tuple[str, str | None]] = [
    (f"{MOUNT}/login", "fallback"), (f"{MOUNT}/raw/x", "closed"), (f"{MOUNT}/boom", "open"),
    (f"{MOUNT}/elsewhere", None), (f"{MOUNT}/health", None), (MOUNT, None), (f"{MOUNT}/", None),
    # Outside the mount: the path itself counts, as before (a form posting past the mount).
    ("/login", "fallback"), ("/other/login", None), (f"{MOUNT}x/login", None),
    # Spellings the guard counts under a route (encoded, as URL.pathname keeps them).
    (f"{MOUNT}/login%0A", "fallback"), (f"{MOUNT}//login", "fallback"),
    (f"{MOUNT}/x/../login", "fallback"), (f"{MOUNT}/log%69n", "fallback"),
]


def _outage(runtime: Any, page: Any) -> None:
    page.set_global("major_outage")
    for _ in range(runtime.config.open_after):
        runtime.poll_now()
    assert not runtime.state.enforce


# --- WSGI: Flask behind the middleware, mounted with SCRIPT_NAME (werkzeug's Client) ----------


def _wsgi_get(stack: WsgiStack, route: str, **query: str) -> Any:
    return stack.client.get(route, query_string=query, base_url=f"http://localhost{MOUNT}/")


@pytest.mark.parametrize(("asked", "policy"), ASKED)
def test_wsgi_names_the_policy_of_a_path_under_script_name(make_wsgi: MakeWsgi, asked: str,
                                                          policy: str | None) -> None:
    stack = make_wsgi(**POLICIES)
    answer = _wsgi_get(stack, "/failopen/flag", path=asked)
    assert answer.status_code == 200
    assert answer.get_json()["outage_policy"] == policy, asked


def test_wsgi_a_mounted_fallback_sign_up_goes_through(make_wsgi: MakeWsgi) -> None:
    stack = make_wsgi(**POLICIES)
    _outage(stack.runtime, stack.page)
    flag = _wsgi_get(stack, "/failopen/flag", path=f"{MOUNT}/login").get_json()
    # What the snippet reads: enforcement off, this route wants the fallback challenge.
    assert (flag["enforce"], flag["outage_policy"], flag["fallback"]) == (
        False, "fallback", {"vendor": "altcha"})
    challenge = _wsgi_get(stack, "/failopen/challenge")
    assert challenge.status_code == 200
    solved = solve_challenge(challenge.get_json())
    headers = {"Accept": "application/json"}
    admitted = stack.client.post("/login", data={"altcha": solved, "user": "ada"},
                                 headers=headers, base_url=f"http://localhost{MOUNT}/")
    assert admitted.status_code == 200, admitted.get_data(as_text=True)
    assert admitted.get_json()["decision"]["outcome"] == "bypassed_fallback"
    refused = stack.client.post("/login", data={"user": "eve"}, headers=headers,
                                base_url=f"http://localhost{MOUNT}/")
    assert (refused.status_code, refused.get_json()["error"]["code"]) == (
        403, "fallback_required")


def test_wsgi_names_the_policy_of_a_percent_encoded_path(make_wsgi: MakeWsgi) -> None:
    stack = make_wsgi(protected_paths=("/inscrição/",),
                      outage_policy_routes="/inscrição/=fallback", fallback_secret="s" * 40)
    asked = MOUNT + quote("/inscrição/")  # /app/inscri%C3%A7%C3%A3o/, as URL.pathname has it
    assert _wsgi_get(stack, "/failopen/flag", path=asked).get_json()["outage_policy"] == (
        "fallback")
    # Invalid UTF-8 after the route: the server's bytes, read back as the guard reads them.
    assert _wsgi_get(stack, "/failopen/flag", path=asked + "%FF").get_json()[
        "outage_policy"] == "fallback"


# --- ASGI: a real Starlette app mounting the middleware (root_path) -------------------------


def _mounted(stack: Stack) -> httpx.AsyncClient:
    outer = Starlette(routes=[Mount(MOUNT, app=stack.app)])
    return httpx.AsyncClient(transport=httpx.ASGITransport(outer, client=(CLIENT_IP, 4711)),
                             base_url="http://testserver",
                             headers={"Accept": "application/json"})


@pytest.mark.anyio
async def test_asgi_names_the_policy_of_a_path_under_root_path(make_asgi: Make) -> None:
    stack = make_asgi(**POLICIES)
    async with _mounted(stack) as client:
        for asked, policy in ASKED:
            answer = await client.get(f"{MOUNT}/failopen/flag", params={"path": asked})
            assert answer.status_code == 200
            assert answer.json()["outage_policy"] == policy, asked


@pytest.mark.anyio
async def test_asgi_a_mounted_fallback_sign_up_goes_through(make_asgi: Make) -> None:
    stack = make_asgi(**POLICIES)
    _outage(stack.runtime, stack.page)
    async with _mounted(stack) as client:
        flag = (await client.get(f"{MOUNT}/failopen/flag",
                                 params={"path": f"{MOUNT}/login"})).json()
        assert (flag["enforce"], flag["outage_policy"], flag["fallback"]) == (
            False, "fallback", {"vendor": "altcha"})
        challenge = await client.get(f"{MOUNT}/failopen/challenge")
        solved = solve_challenge(challenge.json())
        admitted = await client.post(f"{MOUNT}/login", data={"altcha": solved, "user": "ada"})
        assert admitted.status_code == 200, admitted.text
        assert admitted.json()["decision"]["outcome"] == "bypassed_fallback"
        refused = await client.post(f"{MOUNT}/login", data={"user": "eve"})
        assert (refused.status_code, refused.json()["error"]["code"]) == (
            403, "fallback_required")


@pytest.mark.anyio
async def test_asgi_names_the_policy_of_a_percent_encoded_path(make_asgi: Make) -> None:
    stack = make_asgi(protected_paths=("/inscrição/",),
                      outage_policy_routes="/inscrição/=fallback", fallback_secret="s" * 40)
    async with _mounted(stack) as client:
        for asked in (MOUNT + quote("/inscrição/"), MOUNT + quote("/inscrição/") + "%FF"):
            answer = await client.get(f"{MOUNT}/failopen/flag", params={"path": asked})
            assert answer.json()["outage_policy"] == "fallback", asked


# --- uvicorn --root-path, behind a proxy that strips the mount -------------------------------

ROOT = Path(__file__).resolve().parents[2]


def _wait_until(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


@pytest.mark.slow
def test_uvicorn_root_path_a_fallback_sign_up_goes_through(tmp_path: Path) -> None:
    page, verify = FakeStatusPage(), FakeVerifyAPI()
    with page.serve(), verify.serve():
        env = fakes_env(page, verify, POLL_INTERVAL="0.1", POLL_JITTER="0",
                        OUTAGE_POLICY_ROUTES="/signup=fallback", FALLBACK_COST="2000",
                        FALLBACK_SECRET="s" * 40)
        port = free_port()
        # uvicorn puts --root-path in front of the path it was sent (the proxy took it off).
        argv = [sys.executable, "-m", "uvicorn", "examples.asgi_app:app", "--host", "127.0.0.1",
                "--port", str(port), "--root-path", MOUNT, "--lifespan", "on",
                "--log-level", "warning"]
        with served(argv, port=port, env=env, log_path=tmp_path / "server.log",
                    ready_path="/health", cwd=ROOT) as url:

            def flag(**query: str) -> Any:
                return httpx.get(url + "/failopen/flag", params=query, timeout=5).json()

            page.set_global("major_outage")
            _wait_until(lambda: not flag()["enforce"], 10, "the watcher to see the outage")
            # The snippet asks with the form's action as the browser reads it: /app/signup.
            asked = flag(path=f"{MOUNT}/signup")
            assert (asked["outage_policy"], asked["fallback"]) == ("fallback", {"vendor": "altcha"})
            assert flag(path=f"{MOUNT}/login")["outage_policy"] == "open"
            assert flag(path=f"{MOUNT}/health")["outage_policy"] is None
            challenge = httpx.get(url + "/failopen/challenge", timeout=5).json()
            admitted = httpx.post(url + "/signup", data={"altcha": solve_challenge(challenge)},
                                  timeout=5)
            assert admitted.status_code == 200, admitted.text
            assert admitted.json()["decision"]["outcome"] == "bypassed_fallback"
            refused = httpx.post(url + "/signup", headers={"Accept": "application/json"},
                                 timeout=5)
            assert (refused.status_code, refused.json()["error"]["code"]) == (
                403, "fallback_required")


# --- the flag names what the guard does, for any path under the mount ------------------------

# Pieces of a form's action, encoded as URL.pathname keeps them: routes, a non-ASCII one, the
# characters routers drop or stop at, dot segments, doubled slashes, invalid UTF-8 and a NUL.
_PIECES = ["/", "login", "raw", "boom", "inscri%C3%A7%C3%A3o", "x", "..", ".", "//", "%2F",
           "%0A", "%00", "%FF", "%C3", "%25", "%2569", "%5C", "\\", ";", "%3B", "%3F", "%20",
           "%E2%80%A8", "%", "%zz", "é", "\x00"]
_UNDER_MOUNT = st.lists(st.sampled_from(_PIECES), max_size=8).map(
    lambda pieces: MOUNT + "/" + "".join(pieces))
_GUARD_POLICIES = {"protected_paths": ("/login", "/raw/", "/boom", "/inscrição/"),
                   "outage_policy_routes": "/login=fallback,/raw/=closed,/inscrição/=fallback",
                   "fallback_secret": "s" * 40, "outage_rate": "none"}


def _judged(status: int, body: bytes) -> str | None:
    """The policy the guard applied to a token-less POST during an outage (None: unguarded)."""
    answer = json.loads(body)
    if "judged" in answer:  # the app behind: the guard let it through, or never looked
        return "open" if answer["judged"] else None
    return {(403, "fallback_required"): "fallback", (503, "outage_closed"): "closed"}[
        (status, answer["error"]["code"])]


def _wsgi_judge(environ: dict[str, Any], start_response: Any) -> list[bytes]:
    start_response("200 OK", [("Content-Type", "application/json")])
    return [json.dumps({"judged": "failopen.decision" in environ}).encode()]


async def _asgi_judge(scope: Any, receive: Any, send: Any) -> None:
    body = json.dumps({"judged": "failopen" in (scope.get("state") or {})}).encode()
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"application/json")]})
    await send({"type": "http.response.body", "body": body})


def test_wsgi_flag_and_guard_agree(make_wsgi: MakeWsgi) -> None:
    stack = make_wsgi(**_GUARD_POLICIES)
    _outage(stack.runtime, stack.page)
    app = WsgiMiddleware(_wsgi_judge, runtime=stack.runtime)

    @settings(max_examples=300, deadline=None, database=None)
    @given(url_path=_UNDER_MOUNT)
    @example(url_path=MOUNT + "/inscri%C3%A7%C3%A3o/")
    @example(url_path=MOUNT + "/login%0A")
    @example(url_path=MOUNT + "/x/..//raw")
    def agree(url_path: str) -> None:
        # As gunicorn builds it: the path decoded to bytes, carried as latin-1, the mount split
        # off.
        decoded = unquote_to_bytes(url_path).decode("latin-1")
        status, _, body = call(app, wsgi_environ(decoded[len(MOUNT):], SCRIPT_NAME=MOUNT))
        flag = call(app, wsgi_environ("/failopen/flag", method="GET", SCRIPT_NAME=MOUNT,
                                      QUERY_STRING=urlencode({"path": url_path})))
        assert flag[0].startswith("200")
        assert json.loads(flag[2])["outage_policy"] == _judged(int(status[:3]), body), url_path

    agree()


@pytest.mark.anyio
async def test_asgi_flag_and_guard_agree(make_asgi: Make) -> None:
    stack = make_asgi(**_GUARD_POLICIES)
    _outage(stack.runtime, stack.page)
    app = FailOpenMiddleware(_asgi_judge, runtime=stack.runtime)
    # Hypothesis cannot await: the same pieces, a seeded sample of their combinations.
    chosen = random.Random(31)
    url_paths = [MOUNT + "/inscri%C3%A7%C3%A3o/", MOUNT + "/login%0A", MOUNT + "/x/..//raw"] + [
        MOUNT + "/" + "".join(chosen.choices(_PIECES, k=chosen.randrange(9)))
        for _ in range(300)]
    for url_path in url_paths:
        # As uvicorn builds it (and Starlette's Mount): decoded once, root_path kept in front.
        path = unquote(url_path)
        reply = await drive(app, http_scope(path, root_path=MOUNT, headers=API))
        flag = await drive(app, http_scope(f"{MOUNT}/failopen/flag", method="GET",
                                           root_path=MOUNT,
                                           query_string=urlencode({"path": url_path}).encode()))
        assert flag.status == 200
        assert flag.json()["outage_policy"] == _judged(reply.status or 0, reply.body), url_path
