"""The verify call: every answer the vendor can give, mapped to an outcome, sync and async."""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from types import SimpleNamespace
from typing import Any

import httpx
import pytest

import failopen.providers.verify as verify_module
from failopen.exceptions import ConfigError, FetchOverloaded
from failopen.providers.exchange import fetch as http_fetch
from failopen.providers.verify import (
    MAX_TOKEN_LENGTH,
    HttpVerifier,
    Verifier,
    VerifyOutcome,
    VerifyResult,
)
from failopen.testing._server import FakeRequest, Reply, as_transport
from failopen.testing.clock import FakeClock as KitClock
from failopen.testing.verify_api import FakeVerifyAPI

URL = "https://verify.test/api/v4/verify/"
KEY = "pk-live-7Q2xV9mB4kR8sT1w-secret"
TOKEN = "61834c1a3e2d94f07.2519381405|r=eu-west-1|meta=3|metabgclr=transparent|pk=A1B2C3"
SECRETS = (KEY, TOKEN)

VALID, INVALID = VerifyOutcome.VALID, VerifyOutcome.INVALID
UNAVAILABLE, RATE_LIMITED = VerifyOutcome.UNAVAILABLE, VerifyOutcome.RATE_LIMITED
OVERLOADED = VerifyOutcome.OVERLOADED

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(params=["sync", "async"])
def mode(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def assert_no_secret(text: str) -> None:
    for secret in SECRETS:
        assert secret not in text
        assert secret[:12] not in text


@pytest.fixture(autouse=True)
def no_secrets_in_logs(caplog: pytest.LogCaptureFixture) -> Iterator[None]:
    """Every test runs with failopen logging at DEBUG; no record may carry the key or token."""
    caplog.set_level(logging.DEBUG, logger="failopen")
    yield
    for when in ("setup", "call"):
        for record in caplog.get_records(when):
            assert_no_secret(record.getMessage())


async def call(verifier: HttpVerifier, token: str, mode: str) -> VerifyResult:
    """One verify, sync or async; checks the result carries no secret."""
    result = verifier.verify(token) if mode == "sync" else await verifier.averify(token)
    assert_no_secret(repr(result))
    assert_no_secret(str(result))
    assert_no_secret(result.reason)
    return result


@pytest.fixture
async def make() -> AsyncIterator[Callable[..., HttpVerifier]]:
    """Build verifiers (in-process by default) and close them after the test."""
    made: list[HttpVerifier] = []

    def build(
        handler: Callable[[FakeRequest], Reply] | None = None,
        *,
        url: str = URL,
        transport: Any = None,
        **kwargs: Any,
    ) -> HttpVerifier:
        if handler is not None:
            transport = as_transport(handler)
        verifier = HttpVerifier(
            url, KEY, transport=transport, async_transport=transport, **kwargs
        )
        made.append(verifier)
        return verifier

    yield build
    for verifier in made:
        verifier.close()
        await verifier.aclose()


@pytest.fixture
def api() -> FakeVerifyAPI:
    fake = FakeVerifyAPI(private_key=KEY)
    fake.add_token(TOKEN)
    return fake


def replying(reply: Reply) -> Callable[[FakeRequest], Reply]:
    return lambda request: reply


# -- the request --------------------------------------------------------------------------------


async def test_posts_key_and_token_as_json(make: Any, mode: str) -> None:
    seen: list[FakeRequest] = []

    def handler(request: FakeRequest) -> Reply:
        seen.append(request)
        return Reply.json({"session_details": {"solved": True}})

    result = await call(make(handler), TOKEN, mode)
    assert result.outcome is VALID
    (request,) = seen
    assert request.method == "POST"
    assert request.path == "/api/v4/verify/"
    assert request.headers["content-type"] == "application/json"
    assert request.json() == {"private_key": KEY, "session_token": TOKEN}


# -- the fake verify API end to end, in process ---------------------------------------------------


@pytest.mark.parametrize(
    ("token", "outcome", "reason"),
    [
        (TOKEN, VALID, "solved"),
        (FakeVerifyAPI.GOOD, VALID, "solved"),
        (FakeVerifyAPI.UNVERIFIED, VALID, "solved"),
        (FakeVerifyAPI.BAD, INVALID, "not solved"),
        (FakeVerifyAPI.DENIED, INVALID, "denied the token: DENIED ACCESS"),
        ("unknown-token", INVALID, "HTTP 400"),
    ],
)
async def test_fake_tokens(
    make: Any, api: FakeVerifyAPI, mode: str, token: str, outcome: VerifyOutcome, reason: str
) -> None:
    result = await call(make(transport=api.transport()), token, mode)
    assert (result.outcome, result.valid) == (outcome, outcome is VALID)
    assert reason in result.reason
    assert api.tokens_seen == [token]


@pytest.mark.parametrize(
    ("token", "outcome", "reason"),
    [
        (FakeVerifyAPI.GOOD, VALID, "solved and verified"),
        (FakeVerifyAPI.UNVERIFIED, INVALID, "solved but not verified"),
        (FakeVerifyAPI.BAD, INVALID, "challenge not solved"),
    ],
)
async def test_require_verified(
    make: Any, api: FakeVerifyAPI, mode: str, token: str, outcome: VerifyOutcome, reason: str
) -> None:
    verifier = make(transport=api.transport(), require_verified=True)
    result = await call(verifier, token, mode)
    assert result.outcome is outcome
    assert result.reason == reason


async def test_wrong_private_key_is_invalid_with_a_distinct_reason(
    make: Any, mode: str, caplog: pytest.LogCaptureFixture
) -> None:
    api = FakeVerifyAPI(private_key="the-right-key")
    result = await call(make(transport=api.transport()), FakeVerifyAPI.GOOD, mode)
    assert result.outcome is INVALID
    assert result.status_code == 401
    assert "credentials" in result.reason
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1
    assert "FAILOPEN_PRIVATE_KEY" in errors[0].getMessage()


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now

    def time(self) -> float:
        return self.now

    def wait(self, event: threading.Event, timeout: float) -> bool:
        self.now += timeout
        return event.is_set()


@pytest.mark.parametrize("status", [401, 403])
async def test_rejected_credentials_log_an_error_once_per_interval(
    make: Any, mode: str, caplog: pytest.LogCaptureFixture, status: int
) -> None:
    clock = FakeClock()
    verifier = make(replying(Reply.json({"error": "INVALID KEY"}, status=status)), clock=clock)

    def errors() -> int:
        return sum(r.levelno == logging.ERROR for r in caplog.records)

    for _ in range(3):
        result = await call(verifier, TOKEN, mode)
        assert (result.outcome, result.status_code) == (INVALID, status)
        assert "credentials" in result.reason
    assert errors() == 1
    clock.now += verify_module.CREDENTIALS_LOG_INTERVAL - 1
    await call(verifier, TOKEN, mode)
    assert errors() == 1
    clock.now += 2
    await call(verifier, TOKEN, mode)
    assert errors() == 2


# -- every answer, mapped -----------------------------------------------------------------------


def _json(data: Any, status: int = 200, **kwargs: Any) -> Reply:
    return Reply.json(data, status=status, **kwargs)


SOLVED = {"session_details": {"solved": True, "verified": True}}

ROWS = [
    # 2xx with a well-formed answer
    pytest.param(_json(SOLVED), VALID, "solved", id="solved"),
    pytest.param(
        _json({"session_details": {"solved": True, "new_field": [1, 2]}, "ip_intelligence": {},
               "schema": "v9"}),
        VALID, "solved", id="unknown-fields-ignored",
    ),
    pytest.param(_json({**SOLVED, "error": None}), VALID, "solved", id="error-null-is-absent"),
    pytest.param(_json(SOLVED, status=201), VALID, "solved", id="other-2xx"),
    pytest.param(_json({"session_details": {"solved": False, "verified": False}}), INVALID,
                 "challenge not solved", id="solved-false"),
    pytest.param(_json({"error": "DENIED ACCESS"}), INVALID, "denied the token: DENIED ACCESS",
                 id="error-on-200"),
    pytest.param(_json({**SOLVED, "error": "DENIED ACCESS"}), INVALID, "denied the token",
                 id="error-beats-solved"),
    pytest.param(_json({"error": {"code": "token_expired", "message": "Expired"}}), INVALID,
                 "denied the token: token_expired", id="error-object"),
    pytest.param(_json({"error": ""}), INVALID, "denied the token", id="error-empty-string"),
    # 429: the caller can provoke it, so it is never "unavailable"
    pytest.param(_json({"error": "TOO MANY"}, status=429, headers=[("Retry-After", "7")]),
                 RATE_LIMITED, "HTTP 429", id="429"),
    pytest.param(Reply(status=429, body=b"<html>slow down</html>"), RATE_LIMITED, "HTTP 429",
                 id="429-html"),
    # other 4xx: about this request, so invalid, JSON or not
    pytest.param(_json({"error": "INVALID SESSION TOKEN"}, status=400), INVALID,
                 "refused the request (HTTP 400): INVALID SESSION TOKEN", id="400-json"),
    pytest.param(_json({"detail": "unprocessable"}, status=422), INVALID, "HTTP 422",
                 id="422-json-without-error"),
    pytest.param(Reply(status=400, body=b"<html>Bad Request</html>"), INVALID,
                 "HTTP 400, non-JSON body", id="400-html"),
    pytest.param(Reply(status=404, body=b"Not Found"), INVALID, "HTTP 404, non-JSON body",
                 id="404-text"),
    pytest.param(Reply(status=413), INVALID, "HTTP 413, non-JSON body", id="413-empty"),
    pytest.param(_json({"error": "DENIED"}, status=401), INVALID, "credentials (HTTP 401)",
                 id="401"),
    pytest.param(Reply(status=403, body=b"Forbidden"), INVALID, "credentials (HTTP 403)",
                 id="403"),
    # the vendor is not answering properly
    pytest.param(_json({"error": "INTERNAL"}, status=500), UNAVAILABLE, "HTTP 500", id="500"),
    pytest.param(Reply(status=502, body=b"<html>Bad Gateway</html>"), UNAVAILABLE, "HTTP 502",
                 id="502"),
    pytest.param(Reply(status=503, headers=[("Retry-After", "30")]), UNAVAILABLE, "HTTP 503",
                 id="503"),
    pytest.param(Reply(status=504), UNAVAILABLE, "HTTP 504", id="504"),
    pytest.param(Reply(status=304), UNAVAILABLE, "HTTP 304", id="final-3xx"),
    pytest.param(Reply(body=b"<html>maintenance</html>"), UNAVAILABLE, "non-JSON body",
                 id="200-html"),
    pytest.param(Reply(body=b'{"session_details": {"solved": tr'), UNAVAILABLE, "non-JSON body",
                 id="200-broken-json"),
    pytest.param(Reply(body=b"\xff\xfe\x00garbage"), UNAVAILABLE, "non-JSON body",
                 id="200-binary"),
    pytest.param(Reply(body=b"[" * 60_000), UNAVAILABLE, "non-JSON body", id="200-deep-nesting"),
    pytest.param(Reply(body=b""), UNAVAILABLE, "empty body", id="200-empty"),
    pytest.param(Reply(body=b" \r\n"), UNAVAILABLE, "empty body", id="200-whitespace"),
    pytest.param(Reply(status=204), UNAVAILABLE, "empty body", id="204"),
    pytest.param(_json([SOLVED]), UNAVAILABLE, "not an object", id="200-json-list"),
    pytest.param(_json("solved"), UNAVAILABLE, "not an object", id="200-json-string"),
    pytest.param(_json({"status": "ok"}), UNAVAILABLE, "neither session_details nor error",
                 id="wrong-shape"),
    pytest.param(_json({"session_details": [True]}), UNAVAILABLE,
                 "neither session_details nor error", id="session-details-list"),
    pytest.param(_json({"session_details": {"verified": True}}), UNAVAILABLE,
                 "no boolean session_details.solved", id="solved-missing"),
    pytest.param(_json({"session_details": {"solved": "true"}}), UNAVAILABLE,
                 "no boolean session_details.solved", id="solved-string"),
    pytest.param(_json({"session_details": {"solved": 1}}), UNAVAILABLE,
                 "no boolean session_details.solved", id="solved-int"),
    # faults, in process (real sockets below)
    pytest.param(Reply(delay=5), UNAVAILABLE, "timeout", id="timeout"),
    pytest.param(Reply(reset=True), UNAVAILABLE, "transport error", id="reset"),
    pytest.param(_json(SOLVED, truncate=True), UNAVAILABLE, "transport error", id="truncated"),
    pytest.param(Reply(body=b" " * 70_000), UNAVAILABLE, "answer too large", id="too-large"),
    pytest.param(Reply(status=307, headers=[("Location", "https://elsewhere.test/verify")]),
                 UNAVAILABLE, "redirect refused", id="redirect-off-origin"),
]


@pytest.mark.parametrize(("reply", "outcome", "reason"), ROWS)
async def test_answer_mapping(
    make: Any, mode: str, reply: Reply, outcome: VerifyOutcome, reason: str
) -> None:
    result = await call(make(replying(reply)), TOKEN, mode)
    assert result.outcome is outcome, result
    assert reason in result.reason
    assert result.valid is (outcome is VALID)
    no_answer = ("timeout", "transport error", "answer too large", "redirect refused")
    expected_status = None if reason in no_answer else reply.status
    assert result.status_code == expected_status


# -- replays and timed-out sessions -----------------------------------------------------------

REPLAYED, TIMED_OUT = "token replayed: verified before", "session timed out"


def _details(**fields: Any) -> Reply:
    return _json({"session_details": {"solved": True, "verified": True, **fields}})


@pytest.mark.parametrize(
    ("reply", "outcome", "reason"),
    [
        pytest.param(_details(previously_verified=True), INVALID, REPLAYED, id="replayed"),
        pytest.param(_details(session_timed_out=True), INVALID, TIMED_OUT, id="timed-out"),
        pytest.param(_details(previously_verified=True, session_timed_out=True), INVALID,
                     REPLAYED, id="both"),
        pytest.param(_details(previously_verified=False, session_timed_out=False), VALID,
                     "solved", id="fresh"),
        # Absent or null: the spec does not define the fields, so no claim is made either way.
        pytest.param(_details(), VALID, "solved", id="absent"),
        pytest.param(_details(previously_verified=None, session_timed_out=None), VALID,
                     "solved", id="null-is-absent"),
        # Anything else cannot be read as "fresh": refused, and never evidence of an outage.
        pytest.param(_details(previously_verified="true"), INVALID,
                     "malformed session_details.previously_verified", id="string-true"),
        pytest.param(_details(previously_verified="false"), INVALID,
                     "malformed session_details.previously_verified", id="string-false"),
        pytest.param(_details(previously_verified=1), INVALID,
                     "malformed session_details.previously_verified", id="number"),
        pytest.param(_details(session_timed_out=0), INVALID,
                     "malformed session_details.session_timed_out", id="zero"),
        pytest.param(_details(session_timed_out={}), INVALID,
                     "malformed session_details.session_timed_out", id="object"),
        # A replay is refused whatever else the answer lacks: it is the vendor saying no.
        pytest.param(_json({"session_details": {"previously_verified": True}}), INVALID,
                     REPLAYED, id="replayed-without-solved"),
        pytest.param(_json({"session_details": {"solved": False, "session_timed_out": True}}),
                     INVALID, TIMED_OUT, id="timed-out-and-unsolved"),
    ],
)
async def test_replayed_or_timed_out_token_is_invalid(
    make: Any, mode: str, reply: Reply, outcome: VerifyOutcome, reason: str
) -> None:
    for require_verified in (False, True):
        verifier = make(replying(reply), require_verified=require_verified)
        result = await call(verifier, TOKEN, mode)
        assert result.outcome is outcome, result
        assert reason in result.reason


def test_a_malformed_replay_field_is_a_paced_warning(caplog: pytest.LogCaptureFixture) -> None:
    """A vendor that changed the field's type refuses every user: the operator must hear it."""
    clock = KitClock()
    reply = _details(previously_verified="false")
    verifier = HttpVerifier(URL, KEY, transport=as_transport(replying(reply)), clock=clock)
    with caplog.at_level(logging.DEBUG, logger="failopen.verify"):
        for _ in range(3):
            assert verifier.verify(TOKEN).outcome is INVALID
        clock.advance(10)
        verifier.verify(TOKEN)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 2
    assert "malformed session_details.previously_verified (str)" in warnings[0]
    assert "2 similar since the last warning" in warnings[1]


async def test_the_fake_admits_a_token_once(make: Any, api: FakeVerifyAPI, mode: str) -> None:
    verifier = make(transport=api.transport())
    assert (await call(verifier, TOKEN, mode)).outcome is VALID
    for _ in range(5):
        again = await call(verifier, TOKEN, mode)
        assert (again.outcome, again.reason) == (INVALID, REPLAYED)
    fresh = api.issue_token()
    assert (await call(verifier, fresh, mode)).outcome is VALID


async def test_the_fake_times_out_a_session_never_verified(make: Any, mode: str) -> None:
    clock = KitClock()
    api = FakeVerifyAPI(private_key=KEY, clock=clock, session_lifetime=300)
    verifier = make(transport=api.transport())
    late, fresh = api.issue_token(), api.issue_token()
    clock.advance(299)
    assert (await call(verifier, fresh, mode)).outcome is VALID
    clock.advance(1)
    result = await call(verifier, late, mode)
    assert (result.outcome, result.reason) == (INVALID, TIMED_OUT)


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ([("Retry-After", "7")], 7.0),
        ([("Retry-After", "Wed, 21 Oct 2015 07:28:00 GMT")], 0.0),
        ([("Retry-After", "soon")], None),
        ([], None),
    ],
)
async def test_rate_limited_carries_retry_after(
    make: Any, mode: str, headers: list[tuple[str, str]], expected: float | None
) -> None:
    result = await call(make(replying(Reply(status=429, headers=headers))), TOKEN, mode)
    assert result.outcome is RATE_LIMITED
    assert result.retry_after == expected


@pytest.mark.parametrize(
    "details",
    [{"solved": True}, {"solved": True, "verified": None}, {"solved": True, "verified": "yes"}],
)
async def test_require_verified_needs_a_boolean(make: Any, mode: str, details: Any) -> None:
    verifier = make(replying(Reply.json({"session_details": details})), require_verified=True)
    result = await call(verifier, TOKEN, mode)
    assert result.outcome is UNAVAILABLE
    assert "session_details.verified" in result.reason


async def test_without_require_verified_verified_is_ignored(make: Any, mode: str) -> None:
    reply = Reply.json({"session_details": {"solved": True, "verified": "junk"}})
    assert (await call(make(replying(reply)), TOKEN, mode)).outcome is VALID


async def test_same_origin_redirect_is_followed(make: Any, mode: str) -> None:
    def handler(request: FakeRequest) -> Reply:
        if request.path == "/api/v4/verify/":
            return Reply(status=308, headers=[("Location", "/api/v5/verify/")])
        assert request.json()["session_token"] == TOKEN  # 308 keeps the method and body
        return Reply.json(SOLVED)

    assert (await call(make(handler), TOKEN, mode)).outcome is VALID


async def test_connection_error_is_unavailable(make: Any, mode: str) -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("[Errno 111] Connection refused", request=request)

    result = await call(make(transport=httpx.MockTransport(refuse)), TOKEN, mode)
    assert result.outcome is UNAVAILABLE
    assert result.reason == (
        "transport error: verify.test:443: ConnectError: [Errno 111] Connection refused")


async def test_plain_user_mock_transport(make: Any, mode: str) -> None:
    transport = httpx.MockTransport(lambda request: httpx.Response(200, json=SOLVED))
    assert (await call(make(transport=transport), TOKEN, mode)).outcome is VALID


# -- tokens decided without a network call ---------------------------------------------------


@pytest.mark.parametrize(
    ("token", "reason"),
    [
        ("", "no token"),
        ("x" * (MAX_TOKEN_LENGTH + 1), "longer than 4096"),
        ("x" * 1_000_000, "longer than 4096"),
        ("abc\x00def", "outside printable ASCII"),
        ("abc\ndef", "outside printable ASCII"),
        ("abc\r\nX-Injected: 1", "outside printable ASCII"),
        ("abc\tdef", "outside printable ASCII"),
        ("abc\x7f", "outside printable ASCII"),
        ("abc\x85", "outside printable ASCII"),
        ("tök\u00e9n", "outside printable ASCII"),
        ("abc\u2028def", "outside printable ASCII"),
        ("abc\ud800def", "outside printable ASCII"),  # would break UTF-8 encoding of the body
    ],
)
async def test_odd_tokens_are_invalid_without_a_request(
    make: Any, api: FakeVerifyAPI, mode: str, token: str, reason: str
) -> None:
    result = await call(make(transport=api.transport()), token, mode)
    assert result.outcome is INVALID
    assert reason in result.reason
    assert result.status_code is None
    assert api.requests == 0


async def test_non_string_token_is_invalid(make: Any, api: FakeVerifyAPI, mode: str) -> None:
    verifier = make(transport=api.transport())
    token: Any = None
    result = verifier.verify(token) if mode == "sync" else await verifier.averify(token)
    assert (result.outcome, result.reason) == (INVALID, "no token")
    assert api.requests == 0


async def test_longest_allowed_token_is_sent(make: Any, api: FakeVerifyAPI, mode: str) -> None:
    token = "x" * MAX_TOKEN_LENGTH
    api.add_token(token)
    assert (await call(make(transport=api.transport()), token, mode)).outcome is VALID
    assert api.tokens_seen == [token]


# -- secrets ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "error",
    [
        f"invalid session token {TOKEN}",
        f"session {TOKEN[:20]}... expired",
        f"key {KEY} is not valid",
        f"wrong key {KEY[-10:]}",
    ],
)
@pytest.mark.parametrize("status", [200, 400])
async def test_vendor_text_echoing_a_secret_is_withheld(
    make: Any, mode: str, error: str, status: int
) -> None:
    result = await call(make(replying(Reply.json({"error": error}, status=status))), TOKEN, mode)
    assert result.outcome is INVALID
    assert ":" not in result.reason.rpartition(")")[2]  # no detail after the status
    for secret in SECRETS:
        for i in range(len(secret) - 8):
            assert secret[i : i + 8] not in result.reason


async def test_short_token_echoed_by_the_vendor_is_withheld(
    make: Any, mode: str
) -> None:
    reply = Reply.json({"error": "bad token zq7"}, status=400)
    result = await call(make(replying(reply)), "zq7", mode)
    assert result.outcome is INVALID
    assert "zq7" not in result.reason


async def test_vendor_text_is_cut_to_one_short_printable_line(make: Any, mode: str) -> None:
    error = "DENIED\nFAKE LOG LINE\x1b[31m" + "A" * 500
    result = await call(make(replying(Reply.json({"error": error}))), TOKEN, mode)
    assert result.outcome is INVALID
    assert "\n" not in result.reason and "\x1b" not in result.reason
    assert len(result.reason) < 120


async def test_transport_error_text_echoing_a_secret_is_withheld(make: Any, mode: str) -> None:
    def leak(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError(f"could not send {TOKEN} with {KEY}", request=request)

    result = await call(make(transport=httpx.MockTransport(leak)), TOKEN, mode)
    assert (result.outcome, result.reason) == (UNAVAILABLE, "transport error")


async def test_no_secret_in_any_outcome_log_or_repr(
    make: Any, api: FakeVerifyAPI, mode: str, caplog: pytest.LogCaptureFixture
) -> None:
    verifier = make(transport=api.transport())
    assert repr(verifier) == f"HttpVerifier(verify_url={URL!r})"
    assert_no_secret(str(verifier))
    outcomes = {(await call(verifier, TOKEN, mode)).outcome}
    api.add_token(TOKEN, solved=False)
    outcomes.add((await call(verifier, TOKEN, mode)).outcome)
    for fault in sorted(api.FAULTS):
        api.set_fault(fault)
        outcomes.add((await call(verifier, TOKEN, mode)).outcome)
    # Only local load makes OVERLOADED; MISCONFIGURED is other vendors' (the spec's vendor answers
    # a wrong key as it answers a denied token).
    assert outcomes == set(VerifyOutcome) - {OVERLOADED, VerifyOutcome.MISCONFIGURED}
    assert api.tokens_seen.count(TOKEN) == 2 + len(api.FAULTS)  # the token really was sent
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) >= 2 + len(api.FAULTS)
    for message in messages:
        assert_no_secret(message)


# -- logging -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("reply", "level"),
    [
        (Reply.json(SOLVED), logging.DEBUG),
        (Reply.json({"error": "DENIED ACCESS"}), logging.DEBUG),
        (Reply(status=429), logging.WARNING),
        (Reply(status=503), logging.WARNING),
        (Reply(reset=True), logging.WARNING),
    ],
)
async def test_one_log_record_per_call(
    make: Any, mode: str, caplog: pytest.LogCaptureFixture, reply: Reply, level: int
) -> None:
    result = await call(make(replying(reply)), TOKEN, mode)
    records = [r for r in caplog.records if r.name == "failopen.verify"]
    assert [r.levelno for r in records] == [level]
    assert result.outcome.value in records[0].getMessage()
    assert result.reason in records[0].getMessage()


# -- construction ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "url",
    ["not a url", "ftp://verify.test/", "http://verify.example.com/api/v4/verify/",
     "https://user:pw@verify.test/", "/api/v4/verify/"],
)
def test_bad_url_is_a_config_error(url: str) -> None:
    with pytest.raises(ConfigError, match="FAILOPEN_VERIFY_URL"):
        HttpVerifier(url, KEY)


def test_plain_http_to_loopback_is_allowed() -> None:
    with HttpVerifier("http://127.0.0.1:9/api/v4/verify/", KEY) as verifier:
        assert verifier.verify_url == "http://127.0.0.1:9/api/v4/verify/"


@pytest.mark.parametrize("key", ["", KEY + "\n", " " + KEY, KEY + "\x00", KEY + "\u00e9"])
def test_bad_private_key_is_a_config_error_that_hides_it(key: str) -> None:
    with pytest.raises(ConfigError, match="FAILOPEN_PRIVATE_KEY") as info:
        HttpVerifier(URL, key)
    assert_no_secret(str(info.value))
    assert_no_secret(repr(info.value))


@pytest.mark.parametrize("timeout", [0, -1, float("nan"), float("inf"), True, "3"])
def test_bad_timeout_is_a_config_error(timeout: Any) -> None:
    with pytest.raises(ConfigError, match="FAILOPEN_VERIFY_TIMEOUT"):
        HttpVerifier(URL, KEY, timeout=timeout)


@pytest.mark.parametrize("max_bytes", [0, -5, 1.5])
def test_bad_max_bytes_is_a_config_error(max_bytes: Any) -> None:
    with pytest.raises(ConfigError, match="max_bytes"):
        HttpVerifier(URL, KEY, max_bytes=max_bytes)


def test_http_verifier_is_a_verifier() -> None:
    with HttpVerifier(URL, KEY) as verifier:
        assert isinstance(verifier, Verifier)


def test_result_valid_and_outcome_values() -> None:
    assert VerifyResult(VALID, "solved").valid
    assert not any(VerifyResult(o, "x").valid for o in VerifyOutcome if o is not VALID)
    assert [o.value for o in VerifyOutcome] == [
        "valid", "invalid", "unavailable", "rate_limited", "overloaded", "misconfigured"
    ]
    assert VerifyOutcome("rate_limited") is RATE_LIMITED
    assert json.dumps({"outcome": RATE_LIMITED}) == '{"outcome": "rate_limited"}'  # a str enum


# -- client lifecycle --------------------------------------------------------------------------


async def test_calls_after_close_open_a_new_client(make: Any, api: FakeVerifyAPI) -> None:
    verifier = make(transport=api.transport())
    for _ in range(2):
        assert verifier.verify(api.issue_token()).valid
        assert (await verifier.averify(api.issue_token())).valid
        verifier.close()
        await verifier.aclose()
    assert api.requests == 4


def test_forked_child_gets_its_own_client(monkeypatch: pytest.MonkeyPatch) -> None:
    with HttpVerifier(URL, KEY, transport=FakeVerifyAPI(private_key=KEY).transport()) as verifier:
        parent = verifier._sync_client()
        assert verifier._sync_client() is parent
        monkeypatch.setattr(verify_module, "os", SimpleNamespace(getpid=lambda: -1))
        child = verifier._sync_client()
        assert child is not parent
        assert verifier.verify(FakeVerifyAPI.GOOD).valid
    parent.close()


# -- real sockets ----------------------------------------------------------------------------------


@pytest.fixture
def served(api: FakeVerifyAPI) -> Iterator[tuple[FakeVerifyAPI, str]]:
    with api.serve() as server:
        yield api, server.url + api.path


DEADLINE = 0.4


@pytest.mark.slow
@pytest.mark.parametrize(
    ("token", "outcome"), [(TOKEN, VALID), (FakeVerifyAPI.BAD, INVALID),
                           (FakeVerifyAPI.DENIED, INVALID), ("unknown", INVALID)]
)
async def test_loopback_tokens(
    make: Any, served: tuple[FakeVerifyAPI, str], mode: str, token: str, outcome: VerifyOutcome
) -> None:
    api, url = served
    assert (await call(make(url=url), token, mode)).outcome is outcome


@pytest.mark.slow
@pytest.mark.parametrize("fault", ["timeout", "slow_drip"])
async def test_loopback_deadline_cuts_slow_answers(
    make: Any, served: tuple[FakeVerifyAPI, str], mode: str, fault: str
) -> None:
    api, url = served
    api.set_fault(fault)
    verifier = make(url=url, timeout=DEADLINE)
    started = time.monotonic()
    result = await call(verifier, TOKEN, mode)
    elapsed = time.monotonic() - started
    assert result.outcome is UNAVAILABLE
    assert result.reason.startswith("timeout")
    assert DEADLINE * 0.9 <= elapsed < DEADLINE + 0.5
    api.set_fault(None)
    # The vendor may have recorded the first call: a new solve, as the browser would make.
    assert (await call(verifier, api.issue_token(), mode)).valid  # and it recovers


@pytest.mark.slow
@pytest.mark.parametrize(
    ("fault", "outcome", "reason"),
    [
        ("reset", UNAVAILABLE, "transport error"),
        ("truncated", UNAVAILABLE, "transport error"),
        ("500", UNAVAILABLE, "HTTP 500"),
        ("502", UNAVAILABLE, "HTTP 502"),
        ("503", UNAVAILABLE, "HTTP 503"),
        ("not_json", UNAVAILABLE, "non-JSON"),
        ("empty", UNAVAILABLE, "empty body"),
        ("wrong_shape", UNAVAILABLE, "neither session_details nor error"),
        ("429", RATE_LIMITED, "HTTP 429"),
    ],
)
async def test_loopback_faults(
    make: Any,
    served: tuple[FakeVerifyAPI, str],
    mode: str,
    fault: str,
    outcome: VerifyOutcome,
    reason: str,
) -> None:
    api, url = served
    api.set_fault(fault, retry_after=2.5)
    verifier = make(url=url)
    result = await call(verifier, TOKEN, mode)
    assert result.outcome is outcome
    assert reason in result.reason
    if fault == "429":
        assert result.retry_after == 3.0
    api.set_fault(None)
    assert (await call(verifier, api.issue_token(), mode)).valid


@pytest.mark.slow
async def test_loopback_connection_refused(make: Any, mode: str) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    started = time.monotonic()
    result = await call(make(url=f"http://127.0.0.1:{port}/api/v4/verify/"), TOKEN, mode)
    assert result.outcome is UNAVAILABLE
    assert result.reason.startswith("transport error")
    assert time.monotonic() - started < 1.0


@pytest.mark.slow
async def test_loopback_concurrent_calls(
    make: Any, served: tuple[FakeVerifyAPI, str]
) -> None:
    api, url = served
    verifier = make(url=url)
    results: list[VerifyResult] = []
    tokens = [api.issue_token() for _ in range(16)]
    threads = [
        threading.Thread(target=lambda t: results.append(verifier.verify(t)), args=(t,))
        for t in tokens[:8]
    ]
    for thread in threads:
        thread.start()
    results += await asyncio.gather(*(verifier.averify(t) for t in tokens[8:]))
    for thread in threads:
        thread.join()
    assert [r.outcome for r in results] == [VALID] * 16
    assert api.requests == 16


@pytest.mark.slow
def test_averify_works_across_event_loops(served: tuple[FakeVerifyAPI, str]) -> None:
    api, url = served
    verifier = HttpVerifier(url, KEY, timeout=1.0)

    async def twice() -> list[VerifyOutcome]:
        return [(await verifier.averify(api.issue_token())).outcome for _ in range(2)]

    first, second = asyncio.new_event_loop(), asyncio.new_event_loop()
    try:
        assert first.run_until_complete(twice()) == [VALID, VALID]
        [(mine, _)] = verifier._aclients.values()
        # Its pooled connection belongs to the first loop, which is not running now: reusing it
        # from the second loop would hang until the deadline.
        assert second.run_until_complete(twice()) == [VALID, VALID]
        assert verifier._aclients[first][0] is mine  # kept for the first loop, not swapped
        assert verifier._aclients[second][0] is not mine
        assert first.run_until_complete(twice()) == [VALID, VALID]  # back on the first: reused
        assert verifier._aclients[first][0] is mine
        first.run_until_complete(verifier.aclose())
        assert mine.is_closed and first not in verifier._aclients
        assert not verifier._aclients[second][0].is_closed  # another loop's: left alone
        second.run_until_complete(verifier.aclose())
        assert len(verifier._aclients) == 0
    finally:
        first.close()
        second.close()


# -- incident behaviour -------------------------------------------------------------------------


def test_unavailable_warnings_are_paced_during_an_incident(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = KitClock()
    api = FakeVerifyAPI()
    api.set_fault("503")
    verifier = HttpVerifier(URL, api.private_key, transport=api.transport(), clock=clock)
    with caplog.at_level(logging.DEBUG, logger="failopen.verify"):
        for _ in range(5):
            assert verifier.verify(TOKEN).outcome is UNAVAILABLE
        clock.advance(10)
        verifier.verify(TOKEN)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 2
    assert "4 similar since the last warning" in warnings[1]


async def test_async_verifies_beyond_the_cap_queue_within_the_deadline() -> None:
    in_flight = peak = 0
    gate = asyncio.Event()

    async def handler(request: httpx.Request) -> httpx.Response:
        nonlocal in_flight, peak
        in_flight += 1
        peak = max(peak, in_flight)
        await gate.wait()
        in_flight -= 1
        return httpx.Response(200, json=SOLVED)

    verifier = HttpVerifier(URL, "k", timeout=5, async_transport=httpx.MockTransport(handler))
    calls = [asyncio.ensure_future(verifier.averify(TOKEN)) for _ in range(250)]
    for _ in range(50):
        await asyncio.sleep(0)
    gate.set()
    results = await asyncio.gather(*calls)
    assert all(r.outcome is VALID for r in results)
    assert peak == verify_module._MAX_IN_FLIGHT


# -- local overload: never evidence of an outage --------------------------------------------------


async def test_async_call_that_gets_no_slot_is_overloaded_and_never_sent(
    caplog: pytest.LogCaptureFixture,
) -> None:
    gate = asyncio.Event()
    tokens: list[str] = []

    async def handler(request: httpx.Request) -> httpx.Response:
        tokens.append(json.loads(request.content)["session_token"])
        await gate.wait()
        return httpx.Response(200, json=SOLVED)

    verifier = HttpVerifier(URL, KEY, timeout=5, async_transport=httpx.MockTransport(handler))
    try:
        blocked = [asyncio.ensure_future(verifier.averify(TOKEN))
                   for _ in range(verify_module._MAX_IN_FLIGHT)]
        for _ in range(50):
            await asyncio.sleep(0)
        assert len(tokens) == verify_module._MAX_IN_FLIGHT  # every slot is taken
        verifier.timeout = 0.05  # the extra call's deadline passes long before the others'
        extra = "extra-token-0123456789"
        result = await verifier.averify(extra)
        assert result.outcome is OVERLOADED
        assert result.reason == "overloaded: no free connection within 0.05s"
        assert (result.status_code, result.retry_after, result.valid) == (None, None, False)
        assert extra not in tokens  # the vendor never heard of it
        gate.set()
        assert [r.outcome for r in await asyncio.gather(*blocked)] == [VALID] * len(blocked)
    finally:
        gate.set()
        await verifier.aclose()
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == ["verify overloaded: overloaded: no free connection within 0.05s"]


async def test_sync_call_that_gets_no_worker_is_overloaded(
    make: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    lanes: list[str] = []

    def no_worker(*args: Any, **kwargs: Any) -> Any:
        lanes.append(kwargs.get("lane", "status"))
        raise FetchOverloaded("no free verify worker within 3s")

    monkeypatch.setattr(verify_module, "fetch", no_worker)
    result = await call(make(replying(Reply.json(SOLVED))), TOKEN, "sync")
    assert (result.outcome, result.status_code) == (OVERLOADED, None)
    assert result.reason == "overloaded: no free verify worker within 3s"
    assert lanes == ["verify"]  # verify calls queue apart from the status page's reads
    records = [r for r in caplog.records if r.name == "failopen.verify"]
    assert [r.levelno for r in records] == [logging.WARNING]


def test_overloaded_shares_the_paced_warning_with_unavailable(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    clock = KitClock()
    api = FakeVerifyAPI()
    api.set_fault("503")
    verifier = HttpVerifier(URL, api.private_key, transport=api.transport(), clock=clock)
    real_fetch = http_fetch
    overloaded = [True, False, True]

    def sometimes_overloaded(*args: Any, **kwargs: Any) -> Any:
        if overloaded.pop(0):
            raise FetchOverloaded("no free verify worker within 3s")
        return real_fetch(*args, **kwargs)

    monkeypatch.setattr(verify_module, "fetch", sometimes_overloaded)
    with verifier:
        assert [verifier.verify(TOKEN).outcome for _ in range(3)] == [
            OVERLOADED, UNAVAILABLE, OVERLOADED
        ]
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "verify overloaded" in warnings[0].getMessage()


# -- one async client per event loop --------------------------------------------------------------


def test_loops_in_threads_get_one_client_each(monkeypatch: pytest.MonkeyPatch) -> None:
    made: list[httpx.AsyncClient] = []

    class CountingClient(httpx.AsyncClient):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            made.append(self)

    monkeypatch.setattr(httpx, "AsyncClient", CountingClient)
    transport = httpx.MockTransport(lambda request: httpx.Response(200, json=SOLVED))
    verifier = HttpVerifier(URL, KEY, async_transport=transport)
    threads_n, calls_n = 8, 20
    barrier = threading.Barrier(threads_n)
    outcomes: list[VerifyOutcome] = []
    errors: list[BaseException] = []
    per_loop: list[set[int]] = []

    async def calls() -> None:
        seen = set()
        for i in range(calls_n):
            if i == calls_n // 2:
                barrier.wait()  # every loop is alive and has its client by now
            outcomes.append((await verifier.averify(TOKEN)).outcome)
            seen.add(id(verifier._async_client()[0]))
        per_loop.append(seen)

    def run() -> None:
        loop = asyncio.new_event_loop()
        try:
            loop.run_until_complete(calls())
            loop.run_until_complete(verifier.aclose())
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)
            barrier.abort()
        finally:
            loop.close()

    threads = [threading.Thread(target=run) for _ in range(threads_n)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert errors == []
    assert outcomes == [VALID] * (threads_n * calls_n)
    assert len(made) == threads_n  # one per loop, not one per loop switch
    assert all(len(seen) == 1 for seen in per_loop)
    assert all(client.is_closed for client in made)  # each loop's aclose closed its own
    assert len(verifier._aclients) == 0


def test_in_flight_cap_is_per_loop() -> None:
    transport = httpx.MockTransport(lambda request: httpx.Response(200, json=SOLVED))
    verifier = HttpVerifier(URL, KEY, async_transport=transport)

    async def entry() -> tuple[httpx.AsyncClient, asyncio.Semaphore]:
        assert (await verifier.averify(TOKEN)).valid
        first = verifier._async_client()
        assert verifier._async_client() is first  # read as one tuple, stable on this loop
        return first

    one, two = asyncio.new_event_loop(), asyncio.new_event_loop()
    try:
        (client_one, cap_one), (client_two, cap_two) = (
            one.run_until_complete(entry()), two.run_until_complete(entry())
        )
        assert client_one is not client_two and cap_one is not cap_two
        one.run_until_complete(verifier.aclose())
        two.run_until_complete(verifier.aclose())
    finally:
        one.close()
        two.close()


def test_client_of_a_closed_loop_is_dropped_when_another_loop_needs_one() -> None:
    transport = httpx.MockTransport(lambda request: httpx.Response(200, json=SOLVED))
    verifier = HttpVerifier(URL, KEY, async_transport=transport)
    first = asyncio.new_event_loop()
    assert first.run_until_complete(verifier.averify(TOKEN)).valid
    stale = verifier._aclients[first][0]
    first.close()  # ended without aclose()
    assert asyncio.run(verifier.averify(TOKEN)).valid
    assert first not in verifier._aclients
    assert stale not in [client for client, _ in verifier._aclients.values()]
    asyncio.run(stale.aclose())
    for client, _ in list(verifier._aclients.values()):
        asyncio.run(client.aclose())


async def test_forked_child_gets_its_own_async_clients(monkeypatch: pytest.MonkeyPatch) -> None:
    transport = httpx.MockTransport(lambda request: httpx.Response(200, json=SOLVED))
    verifier = HttpVerifier(URL, KEY, async_transport=transport)
    assert (await verifier.averify(TOKEN)).valid
    parent, _ = verifier._async_client()
    monkeypatch.setattr(verify_module, "os", SimpleNamespace(getpid=lambda: -1))
    child, _ = verifier._async_client()
    assert child is not parent
    assert verifier._async_client()[0] is child
    assert (await verifier.averify(TOKEN)).valid
    await verifier.aclose()
    assert child.is_closed and not parent.is_closed  # the parent's sockets are not ours to close
    await parent.aclose()


# -- retry_after is a bounded hint ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [(None, None), (7.0, 7.0), (0.0, 0.0), (-5.0, 0.0), (3600.0, 3600.0), (3601.0, 3600.0),
     (1e300, 3600.0), (float("inf"), 3600.0), (float("-inf"), 0.0), (float("nan"), None)],
)
def test_retry_after_is_clamped_in_every_result(
    value: float | None, expected: float | None
) -> None:
    result = VerifyResult(RATE_LIMITED, "x", 429, value)
    assert result.retry_after == expected


@pytest.mark.parametrize(
    ("parsed", "expected"),
    [(float("inf"), 3600.0), (1e12, 3600.0), (float("nan"), None), (-1.0, 0.0), (12.5, 12.5)],
)
async def test_rate_limited_retry_after_is_clamped(
    make: Any, mode: str, monkeypatch: pytest.MonkeyPatch, parsed: float, expected: float | None
) -> None:
    monkeypatch.setattr(
        "failopen.providers.verify_answers.parse_retry_after", lambda value, **kw: parsed
    )
    reply = Reply(status=429, headers=[("Retry-After", "whatever")])
    result = await call(make(replying(reply)), TOKEN, mode)
    assert (result.outcome, result.retry_after) == (RATE_LIMITED, expected)


async def test_retry_after_parser_failure_is_no_hint(
    make: Any, mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(value: Any, **kwargs: Any) -> float:
        raise OverflowError("date value out of range")

    monkeypatch.setattr("failopen.providers.verify_answers.parse_retry_after", broken)
    reply = Reply(status=429, headers=[("Retry-After", "Fri, 31 Dec 99999 23:59:59 GMT")])
    result = await call(make(replying(reply)), TOKEN, mode)
    assert (result.outcome, result.retry_after) == (RATE_LIMITED, None)


@pytest.mark.parametrize("header", ["99999999999", "9" * 400, "Fri, 31 Dec 9999 23:59:59 GMT"])
async def test_huge_retry_after_header_stays_bounded(make: Any, mode: str, header: str) -> None:
    reply = Reply(status=429, headers=[("Retry-After", header)])
    result = await call(make(replying(reply)), TOKEN, mode)
    assert result.outcome is RATE_LIMITED
    assert result.retry_after is None or 0 <= result.retry_after <= 3600
