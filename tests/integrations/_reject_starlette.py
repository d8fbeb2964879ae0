"""A Starlette site whose refusal page is its log-in page again (``reject=``), as uvicorn runs it
in test_reject_servers.py. Configuration from ``FAILOPEN_*``; ``/login`` is protected."""

from __future__ import annotations

import os
from typing import Any
from urllib.parse import parse_qs

import jinja2
from _refusal_kit import LOGIN, MESSAGES
from failopen.integrations.asgi import FailOpenMiddleware
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route
from starlette.templating import Jinja2Templates

from failopen import Config
from failopen.engine.guard import Decision

templates = Jinja2Templates(env=jinja2.Environment(loader=jinja2.DictLoader({"login.html": LOGIN}),
                                                   autoescape=True))


async def admitted(request: Request) -> Response:
    return JSONResponse({"ok": True, "outcome": request.state.failopen.outcome})


async def health(request: Request) -> Response:
    return PlainTextResponse("ok")


def refused(scope: Any, decision: Decision) -> Any:
    """The log-in page again, with a message and the name the person typed."""
    async def page(scope: Any, receive: Any, send: Any) -> None:
        request = Request(scope, receive)
        form = parse_qs((await request.body()).decode())  # request.form() needs python-multipart
        response = templates.TemplateResponse(
            request, "login.html", {"message": MESSAGES[decision.status_code],
                                    "username": form.get("username", [""])[0]},
            status_code=decision.status_code)
        await response(scope, receive, send)
    return page


config = Config.from_env({"FAILOPEN_PROTECTED_PATHS": "/login", **os.environ})
app = FailOpenMiddleware(
    Starlette(routes=[Route("/login", admitted, methods=["POST"]), Route("/health", health)]),
    config=config, reject=refused)
