"""A Flask log-in page guarded by failopen: ``cd examples && gunicorn flask_app:app``.

Configuration comes from ``FAILOPEN_*`` variables (``FAILOPEN_PROTECTED_PATHS`` defaults to
``/login`` here). Against the test kit's fakes::

    failopen emulate status &     # http://127.0.0.1:8401
    failopen emulate verify &     # http://127.0.0.1:8402
    failopen emulate vendor &     # http://127.0.0.1:8404, the vendor's api.js
    FAILOPEN_STATUS_URL=http://127.0.0.1:8401 \\
    FAILOPEN_VERIFY_URL=http://127.0.0.1:8402/api/v4/verify/ \\
    FAILOPEN_VENDOR_URL=http://127.0.0.1:8404 \\
    FAILOPEN_PRIVATE_KEY=test-private-key FAILOPEN_PUBLIC_KEY=test-public-key \\
        sh -c 'cd examples && ../.venv/bin/gunicorn --preload -w 2 flask_app:app'

gunicorn puts the directory it starts in on ``sys.path``: started from the repository root, the
source folder ``failopen/`` would hide an installed (non-editable) failopen, which alone has
``failopen.integrations``. Hence ``cd examples``.

``GET /`` is the log-in page with the browser snippet; the form is a normal browser POST to
``/login``, which is protected and answers ``{"ok": true, "decision": {...}, "bypassed": bool}``
when admitted; ``GET /health`` is not protected.
"""

from __future__ import annotations

from html import escape
from urllib.parse import urlsplit

from failopen.integrations.wsgi import FailOpenMiddleware
from flask import Flask, Response, jsonify, request

from failopen import Config
from failopen.web import snippet_attributes

config = Config.from_env()
if not config.protected_paths:
    config = config.replace(protected_paths=("/login",))

PREFIX = "/failopen"
SNIPPET_TAG = " ".join(f'{name}="{escape(value)}"' for name, value in snippet_attributes(
    config, flag_url=f"{PREFIX}/flag").items())
# The snippet needs no inline script and no eval: scripts from this site and the vendor only.
VENDOR_ORIGIN = "{0.scheme}://{0.netloc}".format(urlsplit(config.vendor_url or ""))
CSP = f"script-src 'self' {VENDOR_ORIGIN}" if config.vendor_url else "script-src 'self'"

app = Flask(__name__)


@app.get("/")
def login_page() -> Response:
    """The log-in form, with the snippet that asks the flag endpoint whether to enforce."""
    field = escape(config.token_field)
    page = (
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>Log in</title>"
        f'<script src="{PREFIX}/failopen.js" {SNIPPET_TAG} defer></script>'
        '</head><body><form method="post" action="/login">'
        '<input name="username" autocomplete="username">'
        '<input name="password" type="password" autocomplete="current-password">'
        f'<input type="hidden" name="{field}">'
        "<button>Log in</button></form></body></html>"
    )
    return Response(page, mimetype="text/html", headers={"Content-Security-Policy": CSP})


@app.post("/login")
def login() -> Response:
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
