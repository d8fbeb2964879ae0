"""The flag endpoint's ``?path=`` under Django's script prefix, and percent-encoded (issue 31, A2).

The snippet asks with its form's action as the browser reads it (``URL.pathname``): the script
prefix in front (FORCE_SCRIPT_NAME, or the server's SCRIPT_NAME / root_path) and non-ASCII
percent-encoded (``/app/inscri%C3%A7%C3%A3o/``). The middleware judges the POST by
``request.path_info``: decoded, the prefix gone. Before the fix the flag answered
``outage_policy: null`` for both, the snippet read "open", and every fallback sign-up there was
refused with ``fallback_required``.
"""

from __future__ import annotations

import asyncio
import io
import json
import random
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import quote, unquote, unquote_to_bytes, urlencode

import pytest
from django.core.handlers.asgi import ASGIHandler
from django.core.handlers.wsgi import WSGIHandler
from django.test import override_settings
from django.urls import get_script_prefix, set_script_prefix

from failopen.runtime import FailOpen
from failopen.testing import FakeStatusPage, solve_challenge

JSON = {"headers": {"accept": "application/json"}}
INSCRICAO = quote("/inscrição/")  # /inscri%C3%A7%C3%A3o/, as URL.pathname has it
POLICIES = {"PROTECTED_PATHS": ["/login/", "/inscrição/"],
            "PROTECTED_VIEWS": ["signup", "cadastro"],
            "OUTAGE_POLICY_ROUTES": {"signup": "fallback", "/inscrição/": "fallback",
                                     "cadastro": "fallback"},
            "FALLBACK_SECRET": "s" * 40, "FALLBACK_COST": 2000}
# What the snippet asks about (under the prefix "/app"), and the policy the middleware gives it.
ASKED: list[tuple[str, str | None]] = [
    ("/app/login/", "open"), ("/app/signup/", "fallback"), ("/app/reset/", "closed"),
    ("/app" + INSCRICAO, "fallback"), ("/app/cadastro" + INSCRICAO, "fallback"),
    ("/app/elsewhere/", None), ("/app/", None), ("/app", None),
    ("/app" + INSCRICAO + "%FF", "fallback"),  # a prefix of it is listed: still protected
    ("/app/cadastro" + INSCRICAO + "%FF", None),  # routes nowhere, as the resolver says
    ("/app/%00", None), ("/app/%zz/..//login/", "open"),  # "//", ".." resolved: /login/
]
LONG = "/app/login/" + "a" * 20_000  # under a protected prefix: still its policy


@pytest.fixture(autouse=True)
def _urls() -> Iterator[None]:
    # Django's real handlers set the script prefix ("/app/") for the thread and leave it: later
    # tests reverse() failopen's URLs from "/".
    prefix = get_script_prefix()
    try:
        with override_settings(ROOT_URLCONF="django_test_urls_outage_mounted"):
            yield
    finally:
        set_script_prefix(prefix)


def _outage(runtime: FailOpen | None, page: FakeStatusPage) -> None:
    assert runtime is not None
    page.set_global("major_outage")
    runtime.poll_now()
    assert not runtime.state.enforce


def code(response: Any) -> str:
    return str(response.json()["error"]["code"])


def test_the_flag_resolves_a_percent_encoded_path(
        use_failopen: Callable[..., FailOpen | None], make_client: Callable[..., Any],
        client_kind: str) -> None:
    use_failopen(**POLICIES)
    client = make_client()
    for asked in (INSCRICAO, "/cadastro" + INSCRICAO):
        answer = client.get("/failopen/flag", {"path": asked})
        assert answer.json()["outage_policy"] == "fallback", asked


@pytest.mark.parametrize(("asked", "policy"), [
    *ASKED, pytest.param(LONG, "open", id="/app/login/aaa...(20,000)")])
def test_the_flag_resolves_a_path_under_force_script_name(
        use_failopen: Callable[..., FailOpen | None], make_client: Callable[..., Any],
        client_kind: str, asked: str, policy: str | None) -> None:
    use_failopen(**POLICIES)
    with override_settings(FORCE_SCRIPT_NAME="/app"):
        # The proxy in front strips "/app": Django sees /failopen/flag, and builds /app/...
        answer = make_client().get("/failopen/flag", {"path": asked})
    assert answer.status_code == 200
    assert answer.json()["outage_policy"] == policy, asked


def test_the_flag_resolves_a_path_under_the_server_s_mount(
        use_failopen: Callable[..., FailOpen | None], make_client: Callable[..., Any],
        client_kind: str) -> None:
    use_failopen(**POLICIES)
    # gunicorn's SCRIPT_NAME; an ASGI server's root_path (in front of the path it gives).
    client, flag = (make_client(SCRIPT_NAME="/app"), "/failopen/flag") if client_kind == "sync" \
        else (make_client(root_path="/app"), "/app/failopen/flag")
    for asked, policy in (("/app/signup/", "fallback"), ("/app" + INSCRICAO, "fallback"),
                          ("/app/reset/", "closed"), ("/app/elsewhere/", None)):
        assert client.get(flag, {"path": asked}).json()["outage_policy"] == policy, asked


def test_a_mounted_non_ascii_fallback_sign_up_goes_through(
        use_failopen: Callable[..., FailOpen | None], fake_status_page: FakeStatusPage,
        make_client: Callable[..., Any]) -> None:
    # Django's test Client only: its AsyncClient puts a non-ASCII path into the ASGI scope as
    # latin-1, which no server does (the real ASGIHandler is driven below).
    _outage(use_failopen(**POLICIES), fake_status_page)
    client = make_client()
    with override_settings(FORCE_SCRIPT_NAME="/app"):
        flag = client.get("/failopen/flag", {"path": "/app" + INSCRICAO}).json()
        # What the snippet reads: enforcement off, this route wants the fallback challenge.
        assert (flag["enforce"], flag["outage_policy"], flag["fallback"]) == (
            False, "fallback", {"vendor": "altcha"})
        solved = solve_challenge(client.get("/failopen/challenge").json())
        admitted = client.post(INSCRICAO, {"altcha": solved}, **JSON)
        assert admitted.status_code == 200, admitted.content
        assert admitted.json()["failopen"]["outcome"] == "bypassed_fallback"
        refused = client.post(INSCRICAO, {"username": "eve"}, **JSON)
        assert (refused.status_code, code(refused)) == (403, "fallback_required")


# --- the flag names what the middleware does, under Django's real handlers --------------------

OURS = ["failopen.integrations.django.middleware.FailOpenMiddleware"]
# Every protected route refuses during the outage (closed by default, the sign-ups fallback):
# what the guard did shows in the answer, whichever route a path counts under.
STRICT = {**POLICIES, "OUTAGE_POLICY": "closed", "OUTAGE_RATE": "none"}
PIECES = ["/", "login", "signup", "reset", "cadastro", "inscri%C3%A7%C3%A3o", "x", "..", "//",
          "%2F", "%0A", "%00", "%FF", "%C3", "%25", "%2569", "%5C", ";", "%3F", "%20", "%",
          "%zz", "%E2%80%A8"]


def _judged(status: int, body: bytes) -> str | None:
    """The policy the middleware applied to a token-less POST during an outage."""
    if (status, body.count(b'"fallback_required"')) == (403, 1):
        return "fallback"
    return "closed" if (status, body.count(b'"outage_closed"')) == (503, 1) else None


def _wsgi(handler: WSGIHandler, method: str, path_info: str, query: str = "") -> tuple[int, bytes]:
    environ = {"REQUEST_METHOD": method, "PATH_INFO": path_info, "QUERY_STRING": query,
               "SERVER_NAME": "testserver", "SERVER_PORT": "80", "wsgi.url_scheme": "http",
               "wsgi.input": io.BytesIO(b""), "CONTENT_LENGTH": "0",
               "REMOTE_ADDR": "127.0.0.1", "HTTP_ACCEPT": "application/json"}
    statuses: list[str] = []
    response = handler(environ, lambda status, headers: statuses.append(status))
    body = b"".join(response)
    response.close()
    return int(statuses[0].split()[0]), body


async def _asgi(handler: ASGIHandler, method: str, path: str, query: str = "") -> tuple[int, bytes]:
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
             "method": method, "path": path, "raw_path": quote(path).encode(),
             "query_string": query.encode(), "root_path": "/app", "scheme": "http",
             "headers": [(b"host", b"testserver"), (b"accept", b"application/json")],
             "client": ("127.0.0.1", 5000), "server": ("testserver", 80)}
    sent: list[dict[str, Any]] = []
    messages = [{"type": "http.request", "body": b"", "more_body": False}]

    async def receive() -> dict[str, Any]:
        if messages:
            return messages.pop()
        await asyncio.Event().wait()  # the client stays connected until the handler is done
        raise AssertionError("unreachable")

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await handler(scope, receive, send)
    status = next(m["status"] for m in sent if m["type"] == "http.response.start")
    return int(status), b"".join(m.get("body", b"") for m in sent
                                 if m["type"] == "http.response.body")


def _url_paths() -> list[str]:
    chosen = random.Random(31)
    return [asked for asked, _ in ASKED] + [LONG] + [
        "/app/" + "".join(chosen.choices(PIECES, k=chosen.randrange(7))) for _ in range(200)]


def test_the_flag_and_the_wsgi_handler_agree_under_force_script_name(
        use_failopen: Callable[..., FailOpen | None], fake_status_page: FakeStatusPage) -> None:
    _outage(use_failopen(**STRICT), fake_status_page)
    seen = set()
    with override_settings(MIDDLEWARE=OURS, FORCE_SCRIPT_NAME="/app"):
        handler = WSGIHandler()
        for url_path in _url_paths():
            # The proxy in front strips "/app"; the server decodes the rest to bytes, as latin-1.
            path_info = unquote_to_bytes(url_path.removeprefix("/app")).decode("latin-1")
            judged = _judged(*_wsgi(handler, "POST", path_info))
            status, flag = _wsgi(handler, "GET", "/failopen/flag",
                                 urlencode({"path": url_path}))
            assert status == 200
            assert json.loads(flag)["outage_policy"] == judged, url_path
            seen.add(judged)
    assert seen == {"fallback", "closed", None}  # every answer was met


def test_the_flag_and_the_asgi_handler_agree_under_root_path(
        use_failopen: Callable[..., FailOpen | None], fake_status_page: FakeStatusPage) -> None:
    from failopen.integrations.django import conf

    _outage(use_failopen(**STRICT), fake_status_page)

    async def scenario() -> set[str | None]:
        handler, seen = ASGIHandler(), set()
        try:
            for url_path in _url_paths():
                # As uvicorn builds it: decoded once, root_path kept in front.
                judged = _judged(*await _asgi(handler, "POST", unquote(url_path)))
                status, flag = await _asgi(handler, "GET", "/app/failopen/flag",
                                           urlencode({"path": url_path}))
                assert status == 200
                assert json.loads(flag)["outage_policy"] == judged, url_path
                seen.add(judged)
        finally:
            await conf.runtime().aclose()
        return seen

    with override_settings(MIDDLEWARE=OURS):
        assert asyncio.run(scenario()) == {"fallback", "closed", None}
