"""``FailOpenMiddleware(app, reject=...)`` (ASGI): the site's own refusal page, here a real
Starlette ``TemplateResponse`` re-rendering a log-in form with a message.

The page keeps its status and body; failopen seals its headers (``Cache-Control: no-store``,
``Retry-After`` on a 429 or 503) and, when the page cannot be had, logs why and sends its own
refusal. The protected app is never called and never sees the refused body.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qs

import httpx
import jinja2
import pytest
from _asgi_kit import Stack, drive, http_scope, starlette_app
from _refusal_kit import BROWSER, FORM, LOGIN, MESSAGES, PASSWORD, REFUSALS
from failopen.integrations.asgi import FailOpenMiddleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.templating import Jinja2Templates

from failopen.engine.guard import Decision
from failopen.testing import FakeVerifyAPI

pytestmark = pytest.mark.anyio

Make = Callable[..., Stack]
TEMPLATES = Jinja2Templates(env=jinja2.Environment(
    loader=jinja2.DictLoader({"login.html": LOGIN}), autoescape=True))


def login_page(scope: Any, decision: Decision, username: str = "") -> Response:
    """The site's log-in page again, with a message for this refusal."""
    return TEMPLATES.TemplateResponse(
        Request(scope), "login.html",
        {"message": MESSAGES[decision.status_code], "username": username},
        status_code=decision.status_code)


class Pages:
    """Plain and async reject callables that remember the thread they ran on."""

    def __init__(self) -> None:
        self.threads: list[int] = []
        self.decisions: list[Decision] = []

    def sync(self, scope: Any, decision: Decision) -> Response:
        self.threads.append(threading.get_ident())
        self.decisions.append(decision)
        return login_page(scope, decision)

    async def async_(self, scope: Any, decision: Decision) -> Response:
        return self.sync(scope, decision)


@pytest.mark.parametrize("flavour", ["sync", "async"])
async def test_the_sites_page_replaces_failopen_s_refusal(make_asgi: Make, flavour: str) -> None:
    pages = Pages()
    stack = make_asgi(reject=pages.sync if flavour == "sync" else pages.async_)
    response = await stack.client.post("/raw", data=FORM, headers={"Accept": BROWSER})
    assert response.status_code == 403
    assert response.headers["content-type"] == "text/html; charset=utf-8"
    assert f'<p class="error">{MESSAGES[403]}</p>' in response.text
    assert response.headers["cache-control"] == "no-store"
    assert "retry-after" not in response.headers
    assert [d.outcome for d in pages.decisions] == ["missing_token"]
    # The refused request reached neither the app nor its body.
    assert stack.recorder.calls == []
    # A plain function may block (templates on disk): a worker thread, as Starlette runs a plain
    # exception handler; an async one runs on the event loop.
    on_loop = pages.threads == [threading.get_ident()]
    assert on_loop is (flavour == "async")


@pytest.mark.parametrize("outcome", REFUSALS)
async def test_every_refusal_kind_gets_the_page_with_its_status_and_retry_after(
    make_asgi: Make, outcome: str
) -> None:
    refusal = REFUSALS[outcome]
    stack = make_asgi(reject=login_page, **refusal.changes)
    headers = {"Accept": BROWSER}
    if refusal.token is not None:
        headers["X-Enforcement-Token"] = refusal.token
    for _ in range(refusal.ready(stack)):
        assert (await stack.client.post("/login", data=FORM, headers=headers)).status_code == 200
    response = await stack.client.post("/login", data=FORM, headers=headers)
    assert response.status_code == refusal.status
    assert MESSAGES[refusal.status] in response.text
    assert response.headers["cache-control"] == "no-store"
    if refusal.status in (429, 503):
        assert int(response.headers["retry-after"]) >= 1
    else:
        assert "retry-after" not in response.headers


class AsyncPage:
    """A callable object whose __call__ is async: awaited on the loop like an async function."""

    async def __call__(self, scope: Any, decision: Decision) -> Response:
        return HTMLResponse("object", status_code=decision.status_code)


async def _tagged(scope: Any, decision: Decision, tag: str) -> Response:
    return HTMLResponse(tag, status_code=decision.status_code)


@pytest.mark.parametrize(("reject", "body"), [
    (AsyncPage(), b"object"),
    (functools.partial(_tagged, tag="partial"), b"partial"),
    (lambda scope, decision: _tagged(scope, decision, "coroutine"), b"coroutine"),
], ids=["async __call__", "partial of async", "plain returning a coroutine"])
async def test_every_way_of_being_async_is_awaited(make_asgi: Make, reject: Any,
                                                   body: bytes) -> None:
    reply = await drive(make_asgi(reject=reject).app, http_scope("/raw"),
                        [{"type": "http.request", "body": b""}])
    assert (reply.status, reply.body) == (403, body)


async def test_the_pages_own_status_and_retry_after_are_kept(make_asgi: Make) -> None:
    def page(scope: Any, decision: Decision) -> Response:
        return HTMLResponse("come back later", status_code=200, headers={"Retry-After": "120"})

    stack = make_asgi(reject=page)
    stack.verify.set_fault("503")
    response = await stack.client.post("/login", headers={"X-Enforcement-Token": "x"})
    assert (response.status_code, response.text) == (200, "come back later")
    assert response.headers.get_list("retry-after") == ["120"]


async def test_caching_the_page_asks_for_is_replaced_by_no_store(make_asgi: Make) -> None:
    def page(scope: Any, decision: Decision) -> Response:
        return HTMLResponse("no", status_code=decision.status_code, headers={
            "Cache-Control": "public, max-age=600", "CDN-Cache-Control": "max-age=600",
            "Surrogate-Control": "max-age=600", "Vary": "Accept"})

    stack = make_asgi(reject=page)
    reply = await drive(stack.app, http_scope("/raw"), [{"type": "http.request", "body": b""}])
    start_headers = [name for name, _ in reply.headers.items()]
    assert reply.status == 403 and reply.body == b"no"
    assert reply.headers["cache-control"] == "no-store"
    assert "cdn-cache-control" not in start_headers and "surrogate-control" not in start_headers
    assert reply.headers["vary"] == "Accept"  # anything else is the page's own business


async def test_a_page_app_may_read_the_form_failopen_read(make_asgi: Make) -> None:
    def reject(scope: Any, decision: Decision) -> Any:
        async def page(scope: Any, receive: Any, send: Any) -> None:
            # request.form() alike, without python-multipart (not a dependency of the tests).
            form = parse_qs((await Request(scope, receive).body()).decode())
            await login_page(scope, decision, form["username"][0])(scope, receive, send)
        return page

    stack = make_asgi(reject=reject)
    response = await stack.client.post("/raw", data=FORM, headers={"Accept": BROWSER})
    assert response.status_code == 403
    assert 'value="ann"' in response.text
    assert stack.recorder.calls == []


async def test_head_gets_the_pages_headers_without_its_body(make_asgi: Make) -> None:
    stack = make_asgi(reject=login_page, protected_methods=("GET",))
    reply = await drive(stack.app, http_scope("/raw", method="HEAD"),
                        [{"type": "http.request", "body": b""}])
    assert reply.status == 403 and reply.body == b""
    assert int(reply.headers["content-length"]) > 0
    assert reply.headers["cache-control"] == "no-store"


async def test_failopen_s_own_failure_reaches_the_page_as_a_503(make_asgi: Make) -> None:
    pages = Pages()
    stack = make_asgi(reject=pages.async_)
    reply = await drive(stack.app, http_scope("/raw", client=4711),  # a server bug
                        [{"type": "http.request", "body": b""}])
    assert reply.status == 503 and MESSAGES[503].encode() in reply.body
    assert reply.headers["retry-after"] == "7"
    assert [d.outcome for d in pages.decisions] == ["internal_error"]


async def test_an_admitted_request_never_meets_the_page(make_asgi: Make) -> None:
    pages = Pages()
    stack = make_asgi(reject=pages.sync)
    response = await stack.client.post("/login", headers={"X-Enforcement-Token":
                                                          FakeVerifyAPI.GOOD})
    assert response.status_code == 200 and pages.decisions == []


async def test_a_body_over_the_cap_is_413_before_any_page_is_asked(make_asgi: Make) -> None:
    pages = Pages()
    stack = make_asgi(reject=pages.sync, max_body_bytes=1024)
    response = await stack.client.post("/raw", data={"username": "a" * 4096},
                                       headers={"Accept": BROWSER})
    assert response.status_code == 413 and response.json()["error"]["code"] == "body_too_large"
    assert pages.decisions == [] and stack.recorder.calls == []


async def test_added_inside_starlette_the_page_may_use_url_for(make_asgi: Make) -> None:
    # app.add_middleware builds the middleware inside the app: scope["app"] is set by then.
    def page(scope: Any, decision: Decision) -> Response:
        return HTMLResponse(f'<a href="{Request(scope).url_for("_health")}">try again</a>',
                            status_code=decision.status_code)

    app = starlette_app()
    app.add_middleware(FailOpenMiddleware, runtime=make_asgi().runtime, reject=page)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app),
                                 base_url="http://testserver") as client:
        response = await client.post("/login", headers={"Accept": BROWSER})
    assert response.status_code == 403
    assert response.text == '<a href="http://testserver/health">try again</a>'
    assert response.headers["cache-control"] == "no-store"


async def test_extension_messages_such_as_starlette_s_debug_pass_through(make_asgi: Make) -> None:
    # A server (Starlette's TestClient) offering "http.response.debug" gets one from a
    # TemplateResponse, before its start: passed on, not taken for a broken page.
    stack = make_asgi(reject=login_page)
    reply = await drive(stack.app, http_scope("/raw", extensions={"http.response.debug": {}}),
                        [{"type": "http.request", "body": b""}])
    assert reply.status == 403 and MESSAGES[403].encode() in reply.body
    assert reply.headers["cache-control"] == "no-store"


# --- a page that cannot be had: failopen's own refusal, and a log line -----------------------


async def _sends_nothing(scope: Any, receive: Any, send: Any) -> None:
    return None


async def _body_first(scope: Any, receive: Any, send: Any) -> None:
    await send({"type": "http.response.body", "body": b"oops"})


def _raises(scope: Any, decision: Decision) -> Any:
    raise RuntimeError("the template is missing")


BROKEN: dict[str, Callable[[Any, Decision], Any]] = {
    "raises": _raises,
    "returns None": lambda scope, decision: None,
    "returns a string": lambda scope, decision: "<h1>no</h1>",
    "its app sends nothing": lambda scope, decision: _sends_nothing,
    "its app sends a body first": lambda scope, decision: _body_first,
}


@pytest.mark.parametrize("broken", BROKEN)
async def test_a_broken_page_falls_back_to_failopen_s_own_logged_without_secrets(
    make_asgi: Make, caplog: pytest.LogCaptureFixture, broken: str
) -> None:
    stack = make_asgi(reject=BROKEN[broken])
    with caplog.at_level(logging.ERROR, logger="failopen.asgi"):
        html = await stack.client.post("/raw", data=FORM, headers={
            "Accept": BROWSER, "X-Enforcement-Token": FakeVerifyAPI.BAD})
        api = await stack.client.post("/raw", data=FORM)
    assert html.status_code == 403 and "<h1>Request refused</h1>" in html.text
    assert html.headers["cache-control"] == "no-store"
    assert api.status_code == 403 and api.json()["error"]["code"] == "missing_token"
    assert stack.recorder.calls == []
    errors = [r for r in caplog.records if r.name == "failopen.asgi"]
    assert len(errors) == 2 and all("reject=" in r.getMessage() for r in errors)
    assert all("403" in r.getMessage() for r in errors)
    assert FakeVerifyAPI.BAD not in caplog.text and PASSWORD not in caplog.text


async def test_a_page_failing_after_its_start_ends_its_response_instead_of_raising(
    make_asgi: Make, caplog: pytest.LogCaptureFixture
) -> None:
    async def half(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 403, "headers": []})
        await send({"type": "http.response.body", "body": b"<p>Plea", "more_body": True})
        raise RuntimeError("the template broke half-way")

    stack = make_asgi(reject=lambda scope, decision: half)
    with caplog.at_level(logging.ERROR, logger="failopen.asgi"):
        reply = await drive(stack.app, http_scope("/raw"), [{"type": "http.request", "body": b""}])
    assert (reply.status, reply.body) == (403, b"<p>Plea")  # ended: the server waits no more
    assert reply.headers["cache-control"] == "no-store"
    assert "after its response started" in caplog.text


@pytest.mark.parametrize("reject", [
    123, "myapp.views.refused", HTMLResponse("a response itself"), lambda: None,
    lambda scope, decision, extra: None,
], ids=["int", "dotted path", "a Response", "no arguments", "three arguments"])
def test_reject_must_be_a_callable_taking_the_scope_and_the_decision(reject: Any) -> None:
    with pytest.raises(TypeError, match=r"reject="):
        FailOpenMiddleware(HTMLResponse("app"), reject=reject)
