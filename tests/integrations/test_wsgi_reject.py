"""``FailOpenMiddleware(app, reject=...)`` (WSGI): the site's own refusal page, here Flask
re-rendering its log-in form (with what the person typed) inside ``app.request_context``.

The page keeps its status and body; failopen seals its headers (``Cache-Control: no-store``,
``Retry-After`` on a 429 or 503). The page is run whole before anything reaches the server, so a
page that fails anywhere, even half-way through its body, is replaced by failopen's own refusal
and logged. The protected app is never called. Also: failopen's HTML page for every refusal.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from _refusal_kit import BROWSER, FORM, LOGIN, MESSAGES, PASSWORD, REFUSALS
from _wsgi_kit import WsgiStack, call, environ, flask_app
from failopen.integrations.wsgi import FailOpenMiddleware
from flask import Flask, make_response, render_template_string, request
from werkzeug.wrappers import Response

from failopen.engine.guard import Decision
from failopen.testing import FakeVerifyAPI

Make = Callable[..., WsgiStack]


def site_with_page() -> tuple[Flask, Callable[[dict[str, Any], Decision], Any]]:
    """The kit's Flask app, and its reject: the log-in page again, as Flask renders it."""
    app = flask_app()

    def reject(environ: dict[str, Any], decision: Decision) -> Any:
        with app.request_context(environ):
            page = render_template_string(LOGIN, message=MESSAGES[decision.status_code],
                                          username=request.form.get("username", ""))
            return make_response(page, decision.status_code)

    return app, reject


def stack_with_page(make_wsgi: Make, **changes: Any) -> WsgiStack:
    app, reject = site_with_page()
    return make_wsgi(inner=app, reject=reject, **changes)


@pytest.mark.parametrize("outcome", REFUSALS)
def test_every_refusal_kind_gets_the_page_with_its_status_and_retry_after(
    make_wsgi: Make, outcome: str
) -> None:
    refusal = REFUSALS[outcome]
    stack = stack_with_page(make_wsgi, **refusal.changes)
    for _ in range(refusal.ready(stack)):
        assert stack.post(token=refusal.token, data=FORM).status_code == 200
    response = stack.post(token=refusal.token, data=FORM, headers={"Accept": BROWSER})
    assert response.status_code == refusal.status
    assert response.headers["Content-Type"] == "text/html; charset=utf-8"
    text = response.get_data(as_text=True)
    assert f'<p class="error">{MESSAGES[refusal.status]}</p>' in text
    assert 'value="ann"' in text  # the body failopen read for the token, replayed to the page
    assert response.headers["Cache-Control"] == "no-store"
    if refusal.status in (429, 503):
        assert int(response.headers["Retry-After"]) >= 1
    else:
        assert "Retry-After" not in response.headers


@pytest.mark.parametrize("outcome", REFUSALS)
def test_without_a_page_a_browser_gets_failopen_s_html_for_every_refusal(
    make_wsgi: Make, outcome: str
) -> None:
    refusal = REFUSALS[outcome]
    stack = make_wsgi(**refusal.changes)
    for _ in range(refusal.ready(stack)):
        assert stack.post(token=refusal.token).status_code == 200
    response = stack.post(token=refusal.token, data=FORM, headers={"Accept": BROWSER})
    assert response.status_code == refusal.status
    assert f"<h1>{refusal.title}</h1>" in response.get_data(as_text=True)
    assert response.headers["Cache-Control"] == "no-store"
    assert ("Retry-After" in response.headers) is (refusal.status != 403)


def test_the_app_is_not_called_and_an_admitted_request_never_meets_the_page(
    make_wsgi: Make
) -> None:
    seen: list[Decision] = []

    def reject(environ: dict[str, Any], decision: Decision) -> Any:
        seen.append(decision)
        return Response("no", status=decision.status_code)

    stack = make_wsgi(reject=reject)
    assert stack.post("/raw", data=FORM).status_code == 403
    assert stack.recorder.calls == []
    assert stack.post(token=FakeVerifyAPI.GOOD).status_code == 200
    assert [d.outcome for d in seen] == ["missing_token"]


def test_a_body_over_the_cap_is_413_before_any_page_is_asked(make_wsgi: Make) -> None:
    seen: list[Decision] = []
    stack = make_wsgi(reject=lambda environ, decision: seen.append(decision),
                      max_body_bytes=1024)
    response = stack.post(data={"username": "a" * 4096}, headers={"Accept": BROWSER})
    assert response.status_code == 413 and seen == []


def test_the_pages_own_status_and_retry_after_are_kept_its_caching_is_not(
    make_wsgi: Make
) -> None:
    def reject(environ: dict[str, Any], decision: Decision) -> Any:
        return Response("come back later", status=200, headers={
            "Retry-After": "120", "Cache-Control": "public, max-age=600",
            "CDN-Cache-Control": "max-age=600", "Surrogate-Control": "max-age=600"})

    stack = make_wsgi(reject=reject)
    stack.verify.set_fault("503")
    response = stack.post(token=FakeVerifyAPI.GOOD)
    assert (response.status_code, response.get_data()) == (200, b"come back later")
    assert response.headers.getlist("Retry-After") == ["120"]
    assert response.headers.getlist("Cache-Control") == ["no-store"]
    assert "CDN-Cache-Control" not in response.headers
    assert "Surrogate-Control" not in response.headers


def test_head_gets_the_pages_headers_without_its_body(make_wsgi: Make) -> None:
    stack = stack_with_page(make_wsgi, protected_methods=("GET",))
    status, headers, body = call(stack.app, environ("/raw", method="HEAD", HTTP_ACCEPT=BROWSER))
    assert status.startswith("403") and body == b""
    assert headers["Cache-Control"] == "no-store"


def test_a_page_may_write_through_the_legacy_write_callable(make_wsgi: Make) -> None:
    def reject(environ: dict[str, Any], decision: Decision) -> Any:
        def page(environ: dict[str, Any], start_response: Any) -> Any:
            write = start_response("403 Forbidden", [("Content-Type", "text/plain")])
            write(b"written, ")
            return [b"then returned"]
        return page

    status, headers, body = call(make_wsgi(reject=reject).app, environ("/raw"))
    assert (status, body) == ("403 Forbidden", b"written, then returned")
    assert headers["Cache-Control"] == "no-store"


# --- a page that cannot be had: failopen's own refusal, and a log line -----------------------


class Closing:
    """A page body that fails after its first chunk, and records that it was closed."""

    closed = False

    def __iter__(self) -> Iterator[bytes]:
        yield b"<p>Plea"
        raise RuntimeError("the template broke half-way")

    def close(self) -> None:
        Closing.closed = True


def _half(environ: dict[str, Any], start_response: Any) -> Any:
    start_response("403 Forbidden", [("Content-Type", "text/html")])
    return Closing()


def _no_start(environ: dict[str, Any], start_response: Any) -> Any:
    return [b"no start_response"]


def _str_body(environ: dict[str, Any], start_response: Any) -> Any:
    start_response("403 Forbidden", [])
    return ["not bytes"]


def _bytes_status(environ: dict[str, Any], start_response: Any) -> Any:
    start_response(b"403 Forbidden", [])
    return [b""]


def _raises(environ: dict[str, Any], decision: Decision) -> Any:
    raise RuntimeError("the template is missing")


BROKEN: dict[str, Callable[[dict[str, Any], Decision], Any]] = {
    "raises": _raises,
    "returns None": lambda environ, decision: None,
    "returns a string": lambda environ, decision: "<h1>no</h1>",
    "fails half-way through its body": lambda environ, decision: _half,
    "never starts its response": lambda environ, decision: _no_start,
    "a str body": lambda environ, decision: _str_body,
    "a bytes status": lambda environ, decision: _bytes_status,
}


@pytest.mark.parametrize("broken", BROKEN)
def test_a_broken_page_falls_back_to_failopen_s_own_logged_without_secrets(
    make_wsgi: Make, caplog: pytest.LogCaptureFixture, broken: str
) -> None:
    stack = make_wsgi(reject=BROKEN[broken])
    with caplog.at_level(logging.ERROR, logger="failopen.wsgi"):
        html = stack.post("/raw", token=FakeVerifyAPI.BAD, data=FORM,
                          headers={"Accept": BROWSER})
        api = stack.post("/raw", data=FORM)
    assert html.status_code == 403 and b"<h1>Request refused</h1>" in html.get_data()
    assert html.headers["Cache-Control"] == "no-store"
    assert api.status_code == 403 and api.get_json()["error"]["code"] == "missing_token"
    assert stack.recorder.calls == []
    errors = [r for r in caplog.records if r.name == "failopen.wsgi"]
    assert len(errors) == 2 and all("reject=" in r.getMessage() for r in errors)
    assert all(r.exc_info for r in errors)
    assert FakeVerifyAPI.BAD not in caplog.text and PASSWORD not in caplog.text
    if broken == "fails half-way through its body":
        assert Closing.closed  # PEP 3333: the page's iterable is closed even when it failed


async def _async_page(environ: dict[str, Any], decision: Decision) -> Any:
    return Response("never")


@pytest.mark.parametrize("reject", [
    123, "myapp.views.refused", lambda: None, lambda environ, decision, extra: None, _async_page,
], ids=["int", "dotted path", "no arguments", "three arguments", "async"])
def test_reject_must_be_a_plain_callable_taking_the_environ_and_the_decision(
    reject: Any
) -> None:
    with pytest.raises(TypeError, match=r"reject="):
        FailOpenMiddleware(Response("app"), reject=reject)
