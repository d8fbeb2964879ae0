"""The web demo's ASGI application: a Starlette site guarded by failopen's ASGI middleware.

    GET  /                 the demo page (page.html)
    GET  /form             the log-in form with the real snippet (the page shows it in a frame)
    POST /login            protected by failopen; reached only when admitted
    GET  /failopen/flag    the flag endpoint, failopen.js: served by the middleware
    GET  /demo/state       the fakes, the timelines (loopback only)
    POST /demo/scene       {"scene": "global"}: drive the fakes (loopback only, JSON only)
    POST /demo/override    {"verb": "off"|"on"|"auto"}: the operator's override (likewise)

The demo routes answer only a loopback client naming a loopback ``Host``, and their POSTs only
``application/json``: another site open in the same browser cannot drive them. failopen's own
override endpoint stays off (no admin token): the page's override calls the flag in-process.
Starlette is imported when the app is built, never when :mod:`failopen` is.
"""

from __future__ import annotations

import importlib
import json
import secrets
from html import escape
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from failopen.cli.demo_web._site import OVERRIDES, SCENES, DemoSite
from failopen.engine.guard import Decision
from failopen.testing.control import loopback_refusal
from failopen.web import snippet_attributes

__all__ = ["build_app"]

HERE = Path(__file__).resolve().parent
FORM_STYLE = (
    "body{font:14px system-ui,sans-serif;margin:0}"
    "form{padding:10px;border:3px solid #999;border-radius:6px}"
    "form[data-failopen-state=completed]{border-color:#16a34a}"
    "form[data-failopen-state=bypassed]{border-color:#ea580c}"
    "form[data-failopen-state=failed]{border-color:#dc2626}"
    "form::before{content:'security check: ' attr(data-failopen-state);display:block;"
    "font-weight:600;margin-bottom:6px}"
    "input{display:block;margin:4px 0;padding:4px;width:90%}"
    "button{margin-top:6px;padding:6px 18px;font-size:14px}"
    "[data-failopen-message]{color:#b91c1c;margin:6px 0 0}"
)

Scope = dict[str, Any]
Message = dict[str, Any]


class _DecisionRecorder:
    """Adds each ``POST /login`` decision to the site's timeline, as its answer starts.

    The ASGI middleware leaves the decision in ``scope["state"]["failopen"]`` for refusals and
    admissions alike; recording it before the answer leaves keeps the page's timeline in step.
    """

    def __init__(self, app: Any, site: DemoSite) -> None:
        self.app = app
        self.site = site

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["path"] != "/login":
            await self.app(scope, receive, send)
            return
        state = scope.get("state")
        if state is None:
            scope["state"] = state = {}
        recorded = False

        async def recording_send(message: Message) -> None:
            nonlocal recorded
            if message["type"] == "http.response.start" and not recorded:
                recorded = True
                decision = state.get("failopen")
                if isinstance(decision, Decision):
                    self.site.record_decision(decision)
            await send(message)

        await self.app(scope, receive, recording_send)


def _buttons(kind: str, choices: dict[str, tuple[str, Any]]) -> str:
    return "".join(f'<button type="button" data-{kind}="{escape(name)}">{escape(label)}</button>'
                   for name, (label, _) in choices.items())


def build_app(site: DemoSite) -> Any:
    """The demo's ASGI app over ``site`` (started): Starlette, failopen's middleware, recorder."""
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import HTMLResponse, JSONResponse, Response
    from starlette.routing import Route

    # Resolved at run time: failopen.integrations installs from the repository's integrations/.
    middleware: Any = importlib.import_module("failopen.integrations.asgi").FailOpenMiddleware

    runtime = site.runtime
    if runtime is None:
        raise RuntimeError("start the DemoSite before building its app")
    config = runtime.config
    page_template = (HERE / "page.html").read_text(encoding="utf-8").replace(
        "<!--scene-buttons-->", _buttons("scene", SCENES)).replace(
        "<!--override-buttons-->", _buttons("override", OVERRIDES))
    snippet_tag = " ".join(
        f'{name}="{escape(value)}"' for name, value in snippet_attributes(
            config, flag_url="/failopen/flag", ready_timeout_ms=3000).items())
    vendor = "{0.scheme}://{0.netloc}".format(urlsplit(config.vendor_url or ""))
    form_page = (
        '<!doctype html><html lang="en"><head><meta charset="utf-8"><title>Log in</title>'
        f'<style>{FORM_STYLE}</style>'
        f'<script src="/failopen/failopen.js" {snippet_tag} defer></script></head><body>'
        '<form method="post" action="/login">'
        '<input name="username" value="demo" autocomplete="username" aria-label="user name">'
        '<input name="password" type="password" value="demo-password" '
        'autocomplete="current-password" aria-label="password">'
        f'<input type="hidden" name="{escape(config.token_field)}">'
        "<button>Log in</button></form></body></html>"
    )
    no_store = {"Cache-Control": "no-store"}

    def refused(request: Request, *, post: bool) -> Response | None:
        client = request.client.host if request.client is not None else None
        reason = loopback_refusal(client, request.headers.get("host"))
        if reason is not None:
            return JSONResponse({"error": reason}, status_code=403, headers=no_store)
        media = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
        if post and media != "application/json":
            return JSONResponse({"error": "send Content-Type: application/json"},
                                status_code=415, headers=no_store)
        return None

    async def read_choice(request: Request, key: str, choices: dict[str, Any]) -> str | Response:
        refusal = refused(request, post=True)
        if refusal is not None:
            return refusal
        try:
            body = json.loads(await request.body())
        except ValueError:
            body = None
        choice = body.get(key) if isinstance(body, dict) else None
        if not isinstance(choice, str) or choice not in choices:
            return JSONResponse({"error": f'send {{"{key}": one of {", ".join(choices)}}}'},
                                status_code=400, headers=no_store)
        return choice

    async def index(request: Request) -> Response:
        refusal = refused(request, post=False)
        if refusal is not None:
            return refusal
        nonce = secrets.token_urlsafe(16)
        csp = (f"default-src 'self'; script-src 'nonce-{nonce}'; style-src 'unsafe-inline'; "
               "frame-ancestors 'none'; base-uri 'none'")
        return HTMLResponse(page_template.replace("{{nonce}}", nonce),
                            headers={"Content-Security-Policy": csp, **no_store})

    async def form(request: Request) -> Response:
        # The snippet needs no inline script and no eval: scripts from this site and the vendor.
        csp = f"script-src 'self' {vendor}; frame-ancestors 'self'"
        return HTMLResponse(form_page, headers={"Content-Security-Policy": csp, **no_store})

    async def login(request: Request) -> Response:
        decision: Decision = request.state.failopen
        return JSONResponse({"ok": True, "decision": decision.to_dict(),
                             "bypassed": decision.bypassed}, headers=no_store)

    async def state(request: Request) -> Response:
        refusal = refused(request, post=False)
        if refusal is not None:
            return refusal
        return JSONResponse(site.snapshot(), headers=no_store)

    async def scene(request: Request) -> Response:
        choice = await read_choice(request, "scene", SCENES)
        if isinstance(choice, Response):
            return choice
        site.play(choice)
        return JSONResponse({"scene": choice, **site.snapshot()}, headers=no_store)

    async def override(request: Request) -> Response:
        choice = await read_choice(request, "verb", OVERRIDES)
        if isinstance(choice, Response):
            return choice
        site.override(choice)
        return JSONResponse({"verb": choice, **site.snapshot()}, headers=no_store)

    app = Starlette(routes=[
        Route("/", index), Route("/form", form), Route("/login", login, methods=["POST"]),
        Route("/demo/state", state), Route("/demo/scene", scene, methods=["POST"]),
        Route("/demo/override", override, methods=["POST"]),
    ])
    return _DecisionRecorder(middleware(app, runtime=runtime), site)
