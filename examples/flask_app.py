"""Flask log-in, sign-up and password-reset pages guarded by failopen:
``cd examples && gunicorn flask_app:app``.

Configuration comes from ``FAILOPEN_*`` variables (``FAILOPEN_PROTECTED_PATHS`` defaults to
``/login,/signup,/password-reset`` here). Against the test kit's fakes::

    failopen emulate status &     # http://127.0.0.1:8401
    failopen emulate verify &     # http://127.0.0.1:8402
    failopen emulate vendor &     # http://127.0.0.1:8404, the vendor's api.js
    FAILOPEN_STATUS_URL=http://127.0.0.1:8401 \\
    FAILOPEN_VERIFY_URL=http://127.0.0.1:8402/api/v4/verify/ \\
    FAILOPEN_VENDOR_URL=http://127.0.0.1:8404 \\
    FAILOPEN_PRIVATE_KEY=test-private-key FAILOPEN_PUBLIC_KEY=test-public-key \\
        sh -c 'cd examples && ../.venv/bin/gunicorn --preload -w 2 flask_app:app'

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
        sh -c 'cd examples && ../.venv/bin/gunicorn --preload -w 2 flask_app:app'

reCAPTCHA, Enterprise and Friendly Captcha publish no status page a machine can read: no
``emulate status``, and ``FAILOPEN_EVIDENCE=probe`` instead of ``FAILOPEN_STATUS_URL``. With
another vendor the form holds no token input: the snippet, told which form (``form=``), renders
the vendor's widget in it, and the widget's token goes in the vendor's field.

gunicorn puts the directory it starts in on ``sys.path``: started from the repository root, the
source folder ``failopen/`` would hide an installed (non-editable) failopen, which alone has
``failopen.integrations``. Hence ``cd examples``.

``GET /`` is the log-in page with the browser snippet; ``GET /signup`` and
``GET /password-reset`` are the other two forms. Each form is a normal browser POST to its own
path, which is protected and answers ``{"ok": true, "decision": {...}, "bypassed": bool}`` when
admitted; ``GET /health`` is not protected.

During an outage every route is ``open`` unless told otherwise. To have sign-up ask for the
self-hosted challenge and password reset refuse until the vendor is back, add::

    FAILOPEN_OUTAGE_POLICY_ROUTES=/signup=fallback,/password-reset=closed \\
    FAILOPEN_FALLBACK_SECRET=$(python -c 'import secrets; print(secrets.token_urlsafe(32))')

Each worker remembers the solutions it accepted (each is good once) in its own memory unless
the fleet shares a Redis store (``FAILOPEN_STORE=redis://...``): with ``-w 2`` and no Redis, a
solution replayed to the other worker is accepted once more.
"""

from __future__ import annotations

import os
from html import escape
from urllib.parse import urlsplit

from failopen.integrations.wsgi import FailOpenMiddleware
from flask import Flask, Response, jsonify, request

from failopen import Config
from failopen.web import snippet_attributes

# Each form: its title and fields (the spec's vendor: the hidden token field is added to each).
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
# The spec's vendor: the form holds the input the snippet fills. Another vendor (FAILOPEN_VENDOR):
# its widget brings its own field, so the form holds nothing of the vendor's; the snippet, told
# which form, renders the widget in it.
WIDGET_POSTS_FIELD = config.provider.widget_posts_field
TOKEN_INPUT = "" if WIDGET_POSTS_FIELD else (
    f'<input type="hidden" name="{escape(config.token_field)}">')
SNIPPET_TAG = " ".join(f'{name}="{escape(value)}"' for name, value in snippet_attributes(
    config, flag_url=f"{PREFIX}/flag", form="form" if WIDGET_POSTS_FIELD else None).items())
# The snippet needs no inline script and no eval: scripts from this site and the vendor only.
VENDOR_ORIGIN = "{0.scheme}://{0.netloc}".format(urlsplit(config.vendor_url or ""))
CSP = f"script-src 'self' {VENDOR_ORIGIN}" if config.vendor_url else "script-src 'self'"

app = Flask(__name__)


@app.get("/")
@app.get("/signup")
@app.get("/password-reset")
def form_page() -> Response:
    """A form (``/`` is the log-in form), with the snippet that asks the flag endpoint whether
    to enforce."""
    action = request.path if request.path in FORMS else "/login"
    title, fields = FORMS[action]
    page = (
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">"
        f"<title>{title}</title>"
        f'<script src="{PREFIX}/failopen.js" {SNIPPET_TAG} defer></script>'
        f'</head><body><form method="post" action="{action}">{fields}{TOKEN_INPUT}'
        f"<button>{title}</button></form></body></html>"
    )
    return Response(page, mimetype="text/html", headers={"Content-Security-Policy": CSP})


@app.post("/login")
@app.post("/signup")
@app.post("/password-reset")
def submitted() -> Response:
    """Reached only when failopen admitted the request; the decision says how."""
    decision = request.environ["failopen.decision"]
    return jsonify(ok=True, user=request.form.get("username", ""),
                   decision=decision.to_dict(), bypassed=decision.bypassed)


@app.get("/health")
def health() -> str:
    """Not protected: failopen passes it straight through."""
    return "ok"


# Flask's own app object stays the WSGI entry point (flask run, gunicorn examples.flask_app:app);
# failopen wraps what it calls.
app.wsgi_app = FailOpenMiddleware(app.wsgi_app, config=config, prefix=PREFIX)  # type: ignore[method-assign]
