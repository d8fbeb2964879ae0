"""The web demo's ASGI application: a Starlette site guarded by failopen's ASGI middleware.

    GET  /                 the demo page (page.html)
    GET  /form/NAME        a form with the real snippet: login, signup, password-reset (the page
                           shows each in a frame)
    POST /login, /signup, /password-reset
                           protected by failopen, each with its outage policy; reached only
                           when admitted
    GET  /failopen/flag    the flag endpoint, /failopen/challenge, failopen.js and its solver
                           failopen-solver.js: served by the middleware
    GET  /demo/state       the fakes, the timelines (loopback only)
    POST /demo/scene       {"scene": "global"}: drive the fakes (loopback only, JSON only)
    POST /demo/override    {"verb": "off"|"on"|"auto"}: the operator's override (likewise)
    POST /demo/reset       {}: the vendor healthy, no override, empty timelines (likewise)

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

from failopen.cli.demo_web._site import OVERRIDES, DemoForm, DemoSite
from failopen.config import Config
from failopen.engine.guard import Decision
from failopen.fallback.settings import INSTALL as _INSTALL
from failopen.testing.control import loopback_refusal
from failopen.web import rejection_payload, snippet_attributes

__all__ = ["build_app"]

HERE = Path(__file__).resolve().parent
FORM_STYLE = (
    "body{font:14px system-ui,sans-serif;margin:0}"
    "form{padding:10px;border:3px solid #999;border-radius:6px}"
    "form[data-failopen-state=completed]{border-color:#16a34a}"
    "form[data-failopen-state=bypassed]{border-color:#ea580c}"
    "form[data-failopen-state=failed]{border-color:#dc2626}"
    "form[data-failopen-state=solving]{border-color:#2563eb}"
    "form[data-failopen-state=closed]{border-color:#6b7280}"
    "form::before{content:'security check: ' attr(data-failopen-state);display:block;"
    "font-weight:600;margin-bottom:6px}"
    "input{display:block;margin:4px 0;padding:4px;width:90%}"
    "button{margin-top:6px;padding:6px 18px;font-size:14px}"
    "[data-failopen-message]{color:#b91c1c;margin:6px 0 0}"
)

Scope = dict[str, Any]
Message = dict[str, Any]


#: What each policy means for a visitor during an outage (the page's caption of each form).
_DURING_OUTAGE = {
    "open": "admitted without a challenge (within the outage rate limit)",
    "fallback": "the browser solves a proof-of-work challenge, then sends",
    "closed": "\u201cbriefly unavailable\u201d: nothing is sent",
}


class _DecisionRecorder:
    """Adds each decision on a form's path to the site's timeline, as its answer starts.

    The ASGI middleware leaves the decision in ``scope["state"]["failopen"]`` for refusals and
    admissions alike; recording it before the answer leaves keeps the page's timeline in step.
    """

    def __init__(self, app: Any, site: DemoSite) -> None:
        self.app = app
        self.site = site
        self.paths = frozenset(form.path for form in site.forms)

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["path"] not in self.paths:
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
                    self.site.record_decision(decision, scope["path"])
            await send(message)

        await self.app(scope, receive, recording_send)


def _buttons(kind: str, choices: dict[str, tuple[str, Any]]) -> str:
    return "".join(f'<button type="button" data-{kind}="{escape(name)}">{escape(label)}</button>'
                   for name, (label, _) in choices.items())


def _form_page(form: DemoForm, config: Config, snippet_tag: str) -> str:
    """A form's own page: what a site serves, with the real snippet (no inline script)."""
    inputs = "".join(
        f'<input name="{escape(name)}" type="{kind}" value="{escape(value)}" '
        f'autocomplete="{complete}" aria-label="{escape(name)}">'
        for name, kind, value, complete in form.inputs)
    # The spec's vendor: the input the snippet fills. Another vendor's widget brings its own,
    # which the snippet renders in the form it is told of (an empty input here would be sent
    # beside the token).
    token = ("" if config.provider.widget_posts_field
             else f'<input type="hidden" name="{escape(config.token_field)}">')
    return (
        f'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>{escape(form.title)}'
        f'</title><style>{FORM_STYLE}</style>'
        f'<script src="/failopen/failopen.js" {snippet_tag} defer></script></head><body>'
        f'<form method="post" action="{escape(form.path)}">{inputs}{token}'
        f"<button>{escape(form.button)}</button></form></body></html>"
    )


def _form_sections(site: DemoSite) -> str:
    """The page's column of forms: each in a frame, with its route's outage policy."""
    parts = []
    for form in site.forms:
        name, policy = escape(form.name), site.policies.get(form.name, "open")
        solve = (f'<p id="solve-{name}" class="solve" data-state="" hidden></p>'
                 if policy == "fallback" else "")
        parts.append(
            f'<section data-form="{name}" data-policy="{escape(policy)}" '
            f'data-action="{escape(form.path)}" data-title="{escape(form.title)}" '
            f'data-button="{escape(form.button)}">'
            f'<h2>{escape(form.title)} <small>POST {escape(form.path)} · outage policy '
            f'<b class="policy" data-policy="{escape(policy)}">{escape(policy)}</b></small></h2>'
            f'<p class="during">During an outage: {escape(_DURING_OUTAGE.get(policy, policy))}.</p>'
            f'<iframe id="frame-{name}" name="frame-{name}" src="/form/{name}" '
            f'title="{escape(form.title)} form"></iframe>'
            f'<p>Security check in the form: <b id="state-{name}" class="form-state" '
            f'data-state="">loading</b></p>{solve}'
            f'<div id="result-{name}" class="result" data-kind="" data-outcome="" data-seq="0">'
            f"Nothing sent yet: press \u201c{escape(form.button)}\u201d.</div></section>")
    if site.fallback_missing is not None:
        parts.append(
            '<section id="fallback-missing"><h2>Sign up and password reset</h2>'
            "<p>Not shown: the sign-up form (outage policy <b>fallback</b>, a self-hosted "
            "proof-of-work challenge) and the password-reset form (<b>closed</b>) need the "
            f"fallback extra.</p><p><code>{escape(_INSTALL)}</code></p>"
            f"<p><small>{escape(site.fallback_missing)}</small></p></section>")
    return "".join(parts)


def _settings(site: DemoSite) -> str:
    """The outage settings the site runs with, as its environment would give them."""
    lines = [f"{name}={value}" for name, value in site.settings.items()]
    if site.fallback_missing is None:
        lines.append("FAILOPEN_FALLBACK_SECRET=...   # made for this run; never shown")
    # A break allowed after each comma: a long list wraps between its items.
    return escape("\n".join(lines)).replace(",", ",<wbr>")


def _vendor_line(site: DemoSite, config: Config) -> str:
    """The header's line naming another vendor than the spec's (none for the spec's)."""
    if site.stage is None:
        return ""
    provider = config.provider
    return (f'<p id="vendor" data-vendor="{escape(provider.name)}">Vendor: '
            f"<b>{escape(provider.title)}</b> (FAILOPEN_VENDOR={escape(provider.name)}, "
            f"widget {escape(config.widget or '')}): its own widget in each form, through "
            f"failopen.js and its {escape(provider.title)} adapter; outage evidence: "
            f"{escape(site.stage.evidence)}.</p>")


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
        "<!--vendor-->", _vendor_line(site, config)).replace(
        "<!--scene-buttons-->", _buttons("scene", site.scenes)).replace(
        "<!--override-buttons-->", _buttons("override", OVERRIDES)).replace(
        "<!--forms-->", _form_sections(site)).replace("<!--settings-->", _settings(site))
    # Another vendor's widget goes into the form the snippet is told of (each page has one).
    form_selector = "form" if config.provider.widget_posts_field else None
    snippet_tag = " ".join(
        f'{name}="{escape(value)}"' for name, value in snippet_attributes(
            config, flag_url="/failopen/flag", form=form_selector,
            ready_timeout_ms=3000).items())
    vendor = "{0.scheme}://{0.netloc}".format(urlsplit(config.vendor_url or ""))
    form_pages = {form.name: _form_page(form, config, snippet_tag) for form in site.forms}
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
        page = form_pages.get(request.path_params["name"])
        if page is None:
            return JSONResponse({"error": f"forms: {', '.join(form_pages)}"}, status_code=404,
                                headers=no_store)
        # The snippet and its solver need no inline script and no eval: scripts from this site
        # and the vendor (the solver's worker falls under script-src too).
        csp = f"script-src 'self' {vendor}; frame-ancestors 'self'"
        return HTMLResponse(page, headers={"Content-Security-Policy": csp, **no_store})

    async def submitted(request: Request) -> Response:
        decision: Decision = request.state.failopen
        return JSONResponse({"ok": True, "decision": decision.to_dict(),
                             "bypassed": decision.bypassed}, headers=no_store)

    async def state(request: Request) -> Response:
        refusal = refused(request, post=False)
        if refusal is not None:
            return refusal
        return JSONResponse(site.snapshot(), headers=no_store)

    async def scene(request: Request) -> Response:
        choice = await read_choice(request, "scene", site.scenes)
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

    async def reset(request: Request) -> Response:
        choice = await read_choice(request, "reset", {"all": None})
        if isinstance(choice, Response):
            return choice
        site.reset()
        return JSONResponse({"reset": choice, **site.snapshot()}, headers=no_store)

    app = Starlette(routes=[
        Route("/", index), Route("/form/{name}", form),
        *(Route(form.path, submitted, methods=["POST"]) for form in site.forms),
        Route("/demo/state", state), Route("/demo/scene", scene, methods=["POST"]),
        Route("/demo/override", override, methods=["POST"]),
        Route("/demo/reset", reset, methods=["POST"]),
    ])

    async def refusal(scope: Scope, decision: Decision) -> Response:
        # The page reads a form frame's answer as JSON, refusals included (their code is the
        # verdict it shows), although a frame's Accept asks for HTML.
        return JSONResponse(rejection_payload(decision), status_code=decision.status_code)

    return _DecisionRecorder(middleware(app, runtime=runtime, reject=refusal), site)
