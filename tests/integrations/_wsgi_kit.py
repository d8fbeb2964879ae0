"""Helpers shared by the WSGI middleware tests: the apps behind it, and a whole stack.

``flask_app()`` is the Flask app most tests put behind the middleware; ``Recorder`` a raw WSGI
app under ``/raw`` keeping every environ it gets; ``WsgiStack`` the fakes, the runtime, the
middleware and a werkzeug test ``Client``. The fixture building stacks (``make_wsgi``) is in
conftest.py.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from failopen.integrations.wsgi import FailOpenMiddleware
from flask import Flask, jsonify, request
from werkzeug.test import Client, TestResponse

from failopen.runtime import FailOpen
from failopen.testing import FakeStatusPage, FakeVerifyAPI

PROTECTED = ("/login", "/raw", "/boom")
ADMIN_TOKEN = "adm-" + "k" * 40
CLIENT_IP = "203.0.113.9"


def sha256(data: bytes) -> str:
    """Hex digest, to compare the body the app read with the one sent."""
    return hashlib.sha256(data).hexdigest()


def flask_app() -> Flask:
    """The app behind the middleware in most tests (``/login`` and ``/boom`` are protected)."""
    app = Flask("wsgi_kit")

    @app.post("/login")
    def login() -> Any:
        decision = request.environ["failopen.decision"]
        body = request.get_data()  # cached: form, files and JSON parse from the same bytes
        return jsonify(ok=True, decision=decision.to_dict(), bypassed=decision.bypassed,
                       body_sha256=sha256(body), body_len=len(body),
                       form=request.form.to_dict(),
                       files={k: sha256(f.read()) for k, f in request.files.items()},
                       json=request.get_json(silent=True))

    @app.get("/health")
    def health() -> str:
        return "ok"

    @app.post("/boom")
    def boom() -> str:
        raise RuntimeError("the app's own bug")

    return app


@dataclass
class Recorder:
    """A raw WSGI app: keeps every environ (and the input stream it got), answers the body."""

    calls: list[dict[str, Any]] = field(default_factory=list)
    inputs: list[Any] = field(default_factory=list)

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
        self.calls.append(environ)
        self.inputs.append(environ.get("wsgi.input"))
        length = int(environ.get("CONTENT_LENGTH") or 0)
        body = environ["wsgi.input"].read(length) if length else b""
        start_response("200 OK", [("Content-Type", "application/octet-stream")])
        return [body]


@dataclass
class WsgiStack:
    """One middleware under test and everything around it."""

    page: FakeStatusPage
    verify: FakeVerifyAPI
    runtime: FailOpen
    app: FailOpenMiddleware
    recorder: Recorder
    client: Client

    def post(self, path: str = "/login", token: str | None = None, **kwargs: Any
             ) -> TestResponse:
        """POST with the token header (when given), JSON preferred unless Accept is set."""
        headers = dict(kwargs.pop("headers", {}))
        headers.setdefault("Accept", "application/json")
        if token is not None:
            headers["X-Enforcement-Token"] = token
        return self.client.post(path, headers=headers, **kwargs)


class Stream:
    """A wsgi.input that counts what was read from it; ``fail`` raises OSError on read."""

    def __init__(self, data: bytes, *, fail: bool = False) -> None:
        self.data, self.at, self.fail = data, 0, fail

    def read(self, size: int = -1) -> bytes:
        if self.fail:
            raise OSError("connection reset")
        end = len(self.data) if size < 0 else min(len(self.data), self.at + size)
        chunk, self.at = self.data[self.at:end], end
        return chunk


def call(app: Any, environ: dict[str, Any]) -> tuple[str, dict[str, str], bytes]:
    """Call a WSGI app directly: (status, headers, body)."""
    seen: dict[str, Any] = {}

    def start_response(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
        seen["status"], seen["headers"] = status, dict(headers)
        return lambda data: None

    body = b"".join(app(environ, start_response))
    return seen["status"], seen["headers"], body


def environ(path: str = "/raw", *, method: str = "POST", body: bytes = b"",
            **extra: Any) -> dict[str, Any]:
    """A minimal PEP 3333 environ, as a server builds it."""
    base: dict[str, Any] = {
        "REQUEST_METHOD": method, "SCRIPT_NAME": "", "PATH_INFO": path, "QUERY_STRING": "",
        "SERVER_NAME": "testserver", "SERVER_PORT": "80", "SERVER_PROTOCOL": "HTTP/1.1",
        "REMOTE_ADDR": CLIENT_IP, "wsgi.version": (1, 0), "wsgi.url_scheme": "http",
        "wsgi.input": Stream(body), "wsgi.errors": None, "wsgi.multithread": False,
        "wsgi.multiprocess": True, "wsgi.run_once": False, "HTTP_ACCEPT": "application/json",
    }
    base.update(extra)
    return base
