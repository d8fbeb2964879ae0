"""The Starlette example's log-in flow with FastAPI: ``uvicorn --app-dir examples fastapi_app:app``.

Needs ``pip install fastapi`` (not in failopen's extras). Configuration comes from ``FAILOPEN_*``
variables as in ``examples/asgi_app.py``; ``FAILOPEN_PROTECTED_PATHS`` defaults to ``/login``.
The decision reaches the endpoint through a dependency reading ``request.state.failopen``.

Against another vendor's fakes (Turnstile here; hCaptcha, reCAPTCHA, reCAPTCHA Enterprise and
Friendly Captcha alike, each ``emulate`` line printing the settings it needs)::

    failopen emulate status --shape cloudflare &   # Turnstile's status page (hCaptcha: hcaptcha)
    failopen emulate verify --vendor turnstile &   # its siteverify
    failopen emulate vendor --vendor turnstile &   # its browser script, /turnstile/v0/api.js
    FAILOPEN_VENDOR=turnstile FAILOPEN_STATUS_URL=http://127.0.0.1:8401 \\
    FAILOPEN_VERIFY_URL=http://127.0.0.1:8402/turnstile/v0/siteverify \\
    FAILOPEN_VENDOR_URL=http://127.0.0.1:8404 \\
    FAILOPEN_PRIVATE_KEY=0x4AAAAAAAfake-turnstile-secret \\
    FAILOPEN_PUBLIC_KEY=0x4AAAAAAAfake-turnstile-sitekey \\
        .venv/bin/uvicorn --app-dir examples fastapi_app:app

reCAPTCHA, Enterprise and Friendly Captcha publish no status page a machine can read: no
``emulate status``, and ``FAILOPEN_EVIDENCE=probe`` instead of ``FAILOPEN_STATUS_URL``. With
another vendor the form holds no token input: the snippet, told which form (``form=``), renders
the vendor's widget in it, and the widget's token goes in the vendor's field.
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
# The spec's vendor: the form holds the input the snippet fills. Another vendor (FAILOPEN_VENDOR):
# its widget brings its own field, so the form holds nothing of the vendor's; the snippet, told
# which form, renders the widget in it.
WIDGET_POSTS_FIELD = config.provider.widget_posts_field
TOKEN_INPUT = "" if WIDGET_POSTS_FIELD else (
    f'<input type="hidden" name="{escape(config.token_field)}">')
api = FastAPI()


def failopen_decision(request: Request) -> Decision:
    """The middleware's decision; it refused the request already unless it allowed it."""
    decision: Decision = request.state.failopen
    return decision


@api.get("/", response_class=HTMLResponse)
async def login_page() -> str:
    """The log-in form, with the snippet that asks the flag endpoint whether to enforce."""
    attributes = snippet_attributes(config, flag_url=f"{PREFIX}/flag",
                                    form="form" if WIDGET_POSTS_FIELD else None)
    tag_attributes = " ".join(f'{name}="{escape(value)}"' for name, value in attributes.items())
    return (
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>Log in</title>"
        f'<script src="{PREFIX}/failopen.js" {tag_attributes} defer></script></head><body>'
        '<form method="post" action="/login"><input name="username">'
        f'<input name="password" type="password">{TOKEN_INPUT}'
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
