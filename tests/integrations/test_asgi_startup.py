"""What the ASGI middleware tells operators as the server starts (Django tells them in checks,
which do not run under uvicorn or gunicorn).

Without a status URL failopen can never see an outage: the server starts (enforcement holds, and
an operator override still works) with an ERROR line saying what to set.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import httpx
import pytest
from _asgi_kit import API, LifespanServer, Recorder, drive, http_scope
from failopen.integrations.asgi import FailOpenMiddleware
from starlette.applications import Starlette

from failopen import Config
from failopen.testing import FakeVerifyAPI, free_port


def _errors(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.levelno >= logging.ERROR and r.name.startswith("failopen")]


@pytest.mark.anyio
async def test_no_status_url_is_reported_once_as_the_server_starts(
    caplog: pytest.LogCaptureFixture,
) -> None:
    verify = FakeVerifyAPI()
    config = Config(verify_url="https://verify.test" + verify.path,
                    private_key=verify.private_key, protected_paths=("/raw",))
    with caplog.at_level(logging.WARNING, logger="failopen"):
        app = FailOpenMiddleware(Starlette(), config=config)
        server = LifespanServer(app)
        await server.startup()
        # Not refused: the app started, and its protected routes still enforce.
        assert server.sent == [{"type": "lifespan.startup.complete"}]
        reply = await drive(app, http_scope("/raw", headers=API),
                            [{"type": "http.request", "body": b""}])
        assert (reply.status, reply.json()["error"]["code"]) == (403, "missing_token")
        await server.shutdown()
    errors = _errors(caplog)
    assert len(errors) == 1, errors
    assert "FAILOPEN_STATUS_URL" in errors[0] and "never fails open" in errors[0]


def test_a_status_url_means_no_report(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="failopen"):
        FailOpenMiddleware(Recorder(), config=Config(status_url="https://status.test"))
    assert _errors(caplog) == []


APP = textwrap.dedent('''
    from starlette.applications import Starlette
    from failopen.integrations.asgi import FailOpenMiddleware

    app = FailOpenMiddleware(Starlette())
''')


@pytest.mark.slow
def test_uvicorn_prints_the_report_and_serves(tmp_path: Path) -> None:
    (tmp_path / "no_status_app.py").write_text(APP)
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAILOPEN_")}
    port = free_port()
    log = tmp_path / "server.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "uvicorn", "no_status_app:app", "--app-dir", str(tmp_path),
             "--host", "127.0.0.1", "--port", str(port), "--lifespan", "on"],
            env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 30
        while True:
            assert process.poll() is None, log.read_text()
            try:
                flag = httpx.get(f"http://127.0.0.1:{port}/failopen/flag", timeout=1)
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline, log.read_text()
                time.sleep(0.05)
        assert flag.status_code == 200 and flag.json()["enforce"] is True
    finally:
        process.terminate()
        process.wait(10)
    text = log.read_text()
    assert text.count("FAILOPEN_STATUS_URL") == 1, text
    assert "Application startup complete" in text
