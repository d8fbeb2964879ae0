from __future__ import annotations

import httpx
import pytest
from _rai_fake import AUTHORIZE, BASE, CLIENT_ID, SECRET, FakeRai, bearer, envelope, token_value

from failopen.rai import ClientCredentialsAuth, Unauthorized

TOKEN_URL = BASE + AUTHORIZE


def ok(request: httpx.Request) -> httpx.Response:
    return httpx.Response(200, json={"ok": True})


def plain_client(fake: FakeRai, auth: ClientCredentialsAuth) -> httpx.Client:
    return httpx.Client(base_url=BASE, auth=auth, transport=httpx.MockTransport(fake))


def test_works_as_a_plain_httpx_auth() -> None:
    fake = FakeRai(ok)
    auth = ClientCredentialsAuth(TOKEN_URL, CLIENT_ID, SECRET)
    with plain_client(fake, auth) as client:
        assert client.get("/api/rai/v1/cohorts/x").json() == {"ok": True}
        client.get("/api/rai/v1/cohorts/y")
    assert fake.auth_calls == 1
    assert [bearer(r) for r in fake.requests] == [token_value(1)] * 2


def test_invalidate_forces_a_new_token() -> None:
    fake = FakeRai(ok)
    auth = ClientCredentialsAuth(TOKEN_URL, CLIENT_ID, SECRET)
    with plain_client(fake, auth) as client:
        client.get("/a")
        auth.invalidate()
        client.get("/b")
    assert [bearer(r) for r in fake.requests] == [token_value(1), token_value(2)]


def test_expiry_uses_the_injected_timer_and_a_margin() -> None:
    now = [0.0]
    fake = FakeRai(ok, expires_in=300)  # margin min(60, 30) = 30 -> kept 270s
    auth = ClientCredentialsAuth(TOKEN_URL, CLIENT_ID, SECRET, timer=lambda: now[0])
    with plain_client(fake, auth) as client:
        client.get("/a")
        now[0] = 269.9
        client.get("/a")
        assert fake.auth_calls == 1
        now[0] = 270.1
        client.get("/a")
        assert fake.auth_calls == 2


def test_a_zero_lifetime_token_is_used_once_and_never_cached() -> None:
    fake = FakeRai(ok, expires_in=0)
    auth = ClientCredentialsAuth(TOKEN_URL, CLIENT_ID, SECRET)
    with plain_client(fake, auth) as client:
        client.get("/a")
        client.get("/a")
    assert [bearer(r) for r in fake.requests] == [token_value(1), token_value(2)]


def test_refused_credentials_raise_unauthorized() -> None:
    fake = FakeRai(ok, authorize=lambda r: envelope(401, "unauthorized", "invalid client"))
    auth = ClientCredentialsAuth(TOKEN_URL, CLIENT_ID, SECRET)
    with plain_client(fake, auth) as client, pytest.raises(Unauthorized, match="invalid client"):
        client.get("/a")
    assert fake.requests == []


def test_the_token_request_inherits_the_request_timeout() -> None:
    seen: list[object] = []

    def authorize(request: httpx.Request) -> None:
        seen.append(request.extensions.get("timeout"))

    fake = FakeRai(ok, authorize=authorize)
    auth = ClientCredentialsAuth(TOKEN_URL, CLIENT_ID, SECRET)
    with httpx.Client(auth=auth, transport=httpx.MockTransport(fake), timeout=7.0) as client:
        client.get(BASE + "/a")
    assert seen == [httpx.Timeout(7.0).as_dict()]


def test_repr_and_redact_hide_the_secret_and_tokens() -> None:
    fake = FakeRai(ok)
    auth = ClientCredentialsAuth(TOKEN_URL, CLIENT_ID, SECRET)
    with plain_client(fake, auth) as client:
        client.get("/a")
    text = f"{auth!r} {auth._cache!r} {auth._cached()!r}"
    assert SECRET not in text and token_value(1) not in text
    assert CLIENT_ID in repr(auth)
    assert auth.redact(f"x {SECRET} y {token_value(1)} z") == "x [redacted] y [redacted] z"


def test_a_secret_cut_by_the_snippet_limit_does_not_leak() -> None:
    from failopen.rai._base import error_from_response

    secret = "cs_live_0123456789abcdefghijklmnopqrstuvwxyz"
    auth = ClientCredentialsAuth("https://rai.test/api/rai/v1/authorize", "id", secret)
    for padding in range(0, 200, 7):  # the cut falls at every position of the secret
        body = ("x" * padding + '{"client_secret":"' + secret + '"}').encode()
        error = error_from_response(400, {"content-type": "text/plain"}, body, auth.redact)
        assert secret[:12] not in str(error), padding


def test_a_json_escaped_secret_is_redacted_too() -> None:
    secret = 'pa"ss\\word-1234567890'
    auth = ClientCredentialsAuth("https://rai.test/api/rai/v1/authorize", "id", secret)
    import json as _json

    assert "pa" + '\\"ss' not in auth.redact(_json.dumps({"client_secret": secret}))
