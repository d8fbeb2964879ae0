"""The token inside a body: read on protected routes only, capped, replayed to the app unchanged."""

from __future__ import annotations

import json
import tracemalloc
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest
from _asgi_kit import Stack, chunks, drive, http_scope, sha256

from failopen.testing import FakeVerifyAPI

pytestmark = pytest.mark.anyio

Make = Callable[..., Stack]
GOOD = FakeVerifyAPI.GOOD
FIELD = "enforcement-token"
CAP = 1000


def multipart(boundary: str, parts: list[tuple[str, str | None, bytes]]) -> bytes:
    """A multipart/form-data body: (name, filename or None, content) per part."""
    out = b""
    for name, filename, content in parts:
        disposition = f'form-data; name="{name}"' + (f'; filename="{filename}"' if filename else "")
        out += f"--{boundary}\r\nContent-Disposition: {disposition}\r\n".encode()
        if filename:
            out += b"Content-Type: application/octet-stream\r\n"
        out += b"\r\n" + content + b"\r\n"
    return out + f"--{boundary}--\r\n".encode()


async def post_login(stack: Stack, body: bytes, content_type: str) -> httpx.Response:
    return await stack.client.post("/login", content=body,
                                   headers={"Content-Type": content_type})


# --- the token found in each kind of body, and the body replayed byte for byte ----------------


async def test_urlencoded_token_and_replay(make_asgi: Make) -> None:
    stack = make_asgi()
    body = f"username=ann%C3%A9&{FIELD}={GOOD}&password=p%26ss&empty=".encode()
    response = await post_login(stack, body, "application/x-www-form-urlencoded")
    assert response.status_code == 200
    got = response.json()
    assert got["decision"]["outcome"] == "valid"
    assert (got["body_sha256"], got["body_len"]) == (sha256(body), len(body))
    assert stack.verify.tokens_seen == [GOOD]


async def test_multipart_with_a_file_token_and_replay(make_asgi: Make) -> None:
    stack = make_asgi()
    upload = bytes(range(256)) * 3 + b"\r\n--not-the-boundary\r\n"
    body = multipart("b0undary42", [
        ("avatar", "me.png", upload),
        (FIELD, None, GOOD.encode()),
        ("username", None, "ann\u00e9".encode()),
    ])
    response = await post_login(stack, body, "multipart/form-data; boundary=b0undary42")
    assert response.status_code == 200
    got = response.json()
    assert got["decision"]["outcome"] == "valid"
    assert (got["body_sha256"], got["body_len"]) == (sha256(body), len(body))


async def test_a_file_named_like_the_field_is_not_the_token(make_asgi: Make) -> None:
    stack = make_asgi()
    body = multipart("bnd", [(FIELD, "token.txt", GOOD.encode())])
    response = await post_login(stack, body, "multipart/form-data; boundary=bnd")
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "missing_token"
    assert stack.verify.requests == 0


@pytest.mark.parametrize("content_type", ["application/json", "application/json; charset=utf-8",
                                          "application/vnd.api+json"])
async def test_json_token_and_replay(make_asgi: Make, content_type: str) -> None:
    stack = make_asgi()
    body = json.dumps({"username": "ann", FIELD: GOOD, "nested": {"x": [1, 2]}}).encode()
    response = await post_login(stack, body, content_type)
    assert response.status_code == 200
    got = response.json()
    assert got["decision"]["outcome"] == "valid"
    assert got["body_sha256"] == sha256(body)


@pytest.mark.parametrize(("body", "content_type"), [
    (b"{not json", "application/json"),
    (b'["a list"]', "application/json"),
    (json.dumps({FIELD: 42}).encode(), "application/json"),
    (b"--x\r\nbroken", "multipart/form-data; boundary=x"),
    (b"", "application/x-www-form-urlencoded"),
])
async def test_unreadable_bodies_carry_no_token(
    make_asgi: Make, body: bytes, content_type: str
) -> None:
    stack = make_asgi()
    response = await post_login(stack, body, content_type)
    assert (response.status_code, response.json()["error"]["code"]) == (403, "missing_token")


async def test_unreadable_body_is_still_replayed_when_the_flag_is_off(make_asgi: Make) -> None:
    stack = make_asgi()
    stack.runtime.flag.force_off("drill")
    body = b"{not json"
    response = await post_login(stack, body, "application/json")
    assert response.status_code == 200 and response.json()["body_sha256"] == sha256(body)


async def test_chunked_body_replays_the_same_bytes_then_the_servers_own(
    make_asgi: Make,
) -> None:
    stack = make_asgi()
    body = f"username=ann&{FIELD}={GOOD}&password=secret".encode()
    messages = chunks(body, 5, 13, 1)  # the token is split across two chunks
    scope = http_scope("/raw", headers=[("Content-Type", "application/x-www-form-urlencoded")])
    reply = await drive(stack.app, scope, messages)
    assert (reply.status, reply.body) == (200, body)
    # The very same bytes, as one message (chunks are not kept: see the slow-client test).
    assert stack.recorder.messages == [{"type": "http.request", "body": body, "more_body": False}]
    assert reply.receive_calls == len(messages)  # read once by failopen, never twice
    _, app_receive, _ = stack.recorder.calls[0]
    assert await app_receive() == {"type": "http.disconnect"}  # later calls reach the server
    assert stack.verify.tokens_seen == [GOOD]


async def test_streamed_request_body_through_httpx(make_asgi: Make) -> None:
    stack = make_asgi()
    parts = [b"username=ann&", f"{FIELD}={GOOD[:4]}".encode(), GOOD[4:].encode(), b"&x=1"]

    async def stream() -> AsyncIterator[bytes]:
        for part in parts:
            yield part

    response = await stack.client.post(
        "/login", content=stream(),
        headers={"Content-Type": "application/x-www-form-urlencoded"})
    assert response.status_code == 200
    assert response.json()["body_sha256"] == sha256(b"".join(parts))


async def test_header_token_leaves_the_body_unread(make_asgi: Make) -> None:
    stack = make_asgi()
    messages = chunks(b"a=1&b=2", 3)
    scope = http_scope("/raw", headers=[("Content-Type", "application/x-www-form-urlencoded"),
                                        ("X-Enforcement-Token", GOOD)])
    reply = await drive(stack.app, scope, messages)
    assert reply.status == 200
    assert stack.recorder.messages == messages
    assert stack.recorder.calls[0][0]["state"]["failopen"].outcome == "valid"


@pytest.mark.parametrize("content_type", [None, "application/octet-stream", "text/plain"])
async def test_other_content_types_are_never_read(
    make_asgi: Make, content_type: str | None
) -> None:
    stack = make_asgi()
    headers = [("Content-Type", content_type)] if content_type else []
    body = f"{FIELD}={GOOD}".encode()
    refused = await drive(stack.app, http_scope("/raw", headers=headers), chunks(body))
    assert (refused.status, refused.receive_calls) == (403, 0)
    stack.runtime.flag.force_off("drill")

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: Any) -> None:
        return None

    await stack.app(http_scope("/raw", headers=headers), receive, send)
    (_, app_receive, _), = stack.recorder.calls
    assert app_receive is receive  # the server's own receive, untouched


# --- the size cap ----------------------------------------------------------------------------


async def test_declared_length_over_the_cap_is_413_without_reading(make_asgi: Make) -> None:
    stack = make_asgi(max_body_bytes=CAP)
    body = f"{FIELD}={GOOD}&pad=".encode() + b"x" * CAP
    scope = http_scope("/raw", headers=[("Content-Type", "application/x-www-form-urlencoded"),
                                        ("Content-Length", str(len(body)))])
    reply = await drive(stack.app, scope, chunks(body))
    assert reply.status == 413
    assert reply.receive_calls == 0
    assert reply.json() == {"error": {"code": "body_too_large",
                                      "message": "The request body is too large."}}
    assert reply.headers["connection"] == "close"
    assert stack.recorder.calls == [] and stack.verify.requests == 0


async def test_chunked_body_over_the_cap_stops_reading_at_the_cap(make_asgi: Make) -> None:
    stack = make_asgi(max_body_bytes=CAP)
    body = f"{FIELD}={GOOD}&pad=".encode() + b"x" * (10 * CAP)
    messages = chunks(body, *([400] * 20))
    scope = http_scope("/raw", headers=[("Content-Type", "application/x-www-form-urlencoded")])
    reply = await drive(stack.app, scope, messages)
    assert reply.status == 413
    assert reply.receive_calls == 3  # 400 + 400 + 400 > 1000: nothing more is read
    assert stack.recorder.calls == []


async def test_a_lying_content_length_is_still_capped(make_asgi: Make) -> None:
    stack = make_asgi(max_body_bytes=CAP)
    body = b"x" * (3 * CAP)
    scope = http_scope("/raw", headers=[("Content-Type", "application/json"),
                                        ("Content-Length", "10")])
    reply = await drive(stack.app, scope, chunks(body, 600, 600))
    assert (reply.status, reply.receive_calls) == (413, 2)


async def test_exactly_the_cap_is_accepted(make_asgi: Make) -> None:
    stack = make_asgi(max_body_bytes=CAP)
    head = f"{FIELD}={GOOD}&pad=".encode()
    body = head + b"x" * (CAP - len(head))
    assert len(body) == CAP
    response = await post_login(stack, body, "application/x-www-form-urlencoded")
    assert response.status_code == 200 and response.json()["body_len"] == CAP
    over = await post_login(stack, body + b"x", "application/x-www-form-urlencoded")
    assert (over.status_code, over.json()["error"]["code"]) == (413, "body_too_large")


async def test_the_cap_does_not_apply_with_a_header_token(make_asgi: Make) -> None:
    stack = make_asgi(max_body_bytes=CAP)
    body = b"x" * (5 * CAP)
    response = await stack.client.post("/login", content=body, headers={
        "Content-Type": "application/x-www-form-urlencoded", "X-Enforcement-Token": GOOD})
    assert response.status_code == 200 and response.json()["body_len"] == len(body)


async def test_unprotected_routes_stream_without_a_cap(make_asgi: Make) -> None:
    stack = make_asgi(max_body_bytes=CAP)
    parts = [b"y" * 4000 for _ in range(8)]

    async def stream() -> AsyncIterator[bytes]:
        for part in parts:
            yield part

    response = await stack.client.post("/upload", content=stream(),
                                       headers={"Content-Type": "application/json"})
    assert response.status_code == 200
    assert response.json() == {"chunks": 8, "len": 32000, "failopen": False}


async def test_a_client_leaving_mid_body_gets_no_answer_and_the_app_no_call(
    make_asgi: Make,
) -> None:
    stack = make_asgi()
    scope = http_scope("/raw", headers=[("Content-Type", "application/json")])
    messages = [{"type": "http.request", "body": b'{"a": ', "more_body": True},
                {"type": "http.disconnect"}]
    reply = await drive(stack.app, scope, messages)
    assert reply.status is None and reply.body == b""
    assert stack.recorder.calls == [] and stack.verify.requests == 0


async def test_a_slow_client_in_tiny_chunks_costs_no_more_than_the_cap(make_asgi: Make) -> None:
    # One byte per message: kept as messages, each byte would hold a ~200-byte dict.
    cap = 100_000
    stack = make_asgi(max_body_bytes=cap)
    body = f"{FIELD}={GOOD}&pad=".encode()
    body += b"x" * (cap - len(body))
    sent = 0

    async def receive() -> dict[str, Any]:
        nonlocal sent
        sent += 1
        return {"type": "http.request", "body": body[sent - 1:sent], "more_body": sent < cap}

    async def send(message: Any) -> None:
        return None

    scope = http_scope("/raw", headers=[("Content-Type", "application/x-www-form-urlencoded")])
    tracemalloc.start()
    try:
        await stack.app(scope, receive, send)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 10 * cap, peak
    assert stack.recorder.messages[0]["body"] == body
    assert stack.verify.tokens_seen == [GOOD]


@pytest.mark.parametrize("length", ["9" * 5000, "1" + "0" * 40])
async def test_an_absurd_content_length_is_413_not_an_internal_error(
    make_asgi: Make, caplog: pytest.LogCaptureFixture, length: str
) -> None:
    stack = make_asgi(max_body_bytes=CAP)
    scope = http_scope("/raw", headers=[("Content-Type", "application/json"),
                                        ("Content-Length", length)])
    reply = await drive(stack.app, scope, chunks(b"{}"))
    assert (reply.status, reply.receive_calls) == (413, 0)
    assert not [r for r in caplog.records if r.levelno >= 40]


async def test_the_first_content_type_is_the_one_read(make_asgi: Make) -> None:
    # Starlette and Django read the first of repeated headers; failopen reads the same one.
    stack = make_asgi()
    body = f"{FIELD}={GOOD}".encode()
    scope = http_scope("/raw", headers=[("Content-Type", "application/x-www-form-urlencoded"),
                                        ("Content-Type", "text/plain")])
    reply = await drive(stack.app, scope, chunks(body))
    assert reply.status == 200 and stack.verify.tokens_seen == [GOOD]


async def test_while_enforcement_is_off_the_body_is_not_read(make_asgi: Make) -> None:
    # Nobody would look at the token: a large upload must not meet the cap, nor be parsed.
    stack = make_asgi(max_body_bytes=CAP)
    stack.runtime.flag.force_off("vendor ticket 1234")
    body = b"x" * (5 * CAP)
    scope = http_scope("/raw", headers=[("Content-Type", "multipart/form-data; boundary=x"),
                                        ("Content-Length", str(len(body)))])
    reply = await drive(stack.app, scope, chunks(body, 2 * CAP))
    assert (reply.status, reply.body) == (200, body)
    assert stack.recorder.calls[0][0]["state"]["failopen"].outcome == "bypassed_flag_off"
