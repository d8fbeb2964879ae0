"""The fake verify endpoint: answers like the vendor, misbehaves on demand, counts what it saw."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import httpx
import pytest

from failopen.testing._server import FakeRequest, LoopbackServer
from failopen.testing.clock import FakeClock
from failopen.testing.verify_api import FakeVerifyAPI

KEY = "fake-test-key"


@pytest.fixture
def api() -> FakeVerifyAPI:
    return FakeVerifyAPI(private_key=KEY)


@pytest.fixture
def client(api: FakeVerifyAPI) -> Iterator[httpx.Client]:
    with httpx.Client(transport=api.transport(), base_url="https://verify.test") as http:
        yield http


def post(client: httpx.Client, body: Any = None, *, path: str = FakeVerifyAPI.path,
         token: str = FakeVerifyAPI.GOOD) -> httpx.Response:
    if body is None:
        body = {"private_key": KEY, "session_token": token}
    return client.post(path, json=body)


def request(body: bytes, *, method: str = "POST", path: str = FakeVerifyAPI.path) -> FakeRequest:
    return FakeRequest(method=method, path=path, query={}, headers={}, body=body)


def encoded(private_key: str, token: str) -> bytes:
    data = {"private_key": private_key, "session_token": token}
    return httpx.Request("POST", "https://verify.test/", json=data).read()


# -- answers --------------------------------------------------------------------------------------


def test_good_token_answer_shape(client: httpx.Client) -> None:
    response = post(client)
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    body = response.json()
    details = body["session_details"]
    assert details["solved"] is True and details["verified"] is True
    assert details["session"] == FakeVerifyAPI.GOOD
    assert details["previously_verified"] is False
    created = datetime.fromisoformat(details["session_created"].replace("Z", "+00:00"))
    assert created.tzinfo is not None
    assert details["session_created"].endswith("Z")
    assert "error" not in body
    assert set(body["ip_intelligence"]) >= {"user_ip", "is_tor", "is_vpn", "is_proxy"}


@pytest.mark.parametrize(
    ("token", "solved", "verified"),
    [
        (FakeVerifyAPI.GOOD, True, True),
        (FakeVerifyAPI.BAD, False, False),
        (FakeVerifyAPI.UNVERIFIED, True, False),
    ],
)
def test_known_tokens(client: httpx.Client, token: str, solved: bool, verified: bool) -> None:
    response = post(client, token=token)
    assert response.status_code == 200
    details = response.json()["session_details"]
    assert (details["solved"], details["verified"]) == (solved, verified)


def test_denied_token_is_an_error_body_on_200(client: httpx.Client) -> None:
    response = post(client, token=FakeVerifyAPI.DENIED)
    assert response.status_code == 200
    assert response.json() == {"error": "DENIED ACCESS"}


def test_unknown_token_is_denied_with_400(client: httpx.Client) -> None:
    response = post(client, token="never-issued")
    assert response.status_code == 400
    assert response.json() == {"error": "DENIED ACCESS"}


def test_add_token(api: FakeVerifyAPI, client: httpx.Client) -> None:
    api.add_token("mine")
    api.add_token("mine-unsolved", solved=False, verified=False)
    assert post(client, token="mine").json()["session_details"]["solved"] is True
    assert post(client, token="mine-unsolved").json()["session_details"]["solved"] is False
    api.add_token(FakeVerifyAPI.GOOD, solved=False)  # redefining a token takes effect
    assert post(client).json()["session_details"]["solved"] is False


def test_second_verify_is_marked_previously_verified(client: httpx.Client) -> None:
    assert post(client).json()["session_details"]["previously_verified"] is False
    assert post(client).json()["session_details"]["previously_verified"] is True


def test_a_session_times_out_after_its_lifetime() -> None:
    clock = FakeClock()
    api = FakeVerifyAPI(private_key=KEY, clock=clock, session_lifetime=120)
    token, other = api.issue_token(), api.issue_token()
    clock.advance(119)
    with httpx.Client(transport=api.transport(), base_url="https://verify.test") as http:
        details = post(http, token=token).json()["session_details"]
        assert (details["session_timed_out"], details["previously_verified"]) == (False, False)
        assert details["session_created"] == "2027-01-15T08:00:00Z"  # FakeClock's start
        assert details["verified_at"] == "2027-01-15T08:01:59Z"
        clock.advance(1)
        details = post(http, token=other).json()["session_details"]
        assert (details["session_timed_out"], details["previously_verified"]) == (True, False)
        assert details["session_is_legit"] is False
        # The built-in tokens began with the fake; reset() begins their sessions again.
        assert post(http).json()["session_details"]["session_timed_out"] is True
        api.reset()
        assert post(http).json()["session_details"]["session_timed_out"] is False


def test_sessions_never_time_out_without_a_lifetime() -> None:
    clock = FakeClock()
    api = FakeVerifyAPI(private_key=KEY, clock=clock, session_lifetime=None)
    clock.advance(10 * 365 * 86400)
    reply = api.handler(request(encoded(KEY, api.GOOD)))
    assert json.loads(reply.body)["session_details"]["session_timed_out"] is False


@pytest.mark.parametrize("lifetime", [0, -1.0, float("nan")])
def test_session_lifetime_must_be_positive(lifetime: float) -> None:
    with pytest.raises(ValueError, match="session_lifetime"):
        FakeVerifyAPI(session_lifetime=lifetime)


def test_issued_tokens_are_fresh_and_good_once(api: FakeVerifyAPI, client: httpx.Client) -> None:
    tokens = [api.issue_token() for _ in range(3)]
    assert len(set(tokens)) == 3 and FakeVerifyAPI.GOOD not in tokens
    for token in tokens:
        details = post(client, token=token).json()["session_details"]
        assert (details["solved"], details["previously_verified"]) == (True, False)
    assert post(client, token=tokens[0]).json()["session_details"]["previously_verified"] is True
    unsolved = api.issue_token(solved=False, verified=False)
    assert post(client, token=unsolved).json()["session_details"]["solved"] is False


def test_adding_a_token_again_begins_a_new_session(api: FakeVerifyAPI,
                                                   client: httpx.Client) -> None:
    post(client)
    api.add_token(FakeVerifyAPI.GOOD)
    assert post(client).json()["session_details"]["previously_verified"] is False


@pytest.mark.parametrize(
    "body",
    [{"private_key": "wrong", "session_token": FakeVerifyAPI.GOOD},
     {"session_token": FakeVerifyAPI.GOOD}],
)
def test_wrong_or_missing_private_key_is_401(client: httpx.Client, body: Any) -> None:
    response = post(client, body)
    assert response.status_code == 401
    assert response.json() == {"error": "INVALID PRIVATE KEY"}


@pytest.mark.parametrize("body", [{"private_key": KEY}, {"private_key": KEY, "session_token": ""},
                                  {"private_key": KEY, "session_token": 7}])
def test_missing_session_token_is_400(client: httpx.Client, body: Any) -> None:
    response = post(client, body)
    assert response.status_code == 400
    assert response.json() == {"error": "MISSING SESSION TOKEN"}


@pytest.mark.parametrize("body", [b"not json", b"[1, 2]", b""])
def test_body_not_a_json_object_is_400(api: FakeVerifyAPI, body: bytes) -> None:
    reply = api.handler(request(body))
    assert reply.status == 400
    assert reply.body == b'{"error": "INVALID REQUEST"}'


def test_other_paths_are_404_and_other_methods_405(client: httpx.Client) -> None:
    assert post(client, path="/api/v4/verify").status_code == 404
    assert post(client, path="/").status_code == 404
    response = client.get(FakeVerifyAPI.path)
    assert response.status_code == 405
    assert response.headers["allow"] == "POST"


def test_default_private_key() -> None:
    api = FakeVerifyAPI()
    assert api.private_key == "test-private-key"
    assert api.handler(request(encoded("test-private-key", FakeVerifyAPI.GOOD))).status == 200
    assert api.handler(request(encoded(KEY, FakeVerifyAPI.GOOD))).status == 401


# -- bookkeeping ---------------------------------------------------------------------------------


def test_counts_requests_and_records_tokens(api: FakeVerifyAPI, client: httpx.Client) -> None:
    assert (api.requests, api.tokens_seen) == (0, [])
    post(client, token="a")
    post(client, token=FakeVerifyAPI.GOOD)
    post(client, {"private_key": KEY})  # no token: counted, nothing recorded
    client.get("/elsewhere")
    assert api.requests == 4
    assert api.tokens_seen == ["a", FakeVerifyAPI.GOOD]


def test_tokens_are_recorded_during_faults(api: FakeVerifyAPI, client: httpx.Client) -> None:
    api.set_fault("503")
    post(client, token="during-outage")
    assert api.tokens_seen == ["during-outage"]


def test_reset(api: FakeVerifyAPI, client: httpx.Client) -> None:
    api.add_token("kept")
    post(client)
    api.set_fault("500")
    api.reset()
    assert (api.requests, api.tokens_seen) == (0, [])
    response = post(client, token="kept")
    assert response.status_code == 200
    assert response.json()["session_details"]["previously_verified"] is False


def test_counting_is_thread_safe(api: FakeVerifyAPI) -> None:
    body = encoded(KEY, "t")

    def hammer() -> None:
        for _ in range(200):
            api.handler(request(body))

    threads = [threading.Thread(target=hammer) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert api.requests == 1600
    assert len(api.tokens_seen) == 1600


# -- faults, in process -------------------------------------------------------------------------


def test_faults_list() -> None:
    expected = {"500", "502", "503", "429", "timeout", "slow_drip", "reset", "truncated",
                "not_json", "empty", "wrong_shape"}
    assert expected == FakeVerifyAPI.FAULTS


def test_unknown_fault_is_refused(api: FakeVerifyAPI) -> None:
    with pytest.raises(ValueError, match="unknown fault 'down'"):
        api.set_fault("down")


@pytest.mark.parametrize(
    ("fault", "status", "content_type"),
    [
        ("500", 500, "application/json"),
        ("502", 502, "text/html"),
        ("503", 503, "text/html"),
        ("429", 429, "application/json"),
        ("not_json", 200, "text/html"),
        ("empty", 200, "application/json"),
        ("wrong_shape", 200, "application/json"),
    ],
)
def test_status_faults(
    api: FakeVerifyAPI, client: httpx.Client, fault: str, status: int, content_type: str
) -> None:
    api.set_fault(fault)
    response = post(client)
    assert response.status_code == status
    assert response.headers["content-type"] == content_type
    assert "retry-after" not in response.headers
    if fault == "empty":
        assert response.content == b""
    elif fault == "wrong_shape":
        body = response.json()
        assert isinstance(body, dict) and not {"session_details", "error"} & set(body)
    elif content_type == "text/html":
        with pytest.raises(ValueError):
            response.json()
    api.set_fault(None)
    assert post(client).status_code == 200


@pytest.mark.parametrize(("fault", "retry_after", "header"),
                         [("429", 2.5, "3"), ("503", 30, "30"), ("429", 0, "0")])
def test_retry_after_in_whole_seconds(
    api: FakeVerifyAPI, client: httpx.Client, fault: str, retry_after: float, header: str
) -> None:
    api.set_fault(fault, retry_after=retry_after)
    assert post(client).headers["retry-after"] == header


def test_retry_after_only_on_429_and_503(api: FakeVerifyAPI, client: httpx.Client) -> None:
    api.set_fault("500", retry_after=5)
    assert "retry-after" not in post(client).headers


@pytest.mark.parametrize(
    ("fault", "error"),
    [("timeout", httpx.ReadTimeout), ("reset", httpx.ReadError),
     ("truncated", httpx.RemoteProtocolError)],
)
def test_connection_faults_in_process(
    api: FakeVerifyAPI, client: httpx.Client, fault: str, error: type[Exception]
) -> None:
    api.set_fault(fault)
    with pytest.raises(error):
        post(client)


def test_slow_drip_in_process_is_a_read_timeout(api: FakeVerifyAPI, client: httpx.Client) -> None:
    # Over a real socket any sane deadline cuts a drip off; in-process it says so at once.
    api.set_fault("slow_drip")
    with pytest.raises(httpx.ReadTimeout):
        post(client)


def test_delivery_faults_carry_the_normal_answer(api: FakeVerifyAPI) -> None:
    body = encoded("wrong", "t")
    api.set_fault("slow_drip")
    dripped = api.handler(request(body))
    assert (dripped.status, dripped.drip) == (401, 0.05)
    api.set_fault("truncated")
    truncated = api.handler(request(body))
    assert (truncated.status, truncated.truncate) == (401, True)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.mark.anyio
async def test_async_transport(api: FakeVerifyAPI) -> None:
    async with httpx.AsyncClient(transport=api.transport()) as http:
        response = await http.post(
            "https://verify.test" + api.path,
            json={"private_key": KEY, "session_token": FakeVerifyAPI.GOOD},
        )
    assert response.json()["session_details"]["solved"] is True


# -- on a real socket -------------------------------------------------------------------------


@pytest.fixture
def served(api: FakeVerifyAPI) -> Iterator[tuple[FakeVerifyAPI, httpx.Client]]:
    with api.serve() as server, httpx.Client(base_url=server.url, timeout=2.0) as http:
        yield api, http


@pytest.mark.slow
def test_serve_answers_on_loopback(served: tuple[FakeVerifyAPI, httpx.Client]) -> None:
    api, http = served
    assert str(http.base_url).startswith("http://127.0.0.1:")
    assert post(http).json()["session_details"]["solved"] is True
    assert post(http, path="/other").status_code == 404
    assert api.requests == 2


@pytest.mark.slow
def test_serve_is_started_and_stops(api: FakeVerifyAPI) -> None:
    server = api.serve()
    assert isinstance(server, LoopbackServer)
    url = server.url
    with httpx.Client(base_url=url) as http:
        assert post(http).status_code == 200
    server.stop()
    with httpx.Client(base_url=url) as http, pytest.raises(httpx.ConnectError):
        post(http)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("fault", "error"),
    [
        ("timeout", httpx.ReadTimeout),
        # socketserver shuts the socket down (FIN) before the RST, so either error can come first
        ("reset", (httpx.ReadError, httpx.RemoteProtocolError)),
        ("truncated", httpx.RemoteProtocolError),
    ],
)
def test_connection_faults_on_loopback(
    served: tuple[FakeVerifyAPI, httpx.Client],
    fault: str,
    error: type[Exception] | tuple[type[Exception], ...],
) -> None:
    api, http = served
    api.set_fault(fault)
    with pytest.raises(error):
        http.post(api.path, json={"private_key": KEY, "session_token": FakeVerifyAPI.GOOD},
                  timeout=0.3)


@pytest.mark.slow
def test_slow_drip_on_loopback_sends_one_byte_at_a_time(
    served: tuple[FakeVerifyAPI, httpx.Client]
) -> None:
    api, http = served
    api.set_fault("slow_drip")
    body = {"private_key": KEY, "session_token": FakeVerifyAPI.GOOD}
    with http.stream("POST", api.path, json=body, timeout=0.3) as response:
        assert response.status_code == 200
        raw = response.iter_raw()
        chunks = [next(raw) for _ in range(4)]
    assert [len(chunk) for chunk in chunks] == [1, 1, 1, 1]
