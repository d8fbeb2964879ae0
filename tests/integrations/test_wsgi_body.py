"""The WSGI middleware reads a token from the body within the cap and replays the body to the app.

Flask must parse the very same form, files and JSON it would have without failopen; a body over
FAILOPEN_MAX_BODY_BYTES is refused unread when it says its length, after ``cap + 1`` bytes when
chunked; a body nothing bounds is never read.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable

import pytest
from _wsgi_kit import Stream, WsgiStack, call, environ, sha256

from failopen.testing import FakeVerifyAPI

Make = Callable[..., WsgiStack]
CAP = 4096


def test_urlencoded_body_token_is_read_and_replayed(make_wsgi: Make) -> None:
    stack = make_wsgi()
    token = stack.verify.issue_token()
    response = stack.post(data={"username": "ann", "enforcement-token": token})
    body = response.get_json()
    assert response.status_code == 200 and body["decision"]["outcome"] == "valid"
    assert body["form"] == {"username": "ann", "enforcement-token": token}
    assert stack.verify.tokens_seen == [token]


def test_multipart_body_with_a_file_is_replayed_byte_for_byte(make_wsgi: Make) -> None:
    stack = make_wsgi()
    token = stack.verify.issue_token()
    avatar = bytes(range(256)) * 8
    response = stack.post(data={"username": "ann", "enforcement-token": token,
                                "avatar": (io.BytesIO(avatar), "a.png", "image/png")})
    body = response.get_json()
    assert response.status_code == 200, response.data
    assert body["form"] == {"username": "ann", "enforcement-token": token}
    assert body["files"] == {"avatar": sha256(avatar)}


def test_json_body_token_is_read_and_replayed(make_wsgi: Make) -> None:
    stack = make_wsgi()
    token = stack.verify.issue_token()
    sent = {"username": "ann", "enforcement-token": token, "nested": [1, {"a": None}]}
    response = stack.post(json=sent)
    body = response.get_json()
    assert response.status_code == 200 and body["json"] == sent
    assert body["body_sha256"] == sha256(json.dumps(sent).encode())


def test_a_header_token_leaves_the_body_unread(make_wsgi: Make) -> None:
    stack = make_wsgi()
    env = environ("/raw", body=b"username=ann", CONTENT_TYPE="application/x-www-form-urlencoded",
                  CONTENT_LENGTH="12", HTTP_X_ENFORCEMENT_TOKEN=FakeVerifyAPI.GOOD)
    stream = env["wsgi.input"]
    status, _, body = call(stack.app, env)
    assert (status, body) == ("200 OK", b"username=ann")
    assert stack.recorder.inputs == [stream]


def test_another_media_type_streams_to_the_app_unread(make_wsgi: Make) -> None:
    stack = make_wsgi()
    upload = b"\x00" * (CAP * 4)  # over any cap: not ours to read
    env = environ("/raw", body=upload, CONTENT_TYPE="application/octet-stream",
                  CONTENT_LENGTH=str(len(upload)), HTTP_X_ENFORCEMENT_TOKEN=FakeVerifyAPI.GOOD)
    stream = env["wsgi.input"]
    status, _, body = call(stack.app, env)
    assert status == "200 OK" and body == upload and stack.recorder.inputs == [stream]
    refused = environ("/raw", body=upload, CONTENT_TYPE="application/octet-stream",
                      CONTENT_LENGTH=str(len(upload)))
    assert call(stack.app, refused)[0].startswith("403")
    assert refused["wsgi.input"].at == 0


def test_a_declared_length_over_the_cap_is_413_unread(make_wsgi: Make) -> None:
    stack = make_wsgi(max_body_bytes=CAP)
    env = environ("/raw", body=b"x" * (CAP + 1), CONTENT_TYPE="application/json",
                  CONTENT_LENGTH=str(CAP + 1))
    status, headers, body = call(stack.app, env)
    assert status == "413 Request Entity Too Large"
    assert json.loads(body)["error"]["code"] == "body_too_large"
    assert headers["Connection"] == "close"
    assert env["wsgi.input"].at == 0 and stack.recorder.calls == []
    huge = environ("/raw", CONTENT_TYPE="application/json", CONTENT_LENGTH="9" * 40)
    assert call(stack.app, huge)[0].startswith("413")


def test_a_chunked_body_is_read_to_the_cap_plus_one_at_most(make_wsgi: Make) -> None:
    stack = make_wsgi(max_body_bytes=CAP)
    env = environ("/raw", body=b"{" + b" " * (CAP * 10), CONTENT_TYPE="application/json",
                  HTTP_TRANSFER_ENCODING="chunked", **{"wsgi.input_terminated": True})
    status, _, _ = call(stack.app, env)
    assert status.startswith("413") and env["wsgi.input"].at == CAP + 1


def test_a_chunked_body_within_the_cap_is_replayed_with_its_length(make_wsgi: Make) -> None:
    stack = make_wsgi(max_body_bytes=CAP)
    token = stack.verify.issue_token()
    sent = f"username=ann&enforcement-token={token}".encode()
    env = environ("/raw", body=sent, CONTENT_TYPE="application/x-www-form-urlencoded",
                  HTTP_TRANSFER_ENCODING="chunked", **{"wsgi.input_terminated": True})
    status, _, body = call(stack.app, env)
    assert (status, body) == ("200 OK", sent)
    assert env["CONTENT_LENGTH"] == str(len(sent))


def test_a_body_with_no_length_and_no_end_is_not_read(make_wsgi: Make) -> None:
    stack = make_wsgi()
    env = environ("/raw", body=b"enforcement-token=" + FakeVerifyAPI.GOOD.encode(),
                  CONTENT_TYPE="application/x-www-form-urlencoded")
    status, _, _ = call(stack.app, env)
    assert status.startswith("403") and env["wsgi.input"].at == 0


@pytest.mark.parametrize("stream", [Stream(b"{}"), Stream(b"", fail=True)])
def test_a_body_that_ends_early_is_400_not_judged(make_wsgi: Make, stream: Stream) -> None:
    stack = make_wsgi()
    env = environ("/raw", CONTENT_TYPE="application/json", CONTENT_LENGTH="100",
                  **{"wsgi.input": stream})
    status, headers, body = call(stack.app, env)
    assert status == "400 Bad Request" and headers["Connection"] == "close"
    assert stack.recorder.calls == [] and stack.verify.requests == 0


@pytest.mark.parametrize("length", ["", "abc", "-5"])
def test_an_unreadable_length_reads_nothing(make_wsgi: Make, length: str) -> None:
    stack = make_wsgi()
    env = environ("/raw", body=b"{}", CONTENT_TYPE="application/json", CONTENT_LENGTH=length)
    assert call(stack.app, env)[0].startswith("403")
    assert env["wsgi.input"].at == 0


def test_a_chunked_form_reaches_flask_whole(make_wsgi: Make) -> None:
    stack = make_wsgi()
    token = stack.verify.issue_token()
    sent = f"username=ann&enforcement-token={token}".encode()
    env = environ("/login", body=sent, CONTENT_TYPE="application/x-www-form-urlencoded",
                  HTTP_TRANSFER_ENCODING="chunked", **{"wsgi.input_terminated": True})
    status, _, body = call(stack.app, env)
    assert status == "200 OK", body
    assert json.loads(body)["form"] == {"username": "ann", "enforcement-token": token}
