"""A token in the body is found whatever read ``request.POST`` before the guard did.

``CsrfViewMiddleware.process_view`` reads ``request.POST`` before failopen's ``process_view``
when failopen comes after it in MIDDLEWARE (the usual place). For a JSON body Django leaves an
empty ``_post`` and never touches the body: a token there must still be found, and the body must
still be there for the view. The CSRF check is on here (``enforce_csrf_checks=True``): Django's
test client skips it by default, which hid this.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import urlencode

import pytest
from django.conf import settings
from django.core.files.uploadedfile import SimpleUploadedFile
from django.core.handlers.asgi import ASGIHandler
from django.http import HttpRequest, HttpResponse
from django.test import override_settings

from failopen.testing import FakeVerifyAPI

OURS = "failopen.integrations.django.middleware.FailOpenMiddleware"
OTHERS = [name for name in settings.MIDDLEWARE if name != OURS]
ORDERS = {
    "after_csrf": [*OTHERS, OURS],  # CSRF's process_view reads request.POST first
    "before_csrf": [OURS, *OTHERS],
    # A middleware that reads request.POST in __call__: before even the path-protected judge.
    "after_a_post_reader": [*OTHERS, f"{__name__}.ReadsPost", OURS],
}
ROUTES = {
    "decorated": "/signup/", "decorated_async": "/signup/async/",
    "named": "/auth/login/", "path": "/login/json/",
}
CSRF = "c" * 32  # an unmasked secret: valid as the cookie and as the header
HEADERS = {"X-CSRFToken": CSRF, "accept": "application/json"}
CAP = 64 * 1024


class ReadsPost:
    """Reads ``request.POST`` before the rest of the chain runs (a method override, a logger)."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        request.POST  # noqa: B018  # the read is the point
        return self.get_response(request)


@pytest.fixture
def urls(use_failopen: Any) -> Iterator[None]:
    use_failopen(PROTECTED_PATHS=["/login/"], PROTECTED_VIEWS=["account_login"],
                 PROTECTED_METHODS=["POST", "PUT"], MAX_BODY_BYTES=CAP)
    with override_settings(ROOT_URLCONF="django_test_urls_bodies"):
        yield


def send(client: Any, url: str, body: str, fields: dict[str, str], method: str = "post") -> Any:
    """``fields`` as a JSON, urlencoded or multipart body (with a file part), CSRF header on."""
    call = getattr(client, method)
    if body == "json":
        return call(url, json.dumps(fields), content_type="application/json", headers=HEADERS)
    if body == "urlencoded":
        return call(url, urlencode(fields), content_type="application/x-www-form-urlencoded",
                    headers=HEADERS)
    upload = SimpleUploadedFile("avatar.png", b"\x89PNG" + b"x" * 500)
    return call(url, {**fields, "avatar": upload}, headers=HEADERS)


def csrf_client(make_client: Callable[..., Any]) -> Any:
    """A client that runs the CSRF check (make it under the MIDDLEWARE it is to use: its
    handler loads the chain on first use)."""
    client = make_client(enforce_csrf_checks=True)
    client.cookies["csrftoken"] = CSRF
    return client


@pytest.mark.parametrize("body", ["json", "urlencoded", "multipart"])
@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize("order", ORDERS)
def test_token_in_the_body_is_found_whatever_read_the_form_first(
    make_client: Callable[..., Any], client_kind: str, urls: None,
    fake_verify_api: FakeVerifyAPI, order: str, route: str, body: str,
) -> None:
    url = ROUTES[route]
    with override_settings(MIDDLEWARE=ORDERS[order]):
        client = csrf_client(make_client)
        token = fake_verify_api.issue_token()
        admitted = send(client, url, body, {"username": "ann", "enforcement-token": token})
        missing = send(client, url, body, {"username": "ann"})
        forged = send(client, url, body, {"username": "ann",
                                          "enforcement-token": FakeVerifyAPI.BAD})
    assert admitted.status_code == 200, admitted.content
    files = ["avatar"] if body == "multipart" else []
    assert admitted.json() == {"user": "ann", "files": files, "outcome": "valid"}
    assert missing.status_code == 403
    assert missing.json()["error"]["code"] == "missing_token"
    assert forged.status_code == 403
    assert forged.json()["error"]["code"] == "invalid_token"
    assert fake_verify_api.requests == 2  # the admitted and the forged token; nothing twice


@pytest.mark.parametrize("order", ORDERS)
def test_json_put_after_a_post_reader_is_searched(
    make_client: Callable[..., Any], client_kind: str, urls: None,
    fake_verify_api: FakeVerifyAPI, order: str,
) -> None:
    """``request.POST`` of a PUT is empty without reading anything: the body still counts."""
    with override_settings(MIDDLEWARE=ORDERS[order]):
        client = csrf_client(make_client)
        token = fake_verify_api.issue_token()
        admitted = send(client, "/auth/login/", "json",
                        {"username": "ann", "enforcement-token": token}, method="put")
    assert admitted.status_code == 200, admitted.content
    assert admitted.json()["outcome"] == "valid"


@pytest.mark.parametrize(("order", "body", "readable"), [
    ("after_csrf", "json", True), ("before_csrf", "json", True),
    # Parsed from the stream by CSRF: Django keeps no raw body, and failopen makes none up.
    ("after_csrf", "multipart", False), ("before_csrf", "multipart", True),
])
def test_refusal_page_sees_the_body_django_would_give_it(
    make_client: Callable[..., Any], client_kind: str, urls: None, use_failopen: Any,
    order: str, body: str, readable: bool,
) -> None:
    use_failopen(PROTECTED_PATHS=[], REJECT_VIEW="django_test_urls_bodies.reject_with_body")
    fields = {"username": "ann", "comment": "x" * 16}
    with override_settings(MIDDLEWARE=ORDERS[order], ROOT_URLCONF="django_test_urls_bodies"):
        client = csrf_client(make_client)
        response = send(client, "/signup/", body, fields)
    assert response.status_code == 403, response.content
    seen = response.json()["body"]
    if readable:  # all of it: the fields, and for multipart the file part too
        assert isinstance(seen, int) and seen >= len(json.dumps(fields)), seen
    else:
        assert seen == "unreadable"


@pytest.mark.parametrize("order", ORDERS)
def test_json_over_the_cap_is_refused_whatever_read_the_form_first(
    make_client: Callable[..., Any], client_kind: str, urls: None,
    fake_verify_api: FakeVerifyAPI, order: str,
) -> None:
    with override_settings(MIDDLEWARE=ORDERS[order]):
        client = csrf_client(make_client)
        response = send(client, "/signup/", "json", {"enforcement-token": FakeVerifyAPI.GOOD,
                                                     "pad": "x" * 2 * CAP})
    assert response.status_code == 413
    assert fake_verify_api.requests == 0


@pytest.mark.parametrize("order", ["after_csrf", "before_csrf"])
def test_chunked_json_after_csrf_is_read_no_further_than_the_cap(
    urls: None, fake_verify_api: FakeVerifyAPI, order: str
) -> None:
    """Under ASGI a chunked body has no length: only the cap bounds what failopen reads, also
    after CSRF left an empty ``request.POST`` behind."""
    from failopen.integrations.django import conf

    token = fake_verify_api.issue_token()
    padded = json.dumps({"enforcement-token": token, "pad": "x" * 2 * CAP}).encode()
    small = json.dumps({"enforcement-token": token, "username": "ann"}).encode()

    async def scenario() -> list[tuple[int, bytes]]:
        try:
            return [await chunked_post("/signup/", padded), await chunked_post("/signup/", small)]
        finally:
            await conf.runtime().aclose()

    with override_settings(MIDDLEWARE=ORDERS[order]):
        (big_status, _), (small_status, answer) = asyncio.run(scenario())
    assert big_status == 413
    assert small_status == 200, answer
    assert json.loads(answer) == {"user": "ann", "files": [], "outcome": "valid"}


async def chunked_post(path: str, body: bytes) -> tuple[int, bytes]:
    """POST ``body`` as JSON through Django's ASGIHandler in 4 KiB chunks, no Content-Length."""
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
             "method": "POST", "path": path, "raw_path": path.encode(),
             "query_string": b"", "root_path": "", "scheme": "http",
             "headers": [(b"host", b"testserver"), (b"content-type", b"application/json"),
                         (b"transfer-encoding", b"chunked"), (b"x-csrftoken", CSRF.encode()),
                         (b"cookie", f"csrftoken={CSRF}".encode())],
             "client": ("127.0.0.1", 5000), "server": ("testserver", 80)}
    chunks = [{"type": "http.request", "body": body[i:i + 4096], "more_body": True}
              for i in range(0, len(body), 4096)]
    chunks.append({"type": "http.request", "body": b"", "more_body": False})
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        if chunks:
            return chunks.pop(0)
        await asyncio.Event().wait()  # the client waits for the answer
        raise AssertionError("unreachable")

    async def send_message(message: dict[str, Any]) -> None:
        sent.append(message)

    await ASGIHandler()(scope, receive, send_message)
    status = next(m["status"] for m in sent if m["type"] == "http.response.start")
    answer = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return int(status), answer
