"""failopen.web: what both adapters answer — flag JSON, rejections, body tokens, overrides."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from failopen.config import Config
from failopen.engine.flag import EnforcementFlag, FlagState, Override, rfc3339
from failopen.engine.guard import Decision
from failopen.exceptions import StoreError
from failopen.providers.verify import MAX_TOKEN_LENGTH
from failopen.stores.file import FileStore
from failopen.stores.memory import MemoryStore
from failopen.testing import FakeClock
from failopen.web import (
    FLAG_HEADERS,
    MAX_OVERRIDE_BODY,
    SNIPPET_OPTIONS,
    RefusalLog,
    admin_token_matches,
    bearer_token,
    flag_payload,
    handle_override,
    load_snippet,
    prefers_json,
    rejection_headers,
    rejection_html,
    rejection_json,
    rejection_payload,
    sealed_page_headers,
    snippet_attributes,
    token_from_body,
    wants_confirm,
)

FIELD = "enforcement-token"
ADMIN = "adm-0123456789abcdefghijklmnop"


def _reject(status: int, outcome: Any, reason: str, retry_after: int | None = None) -> Decision:
    return Decision(allow=False, bypassed=False, outcome=outcome, reason=reason,
                    status_code=status, retry_after=retry_after)


# --- the flag endpoint ---------------------------------------------------------------------------


def test_flag_payload_has_the_issue_keys_and_is_never_cached() -> None:
    state = FlagState(enforce=False, source="watcher", reason="global major_outage", since=0.0,
                      global_status="major_outage")
    payload = flag_payload(state)
    assert {"enforce", "source", "reason", "since", "stale"} <= set(payload)
    assert payload["enforce"] is False and payload["since"] == "1970-01-01T00:00:00.000Z"
    assert payload["mode"] == "enforce"
    assert ("Cache-Control", "no-store") in FLAG_HEADERS


def test_flag_payload_carries_the_poll_error_while_stale_and_null_otherwise() -> None:
    fresh = FlagState(enforce=False, source="watcher", reason="outage", since=0.0)
    assert flag_payload(fresh)["error"] is None
    stale = FlagState(enforce=False, source="watcher", reason="outage", since=0.0, stale=True,
                      error="StatusUnavailable: reset")
    assert flag_payload(stale)["error"] == "StatusUnavailable: reset"
    assert flag_payload(stale, mode="shadow")["error"] == "StatusUnavailable: reset"


def test_shadow_mode_tells_the_browser_to_enforce_and_shows_what_would_happen() -> None:
    # The server enforces in shadow mode, so a browser told "enforce: false" would skip the
    # challenge and collect 403s for every log-in during the outage.
    off = FlagState(enforce=False, source="watcher", reason="outage", since=0.0)
    payload = flag_payload(off, mode="shadow")
    assert payload["enforce"] is True and payload["would_bypass"] is True
    assert payload["shadow"] == {"enforce": False}
    on = FlagState(enforce=True, source="watcher", reason="ok", since=0.0)
    assert flag_payload(on, mode="shadow")["would_bypass"] is False
    assert flag_payload(on, mode="shadow")["shadow"] == {"enforce": True}
    assert "shadow" not in flag_payload(off)


@pytest.mark.parametrize(("value", "expected"), [
    ("1", True), ("true", True), ("YES", True), (" 1 ", True),
    (None, False), ("", False), ("0", False), ("false", False), ("2", False),
])
def test_wants_confirm(value: str | None, expected: bool) -> None:
    assert wants_confirm(value) is expected


# --- rejections ----------------------------------------------------------------------------------


def test_rejection_body_never_carries_the_internal_reason() -> None:
    # The reason says which verify failure happened and whether an outage was confirmed:
    # useful in the log, and a map for an attacker probing for a bypass.
    decision = _reject(503, "cannot_verify", "cannot verify now (timeout); no outage confirmed", 7)
    body = json.loads(rejection_json(decision))
    assert body["error"]["code"] == "cannot_verify"
    assert "outage" not in body["error"]["message"]
    assert "timeout" not in rejection_json(decision).decode()
    assert "outage" not in rejection_html(decision).decode()
    assert ("Retry-After", "7") in rejection_headers(decision, json_body=True)


@pytest.mark.parametrize("outcome", ["missing_token", "invalid_token", "rate_limited",
                                     "cannot_verify", "internal_error", "some_future_outcome"])
def test_every_outcome_has_a_public_message(outcome: str) -> None:
    payload = rejection_payload(_reject(403, outcome, "secret detail"))
    assert payload["error"]["code"] == outcome
    assert payload["error"]["message"] and "secret detail" not in payload["error"]["message"]


def test_rejection_headers() -> None:
    forbidden = _reject(403, "invalid_token", "x")
    assert dict(rejection_headers(forbidden, json_body=False)) == {
        "Content-Type": "text/html; charset=utf-8", "Cache-Control": "no-store",
    }
    assert dict(rejection_headers(forbidden, json_body=True))["Content-Type"] == "application/json"


def test_rejection_html_is_a_small_escaped_page() -> None:
    page = rejection_html(_reject(403, "missing_token", "<script>")).decode()
    assert page.startswith("<!doctype html>") and "<script>" not in page
    assert "Request refused" in page
    assert "retry" in rejection_html(_reject(503, "cannot_verify", "x", 5)).decode()


def test_a_sites_refusal_page_is_never_cached_and_a_503_says_when_to_retry() -> None:
    page = [("Content-Type", "text/html"), ("cache-control", "public, max-age=600"),
            ("CDN-Cache-Control", "max-age=600"), ("Surrogate-Control", "max-age=60"),
            ("Set-Cookie", "csrftoken=abc")]
    assert sealed_page_headers(page, _reject(503, "cannot_verify", "x", 5)) == [
        ("Content-Type", "text/html"), ("Set-Cookie", "csrftoken=abc"),
        ("Cache-Control", "no-store"), ("Retry-After", "5")]
    own = sealed_page_headers([("retry-after", "60")], _reject(429, "outage_rate_limited", "x", 9))
    assert own == [("retry-after", "60"), ("Cache-Control", "no-store")]
    assert sealed_page_headers([], _reject(403, "missing_token", "x")) == [
        ("Cache-Control", "no-store")]


@pytest.mark.parametrize(("accept", "content_type", "expected"), [
    ("application/json", None, True),
    ("application/problem+json", None, True),
    ("text/html,application/xhtml+xml,*/*;q=0.8", "application/json", False),
    ("*/*", "application/json; charset=utf-8", True),
    ("*/*", "application/vnd.api+json", True),
    ("*/*", "application/x-www-form-urlencoded", False),
    (None, None, False),
])
def test_prefers_json(accept: str | None, content_type: str | None, expected: bool) -> None:
    assert prefers_json(accept, content_type) is expected


# --- the token in a body -------------------------------------------------------------------------


def _multipart(*parts: tuple[str, str | None, bytes], boundary: str = "XyZ") -> tuple[str, bytes]:
    chunks = []
    for name, filename, value in parts:
        disposition = f'form-data; name="{name}"' + (f'; filename="{filename}"' if filename else "")
        chunks.append(f"--{boundary}\r\nContent-Disposition: {disposition}\r\n".encode()
                      + (b"Content-Type: application/octet-stream\r\n" if filename else b"")
                      + b"\r\n" + value + b"\r\n")
    closing = f"--{boundary}--\r\n".encode()
    return f"multipart/form-data; boundary={boundary}", b"".join(chunks) + closing


@pytest.mark.parametrize(("content_type", "body", "expected"), [
    ("application/x-www-form-urlencoded", b"user=a&enforcement-token=tok.1%2B2", "tok.1+2"),
    ("application/x-www-form-urlencoded; charset=utf-8", b"enforcement-token=", ""),
    ("application/x-www-form-urlencoded", b"user=a", None),
    ("application/json", b'{"enforcement-token": "tok-json", "user": "a"}', "tok-json"),
    ("application/vnd.api+json", b'{"enforcement-token": "tok-json"}', "tok-json"),
    ("application/json", b'{"enforcement-token": 12}', None),
    ("application/json", b'["enforcement-token"]', None),
    ("application/json", b"{not json", None),
    ("application/json", b"[" * 100_000, None),
    ("application/json", b"\xff\xfe", None),
    ("text/plain", b"enforcement-token=tok", None),
    (None, b"enforcement-token=tok", None),
])
def test_token_from_body(content_type: str | None, body: bytes, expected: str | None) -> None:
    assert token_from_body(content_type, body, FIELD) == expected


def test_token_from_multipart_with_a_file_before_it() -> None:
    content_type, body = _multipart(
        ("avatar", "a.bin", b"\x00\x01--XyZ not a boundary\r\n\r\n"),
        ("user", None, b"alice"),
        (FIELD, None, b"tok-multi"),
    )
    assert token_from_body(content_type, body, FIELD) == "tok-multi"


def test_a_file_upload_named_like_the_field_is_never_the_token() -> None:
    content_type, body = _multipart((FIELD, "evil.txt", b"tok-from-file"))
    assert token_from_body(content_type, body, FIELD) is None


@pytest.mark.parametrize("content_type", [
    "multipart/form-data", "multipart/form-data; boundary=", "multipart/form-data; boundary=other",
])
def test_multipart_without_a_usable_boundary_carries_no_token(content_type: str) -> None:
    _, body = _multipart((FIELD, None, b"tok"))
    assert token_from_body(content_type, body, FIELD) is None


def test_multipart_quoted_boundary_and_truncated_part() -> None:
    content_type, body = _multipart((FIELD, None, b"tok"), boundary="a b")
    assert token_from_body('multipart/form-data; boundary="a b"', body, FIELD) == "tok"
    assert token_from_body(content_type, b"--a b\r\nContent-Disposition: form-data", FIELD) is None


def test_urlencoded_field_flood_is_refused_not_parsed() -> None:
    body = b"&".join(b"f%d=1" % i for i in range(5000)) + b"&enforcement-token=tok"
    assert token_from_body("application/x-www-form-urlencoded", body, FIELD) is None


# --- admin token ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("header", "expected"), [
    (f"Bearer {ADMIN}", ADMIN), (f"bearer  {ADMIN} ", ADMIN), ("Basic abc", None),
    ("Bearer", None), ("Bearer ", None), ("", None), (None, None),
])
def test_bearer_token(header: str | None, expected: str | None) -> None:
    assert bearer_token(header) == expected


def test_admin_token_matches() -> None:
    assert admin_token_matches(ADMIN, ADMIN)
    assert not admin_token_matches(ADMIN[:-1], ADMIN)
    assert not admin_token_matches(ADMIN + "x", ADMIN)
    assert not admin_token_matches("é" * 30, ADMIN)
    assert not admin_token_matches(None, ADMIN)
    assert not admin_token_matches("", "")
    assert not admin_token_matches(ADMIN, None), "no configured token must never match"


# --- the override endpoint -----------------------------------------------------------------------


@pytest.fixture
def flag(fake_clock: FakeClock, tmp_path: Path) -> EnforcementFlag:
    # A store every worker sees: the override endpoint refuses one that only this process sees.
    return EnforcementFlag(store=FileStore(tmp_path / "override.json"), clock=fake_clock)


def _override(flag: EnforcementFlag, data: Any, **kwargs: Any) -> tuple[int, dict[str, Any]]:
    body = data if isinstance(data, bytes) else json.dumps(data).encode()
    return handle_override(flag, body, actor="staff:alice", store=flag_store(flag), **kwargs)


def flag_store(flag: EnforcementFlag) -> Any:
    return flag._store  # the store the flag writes, as the adapters pass runtime.store


@pytest.mark.parametrize("data", [{"enforce": True}, {"enforce": False, "ttl": 60},
                                  {"enforce": None}, b"not even JSON"])
def test_an_override_only_this_process_would_see_is_refused(
    fake_clock: FakeClock, data: Any
) -> None:
    # Under three workers, a 200 from one of them left the other two admitting tokenless requests.
    store = MemoryStore()
    flag = EnforcementFlag(store=store, clock=fake_clock)
    before = flag.state
    body = data if isinstance(data, bytes) else json.dumps(data).encode()
    status, answer = handle_override(flag, body, actor="admin-token", store=store)
    assert status == 409
    assert set(answer) == {"error"} and set(answer["error"]) == {"code", "message"}
    assert answer["error"]["code"] == "store_not_shared"
    assert "FAILOPEN_STORE=file:///" in answer["error"]["message"]
    assert flag.state is before and store.load() is None


# --- refusals in the log, paced -----------------------------------------------------------------


def test_a_flood_of_refusals_writes_one_line_then_a_count_per_interval(
    fake_clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    log = RefusalLog(logging.getLogger("failopen.test-refusals"), interval=60.0, clock=fake_clock)
    with caplog.at_level(logging.WARNING, logger="failopen.test-refusals"):
        for i in range(300):
            log.refused("wrong admin token", f"198.51.100.{i % 7}")
        assert len(caplog.records) == 1
        first = caplog.records[0].getMessage()
        assert "wrong admin token" in first and "198.51.100.0" in first
        fake_clock.advance(59)
        log.refused("wrong admin token", "198.51.100.1")
        assert len(caplog.records) == 1
        fake_clock.advance(2)
        log.refused("wrong admin token", "198.51.100.2")
        assert len(caplog.records) == 2
        second = caplog.records[1].getMessage()
        assert "300 more" in second and "198.51.100.2" in second
        fake_clock.advance(61)  # a quiet interval: the next refusal is logged alone
        log.refused("wrong admin token", "198.51.100.3")
        assert len(caplog.records) == 3 and "more refused" not in caplog.records[2].getMessage()
    assert all(r.levelno == logging.WARNING for r in caplog.records)


def test_override_off_with_ttl_then_auto(
    flag: EnforcementFlag, fake_clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="failopen.audit"):
        status, answer = _override(flag, {"enforce": False, "ttl": 900, "reason": "vendor down"})
    assert status == 200
    assert answer["override"]["enforce"] is False
    assert answer["override"]["reason"] == "vendor down (by staff:alice)"
    assert answer["flag"]["enforce"] is False and answer["flag"]["source"] == "override"
    assert "staff:alice" in caplog.text
    fake_clock.advance(901)
    assert flag.state.enforce is True, "the ttl must lapse by itself"
    status, answer = _override(flag, {"enforce": True})
    assert (status, answer["flag"]["enforce"], answer["override"]["enforce"]) == (200, True, True)
    status, answer = _override(flag, {"enforce": None, "reason": "done"})
    assert (status, answer["override"]) == (200, None)


def test_override_off_without_ttl_lapses_in_an_hour_and_says_when(
    flag: EnforcementFlag, fake_clock: FakeClock
) -> None:
    status, answer = _override(flag, {"enforce": False})
    lapses = rfc3339(fake_clock.time() + 3600)
    assert status == 200
    assert answer["override"]["expires_at"] == lapses
    assert answer["flag"]["expires_at"] == lapses
    fake_clock.advance(3600)
    assert flag.state.enforce is True


def test_override_off_for_seven_days_is_the_longest(
    flag: EnforcementFlag, fake_clock: FakeClock
) -> None:
    status, answer = _override(flag, {"enforce": False, "ttl": 7 * 86400})
    assert (status, answer["override"]["expires_at"]) == (
        200, rfc3339(fake_clock.time() + 7 * 86400))
    before = flag.state
    status, answer = _override(flag, {"enforce": False, "ttl": 7 * 86400 + 1})
    assert (status, answer["error"]["code"]) == (400, "bad_request")
    assert "at most 7 days (604800 s)" in answer["error"]["message"]
    assert flag.state is before


def test_override_on_may_be_open_ended(flag: EnforcementFlag) -> None:
    status, answer = _override(flag, {"enforce": True})
    assert (status, answer["override"]["expires_at"], answer["flag"]["expires_at"]) == (
        200, None, None)
    status, answer = _override(flag, {"enforce": True, "ttl": 31 * 86400})
    assert status == 400 and "at most 30 days" in answer["error"]["message"]


def test_override_answer_shows_the_shadow_flag(flag: EnforcementFlag) -> None:
    status, answer = _override(flag, {"enforce": False}, mode="shadow")
    assert status == 200 and answer["flag"]["enforce"] is True and answer["flag"]["would_bypass"]


@pytest.mark.parametrize(("data", "message"), [
    (b"", "not JSON"),
    (b"{", "not JSON"),
    ([False], "JSON object"),
    ({}, '"enforce" is required'),
    ({"enforce": "false"}, '"enforce" is required'),
    ({"enforce": 0}, '"enforce" is required'),
    ({"enforce": 1}, '"enforce" is required'),
    ({"enforce": False, "ttl": 0}, '"ttl" must be'),
    ({"enforce": False, "ttl": -5}, '"ttl" must be'),
    ({"enforce": False, "ttl": True}, '"ttl" must be'),
    ({"enforce": False, "ttl": "900"}, '"ttl" must be'),
    ({"enforce": False, "ttl": 10**9}, "at most 7 days (604800 s)"),
    (b'{"enforce": false, "ttl": 1' + b"0" * 400 + b"}", '"ttl" must be'),
    ({"enforce": True, "ttl": 10**9}, "at most 30 days"),
    (b'{"enforce": false, "ttl": NaN}', '"ttl" must be'),
    ({"enforce": None, "ttl": 60}, "does not apply"),
    ({"enforce": False, "reason": 5}, '"reason" must be'),
    ({"enforce": False, "reason": "x" * 501}, '"reason" must be'),
    ({"enforce": False, "until": 5}, "unknown field(s): until"),
    (b"[" * 4000, "not JSON"),
    (b" " * (MAX_OVERRIDE_BODY + 1), "body over"),
])
def test_a_bad_override_request_changes_nothing(
    flag: EnforcementFlag, data: Any, message: str
) -> None:
    before = flag.state
    status, answer = _override(flag, data)
    assert status == 400 and answer["error"]["code"] == "bad_request"
    assert message in answer["error"]["message"]
    assert flag.state is before


def test_a_store_that_cannot_be_written_answers_503_and_changes_nothing(
    fake_clock: FakeClock, caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    class BrokenStore(FileStore):
        def save(self, override: Override | None) -> None:
            raise StoreError("disk full")

    flag = EnforcementFlag(store=BrokenStore(tmp_path / "override.json"), clock=fake_clock)
    status, answer = _override(flag, {"enforce": False})
    assert status == 503 and answer["error"]["code"] == "store_unavailable"
    assert flag.state.enforce is True
    assert "disk full" in caplog.text


# --- the snippet ---------------------------------------------------------------------------------


def test_load_snippet_gives_a_strong_etag_that_follows_the_content(tmp_path: Path) -> None:
    first, second = tmp_path / "a.js", tmp_path / "b.js"
    first.write_text("console.log(1)")
    second.write_text("console.log(2)")
    a, b = load_snippet(first), load_snippet(second)
    assert a is not None and b is not None
    assert a.body == b"console.log(1)"
    assert a.etag.startswith('"') and a.etag.endswith('"') and a.etag != b.etag
    assert load_snippet(tmp_path / "missing.js") is None


def test_snippet_attributes_carry_no_secret() -> None:
    config = Config(verify_url="https://v.example.com/", private_key="pk-secret-value",
                    public_key="PUB-1", admin_token=ADMIN, vendor_url="https://client.v.example/")
    attributes = snippet_attributes(config, flag_url="/failopen/flag")
    assert attributes == {
        "data-failopen-flag-url": "/failopen/flag",
        "data-failopen-public-key": "PUB-1",
        "data-failopen-token-field": FIELD,
        "data-failopen-vendor-url": "https://client.v.example",
    }
    assert "pk-secret-value" not in str(attributes) and ADMIN not in str(attributes)


def test_snippet_attributes_render_the_tuning_options_given() -> None:
    attributes = snippet_attributes(Config(), flag_url="/f", form="#login", ready_timeout_ms=800,
                                    retries=0, retry_delay_ms=50)
    assert attributes["data-failopen-vendor-url"] == ""  # not configured: the snippet says so
    assert {k: v for k, v in attributes.items() if k in SNIPPET_OPTIONS.values()} == {
        "data-failopen-form": "#login", "data-failopen-ready-timeout-ms": "800",
        "data-failopen-retries": "0", "data-failopen-retry-delay-ms": "50",
    }
    with pytest.raises(ValueError, match="ready_timeout_ms"):
        snippet_attributes(Config(), flag_url="/f", ready_timeout_ms=0)
    with pytest.raises(ValueError, match="retries"):
        snippet_attributes(Config(), flag_url="/f", retries=True)
    with pytest.raises(ValueError, match="form"):
        snippet_attributes(Config(), flag_url="/f", form=" ")


# --- a body built to be slow to read -------------------------------------------------------------
# token_from_body runs on the ASGI event loop: what one request costs, every request waits for.


@pytest.mark.parametrize("unit", [b"[0],", b"[],", b"{},", b"1.5e300,", b'{"a":0},'])
def test_a_json_body_of_too_many_values_is_refused_not_parsed(unit: bytes) -> None:
    # A megabyte of tiny containers or numbers held the ASGI loop ~100 ms in json.loads (C code:
    # a worker thread would hold the GIL as long). Over the limit it is not parsed: no token.
    body = b'{"enforcement-token": "tok", "pad": [' + unit * 6000 + b"0]}"
    assert token_from_body("application/json", body, FIELD) is None


def test_a_json_body_within_the_limits_still_finds_the_token() -> None:
    # An avatar as base64 text costs next to nothing to parse, however long.
    body = json.dumps({FIELD: "tok", "items": list(range(4000)), "avatar": "QUJD" * 250_000})
    assert token_from_body("application/json", body.encode(), FIELD) == "tok"


def test_urlencoded_decodes_only_the_fields_own_value() -> None:
    # Decoding every value cost ~0.1 s per MiB of "%41"; only the token's value is decoded now.
    body = b"pad=" + b"%41" * 300_000 + b"&enforcement-token=tok%2B1&" + b"%42" * 300_000
    assert token_from_body("application/x-www-form-urlencoded", body, FIELD) == "tok+1"


def test_urlencoded_token_too_long_to_be_valid_stays_too_long() -> None:
    body = b"enforcement-token=" + b"%41" * 300_000
    token = token_from_body("application/x-www-form-urlencoded", body, FIELD)
    assert token is not None and len(token) > MAX_TOKEN_LENGTH  # the guard: invalid_token


_FORM_PIECES = st.sampled_from(["enforcement-token", "enforcement%2Dtoken", "enforcement+token",
                                "enforcement-token=", "=", "&", "&&", "+", "%", "%2", "%41",
                                "%E2%80%A8", "%FF", "a", "b=c", "tok", ";", " "])


@settings(max_examples=300, deadline=None)
@given(st.lists(_FORM_PIECES, max_size=12).map("".join))
def test_urlencoded_reads_what_parse_qsl_reads(text: str) -> None:
    # Faster, never different: the first pair named like the field, decoded as parse_qsl does.
    pairs = parse_qsl(text, keep_blank_values=True)
    expected = next((value for name, value in pairs if name == FIELD), None)
    assert token_from_body("application/x-www-form-urlencoded", text.encode(), FIELD) == expected


def test_multipart_part_flood_is_refused_not_parsed() -> None:
    parts = [(f"f{i}", None, b"1") for i in range(5000)] + [(FIELD, None, b"tok")]
    content_type, body = _multipart(*parts)
    assert token_from_body(content_type, body, FIELD) is None


def test_multipart_header_flood_in_one_part_is_refused() -> None:
    body = (b"--XyZ\r\n" + b"X-Pad: 1\r\n" * 5000
            + b'Content-Disposition: form-data; name="enforcement-token"\r\n\r\ntok\r\n--XyZ--\r\n')
    assert token_from_body("multipart/form-data; boundary=XyZ", body, FIELD) is None


def test_multipart_within_the_limits_still_finds_the_token() -> None:
    parts = [(f"f{i}", None, b"1") for i in range(900)] + [(FIELD, None, b"tok")]
    content_type, body = _multipart(*parts)
    assert token_from_body(content_type, body, FIELD) == "tok"


@pytest.mark.parametrize("disposition", [
    b"form-data" + b";" * 1_000_000,  # the stdlib's email parser: seconds, quadratic
    b"form-data" + b"; a=b" * 200_000,
    b'form-data; name="' + b'\\"' * 500_000,
    b'form-data; name="x' + b'; a="\\' * 150_000,
])
def test_a_huge_content_disposition_does_not_hide_the_token(disposition: bytes) -> None:
    # What these cost is measured by tests/benchmarks/bench_web.py, not timed here.
    body = (b"--XyZ\r\nContent-Disposition: " + disposition
            + b'\r\n\r\nv\r\n--XyZ\r\nContent-Disposition: form-data; name="enforcement-token"'
            + b"\r\n\r\ntok\r\n--XyZ--\r\n")
    assert token_from_body("multipart/form-data; boundary=XyZ", body, FIELD) == "tok"


def test_many_parts_with_long_dispositions_still_find_the_token() -> None:
    part = b"--XyZ\r\nContent-Disposition: form-data" + b";" * 1000 + b"\r\n\r\nv\r\n"
    body = part * 999 + b'--XyZ\r\nContent-Disposition: form-data; name="enforcement-token"'
    token = token_from_body("multipart/form-data; boundary=XyZ",
                            body + b"\r\n\r\ntok\r\n--XyZ--", FIELD)
    assert token == "tok"


@pytest.mark.parametrize(("disposition", "expected"), [
    (b'form-data; name="enforcement-token"', "tok"),
    (b"form-data; name=enforcement-token", "tok"),
    (b'form-data; NAME="enforcement-token"', "tok"),
    (b'form-data ; name = "enforcement-token" ', "tok"),
    (b'form-data; name="enforcement-\\t\\"oken"', None),  # only \\ and \" are unescaped
    (b'form-data; name="a\\"b"; name="enforcement-token"', None),  # the first name decides
    (b"form-data; name*=utf-8''enforcement%2Dtoken", "tok"),
    (b'form-data; name="other"', None),
    (b'form-data; name="enforcement-token"; filename="t.txt"', None),
    (b"form-data; name=\"enforcement-token\"; filename*=utf-8''t.txt", None),
    (b'form-data; name="enforcement-token"; filename=""', None),
    (b"form-data; name*=no-such-charset''enforcement%2Dtoken", None),
    (b'form-data; name="enforcement-token', None),  # an unterminated quote
    (b"form-data; name", None),
])
def test_content_disposition_forms(disposition: bytes, expected: str | None) -> None:
    body = b"--XyZ\r\nContent-Disposition: " + disposition + b"\r\n\r\ntok\r\n--XyZ--\r\n"
    assert token_from_body("multipart/form-data; boundary=XyZ", body, FIELD) == expected


def test_a_long_reason_keeps_who_placed_the_override(flag: EnforcementFlag) -> None:
    # The stored reason is cut at 500 characters: the actor must not be what is cut.
    status, answer = _override(flag, {"enforce": False, "reason": "x" * 500})
    assert status == 200
    assert answer["override"]["reason"].endswith(" (by staff:alice)")
    assert flag.state.reason.endswith(" (by staff:alice)")


def test_the_public_flag_does_not_name_who_placed_an_override(flag: EnforcementFlag) -> None:
    # The flag endpoint answers anyone; a staff user name is for the audit log and the CLI.
    status, answer = _override(flag, {"enforce": False, "reason": "vendor down"})
    assert status == 200 and "staff:alice" in answer["override"]["reason"]
    public = flag_payload(flag.state)
    assert public["reason"] == "vendor down" and "alice" not in json.dumps(public)
    assert "alice" not in json.dumps(answer["flag"])
    watcher = FlagState(enforce=True, source="watcher", reason="all fine (by design)", since=0.0)
    assert flag_payload(watcher)["reason"] == "all fine (by design)"  # only overrides change
