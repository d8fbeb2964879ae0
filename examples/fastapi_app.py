"""The Starlette example's log-in flow with FastAPI: ``uvicorn --app-dir examples fastapi_app:app``.

Needs ``pip install fastapi`` (not in failopen's extras). Configuration comes from ``FAILOPEN_*``
variables as in ``examples/asgi_app.py``; ``FAILOPEN_PROTECTED_PATHS`` defaults to ``/login``.
The decision reaches the endpoint through a dependency reading ``request.state.failopen``.
"""

from __future__ import annotations

from html import escape
from typing import Annotated, Any

from failopen.integrations.asgi import FailOpenMiddleware
from fastapi import Depends, FastAPI, Request
from fastapi.responses import HTMLResponse

from failopen import Config, Decision
from failopen.web import snippet_attributes

config = Config.from_env()
if not config.protected_paths:
    config = config.replace(protected_paths=("/login",))

PREFIX = "/failopen"
api = FastAPI()


def failopen_decision(request: Request) -> Decision:
    """The middleware's decision; it refused the request already unless it allowed it."""
    decision: Decision = request.state.failopen
    return decision


@api.get("/", response_class=HTMLResponse)
async def login_page() -> str:
    """The log-in form, with the snippet that asks the flag endpoint whether to enforce."""
    attributes = snippet_attributes(config, flag_url=f"{PREFIX}/flag")
    tag_attributes = " ".join(f'{name}="{escape(value)}"' for name, value in attributes.items())
    return (
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>Log in</title>"
        f'<script src="{PREFIX}/failopen.js" {tag_attributes} defer></script></head><body>'
        '<form method="post" action="/login"><input name="username">'
        '<input name="password" type="password">'
        f'<input type="hidden" name="{escape(config.token_field)}">'
        "<button>Log in</button></form></body></html>"
    )


@api.post("/login")
async def login(decision: Annotated[Decision, Depends(failopen_decision)]) -> dict[str, Any]:
    """Reached only when failopen admitted the request."""
    return {"ok": True, "decision": decision.to_dict(), "bypassed": decision.bypassed}


@api.get("/health")
async def health() -> str:
    """Not protected: failopen passes it straight through."""
    return "ok"


app = FailOpenMiddleware(api, config=config, prefix=PREFIX)
