"""The session-intelligence API emulator against spec interface A (sections 2, 4.1-4.6, 5, 7, 8)."""

from __future__ import annotations

import asyncio
import base64
import re
import threading
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from typing import Any

import httpx
import pytest

from failopen.testing.rai_emulator import DEFAULT_PAGE_SIZE, RaiEmulator

PREFIX = "/api/rai/v1"
KEY = "pk_live_test"
COHORT_FIELDS = [
    "cohort_id", "public_key", "customer_name", "cohort_window_start", "cohort_window_end",
    "created_at", "session_count", "tagged_session_count", "anomaly_ids", "telltale_ids",
    "telltale_names", "telltale_owner_categories", "ticketing_ticket_id", "ticketing_ticket_url",
    "schema_version",
]  # fmt: skip
SESSION_FIELDS = [
    "session_id", "session_created", "public_key", "cohort_id", "anomaly_id",
    "original_ticket_id", "attack_label", "client_theme", "render_type", "risk_score",
    "risk_band", "risk_category", "custom_risk_score", "suspicion_flags", "tagged_by_telltale",
    "telltale_names", "verify", "schema_version",
]  # fmt: skip
UTC_STAMP = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{3})?Z")


class FakeClock:
    """Time that moves only when told to; waits return at once and advance it."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.waits: list[float] = []

    def monotonic(self) -> float:
        return self.now

    def time(self) -> float:
        return 1_700_000_000.0 + self.now

    def wait(self, event: threading.Event, timeout: float) -> bool:
        self.waits.append(timeout)
        self.now += timeout
        return event.is_set()


class Api:
    """A thin raw-HTTP caller: tests see exactly what the emulator answers."""

    def __init__(self, emulator: RaiEmulator) -> None:
        self.emulator = emulator
        self.http = httpx.Client(transport=emulator.transport(), base_url="http://rai.test")
        self.token = self.authorize().json()["access_token"]

    def authorize(self, **body: Any) -> httpx.Response:
        creds = {"client_id": self.emulator.client_id, "client_secret": self.emulator.client_secret}
        return self.http.post(f"{PREFIX}/authorize", json={**creds, **body})

    def get(self, path: str, params: Any = None, *, token: str | None = None) -> httpx.Response:
        headers = {"Authorization": f"Bearer {token or self.token}"}
        return self.http.get(PREFIX + path, params=params, headers=headers)

    def window(self, **extra: Any) -> dict[str, Any]:
        start, end = self.emulator.data_window
        return {"from": start, "to": end, "public_key": KEY, **extra}

    def all_pages(self, path: str, params: dict[str, Any], field: str) -> list[dict[str, Any]]:
        records: list[dict[str, Any]] = []
        token = None
        while True:
            reply = self.get(path, {**params, **({"page_token": token} if token else {})})
            assert reply.status_code == 200, reply.text
            body = reply.json()
            records += body[field]
            token = body.get("next_page_token")
            if not token:
                return records


def error_of(reply: httpx.Response) -> str:
    body = reply.json()
    assert set(body["error"]) == {"code", "message", "request_id"}
    assert body["error"]["request_id"] and body["error"]["message"]
    return str(body["error"]["code"])


@pytest.fixture
def emulator() -> RaiEmulator:
    return RaiEmulator()


@pytest.fixture
def api(emulator: RaiEmulator) -> Iterator[Api]:
    api = Api(emulator)
    yield api
    api.http.close()


# -- authorize (4.2, 5) -----------------------------------------------------------------------


def test_authorize_issues_a_bearer_token(api: Api) -> None:
    body = api.authorize().json()
    assert set(body) == {"access_token", "expires_in", "token_type"}
    assert body["token_type"] == "Bearer" and body["expires_in"] == 3600
    assert api.emulator.authorize_calls == 2


@pytest.mark.parametrize(
    "body",
    [{"client_id": "test-client"}, {"client_secret": "test-secret"}, [1, 2],
     {"client_id": 5, "client_secret": "test-secret"}, {"client_id": "", "client_secret": "x"}],
)  # fmt: skip
def test_authorize_rejects_malformed_bodies(api: Api, body: Any) -> None:
    reply = api.http.post(f"{PREFIX}/authorize", json=body)
    assert reply.status_code == 400 and error_of(reply) == "invalid_request"


def test_authorize_needs_json(api: Api) -> None:
    reply = api.http.post(f"{PREFIX}/authorize", content=b"{not json", headers={
        "Content-Type": "application/json"})  # fmt: skip
    assert error_of(reply) == "invalid_request"
    reply = api.http.post(f"{PREFIX}/authorize", data={"client_id": "test-client"})
    assert reply.status_code == 400 and error_of(reply) == "invalid_request"


@pytest.mark.parametrize("field", ["client_id", "client_secret"])
def test_authorize_rejects_wrong_credentials(api: Api, field: str) -> None:
    reply = api.authorize(**{field: "wrong"})
    assert reply.status_code == 401 and error_of(reply) == "unauthorized"
    assert "wrong" not in reply.text and "test-secret" not in reply.text


# -- bearer tokens (5) ------------------------------------------------------------------------


@pytest.mark.parametrize("header", [None, "Bearer", "Basic dGVzdA==", "Bearer not-a-token"])
def test_data_endpoints_need_a_valid_token(api: Api, header: str | None) -> None:
    headers = {} if header is None else {"Authorization": header}
    for path in ("/cohorts", "/sessions", "/cohorts/coh_x", "/cohorts/coh_x/sessions"):
        reply = api.http.get(PREFIX + path, params=api.window(), headers=headers)
        assert reply.status_code == 401 and error_of(reply) == "unauthorized"
        assert reply.headers["WWW-Authenticate"].startswith("Bearer")


def test_tokens_expire_on_the_injected_clock() -> None:
    clock = FakeClock()
    api = Api(RaiEmulator(clock=clock, token_ttl=60))
    assert api.get("/cohorts", api.window()).status_code == 200
    clock.now += 59.9
    assert api.get("/cohorts", api.window()).status_code == 200
    clock.now += 0.1
    reply = api.get("/cohorts", api.window())
    assert reply.status_code == 401 and "expired" in reply.json()["error"]["message"]
    api.token = api.authorize().json()["access_token"]
    assert api.get("/cohorts", api.window()).status_code == 200


def test_expire_tokens_invalidates_every_token(api: Api) -> None:
    other = api.authorize().json()["access_token"]
    api.emulator.expire_tokens()
    for token in (api.token, other):
        assert error_of(api.get("/cohorts", api.window(), token=token)) == "unauthorized"


def test_request_ids_are_unique_per_request(api: Api) -> None:
    ids = {api.get("/cohorts/nope").json()["error"]["request_id"] for _ in range(50)}
    assert len(ids) == 50


# -- records (2.1-2.3) ------------------------------------------------------------------------


def test_cohort_records_carry_every_spec_field(api: Api) -> None:
    cohorts = api.all_pages("/cohorts", api.window(), "cohorts")
    assert [c["cohort_id"] for c in cohorts] == api.emulator.cohort_ids()
    for cohort in cohorts:
        assert list(cohort) == COHORT_FIELDS
        for name in ("cohort_window_start", "cohort_window_end", "created_at"):
            assert UTC_STAMP.fullmatch(cohort[name])
        assert cohort["cohort_window_start"] < cohort["cohort_window_end"] < cohort["created_at"]
        assert 0 < cohort["tagged_session_count"] <= cohort["session_count"]
        assert all(isinstance(i, int) for i in cohort["anomaly_ids"] + cohort["telltale_ids"])
        assert len(cohort["telltale_ids"]) == len(cohort["telltale_names"])
        assert cohort["ticketing_ticket_url"].endswith(cohort["ticketing_ticket_id"])
        assert cohort["schema_version"] == "rai-v1" and cohort["public_key"] == KEY


def test_session_records_carry_every_spec_field_and_agree_with_their_cohort(api: Api) -> None:
    for cohort_id in api.emulator.cohort_ids():
        cohort = api.get(f"/cohorts/{cohort_id}").json()
        sessions = api.all_pages(f"/cohorts/{cohort_id}/sessions", {}, "sessions")
        assert len(sessions) == cohort["session_count"]
        assert sum(s["tagged_by_telltale"] for s in sessions) == cohort["tagged_session_count"]
        for s in sessions:
            assert list(s) == SESSION_FIELDS
            assert UTC_STAMP.fullmatch(s["session_created"])
            assert cohort["cohort_window_start"] <= s["session_created"]
            assert s["session_created"][:19] < cohort["cohort_window_end"][:19]
            assert s["cohort_id"] == cohort_id and s["public_key"] == cohort["public_key"]
            assert s["anomaly_id"] in cohort["anomaly_ids"]
            assert s["attack_label"] == "retroactive_attack" and s["risk_band"] == "high"
            assert s["risk_category"] in ("bot", "human") and 0 <= s["risk_score"] <= 1
            assert isinstance(s["custom_risk_score"], (float, type(None)))
            assert s["telltale_names"] == (cohort["telltale_names"] if s["tagged_by_telltale"]
                                           else [])  # fmt: skip
            if s["verify"] is not None:
                assert list(s["verify"]) == ["security_level", "solved", "verified"]
                assert s["verify"]["solved"] or not s["verify"]["verified"]
    assert len({s["session_id"] for s in api.emulator.iter_session_records()}) == (
        api.emulator.total_sessions
    )


def test_data_is_deterministic_per_seed() -> None:
    def snapshot(seed: int) -> list[dict[str, Any]]:
        return list(RaiEmulator(seed=seed).iter_session_records())

    assert snapshot(3) == snapshot(3)
    assert snapshot(3) != snapshot(4)


def test_a_million_sessions_are_generated_on_demand() -> None:
    emulator = RaiEmulator(cohorts=100, sessions_per_cohort=10_000)
    assert emulator.total_sessions == 1_000_000
    api = Api(emulator)
    last = emulator.cohort_ids()[-1]
    body = api.get(f"/cohorts/{last}/sessions", {"page_size": 1000}).json()
    assert len(body["sessions"]) == 1000 and body["next_page_token"]
    assert len(emulator._plans) <= 100  # only cohort plans are kept, never records


# -- list cohorts (4.3) -----------------------------------------------------------------------


def test_list_cohorts_filters(api: Api) -> None:
    everything = api.all_pages("/cohorts", api.window(), "cohorts")
    anomaly = everything[0]["anomaly_ids"][0]
    telltale = everything[0]["telltale_ids"][0]
    median = sorted(c["session_count"] for c in everything)[len(everything) // 2]
    cases: dict[str, tuple[Any, Callable[[dict[str, Any]], bool]]] = {
        "cohort_id": (everything[2]["cohort_id"], lambda c: c is everything[2]),
        "anomaly_id": (anomaly, lambda c: anomaly in c["anomaly_ids"]),
        "telltale_id": (telltale, lambda c: telltale in c["telltale_ids"]),
        "min_session_count": (median, lambda c: c["session_count"] >= median),
    }
    for name, (value, keep) in cases.items():
        got = api.all_pages("/cohorts", api.window(**{name: value, "page_size": 2}), "cohorts")
        want = [c for c in everything if keep(c)]
        assert got == want and 0 < len(want) < len(everything), name


def test_list_cohorts_window_is_half_open_on_window_start(api: Api) -> None:
    everything = api.all_pages("/cohorts", api.window(), "cohorts")
    cut = everything[5]["cohort_window_start"]
    first = api.all_pages("/cohorts", api.window(to=cut), "cohorts")
    second = api.all_pages("/cohorts", api.window(**{"from": cut}), "cohorts")
    assert first + second == everything and len(first) == 5


def test_list_cohorts_can_filter_on_created_at_instead() -> None:
    api = Api(RaiEmulator(cohort_filter="created_at"))
    everything = api.all_pages("/cohorts", api.window(to="2024-05-31T00:00:00Z"), "cohorts")
    assert len(everything) == 12
    # Cohort 11's window starts 2024-05-19T13:13 and it was created 2024-05-21T13:57.
    late = everything[11]
    for cut, listed in (("2024-05-21T13:57:29Z", False), ("2024-05-21T13:57:30Z", True)):
        got = api.all_pages("/cohorts", api.window(to=cut), "cohorts")
        assert (late in got) is listed and got[:11] == everything[:11]
    assert api.all_pages("/cohorts", {**api.window(), "from": "2024-05-21T13:57:29Z",
                                      "to": "2024-05-22T00:00:00Z"}, "cohorts") == [late]
    api.http.close()
    with pytest.raises(ValueError, match="cohort_filter"):
        RaiEmulator(cohort_filter="created")  # type: ignore[arg-type]


def test_list_cohorts_by_several_public_keys() -> None:
    api = Api(RaiEmulator(public_keys=("pk_a", "pk_b", "pk_c")))
    start, end = api.emulator.data_window
    both = api.all_pages("/cohorts", {"from": start, "to": end, "public_key": ["pk_a", "pk_c"]},
                         "cohorts")  # fmt: skip
    assert {c["public_key"] for c in both} == {"pk_a", "pk_c"}
    only_b = api.all_pages("/cohorts", {"from": start, "to": end, "public_key": "pk_b"}, "cohorts")
    assert len(both) + len(only_b) == api.emulator.cohort_count


def test_unknown_cohort_id_filter_gives_an_empty_list(api: Api) -> None:
    body = api.get("/cohorts", api.window(cohort_id="coh_ffffffffffff")).json()
    assert body == {"cohorts": [], "next_page_token": "", "schema_version": "rai-v1"}


# -- sessions (4.5, 4.6) ----------------------------------------------------------------------


def test_list_sessions_returns_every_session_once_in_time_order(api: Api) -> None:
    sessions = api.all_pages("/sessions", api.window(page_size=7), "sessions")
    assert sessions == list(api.emulator.iter_session_records())
    stamps = [s["session_created"] for s in sessions]
    assert stamps == sorted(stamps)


def test_list_sessions_consecutive_windows_never_overlap(api: Api) -> None:
    everything = api.all_pages("/sessions", api.window(page_size=1000), "sessions")
    cut = everything[len(everything) // 2]["session_created"]
    first = api.all_pages("/sessions", api.window(to=cut, page_size=1000), "sessions")
    second = api.all_pages("/sessions", api.window(**{"from": cut}, page_size=1000), "sessions")
    assert first + second == everything and first and second


def test_list_sessions_filters(api: Api) -> None:
    everything = api.all_pages("/sessions", api.window(page_size=1000), "sessions")
    cohorts = {c["cohort_id"]: c for c in api.all_pages("/cohorts", api.window(), "cohorts")}
    two = next(c for c in cohorts.values() if len(c["anomaly_ids"]) == 2)
    anomaly = two["anomaly_ids"][1]
    telltale = two["telltale_ids"][0]
    cases: dict[str, tuple[Any, Callable[[dict[str, Any]], bool]]] = {
        "cohort_id": (two["cohort_id"], lambda s: s["cohort_id"] == two["cohort_id"]),
        "anomaly_id": (anomaly, lambda s: s["anomaly_id"] == anomaly),
        "telltale_id": (telltale, lambda s: telltale in cohorts[s["cohort_id"]]["telltale_ids"]),
    }
    for name, (value, keep) in cases.items():
        got = api.all_pages("/sessions", api.window(**{name: value, "page_size": 9}), "sessions")
        want = [s for s in everything if keep(s)]
        assert got == want and 0 < len(want) < len(everything), name


def test_list_sessions_ignores_min_session_count_and_unknown_params(api: Api) -> None:
    plain = api.get("/sessions", api.window()).json()["sessions"]
    assert api.get("/sessions", api.window(min_session_count=10**6)).json()["sessions"] == plain
    assert api.get("/sessions", api.window(colour="blue")).json()["sessions"] == plain


def test_cohort_sessions_accept_only_pagination_and_ignore_the_rest(api: Api) -> None:
    cohort_id = api.emulator.cohort_ids()[1]
    plain = api.get(f"/cohorts/{cohort_id}/sessions").json()
    noisy = api.get(f"/cohorts/{cohort_id}/sessions", {"from": "x", "public_key": "nope"}).json()
    assert plain["sessions"] == noisy["sessions"]
    assert plain["sessions"] == list(api.emulator.iter_session_records(cohort_id))


# -- get cohort (4.4) -------------------------------------------------------------------------


def test_get_cohort_matches_the_listed_record(api: Api) -> None:
    listed = api.all_pages("/cohorts", api.window(), "cohorts")
    for cohort in listed:
        assert api.get(f"/cohorts/{cohort['cohort_id']}").json() == cohort
        assert api.emulator.cohort_record(cohort["cohort_id"]) == cohort


@pytest.mark.parametrize("cohort_id", ["coh_ffffffffffff", "unknown", "coh_%2F..", "COH_X"])
def test_unknown_cohorts_are_not_found(api: Api, cohort_id: str) -> None:
    for path in (f"/cohorts/{cohort_id}", f"/cohorts/{cohort_id}/sessions"):
        reply = api.get(path)
        assert reply.status_code == 404 and error_of(reply) == "not_found"


@pytest.mark.parametrize(
    ("method", "path"),
    [("GET", "/authorize"), ("POST", "/cohorts"), ("DELETE", "/sessions"), ("GET", "/nothing"),
     ("GET", "/cohorts/x/sessions/y")],
)  # fmt: skip
def test_unknown_routes_are_not_found(api: Api, method: str, path: str) -> None:
    reply = api.http.request(method, PREFIX + path)
    assert reply.status_code == 404 and error_of(reply) == "not_found"


# -- limits and 400 codes (4.1, 7, 8) ---------------------------------------------------------


@pytest.mark.parametrize("size", ["0", "1001", "-1", "abc", "", "1.5", ["5", "6"]])
def test_page_size_outside_1_to_1000_is_rejected(api: Api, size: Any) -> None:
    cohort_id = api.emulator.cohort_ids()[0]
    for path, params in (("/cohorts", api.window()), ("/sessions", api.window()),
                         (f"/cohorts/{cohort_id}/sessions", {})):  # fmt: skip
        reply = api.get(path, {**params, "page_size": size})
        assert reply.status_code == 400 and error_of(reply) == "invalid_page_size"


def test_page_size_limits_and_default() -> None:
    api = Api(RaiEmulator(cohorts=3, sessions_per_cohort=700))
    assert len(api.get("/sessions", api.window()).json()["sessions"]) == DEFAULT_PAGE_SIZE == 100
    assert len(api.get("/sessions", api.window(page_size=1)).json()["sessions"]) == 1
    assert len(api.get("/sessions", api.window(page_size=1000)).json()["sessions"]) == 1000


def _window_cases() -> list[dict[str, Any]]:
    start = datetime(2024, 5, 1)
    return [
        {"to": "2024-05-02T00:00:00Z"},
        {"from": "2024-05-01T00:00:00Z"},
        {"from": "2024-05-01", "to": "2024-05-02T00:00:00Z"},
        {"from": start.isoformat(), "to": "2024-05-02T00:00:00Z"},  # no offset
        {"from": "2024-13-01T00:00:00Z", "to": "2024-05-02T00:00:00Z"},
        {"from": "2024-05-02T00:00:00Z", "to": "2024-05-01T00:00:00Z"},
        {"from": "2024-05-01T00:00:00Z", "to": "2024-05-01T00:00:00Z"},
        {"from": "2024-05-01T00:00:00Z", "to": "2024-05-31T00:00:00.001Z"},
        {"from": ["2024-05-01T00:00:00Z", "2024-05-02T00:00:00Z"], "to": "2024-05-03T00:00:00Z"},
    ]


@pytest.mark.parametrize("window", _window_cases())
def test_bad_windows_are_rejected(api: Api, window: dict[str, Any]) -> None:
    for path in ("/cohorts", "/sessions"):
        reply = api.get(path, {"public_key": KEY, **window})
        assert reply.status_code == 400 and error_of(reply) == "invalid_window"


def test_windows_of_exactly_30_days_and_any_offset_are_accepted(api: Api) -> None:
    for window in ({"from": "2024-05-01T00:00:00Z", "to": "2024-05-31T00:00:00Z"},
                   {"from": "2024-05-01T02:00:00+02:00", "to": "2024-05-30T22:59:59.5-01:00"}):
        assert api.get("/sessions", {"public_key": KEY, **window}).status_code == 200


def test_offsets_are_honoured(api: Api) -> None:
    utc = api.get("/sessions", api.window(to="2024-05-02T00:00:00Z")).json()
    shifted = api.get("/sessions", api.window(to="2024-05-02T02:00:00+02:00")).json()
    assert utc["sessions"] == shifted["sessions"]


@pytest.mark.parametrize("keys", [None, "", ["", ""]])
def test_public_key_is_required(api: Api, keys: Any) -> None:
    params = api.window()
    params.pop("public_key")
    if keys is not None:
        params["public_key"] = keys
    for path in ("/cohorts", "/sessions"):
        reply = api.get(path, params)
        assert reply.status_code == 400 and error_of(reply) == "missing_public_key"


def test_unowned_public_keys_are_forbidden(api: Api) -> None:
    for path in ("/cohorts", "/sessions"):
        reply = api.get(path, api.window(public_key=[KEY, "pk_live_someone_else"]))
        assert reply.status_code == 403 and error_of(reply) == "forbidden_public_key"


@pytest.mark.parametrize(
    ("name", "value"),
    [("anomaly_id", "abc"), ("anomaly_id", "-3"), ("telltale_id", "1.5"), ("cohort_id", ""),
     ("cohort_id", ["a", "b"]), ("min_session_count", "many"), ("telltale_id", "")],
)  # fmt: skip
def test_malformed_filters_are_rejected(api: Api, name: str, value: Any) -> None:
    paths = ["/cohorts"] + (["/sessions"] if name != "min_session_count" else [])
    for path in paths:
        reply = api.get(path, api.window(**{name: value}))
        assert reply.status_code == 400 and error_of(reply) == "invalid_filter", path


# -- page tokens (4.1) ------------------------------------------------------------------------


def _first_token(api: Api, path: str, params: dict[str, Any]) -> str:
    token = api.get(path, {**params, "page_size": 2}).json()["next_page_token"]
    assert token
    return str(token)


def test_page_tokens_are_bound_to_their_filters(api: Api) -> None:
    token = _first_token(api, "/sessions", api.window())
    changed = [api.window(to="2024-05-15T00:00:00Z"), api.window(anomaly_id=70001),
               api.window(cohort_id=api.emulator.cohort_ids()[0])]  # fmt: skip
    for params in changed:
        reply = api.get("/sessions", {**params, "page_token": token})
        assert reply.status_code == 400 and error_of(reply) == "invalid_page_token"
    reply = api.get("/cohorts", {**api.window(), "page_token": token})
    assert error_of(reply) == "invalid_page_token"
    ok = api.get("/sessions", {**api.window(), "page_token": token, "page_size": 50})
    assert ok.status_code == 200 and len(ok.json()["sessions"]) == 50


def test_page_tokens_are_bound_to_the_cohort_in_the_path(api: Api) -> None:
    first, second = api.emulator.cohort_ids()[:2]
    token = _first_token(api, f"/cohorts/{first}/sessions", {})
    reply = api.get(f"/cohorts/{second}/sessions", {"page_token": token})
    assert error_of(reply) == "invalid_page_token"
    assert api.get(f"/cohorts/{first}/sessions", {"page_token": token}).status_code == 200


def test_public_key_order_does_not_change_the_filter() -> None:
    api = Api(RaiEmulator(public_keys=("pk_a", "pk_b")))
    start, end = api.emulator.data_window
    params = {"from": start, "to": end, "public_key": ["pk_a", "pk_b"]}
    token = _first_token(api, "/cohorts", params)
    swapped = {**params, "public_key": ["pk_b", "pk_a"], "page_token": token}
    assert api.get("/cohorts", swapped).status_code == 200


def test_tampered_and_garbage_page_tokens_are_rejected(api: Api) -> None:
    token = _first_token(api, "/sessions", api.window())
    raw = bytearray(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
    raw[len(raw) // 3] ^= 1
    tampered = base64.urlsafe_b64encode(bytes(raw)).decode().rstrip("=")
    for bad in (tampered, token[:-2], "garbage", "!!!", token + "A"):
        reply = api.get("/sessions", {**api.window(), "page_token": bad})
        assert reply.status_code == 400 and error_of(reply) == "invalid_page_token", bad
    reply = api.get("/sessions", {**api.window(), "page_token": [token, token]})
    assert error_of(reply) == "invalid_page_token"


def test_page_tokens_expire(api: Api) -> None:
    token = _first_token(api, "/sessions", api.window())
    api.emulator.expire_page_tokens()
    assert error_of(api.get("/sessions", {**api.window(), "page_token": token})) == (
        "invalid_page_token"
    )
    clock = FakeClock()
    timed = Api(RaiEmulator(clock=clock, page_token_ttl=30))
    token = _first_token(timed, "/sessions", timed.window())
    clock.now += 31
    reply = timed.get("/sessions", {**timed.window(), "page_token": token})
    assert "expired" in reply.json()["error"]["message"]


def test_an_empty_page_token_is_the_first_page(api: Api) -> None:
    first = api.get("/sessions", api.window()).json()
    assert api.get("/sessions", api.window(page_token="")).json()["sessions"] == first["sessions"]


def test_final_page_token_can_be_absent() -> None:
    api = Api(RaiEmulator(final_page_token="absent"))
    body = api.get("/cohorts", api.window(page_size=1000)).json()
    assert "next_page_token" not in body and len(body["cohorts"]) == api.emulator.cohort_count


# -- per-endpoint error codes exactly as the spec lists them (4.2-4.6) ------------------------


def test_every_listed_error_code_can_be_produced_per_endpoint() -> None:
    spec = {
        "list_cohorts": {"invalid_page_size", "invalid_page_token", "invalid_window",
                         "invalid_filter", "missing_public_key", "unauthorized", "forbidden",
                         "forbidden_public_key", "internal"},
        "get_cohort": {"unauthorized", "forbidden", "not_found", "internal"},
        "list_cohort_sessions": {"invalid_page_size", "invalid_page_token", "unauthorized",
                                 "forbidden", "not_found", "internal"},
        "list_sessions": {"invalid_page_size", "invalid_page_token", "invalid_window",
                          "invalid_filter", "missing_public_key", "unauthorized", "forbidden",
                          "forbidden_public_key", "internal"},
    }  # fmt: skip
    emulator = RaiEmulator()
    api = Api(emulator)
    cohort_id = emulator.cohort_ids()[0]
    paths = {"list_cohorts": "/cohorts", "get_cohort": f"/cohorts/{cohort_id}",
             "list_cohort_sessions": f"/cohorts/{cohort_id}/sessions", "list_sessions": "/sessions"}
    triggers: dict[str, dict[str, Any]] = {
        "invalid_page_size": {"page_size": 0}, "invalid_page_token": {"page_token": "x"},
        "invalid_window": {"to": "soon"}, "invalid_filter": {"anomaly_id": "x"},
        "missing_public_key": {"public_key": ""}, "forbidden_public_key": {"public_key": "pk_x"},
    }  # fmt: skip
    for endpoint, codes in spec.items():
        seen = set()
        base = api.window() if endpoint in ("list_cohorts", "list_sessions") else {}
        for code in codes:
            path = paths[endpoint]
            token = api.token
            if code == "unauthorized":
                token = "expired"
            elif code == "not_found":
                path = path.replace(cohort_id, "coh_ffffffffffff")
            elif code in ("forbidden", "internal"):
                emulator.inject_error(code, endpoint=endpoint)
            reply = api.get(path, {**base, **triggers.get(code, {})}, token=token)
            seen.add(error_of(reply))
        assert seen == codes, endpoint


def test_forbidden_endpoints_answer_403(api: Api) -> None:
    emulator = RaiEmulator(forbidden_endpoints=["list_sessions"])
    api = Api(emulator)
    reply = api.get("/sessions", api.window())
    assert reply.status_code == 403 and error_of(reply) == "forbidden"
    assert api.get("/cohorts", api.window()).status_code == 200


def test_inject_error_validates_its_arguments(emulator: RaiEmulator) -> None:
    with pytest.raises(ValueError, match="unknown error code"):
        emulator.inject_error("teapot")
    with pytest.raises(ValueError, match="unknown endpoint"):
        emulator.inject_error("internal", endpoint="delete_everything")
    with pytest.raises(ValueError, match="forbidden_endpoints"):
        RaiEmulator(forbidden_endpoints=["nope"])


def test_injected_errors_on_authorize(api: Api) -> None:
    api.emulator.inject_error("internal", endpoint="authorize", times=2)
    assert api.get("/cohorts", api.window()).status_code == 200  # other endpoints unaffected
    assert [api.authorize().status_code for _ in range(3)] == [500, 500, 200]


# -- fault injection and counters -------------------------------------------------------------


def test_fail_every_nth_data_request() -> None:
    api = Api(RaiEmulator(fail_every=3))
    statuses = [api.get("/cohorts", api.window()).status_code for _ in range(9)]
    assert statuses == [200, 200, 500, 200, 200, 500, 200, 200, 500]
    assert api.emulator.error_counts["internal"] == 3
    assert api.authorize().status_code == 200  # authorize does not count
    assert api.emulator.data_requests == 9 and api.emulator.authorize_calls == 2
    assert api.emulator.requests == 11 and len(api.emulator.history) == 11


def test_latency_and_slow_pages_wait_on_the_clock() -> None:
    clock = FakeClock()
    api = Api(RaiEmulator(clock=clock, latency=0.02, slow_pages=1.5))
    clock.waits.clear()
    body = api.get("/sessions", api.window()).json()
    assert len(body["sessions"]) == 100
    assert clock.waits == [0.02, 1.5]


def test_unknown_fields_exercise_client_tolerance() -> None:
    api = Api(RaiEmulator(unknown_fields=True))
    body = api.get("/sessions", api.window()).json()
    assert "future_top_level" in body
    assert all(s["future_field"] for s in body["sessions"])
    cohort = api.get("/cohorts", api.window()).json()["cohorts"][0]
    assert list(cohort)[: len(COHORT_FIELDS)] == COHORT_FIELDS and "future_field" in cohort


def test_async_clients_work_over_the_transport(emulator: RaiEmulator) -> None:
    async def run() -> int:
        async with httpx.AsyncClient(transport=emulator.transport(), base_url="http://r") as c:
            auth = await c.post(f"{PREFIX}/authorize", json={
                "client_id": "test-client", "client_secret": "test-secret"})  # fmt: skip
            headers = {"Authorization": "Bearer " + auth.json()["access_token"]}
            start, end = emulator.data_window
            reply = await c.get(f"{PREFIX}/sessions", headers=headers,
                                params={"from": start, "to": end, "public_key": KEY})  # fmt: skip
            return len(reply.json()["sessions"])

    assert asyncio.run(run()) == 100


# -- a real socket ----------------------------------------------------------------------------


@pytest.mark.slow
def test_served_on_loopback_with_latency_and_slow_pages() -> None:
    emulator = RaiEmulator(latency=0.01, slow_pages=0.01, cohorts=2, sessions_per_cohort=500)
    with emulator.serve() as server, httpx.Client(base_url=server.url) as http:
        token = http.post(f"{PREFIX}/authorize", json={
            "client_id": "test-client", "client_secret": "test-secret"}).json()["access_token"]
        start, end = emulator.data_window
        reply = http.get(f"{PREFIX}/sessions", headers={"Authorization": f"Bearer {token}"},
                         params={"from": start, "to": end, "public_key": KEY, "page_size": 1000})
        assert reply.headers["transfer-encoding"] == "chunked"
        assert len(reply.json()["sessions"]) == 1000
        assert reply.json()["next_page_token"] == ""


@pytest.mark.slow
def test_stopping_the_server_cuts_simulated_latency_short() -> None:
    emulator = RaiEmulator(latency=600)
    server = emulator.serve()
    outcome: list[object] = []

    def call() -> None:
        try:
            outcome.append(httpx.post(f"{server.url}{PREFIX}/authorize", json={}, timeout=60))
        except httpx.HTTPError as exc:
            outcome.append(exc)

    caller = threading.Thread(target=call)
    caller.start()
    while emulator.requests == 0:
        threading.Event().wait(0.005)
    server.stop()
    caller.join(timeout=30)  # a liveness bound, far above the real time it takes
    assert not caller.is_alive() and outcome


def test_window_helpers_cover_the_data(emulator: RaiEmulator) -> None:
    start, end = emulator.data_window
    span = datetime.fromisoformat(end[:-1]) - datetime.fromisoformat(start[:-1])
    assert timedelta(days=1) < span <= timedelta(days=30)
    with pytest.raises(KeyError):
        emulator.cohort_record("coh_nope")
    with pytest.raises(ValueError, match="RFC 3339"):
        RaiEmulator(start="yesterday")
