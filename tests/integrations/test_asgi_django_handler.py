"""FailOpenMiddleware around Django's own ASGI handler, in a subprocess.

Django is configured once per process, and tests/integrations/django/ configures it for this
one; the script below configures its own minimal project in a fresh interpreter instead.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

SCRIPT = textwrap.dedent('''
    import asyncio

    import django
    from django.conf import settings

    settings.configure(DEBUG=False, SECRET_KEY="s" * 50, ROOT_URLCONF="__main__",
                       ALLOWED_HOSTS=["testserver"], MIDDLEWARE=[])
    django.setup()

    import httpx
    from django.core.asgi import get_asgi_application
    from django.http import JsonResponse
    from django.urls import path

    from failopen import Config, FailOpen
    from failopen.integrations.asgi import FailOpenMiddleware
    from failopen.testing import FakeVerifyAPI

    def login(request):
        body = request.body  # the bytes failopen read, replayed
        return JsonResponse({"len": len(body), "username": request.POST.get("username")})

    urlpatterns = [path("login", login), path("health", lambda request: JsonResponse({}))]

    async def main():
        verify = FakeVerifyAPI()
        runtime = FailOpen(
            Config(verify_url="https://verify.test" + verify.path,
                   private_key=verify.private_key, protected_paths=("/login",)),
            verify_async_transport=verify.transport(),
        )
        app = FailOpenMiddleware(get_asgi_application(), runtime=runtime)
        transport = httpx.ASGITransport(app)
        async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as client:
            form = {"username": "ann", "enforcement-token": FakeVerifyAPI.GOOD}
            admitted = await client.post("/login", data=form)
            assert admitted.status_code == 200, admitted.text
            assert admitted.json()["username"] == "ann", admitted.text
            refused = await client.post("/login", data={"username": "ann"})
            assert refused.status_code == 403, refused.text
            assert refused.json()["error"]["code"] == "missing_token"
            assert (await client.get("/health")).status_code == 200
            assert (await client.get("/failopen/flag")).json()["enforce"] is True
        # Django upper-cases scope["method"]: a lower-case "post" runs the POST view, so it
        # must meet the guard too (httpx upper-cases methods, hence the raw call).
        sent, messages = [], [{"type": "http.request", "body": b"username=ann"}]

        async def receive():
            if messages:
                return messages.pop()
            await asyncio.Event().wait()  # the client stays: Django waits for a disconnect

        async def send(message):
            sent.append(message)

        scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
                 "method": "post", "scheme": "http", "path": "/login", "raw_path": b"/login",
                 "query_string": b"", "root_path": "", "client": ("203.0.113.9", 1),
                 "server": ("testserver", 80),
                 "headers": [(b"host", b"testserver"),
                             (b"content-type", b"application/x-www-form-urlencoded")]}
        await app(scope, receive, send)
        assert sent[0]["status"] == 403, sent
        await runtime.aclose()
        print("django-asgi-ok")

    asyncio.run(main())
''')


@pytest.mark.slow
def test_django_asgi_handler_behind_the_middleware() -> None:
    result = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().endswith("django-asgi-ok"), result.stdout
