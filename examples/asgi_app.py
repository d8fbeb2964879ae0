"""Starlette log-in, sign-up and password-reset pages guarded by failopen:
``uvicorn --app-dir examples asgi_app:app``.

Configuration comes from ``FAILOPEN_*`` variables (``FAILOPEN_PROTECTED_PATHS`` defaults to
``/login,/signup,/password-reset`` here). Against the test kit's fakes::

    failopen emulate status &     # http://127.0.0.1:8401
    failopen emulate verify &     # http://127.0.0.1:8402
    failopen emulate vendor &     # http://127.0.0.1:8404, the vendor's api.js
    FAILOPEN_STATUS_URL=http://127.0.0.1:8401 \\
    FAILOPEN_VERIFY_URL=http://127.0.0.1:8402/api/v4/verify/ \\
    FAILOPEN_VENDOR_URL=http://127.0.0.1:8404 \\
    FAILOPEN_PRIVATE_KEY=test-private-key FAILOPEN_PUBLIC_KEY=test-public-key \\
        .venv/bin/uvicorn --app-dir examples asgi_app:app

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
        .venv/bin/uvicorn --app-dir examples asgi_app:app

reCAPTCHA, Enterprise and Friendly Captcha publish no status page a machine can read: no
``emulate status``, and ``FAILOPEN_EVIDENCE=probe`` instead of ``FAILOPEN_STATUS_URL``. With
another vendor the form holds no token input: the snippet, told which form (``form=``), renders
the vendor's widget in it, and the widget's token goes in the vendor's field.

From the repository root, ``--app-dir examples`` (not ``examples.asgi_app``) keeps the root off
``sys.path``: there the source folder ``failopen/`` would hide an installed (non-editable)
failopen, which alone has ``failopen.integrations``.

``GET /`` is the log-in page with the browser snippet, served with
``Content-Security-Policy: script-src 'self' <vendor>``; ``GET /signup`` and
``GET /password-reset`` are the other two forms. Each form is a normal browser POST to its own
path, which is protected and answers ``{"ok": true, "decision": {...}, "bypassed": bool}`` when
admitted; ``GET /health`` is not protected. ``SNIPPET_READY_TIMEOUT_MS``,
``SNIPPET_RETRIES`` and ``SNIPPET_RETRY_DELAY_MS`` (the example's own variables, not failopen
settings) tune the snippet; the browser tests use them to fail fast.

During an outage every route is ``open`` unless told otherwise. To have sign-up ask for the
self-hosted challenge (solved by the snippet's worker, ``/failopen/failopen-solver.js``, which
the same CSP allows) and password reset refuse until the vendor is back, add::

    FAILOPEN_OUTAGE_POLICY_ROUTES=/signup=fallback,/password-reset=closed \\
    FAILOPEN_FALLBACK_SECRET=$(python -c 'import secrets; print(secrets.token_urlsafe(32))')
"""

from __future__ import annotations

import os
from html import escape
from urllib.parse import urlsplit

from failopen.integrations.asgi import FailOpenMiddleware
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, PlainTextResponse
from starlette.routing import Route

from failopen import Config
from failopen.web import snippet_attributes

# Each form: its title and fields (the hidden token field is added to each).
FORMS = {
    "/login": ("Log in", '<input name="username" autocomplete="username">'
                         '<input name="password" type="password" autocomplete="current-password">'),
    "/signup": ("Sign up", '<input name="email" type="email" autocomplete="email">'),
    "/password-reset": ("Reset password", '<input name="email" type="email" autocomplete="email">'),
}
# The forms' paths are protected unless FAILOPEN_PROTECTED_PATHS says otherwise (a default under
# the environment, so that FAILOPEN_OUTAGE_POLICY_ROUTES may name them).
config = Config.from_env({"FAILOPEN_PROTECTED_PATHS": ",".join(FORMS), **os.environ})

PREFIX = "/failopen"


def _tuning(name: str) -> int | None:
    value = os.environ.get(name, "").strip()
    if not value:
        return None
    if not value.isdigit():
        raise SystemExit(f"{name}: expected a whole number of milliseconds or retries, "
                         f"got {value!r}")
    return int(value)


# The spec's vendor: the form holds the input the snippet fills. Another vendor (FAILOPEN_VENDOR):
# the form holds nothing of the vendor's; the snippet, told which form, renders the widget in it.
SPEC_VENDOR = not config.provider.widget_posts_field
TOKEN_INPUT = f'<input type="hidden" name="{escape(config.token_field)}">' if SPEC_VENDOR else ""
SNIPPET_TAG = " ".join(f'{name}="{escape(value)}"' for name, value in snippet_attributes(
    config, flag_url=f"{PREFIX}/flag", form=None if SPEC_VENDOR else "form",
    ready_timeout_ms=_tuning("SNIPPET_READY_TIMEOUT_MS"),
    retries=_tuning("SNIPPET_RETRIES"), retry_delay_ms=_tuning("SNIPPET_RETRY_DELAY_MS"),
).items())
# The snippet needs no inline script and no eval: scripts from this site and the vendor only.
# With a second vendor (FAILOPEN_FALLBACK_VENDOR), its origin too: a fallback route renders it
# during an outage. A vendor's widget is a frame from its own origin.
ORIGINS = " ".join(sorted({"{0.scheme}://{0.netloc}".format(urlsplit(url))
                           for url in (config.vendor_url, config.fallback_vendor_url) if url}))
CSP = f"script-src 'self' {ORIGINS}" if ORIGINS else "script-src 'self'"
if not SPEC_VENDOR:
    CSP += f"; frame-src {ORIGINS}"
# The page styles on the state the snippet sets on the form (an inline style is no script).
STYLE = (
    "form{max-width:20em;padding:1em;border:2px solid #999}"
    "form[data-failopen-state=completed]{border-color:#2a2}"
    "form[data-failopen-state=bypassed]{border-color:#e90}"
    "form[data-failopen-state=failed]{border-color:#c22}"
    "form::before{content:'security check: ' attr(data-failopen-state);display:block}"
    "[data-failopen-message]{color:#c22}"
)


async def form_page(request: Request) -> HTMLResponse:
    """A form (``/`` is the log-in form), with the snippet that asks the flag endpoint whether
    to enforce."""
    action = request.url.path if request.url.path in FORMS else "/login"
    title, fields = FORMS[action]
    return HTMLResponse(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">"
        f'<title>{title}</title><style>{STYLE}</style>'
        f'<script src="{PREFIX}/failopen.js" {SNIPPET_TAG} defer></script>'
        f'</head><body><form method="post" action="{action}">{fields}{TOKEN_INPUT}'
        f"<button>{title}</button></form></body></html>",
        headers={"Content-Security-Policy": CSP},
    )


async def submitted(request: Request) -> JSONResponse:
    """Reached only when failopen admitted the request; the decision says how."""
    decision = request.state.failopen
    return JSONResponse({"ok": True, "decision": decision.to_dict(),
                         "bypassed": decision.bypassed})


async def health(request: Request) -> PlainTextResponse:
    """Not protected: failopen passes it straight through."""
    return PlainTextResponse("ok")


routes = [
    Route("/", form_page),
    Route("/signup", form_page, methods=["GET"]),
    Route("/password-reset", form_page, methods=["GET"]),
    *(Route(action, submitted, methods=["POST"]) for action in FORMS),
    Route("/health", health),
]
app = FailOpenMiddleware(Starlette(routes=routes), config=config, prefix=PREFIX)
