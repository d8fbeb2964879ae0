"""A Flask site whose refusal page is its log-in page again (``reject=``), as gunicorn runs it in
test_reject_servers.py. Configuration from ``FAILOPEN_*``; ``/login`` is protected."""

from __future__ import annotations

import os
from typing import Any

from _refusal_kit import LOGIN, MESSAGES
from failopen.integrations.wsgi import FailOpenMiddleware
from flask import Flask, make_response, render_template_string, request

from failopen import Config
from failopen.engine.guard import Decision

app = Flask(__name__)


@app.post("/login")
def login() -> Any:
    return {"ok": True, "outcome": request.environ["failopen.decision"].outcome}


@app.get("/health")
def health() -> str:
    return "ok"


def refused(environ: dict[str, Any], decision: Decision) -> Any:
    """The log-in page again, rendered by Flask, with a message and the name typed."""
    with app.request_context(environ):
        page = render_template_string(LOGIN, message=MESSAGES[decision.status_code],
                                      username=request.form.get("username", ""))
        return make_response(page, decision.status_code)


config = Config.from_env({"FAILOPEN_PROTECTED_PATHS": "/login", **os.environ})
app.wsgi_app = FailOpenMiddleware(app.wsgi_app, config=config,  # type: ignore[method-assign]
                                  reject=refused)
