"""A Starlette log-in page guarded by failopen: ``uvicorn examples.asgi_app:app``.

Configuration comes from ``FAILOPEN_*`` variables (``FAILOPEN_PROTECTED_PATHS`` defaults to
``/login`` here). Against the test kit's fakes::

    failopen emulate status &     # http://127.0.0.1:8401
    failopen emulate verify &     # http://127.0.0.1:8402
    FAILOPEN_STATUS_URL=http://127.0.0.1:8401 \\
    FAILOPEN_VERIFY_URL=http://127.0.0.1:8402/api/v4/verify/ \\
    FAILOPEN_PRIVATE_KEY=test-private-key FAILOPEN_PUBLIC_KEY=test-public-key \\
        uvicorn examples.asgi_app:app

``GET /`` is the log-in page with the browser snippet; ``POST /login`` is protected and answers
``{"ok": true, "decision": {...}, "bypassed": bool}`` when admitted; ``GET /health`` is not.
"""

from __future__ import annotations

from html import escape

from failopen.integrations.asgi import FailOpenMiddleware
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, PlainTextResponse
from starlette.routing import Route

from failopen import Config
from failopen.web import snippet_attributes

config = Config.from_env()
if not config.protected_paths:
    config = config.replace(protected_paths=("/login",))

PREFIX = "/failopen"


async def login_page(request: Request) -> HTMLResponse:
    """The log-in form, with the snippet that asks the flag endpoint whether to enforce."""
    attributes = snippet_attributes(config, flag_url=f"{PREFIX}/flag")
    tag_attributes = " ".join(f'{name}="{escape(value)}"' for name, value in attributes.items())
    field = escape(config.token_field)
    return HTMLResponse(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>Log in</title>"
        f'<script src="{PREFIX}/failopen.js" {tag_attributes} defer></script></head><body>'
        '<form method="post" action="/login">'
        '<input name="username" autocomplete="username">'
        '<input name="password" type="password" autocomplete="current-password">'
        f'<input type="hidden" name="{field}">'
        "<button>Log in</button></form></body></html>"
    )


async def login(request: Request) -> JSONResponse:
    """Reached only when failopen admitted the request; the decision says how."""
    decision = request.state.failopen
    return JSONResponse({"ok": True, "decision": decision.to_dict(),
                         "bypassed": decision.bypassed})


async def health(request: Request) -> PlainTextResponse:
    """Not protected: failopen passes it straight through."""
    return PlainTextResponse("ok")


routes = [
    Route("/", login_page),
    Route("/login", login, methods=["POST"]),
    Route("/health", health),
]
app = FailOpenMiddleware(Starlette(routes=routes), config=config, prefix=PREFIX)
