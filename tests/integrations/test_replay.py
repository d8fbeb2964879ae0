"""One solved token admits one request: a replayed or timed-out token is refused 403.

Through the guard with the real verify client, and end to end through the ASGI middleware with
the test kit's fake verify API on a loopback socket. A refused replay is never evidence of an
outage: the status page is not even asked.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest
from _asgi_kit import starlette_app
from failopen.integrations.asgi import FailOpenMiddleware

from failopen import Config
from failopen.runtime import FailOpen
from failopen.testing import FakeClock, FakeStatusPage, FakeVerifyAPI

pytestmark = pytest.mark.anyio

REPLAYED = "token rejected: token replayed: verified before"
TIMED_OUT = "token rejected: session timed out"


@pytest.fixture
def clock() -> FakeClock:
    """The fake vendor's clock only: the runtime's watcher would spin a FakeClock forward."""
    return FakeClock()


@pytest.fixture
def page() -> FakeStatusPage:
    return FakeStatusPage()


@pytest.fixture
def verify(clock: FakeClock) -> Iterator[FakeVerifyAPI]:
    api = FakeVerifyAPI(clock=clock, session_lifetime=300)
    with api.serve():
        yield api


@pytest.fixture
async def runtime(page: FakeStatusPage, verify: FakeVerifyAPI) -> AsyncIterator[FailOpen]:
    config = Config(status_url="https://status.test", verify_url=verify.verify_url,
                    private_key=verify.private_key, protected_paths=("/login",),
                    verify_timeout=5.0)
    built = FailOpen(config, status_transport=page.transport())
    yield built
    await built.aclose()


@pytest.fixture
async def client(runtime: FailOpen) -> AsyncIterator[httpx.AsyncClient]:
    app = FailOpenMiddleware(starlette_app(), runtime=runtime)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app),
                                 base_url="http://testserver") as http:
        yield http


async def login(client: httpx.AsyncClient, token: str) -> httpx.Response:
    return await client.post("/login", headers={"X-Enforcement-Token": token,
                                                "Accept": "application/json"})


async def test_guard_admits_a_token_once(runtime: FailOpen, page: FakeStatusPage,
                                         verify: FakeVerifyAPI) -> None:
    first = runtime.decide(FakeVerifyAPI.GOOD, path="/login")
    assert (first.allow, first.outcome) == (True, "valid")
    for _ in range(5):
        again = runtime.decide(FakeVerifyAPI.GOOD, path="/login")
        assert (again.allow, again.bypassed, again.status_code, again.outcome, again.reason) == (
            False, False, 403, "invalid_token", REPLAYED)
    # The watcher's own polls aside, no confirmation was asked for: a replay is not a sign.
    assert runtime.confirmer is not None and runtime.confirmer.requests == 0
    assert verify.tokens_seen == [FakeVerifyAPI.GOOD] * 6


async def test_guard_refuses_a_timed_out_session(runtime: FailOpen, verify: FakeVerifyAPI,
                                                 clock: FakeClock) -> None:
    token = verify.issue_token()
    clock.advance(300)
    decision = await runtime.adecide(token, path="/login")
    assert (decision.status_code, decision.outcome, decision.reason) == (
        403, "invalid_token", TIMED_OUT)


async def test_asgi_admits_a_solved_token_once(client: httpx.AsyncClient,
                                               verify: FakeVerifyAPI) -> None:
    token = verify.issue_token()
    first = await login(client, token)
    assert first.status_code == 200
    assert first.json()["decision"]["outcome"] == "valid"
    for _ in range(3):
        again = await login(client, token)
        assert again.status_code == 403
        # The client learns the outcome; the reason (which check refused) stays in the log.
        assert again.json() == {"error": {
            "code": "invalid_token", "message": "The enforcement token was not accepted."}}
    assert (await login(client, verify.issue_token())).status_code == 200  # a new solve passes


async def test_asgi_refuses_a_timed_out_session(client: httpx.AsyncClient, verify: FakeVerifyAPI,
                                                clock: FakeClock, caplog: Any) -> None:
    token = verify.issue_token()
    clock.advance(301)
    with caplog.at_level("INFO", logger="failopen.guard"):
        response = await login(client, token)
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "invalid_token"
    assert TIMED_OUT in caplog.text
