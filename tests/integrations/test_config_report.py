"""No silent misconfiguration in the ASGI and WSGI middlewares (issue 18, items 7 and 8).

As each middleware is built: a WARNING per ``FAILOPEN_*`` variable failopen does not read (with
the closest known name, once per process), one INFO line saying what it protects with which
evidence, store and mode (no secret in it), and a WARNING when it protects nothing. Nothing of it
per request. Then the newcomer's case under a real uvicorn: ``FAILOPEN_PROTECTED_PATH=/signup``.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from failopen.integrations.asgi import FailOpenMiddleware as AsgiMiddleware
from failopen.integrations.wsgi import FailOpenMiddleware as WsgiMiddleware
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Route
from werkzeug.test import Client

from failopen import Config
from failopen.runtime import FailOpen
from failopen.testing import FakeStatusPage, FakeVerifyAPI, free_port

PASSWORD = "Redis-Pa55-in-the-url"


def _signup_app() -> Starlette:
    async def signup(request: Any) -> PlainTextResponse:
        return PlainTextResponse("account created")

    return Starlette(routes=[Route("/signup", signup, methods=["POST"])])


def _wsgi_app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [b"account created"]


def _build(kind: str, config: Config | None = None) -> FailOpen:
    if kind == "asgi":
        return AsgiMiddleware(_signup_app(), config=config).runtime
    return WsgiMiddleware(_wsgi_app, config=config).runtime


def _lines(caplog: pytest.LogCaptureFixture, level: int) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.levelno == level and r.name.startswith("failopen")]


@pytest.mark.parametrize("kind", ["asgi", "wsgi"])
def test_a_misspelled_variable_is_named_once_per_process(
    kind: str, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    caplog.set_level(logging.INFO)
    monkeypatch.setenv("FAILOPEN_PROTECTED_PATH", "/signup")
    monkeypatch.setenv("FAILOPEN_RAI_CLIENT_SECRET", "read by failopen rai: known")
    runtimes = [_build(kind), _build(kind)]  # a second middleware in the same process
    try:
        warnings = _lines(caplog, logging.WARNING)
        named = [w for w in warnings if "FAILOPEN_PROTECTED_PATH " in w]
        assert named == ["failopen: the environment variable FAILOPEN_PROTECTED_PATH is "
                         "ignored; did you mean FAILOPEN_PROTECTED_PATHS?"]
        assert not any("RAI" in w for w in warnings)
        # And what it means: nothing is protected, said by each runtime built.
        nothing = [w for w in warnings if "protects nothing" in w]
        assert len(nothing) == 2 and "FAILOPEN_PROTECTED_PATHS" in nothing[0]
    finally:
        for runtime in runtimes:
            runtime.stop()


@pytest.mark.parametrize("kind", ["asgi", "wsgi"])
def test_a_site_protected_by_form_fields_is_not_told_it_protects_nothing(
    kind: str, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Issue 31, item 12: FAILOPEN_PROTECTED_BY_FIELDS says the fields protect, on purpose.
    caplog.set_level(logging.INFO)
    monkeypatch.setenv("FAILOPEN_PROTECTED_BY_FIELDS", "true")
    runtime = _build(kind)
    try:
        assert not any("protects nothing" in w for w in _lines(caplog, logging.WARNING))
        assert any("protects form fields only (FAILOPEN_PROTECTED_BY_FIELDS)" in line
                   for line in _lines(caplog, logging.INFO))
    finally:
        runtime.stop()


def test_nothing_more_is_logged_per_request(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAILOPEN_PROTECTED_PATH", "/signup")
    app = WsgiMiddleware(_wsgi_app)
    try:
        caplog.clear()
        caplog.set_level(logging.INFO)
        client = Client(app)
        for _ in range(5):
            assert client.post("/signup").status_code == 200
        assert _lines(caplog, logging.WARNING) == [] and _lines(caplog, logging.INFO) == []
    finally:
        app.runtime.stop()


@pytest.mark.parametrize("kind", ["asgi", "wsgi"])
def test_the_start_up_line_says_what_is_protected_and_how(
    kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    verify = FakeVerifyAPI()
    config = Config(
        status_url="https://status.vendor.example", global_component="gc-1",
        verify_url="https://verify.vendor.example" + verify.path,
        private_key=verify.private_key, admin_token="adm-" + "z" * 30,
        protected_paths=("/signup", "/login"), protected_methods=frozenset({"POST", "PUT"}),
        store=f"redis://:{PASSWORD}@127.0.0.1:{free_port()}/0", mode="shadow")
    runtime = _build(kind, config)
    try:
        [line] = [m for m in _lines(caplog, logging.INFO) if m.startswith("failopen (")]
        assert line == (
            f"failopen ({kind.upper()}) protects POST, PUT on /signup, /login; evidence: status "
            "page https://status.vendor.example (global component: gc-1); store: "
            f"redis://:***@127.0.0.1:{config.store.rsplit(':', 1)[1]} (prefix 'failopen:', "
            "every process of the fleet); mode: shadow")
        [record] = [r for r in caplog.records if getattr(r, "event", "") == "failopen.started"]
        assert record.protects == "POST, PUT on /signup, /login"  # type: ignore[attr-defined]
        for secret in (PASSWORD, verify.private_key, "z" * 30):
            assert secret not in caplog.text
        assert "protects nothing" not in caplog.text
    finally:
        runtime.stop()


@pytest.mark.parametrize("kind", ["asgi", "wsgi"])
def test_protected_views_are_not_read_outside_django(
    kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    runtime = _build(kind, Config(protected_views=("accounts:signup",), verify_url=(
        "https://verify.vendor.example/v"), private_key="k"))
    try:
        warnings = _lines(caplog, logging.WARNING)
        assert any("FAILOPEN_PROTECTED_VIEWS (accounts:signup) is read by the Django adapter "
                   "only" in w for w in warnings), warnings
        assert any("protects nothing" in w for w in warnings)
    finally:
        runtime.stop()


# --- a real server: the newcomer's FAILOPEN_PROTECTED_PATH=/signup ------------------------------

APP = textwrap.dedent('''
    from starlette.applications import Starlette
    from starlette.responses import PlainTextResponse
    from starlette.routing import Route
    from failopen.integrations.asgi import FailOpenMiddleware

    async def signup(request):
        return PlainTextResponse("account created")

    app = FailOpenMiddleware(Starlette(routes=[Route("/signup", signup, methods=["POST"])]))
''')


@pytest.mark.slow
def test_uvicorn_says_once_that_the_variable_is_ignored_and_nothing_is_protected(
    tmp_path: Path, fake_status_page: FakeStatusPage, fake_verify_api: FakeVerifyAPI
) -> None:
    (tmp_path / "newcomer_app.py").write_text(APP)
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAILOPEN_")}
    env.update({"FAILOPEN_STATUS_URL": fake_status_page.url,
                "FAILOPEN_VERIFY_URL": fake_verify_api.verify_url,
                "FAILOPEN_PRIVATE_KEY": fake_verify_api.private_key,
                "FAILOPEN_PROTECTED_PATH": "/signup"})
    port = free_port()
    log = tmp_path / "server.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "uvicorn", "newcomer_app:app", "--app-dir", str(tmp_path),
             "--host", "127.0.0.1", "--port", str(port)],
            env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 30
        while True:
            assert process.poll() is None, log.read_text()
            try:
                httpx.get(f"http://127.0.0.1:{port}/failopen/flag", timeout=1)
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline, log.read_text()
                time.sleep(0.05)
        for _ in range(3):  # the mistake itself: sign-up answers without a token
            answer = httpx.post(f"http://127.0.0.1:{port}/signup", timeout=5)
            assert answer.status_code == 200 and answer.text == "account created"
    finally:
        process.terminate()
        process.wait(10)
    text = log.read_text()
    assert text.count("FAILOPEN_PROTECTED_PATH is ignored; did you mean "
                      "FAILOPEN_PROTECTED_PATHS?") == 1, text
    assert text.count("failopen (ASGI) protects nothing") == 1, text
    assert fake_verify_api.private_key not in text
