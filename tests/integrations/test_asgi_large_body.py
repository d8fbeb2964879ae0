"""A crafted body cannot hold the event loop while the middleware looks for the token in it.

Parsing a megabyte of tiny JSON arrays took ~100 ms of C code holding the GIL (a worker thread
would stall the loop as long). failopen.web now refuses to parse a JSON body of more values than
any log-in carries, and decodes only the token's own pair of a urlencoded body; the cost of both
is in tests/benchmarks/bench_asgi_body.py, not timed here.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable

import pytest
from _asgi_kit import Stack

from failopen.testing import FakeVerifyAPI

pytestmark = pytest.mark.anyio

Make = Callable[..., Stack]
FIELD = "enforcement-token"
GOOD = FakeVerifyAPI.GOOD


def worst_case_json(size: int, token: str = GOOD) -> bytes:
    """A JSON object of about ``size`` bytes that costs the most to parse per byte."""
    head = json.dumps({FIELD: token, "pad": []}).encode()[:-2]
    return head + b"[0]," * ((size - len(head) - 5) // 4) + b"[0]]}"


async def test_a_megabyte_of_tiny_json_values_is_refused_unparsed(make_asgi: Make) -> None:
    stack = make_asgi(max_body_bytes=2 << 20)
    response = await stack.client.post("/login", content=worst_case_json(1 << 20),
                                       headers={"Content-Type": "application/json"})
    assert (response.status_code, response.json()["error"]["code"]) == (403, "missing_token")
    assert stack.verify.requests == 0


async def test_a_large_sign_up_with_an_avatar_still_carries_its_token(make_asgi: Make) -> None:
    stack = make_asgi(max_body_bytes=2 << 20)
    avatar = base64.b64encode(bytes(range(256)) * 3000).decode()
    body = json.dumps({"username": "ann", "interests": list(range(500)), "avatar": avatar,
                       FIELD: GOOD}).encode()
    response = await stack.client.post("/login", content=body,
                                       headers={"Content-Type": "application/json"})
    assert response.status_code == 200, response.text
    assert response.json()["decision"]["outcome"] == "valid"
    assert response.json()["body_len"] == len(body)


async def test_a_megabyte_of_percent_escapes_around_the_token_still_finds_it(
    make_asgi: Make,
) -> None:
    stack = make_asgi(max_body_bytes=2 << 20)
    body = (b"pad=" + b"%41" * 150_000 + f"&{FIELD}={GOOD}&bio=".encode() + b"%42" * 150_000)
    response = await stack.client.post(
        "/login", content=body, headers={"Content-Type": "application/x-www-form-urlencoded"})
    assert response.status_code == 200, response.text
    assert response.json()["decision"]["outcome"] == "valid"
