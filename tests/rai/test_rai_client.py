from __future__ import annotations

import logging
import threading
from datetime import datetime, timedelta, timezone
from email.utils import format_datetime
from typing import Any

import httpx
import pytest
from _rai_fake import (
    BASE,
    CLIENT_ID,
    SECRET,
    FakeRai,
    bearer,
    envelope,
    make_client,
    page,
    token_value,
)

from failopen.rai import (
    BadRequest,
    Client,
    Cohort,
    Forbidden,
    InvalidResponse,
    NotFound,
    RaiError,
    RaiTransportError,
    RaiValidationError,
    ServerError,
    Unauthorized,
)

START = datetime(2024, 5, 1, tzinfo=timezone.utc)
END = datetime(2024, 5, 8, tzinfo=timezone.utc)
COHORT = {"cohort_id": "coh_1", "session_count": 3}


def cohort_ok(request: httpx.Request) -> httpx.Response:
    return httpx.Response(200, json=COHORT)


# --- requests ---------------------------------------------------------------------------------


def test_list_cohorts_sends_every_filter_and_repeats_public_key() -> None:
    fake = FakeRai(lambda r: page("cohorts", [COHORT]))
    client, _ = make_client(fake)
    with client:
        cohorts = list(client.iter_cohorts(
            START, END, ["PK-1", "PK-2"], cohort_id="coh_1", anomaly_id=7, telltale_id=4101,
            min_session_count=10, page_size=50,
        ))
    assert [c.cohort_id for c in cohorts] == ["coh_1"]
    (request,) = fake.requests
    assert request.method == "GET"
    assert request.url.path == "/api/rai/v1/cohorts"
    assert fake.params == [[
        ("from", "2024-05-01T00:00:00Z"), ("to", "2024-05-08T00:00:00Z"),
        ("public_key", "PK-1"), ("public_key", "PK-2"), ("cohort_id", "coh_1"),
        ("anomaly_id", "7"), ("telltale_id", "4101"), ("min_session_count", "10"),
        ("page_size", "50"),
    ]]
    assert bearer(request) == token_value(1)
    assert request.headers["accept"] == "application/json"


def test_optional_filters_are_left_out_when_not_given() -> None:
    fake = FakeRai(lambda r: page("cohorts", []))
    client, _ = make_client(fake)
    assert list(client.iter_cohorts(START, END, ["PK"])) == []
    assert [name for name, _ in fake.params[0]] == ["from", "to", "public_key"]


def test_times_are_sent_as_rfc3339_utc_whatever_the_input_offset() -> None:
    fake = FakeRai(lambda r: page("sessions", []))
    client, _ = make_client(fake)
    paris = timezone(timedelta(hours=2))
    list(client.iter_sessions(datetime(2024, 5, 1, 2, 0, 0, 500, tzinfo=paris),
                              "2024-05-02T12:30:00.25+02:00", ["PK"]))
    list(client.iter_sessions("2024-05-01t00:00:00z", "2024-05-01T01:00:00.123456789Z", ["PK"]))
    assert fake.params[0][:2] == [("from", "2024-05-01T00:00:00.000500Z"),
                                  ("to", "2024-05-02T10:30:00.250000Z")]
    assert fake.params[1][:2] == [("from", "2024-05-01T00:00:00Z"),
                                  ("to", "2024-05-01T01:00:00.123456Z")]


def test_list_sessions_sends_its_filters() -> None:
    fake = FakeRai(lambda r: page("sessions", [{"session_id": "s-1", "unknown": 1}]))
    client, _ = make_client(fake)
    sessions = list(client.iter_sessions(START, END, ["PK"], cohort_id="c", anomaly_id=1,
                                         telltale_id=2, page_size=1000))
    assert sessions[0].session_id == "s-1" and sessions[0].raw["unknown"] == 1
    assert fake.requests[0].url.path == "/api/rai/v1/sessions"
    assert fake.params[0][2:] == [("public_key", "PK"), ("cohort_id", "c"), ("anomaly_id", "1"),
                                  ("telltale_id", "2"), ("page_size", "1000")]


def test_get_cohort_and_its_sessions() -> None:
    def data(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/sessions"):
            return page("sessions", [{"session_id": "s-1", "cohort_id": "coh_1"}])
        return httpx.Response(200, json={**COHORT, "brand_new": True})

    fake = FakeRai(data)
    client, _ = make_client(fake)
    cohort = client.get_cohort("coh_1")
    assert isinstance(cohort, Cohort) and cohort.session_count == 3
    assert cohort.raw["brand_new"] is True
    sessions = list(client.iter_cohort_sessions("coh_1", page_size=10))
    assert [s.session_id for s in sessions] == ["s-1"]
    assert [r.url.path for r in fake.requests] == [
        "/api/rai/v1/cohorts/coh_1", "/api/rai/v1/cohorts/coh_1/sessions"]
    assert fake.params[1] == [("page_size", "10")]


def test_cohort_id_is_percent_encoded_in_the_path() -> None:
    fake = FakeRai(cohort_ok)
    client, _ = make_client(fake)
    client.get_cohort("a/../b?x=1")
    assert fake.requests[0].url.raw_path == b"/api/rai/v1/cohorts/a%2F..%2Fb%3Fx%3D1"


def test_base_url_with_a_path_prefix_is_kept_for_every_call() -> None:
    fake = FakeRai(cohort_ok)
    client, _ = make_client(fake, base_url="https://gw.test/vendor/")
    client.get_cohort("c")
    assert fake.requests[0].url.path == "/vendor/api/rai/v1/cohorts/c"
    assert fake.auth_calls == 1


def test_authorize_sends_the_credentials_as_json() -> None:
    fake = FakeRai(cohort_ok)
    client, _ = make_client(fake)
    client.get_cohort("c")
    assert fake.auth_bodies == [{"client_id": CLIENT_ID, "client_secret": SECRET}]


# --- validation before any request -------------------------------------------------------------

NAIVE = datetime(2024, 5, 1)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"page_size": 0}, "between 1 and 1000"),
        ({"page_size": 1001}, "between 1 and 1000"),
        ({"page_size": True}, "must be an int"),
        ({"page_size": "10"}, "must be an int"),
        ({"start": END, "end": START}, "must be before end"),
        ({"start": START, "end": START}, "must be before end"),
        ({"start": NAIVE}, "naive datetime"),
        ({"end": "2024-05-08T00:00:00"}, "RFC 3339"),
        ({"end": "2024-02-30T00:00:00Z"}, "not a valid time"),
        ({"end": 1714521600}, "RFC 3339 string"),
        ({"public_keys": []}, "at least one"),
        ({"public_keys": "PK-1"}, "not a single string"),
        ({"public_keys": ["PK", ""]}, "non-empty string"),
        ({"public_keys": None}, "sequence of strings"),
        ({"anomaly_id": "7"}, "anomaly_id must be an int"),
        ({"telltale_id": 1.5}, "telltale_id must be an int"),
        ({"min_session_count": -1}, "at least 0"),
        ({"cohort_id": ""}, "cohort_id must be a non-empty"),
    ],
)
def test_bad_arguments_fail_before_any_request(kwargs: dict[str, Any], match: str) -> None:
    fake = FakeRai()
    client, _ = make_client(fake)
    args = {"start": START, "end": END, "public_keys": ["PK"], **kwargs}
    with pytest.raises(RaiValidationError, match=match):
        client.iter_cohorts(**args)  # raises on the call, not on the first next()
    assert fake.requests == [] and fake.auth_calls == 0


def test_bad_cohort_ids_fail_before_any_request() -> None:
    fake = FakeRai()
    client, _ = make_client(fake)
    for bad in ("", "..", "."):
        with pytest.raises(RaiValidationError):
            client.get_cohort(bad)
    with pytest.raises(RaiValidationError):
        client.iter_cohort_sessions("..")
    with pytest.raises(RaiValidationError):
        client.iter_cohort_sessions("c", page_size=0)
    assert fake.requests == [] and fake.auth_calls == 0


@pytest.mark.parametrize(
    ("base_url", "match"),
    [
        ("rai.test", "absolute"),
        ("ftp://rai.test", "absolute http"),
        ("http://rai.example.com", "plain http"),
        ("https://user:pw@rai.test", "credentials"),
        ("https://rai.test/?x=1", "query"),
    ],
)
def test_bad_base_urls_are_refused(base_url: str, match: str) -> None:
    with pytest.raises(RaiValidationError, match=match):
        Client(base_url, CLIENT_ID, SECRET)


def test_plain_http_is_allowed_on_loopback() -> None:
    with Client("http://127.0.0.1:8000", CLIENT_ID, SECRET) as client:
        assert str(client.authorize_url) == "http://127.0.0.1:8000/api/rai/v1/authorize"


@pytest.mark.parametrize(
    "kwargs",
    [{"max_attempts": 0}, {"timeout": 0}, {"backoff_base": -1}, {"backoff_max": "1"}],
)
def test_bad_settings_are_refused(kwargs: dict[str, Any]) -> None:
    with pytest.raises(RaiValidationError):
        Client(BASE, CLIENT_ID, SECRET, **kwargs)
    with pytest.raises(RaiValidationError):
        Client(BASE, CLIENT_ID, "", **{})


# --- errors -----------------------------------------------------------------------------------

SPEC_ERRORS = [
    (400, "invalid_request", BadRequest),
    (400, "invalid_page_size", BadRequest),
    (400, "invalid_page_token", BadRequest),
    (400, "invalid_window", BadRequest),
    (400, "invalid_filter", BadRequest),
    (400, "missing_public_key", BadRequest),
    (403, "forbidden", Forbidden),
    (403, "forbidden_public_key", Forbidden),
    (404, "not_found", NotFound),
    (500, "internal", ServerError),
]


@pytest.mark.parametrize(("status", "code", "cls"), SPEC_ERRORS)
def test_every_spec_error_becomes_its_class_with_code_and_request_id(
    status: int, code: str, cls: type[RaiError]
) -> None:
    fake = FakeRai(lambda r: envelope(status, code, "Human text", "req-42"))
    client, sleeps = make_client(fake, max_attempts=2)
    with pytest.raises(cls) as info:
        list(client.iter_cohorts(START, END, ["PK"]))
    exc = info.value
    assert type(exc) is cls
    assert (exc.status_code, exc.code, exc.message, exc.request_id) == (
        status, code, "Human text", "req-42")
    assert str(exc) == f"{status} {code}: Human text (request_id=req-42)"
    # Only the 500 is retried.
    assert len(fake.requests) == (2 if status == 500 else 1)
    assert len(sleeps) == (1 if status == 500 else 0)


def test_unauthorized_on_authorize_is_not_retried() -> None:
    fake = FakeRai(cohort_ok, authorize=lambda r: envelope(401, "unauthorized", "bad creds", "r1"))
    client, sleeps = make_client(fake)
    with pytest.raises(Unauthorized) as info:
        client.get_cohort("c")
    assert (info.value.status_code, info.value.code, info.value.request_id) == (
        401, "unauthorized", "r1")
    assert fake.auth_calls == 1 and fake.requests == [] and sleeps == []


def test_bad_request_on_authorize() -> None:
    fake = FakeRai(cohort_ok, authorize=lambda r: envelope(400, "invalid_request"))
    client, sleeps = make_client(fake)
    with pytest.raises(BadRequest, match="invalid_request"):
        client.get_cohort("c")
    assert sleeps == []


def test_html_error_page_still_gives_a_clear_error() -> None:
    html = "<html><body><h1>502   Bad Gateway</h1>\n<p>nginx</p></body></html>"
    fake = FakeRai(lambda r: httpx.Response(502, text=html, headers={
        "content-type": "text/html; charset=utf-8", "x-request-id": "edge-7"}))
    client, _ = make_client(fake, max_attempts=1)
    with pytest.raises(ServerError) as info:
        client.get_cohort("c")
    exc = info.value
    assert exc.status_code == 502 and exc.code is None and exc.request_id == "edge-7"
    assert str(exc).startswith(
        "502: Bad Gateway, without an error envelope (text/html, 65 bytes): <html>")
    assert "502 Bad Gateway</h1> <p>nginx" in str(exc)


@pytest.mark.parametrize(
    ("response", "cls", "text"),
    [
        (httpx.Response(404), NotFound, "404: Not Found, without an error envelope (no content"),
        (httpx.Response(400, json={"detail": "nope"}), BadRequest, '{"detail":"nope"}'),
        (httpx.Response(403, json={"error": "denied"}), Forbidden, "403"),
        (httpx.Response(302, headers={"location": "https://elsewhere.test/"}), RaiError, "302"),
    ],
)
def test_non_envelope_errors(response: httpx.Response, cls: type[RaiError], text: str) -> None:
    fake = FakeRai(lambda r: response)
    client, sleeps = make_client(fake)
    with pytest.raises(cls) as info:
        client.get_cohort("c")
    assert type(info.value) is cls
    assert text in str(info.value)
    assert info.value.status_code == response.status_code and info.value.code is None
    assert len(fake.requests) == 1 and sleeps == []  # 4xx (but 429) and 3xx are never retried


def test_a_429_is_retried_after_its_retry_after() -> None:
    answers = iter([httpx.Response(429, text="slow down", headers={"Retry-After": "2"})])
    fake = FakeRai(lambda r: next(answers, None) or httpx.Response(200, json={"cohort_id": "c"}))
    client, sleeps = make_client(fake)
    assert client.get_cohort("c").cohort_id == "c"
    assert len(fake.requests) == 2 and sleeps[0] >= 2


def test_a_429_that_persists_ends_as_rai_error_after_the_attempts() -> None:
    fake = FakeRai(lambda r: httpx.Response(429, text="slow down"))
    client, sleeps = make_client(fake)
    with pytest.raises(RaiError, match="429: Too Many Requests,"):
        client.get_cohort("c")
    assert len(fake.requests) == client.max_attempts


def test_one_threads_backoff_holds_back_the_others() -> None:
    fake = FakeRai(lambda r: httpx.Response(200, json={"cohort_id": "c"}))
    client, sleeps = make_client(fake)
    client.pause(5.0)  # as a retrying request on another thread does
    client.get_cohort("c")
    assert len(sleeps) == 1 and 4.0 < sleeps[0] <= 5.0


@pytest.mark.parametrize(
    "body",
    [b"not json", b"[]", b'{"cohorts": "x"}', b'{"cohorts": [], "next_page_token": 5}',
     b'{"cohorts": [1]}', b"{}"],
)
def test_malformed_list_answers_raise_invalid_response_without_retry(body: bytes) -> None:
    fake = FakeRai(lambda r: httpx.Response(200, content=body))
    client, sleeps = make_client(fake)
    with pytest.raises(InvalidResponse):
        list(client.iter_cohorts(START, END, ["PK"]))
    assert len(fake.requests) == 1 and sleeps == []


@pytest.mark.parametrize(
    "token_body",
    [{"expires_in": 60}, {"access_token": "t", "expires_in": "60"},
     {"access_token": "t", "expires_in": 60, "token_type": "MAC"}, []],
)
def test_malformed_token_answers_raise_invalid_response(token_body: Any) -> None:
    fake = FakeRai(cohort_ok, authorize=lambda r: httpx.Response(200, json=token_body))
    client, _ = make_client(fake)
    with pytest.raises(InvalidResponse, match="authorize"):
        client.get_cohort("c")
    assert fake.requests == []


# --- retries ----------------------------------------------------------------------------------


def failing(times: int, failure: httpx.Response | Exception,
            then: httpx.Response | None = None) -> Any:
    calls = {"n": 0}

    def data(request: httpx.Request) -> httpx.Response:
        calls["n"] += 1
        if calls["n"] <= times:
            if isinstance(failure, Exception):
                raise failure
            return failure
        return then if then is not None else httpx.Response(200, json=COHORT)

    return data


def test_server_errors_are_retried_with_full_jitter_backoff() -> None:
    fake = FakeRai(failing(3, envelope(500, "internal")))
    client, sleeps = make_client(fake, max_attempts=4, backoff_base=0.5, backoff_max=30)
    assert client.get_cohort("c").cohort_id == "coh_1"
    assert len(fake.requests) == 4
    assert len(sleeps) == 3
    for attempt, slept in enumerate(sleeps, start=1):
        assert 0 <= slept <= 0.5 * 2 ** (attempt - 1)


class Ceiling:
    """A random source that always picks the top of the range, to see the exponential cap."""

    def uniform(self, a: float, b: float) -> float:
        return b


def test_backoff_doubles_up_to_backoff_max() -> None:
    fake = FakeRai(failing(10, envelope(503, "internal")))
    client, sleeps = make_client(fake, max_attempts=6, backoff_base=0.5, backoff_max=3)
    client._rng = Ceiling()  # type: ignore[assignment]
    with pytest.raises(ServerError) as info:
        client.get_cohort("c")
    assert info.value.status_code == 503
    assert sleeps == [0.5, 1.0, 2.0, 3.0, 3.0]
    assert len(fake.requests) == 6


def test_jitter_is_random_not_fixed() -> None:
    fake = FakeRai(failing(100, envelope(500, "internal")))
    client, sleeps = make_client(fake, max_attempts=40, backoff_base=1, backoff_max=1)
    with pytest.raises(ServerError):
        client.get_cohort("c")
    assert len(set(sleeps)) > 30 and all(0 <= s <= 1 for s in sleeps)


def test_retry_after_seconds_is_a_floor_on_the_wait() -> None:
    busy = envelope(503, "internal", headers={"Retry-After": "7"})
    fake = FakeRai(failing(1, busy))
    client, sleeps = make_client(fake, backoff_base=0.1, backoff_max=30)
    client.get_cohort("c")
    assert sleeps == [7.0]


def test_retry_after_http_date_is_honoured() -> None:
    when = format_datetime(datetime.now(timezone.utc) + timedelta(seconds=12), usegmt=True)
    fake = FakeRai(failing(1, httpx.Response(503, headers={"Retry-After": when})))
    client, sleeps = make_client(fake, backoff_base=0.1)
    client.get_cohort("c")
    assert len(sleeps) == 1 and 9 <= sleeps[0] <= 12


def test_retry_after_beyond_backoff_max_raises_at_once() -> None:
    fake = FakeRai(failing(5, envelope(503, "internal", headers={"Retry-After": "3600"})))
    client, sleeps = make_client(fake, backoff_max=30)
    with pytest.raises(ServerError) as info:
        client.get_cohort("c")
    assert info.value.retry_after == 3600
    assert len(fake.requests) == 1 and sleeps == []


def test_transport_errors_are_retried() -> None:
    fake = FakeRai(failing(2, httpx.ConnectError("connection refused")))
    client, sleeps = make_client(fake)
    assert client.get_cohort("c").cohort_id == "coh_1"
    assert len(fake.requests) == 3 and len(sleeps) == 2


def test_transport_errors_after_the_last_attempt() -> None:
    fake = FakeRai(failing(99, httpx.ReadTimeout("timed out")))
    client, sleeps = make_client(fake, max_attempts=3)
    with pytest.raises(RaiTransportError) as info:
        client.get_cohort("c")
    assert info.value.status_code is None
    assert "ReadTimeout (rai.test:443): timed out" in str(info.value)  # names where it failed
    assert isinstance(info.value.__cause__, httpx.ReadTimeout)
    assert len(fake.requests) == 3 and len(sleeps) == 2


def test_max_attempts_one_means_no_retry() -> None:
    fake = FakeRai(failing(1, envelope(500, "internal")))
    client, sleeps = make_client(fake, max_attempts=1)
    with pytest.raises(ServerError):
        client.get_cohort("c")
    assert len(fake.requests) == 1 and sleeps == []


def test_authorize_server_errors_and_transport_errors_are_retried() -> None:
    answers: list[httpx.Response | None] = [envelope(500, "internal"), None]

    def authorize(request: httpx.Request) -> httpx.Response | None:
        return answers.pop(0)

    fake = FakeRai(cohort_ok, authorize=authorize)
    client, sleeps = make_client(fake)
    assert client.get_cohort("c").cohort_id == "coh_1"
    assert fake.auth_calls == 2 and len(sleeps) == 1 and len(fake.requests) == 1


def test_a_body_that_drips_past_the_timeout_is_cut_off() -> None:
    clock = {"now": 0.0}

    def slow_chunks() -> Any:
        for _ in range(5):
            clock["now"] += 1.0
            yield b" "

    fake = FakeRai(lambda r: httpx.Response(200, content=slow_chunks()))
    client, sleeps = make_client(fake, timeout=2.5, max_attempts=1)
    import failopen.rai._client as module

    real = module.time.monotonic
    module.time.monotonic = lambda: clock["now"]  # type: ignore[assignment]
    try:
        with pytest.raises(RaiTransportError, match="body still arriving after 2.5s"):
            client.get_cohort("c")
    finally:
        module.time.monotonic = real  # type: ignore[assignment]


# --- tokens -----------------------------------------------------------------------------------


def test_the_token_is_cached_across_calls() -> None:
    fake = FakeRai(cohort_ok)
    client, _ = make_client(fake)
    for _ in range(5):
        client.get_cohort("c")
    assert fake.auth_calls == 1
    assert {bearer(r) for r in fake.requests} == {token_value(1)}


@pytest.mark.parametrize(("expires_in", "kept_until"), [(3600, 3540), (100, 90), (10, 9)])
def test_the_token_is_refreshed_shortly_before_it_expires(expires_in: int,
                                                          kept_until: float) -> None:
    now = {"t": 1000.0}
    fake = FakeRai(cohort_ok, expires_in=expires_in)
    client, _ = make_client(fake, timer=lambda: now["t"])
    client.get_cohort("c")
    now["t"] += kept_until - 0.01
    client.get_cohort("c")
    assert fake.auth_calls == 1
    now["t"] += 0.02
    client.get_cohort("c")
    assert fake.auth_calls == 2
    assert bearer(fake.requests[-1]) == token_value(2)


def test_a_401_refreshes_the_token_once_and_retries_once() -> None:
    def data(request: httpx.Request) -> httpx.Response:
        if bearer(request) == token_value(1):
            return envelope(401, "unauthorized", "token expired")
        return httpx.Response(200, json=COHORT)

    fake = FakeRai(data)
    client, sleeps = make_client(fake)
    assert client.get_cohort("c").cohort_id == "coh_1"
    assert fake.auth_calls == 2
    assert [bearer(r) for r in fake.requests] == [token_value(1), token_value(2)]
    assert sleeps == []
    client.get_cohort("c")
    assert fake.auth_calls == 2  # the new token is cached


def test_a_401_after_the_refresh_raises_unauthorized_without_looping() -> None:
    fake = FakeRai(lambda r: envelope(401, "unauthorized", "no", "req-401"))
    client, sleeps = make_client(fake)
    with pytest.raises(Unauthorized) as info:
        client.get_cohort("c")
    assert info.value.request_id == "req-401"
    assert fake.auth_calls == 2 and len(fake.requests) == 2 and sleeps == []


def test_twenty_threads_share_one_authorize() -> None:
    fake = FakeRai(cohort_ok, auth_delay=0.05)
    client, _ = make_client(fake)
    barrier = threading.Barrier(20)
    results: list[Any] = []

    def work() -> None:
        barrier.wait()
        results.append(client.get_cohort("c").cohort_id)

    threads = [threading.Thread(target=work) for _ in range(20)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert results == ["coh_1"] * 20
    assert fake.auth_calls == 1
    assert {bearer(r) for r in fake.requests} == {token_value(1)}


def test_twenty_threads_refused_at_once_refresh_once() -> None:
    revoked = threading.Event()
    barrier = threading.Barrier(20)

    def data(request: httpx.Request) -> httpx.Response:
        if revoked.is_set() and bearer(request) == token_value(1):
            return envelope(401, "unauthorized")
        return httpx.Response(200, json=COHORT)

    fake = FakeRai(data, auth_delay=0.02)
    client, _ = make_client(fake)
    client.get_cohort("c")  # token 1 cached
    revoked.set()
    errors: list[BaseException] = []

    def work() -> None:
        barrier.wait()
        try:
            client.get_cohort("c")
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(20)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert errors == []
    assert fake.auth_calls == 2


# --- secrets ----------------------------------------------------------------------------------


def test_secrets_never_show_in_reprs_errors_or_logs(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    tokens = [token_value(n) for n in range(1, 4)]

    def authorize(request: httpx.Request) -> httpx.Response | None:
        if fake.auth_calls == 3:  # a server that echoes what it got
            return envelope(401, "unauthorized", f"bad secret {SECRET} for {tokens[0]}")
        return None

    def data(request: httpx.Request) -> httpx.Response:
        if len(fake.requests) <= 2:
            return envelope(500, "internal", f"token {bearer(request)} broke us")
        return envelope(401, "unauthorized", f"expired: {bearer(request)}")

    fake = FakeRai(data, authorize=authorize)
    client, _ = make_client(fake, max_attempts=3)
    caught: list[RaiError] = []
    for _ in range(2):
        try:
            client.get_cohort("c")
        except RaiError as exc:
            caught.append(exc)
    assert fake.auth_calls == 3, "the scenario should have reached the echoing authorize"
    texts = [repr(client), str(client.auth), repr(client.auth), caplog.text]
    texts += [str(exc) for exc in caught] + [repr(exc) for exc in caught]
    texts += [repr(client.auth._cache)]
    assert "[redacted]" in " ".join(str(exc) for exc in caught)
    for text in texts:
        assert SECRET not in text
        for token in tokens:
            assert token not in text
    assert CLIENT_ID in repr(client) and BASE in repr(client)


def test_retries_are_logged_with_the_error() -> None:
    fake = FakeRai(failing(1, envelope(500, "internal", "boom", "req-5")))
    client, _ = make_client(fake)
    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append  # type: ignore[method-assign]
    logger = logging.getLogger("failopen.rai")
    logger.addHandler(handler)
    try:
        client.get_cohort("c")
    finally:
        logger.removeHandler(handler)
    warnings = [r.getMessage() for r in records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "500 internal: boom (request_id=req-5)" in warnings[0]
    assert "attempt 1 of 4" in warnings[0]


def test_close_closes_the_connection_pool() -> None:
    fake = FakeRai(cohort_ok)
    client, _ = make_client(fake)
    with client as entered:
        assert entered is client
    assert client._http.is_closed
