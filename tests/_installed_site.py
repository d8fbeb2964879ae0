"""Run in a venv built by ``_wheel.extra_venv``: a minimal site of one adapter (``django``,
``wsgi`` or ``asgi``) protecting a log-in with the default settings, enforcement off by an
operator's override in ``STORE`` (a file store), posts 21 token-less log-ins from one address
and prints the statuses as JSON. Exits 3 when ``limits`` can be imported: the venv is not what
the install it stands for brings."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import sys
from typing import Any

KIND, STORE = sys.argv[1], sys.argv[2]
CLIENT = "203.0.113.7"
# Never called: enforcement is off. A status page would only add a watcher polling nothing.
VERIFY = {"VERIFY_URL": "https://verify.invalid/api/v4/verify/", "PRIVATE_KEY": "sk_test"}
POSTS = 21

if importlib.util.find_spec("limits") is not None:
    sys.exit(3)


def django_statuses() -> list[int]:
    import django
    from django.conf import settings

    settings.configure(
        DEBUG=False, ALLOWED_HOSTS=["testserver"], SECRET_KEY="k" * 50, ROOT_URLCONF=__name__,
        INSTALLED_APPS=["failopen.integrations.django"],
        MIDDLEWARE=["failopen.integrations.django.middleware.FailOpenMiddleware"],
        FAILOPEN={"PROTECTED_PATHS": ["/login/"], "STORE": STORE, **VERIFY})
    django.setup()
    from django.http import HttpResponse
    from django.test import Client
    from django.urls import path

    globals()["urlpatterns"] = [path("login/", lambda request: HttpResponse("welcome"))]
    client = Client(REMOTE_ADDR=CLIENT)
    return [client.post("/login/").status_code for _ in range(POSTS)]


def _config() -> Any:
    import failopen

    return failopen.Config(protected_paths=("/login",), store=STORE,
                           **{name.lower(): value for name, value in VERIFY.items()})


def wsgi_statuses() -> list[int]:
    import io
    from wsgiref.util import setup_testing_defaults

    from failopen.integrations.wsgi import FailOpenMiddleware

    def app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [b"welcome"]

    middleware = FailOpenMiddleware(app, config=_config())
    statuses = []
    for _ in range(POSTS):
        environ: dict[str, Any] = {"REQUEST_METHOD": "POST", "PATH_INFO": "/login",
                                   "REMOTE_ADDR": CLIENT, "wsgi.input": io.BytesIO(b"")}
        setup_testing_defaults(environ)
        seen: list[str] = []

        def start(status: str, headers: Any, exc: Any = None, seen: list[str] = seen) -> None:
            seen.append(status)

        b"".join(middleware(environ, start))
        statuses.append(int(seen[0].split()[0]))
    return statuses


def asgi_statuses() -> list[int]:
    import httpx
    from failopen.integrations.asgi import FailOpenMiddleware

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"welcome"})

    async def posts() -> list[int]:
        transport = httpx.ASGITransport(app=FailOpenMiddleware(app, config=_config()),
                                        client=(CLIENT, 40000))
        async with httpx.AsyncClient(transport=transport, base_url="http://site") as client:
            return [(await client.post("/login")).status_code for _ in range(POSTS)]

    return asyncio.run(posts())


print(json.dumps({"django": django_statuses, "wsgi": wsgi_statuses,
                  "asgi": asgi_statuses}[KIND]()))
