"""The status-page client: parsing, and reading the fake page in-process and over loopback."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from email.utils import formatdate
from typing import Any

import httpx
import pytest

from failopen.config import Config
from failopen.exceptions import (
    ConfigError,
    GlobalComponentError,
    RedirectRefused,
    ResponseTooLarge,
    StatusParseError,
    StatusUnavailable,
)
from failopen.providers.status import (
    KNOWN_STATUSES,
    Component,
    StatusClient,
    StatusReport,
    parse_components,
    parse_indicator,
)
from failopen.testing._server import FakeRequest, LoopbackServer, Reply
from failopen.testing.clock import FakeClock
from failopen.testing.status_page import (
    DRIP_SECONDS_PER_BYTE,
    FAULTS,
    UNKNOWN_STATUS,
    FakeStatusPage,
)

URL = "https://status.test"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def component(cid: str, status: str = "operational", description: str | None = None,
              **extra: Any) -> dict[str, Any]:
    return {
        "id": cid, "name": cid.title(), "status": status, "created_at": "2024-01-01T00:00:00Z",
        "updated_at": "2024-05-01T12:00:00.000Z", "position": 1, "description": description,
        "showcase": True, "start_date": "2024-01-01", "group_id": None, "page_id": "p1",
        "group": False, "only_show_if_degraded": False, **extra,
    }


def document(*components: dict[str, Any], **extra: Any) -> bytes:
    if not components:
        components = (
            component("glob", "operational"),
            component("use1", "operational", "us-east-1"),
            component("euw1", "operational", "eu-west-1"),
        )
    page = {"id": "p1", "name": "Vendor", "url": "https://status.test", "time_zone": "Etc/UTC",
            "updated_at": "2024-05-01T12:00:00.000Z"}
    return json.dumps({"page": page, "components": list(components), **extra}).encode()


def client_for(page: FakeStatusPage, **kwargs: Any) -> StatusClient:
    return StatusClient(URL, transport=page.transport(), async_transport=page.transport(),
                        **kwargs)


# --- parsing -----------------------------------------------------------------------------------


def test_a_healthy_page_parses_into_global_and_regions() -> None:
    report = parse_components(document(), fetched_at=123.0)
    assert report.global_status == "operational"
    assert report.known and report.operational
    assert report.source == "components"
    assert report.fetched_at == 123.0
    assert report.page_updated_at == "2024-05-01T12:00:00.000Z"
    assert report.global_component is not None and report.global_component.id == "glob"
    assert [(r.id, r.description, r.status) for r in report.regions] == [
        ("use1", "us-east-1", "operational"), ("euw1", "eu-west-1", "operational"),
    ]
    assert report.impaired_regions() == ()


@pytest.mark.parametrize("status", sorted(KNOWN_STATUSES))
def test_every_spec_status_is_read_and_known(status: str) -> None:
    report = parse_components(
        document(component("glob", status), component("r1", status, "us-east-1")), fetched_at=0
    )
    assert report.global_status == status
    assert report.known
    assert report.operational is (status == "operational")
    assert [r.status for r in report.regions] == [status]
    assert all(r.known for r in report.regions)


def test_known_statuses_are_exactly_the_spec_values() -> None:
    spec = {"operational", "degraded_performance", "partial_outage", "major_outage",
            "under_maintenance"}
    assert spec == KNOWN_STATUSES


def test_a_regional_impairment_with_the_global_operational_stays_operational() -> None:
    # spec 3.2: failover complete -> region impaired, global operational.
    body = document(component("glob"), component("use1", "major_outage", "us-east-1"),
                    component("euw1", "operational", "eu-west-1"))
    report = parse_components(body, fetched_at=0)
    assert report.global_status == "operational"
    assert [r.id for r in report.impaired_regions()] == ["use1"]


def test_a_configured_global_id_wins_over_the_null_description_rule() -> None:
    body = document(component("a", "operational"), component("b", "major_outage"),
                    component("r1", "operational", "us-east-1"))
    report = parse_components(body, global_component="b", fetched_at=0)
    assert report.global_status == "major_outage"
    assert [r.id for r in report.regions] == ["a", "r1"]


def test_a_configured_global_id_may_carry_a_description() -> None:
    body = document(component("g", "partial_outage", "Platform"),
                    component("r1", "operational", "us-east-1"))
    report = parse_components(body, global_component="g", fetched_at=0)
    assert report.global_status == "partial_outage"


def test_several_null_description_components_are_ambiguous() -> None:
    body = document(component("a"), component("b"), component("r1", description="us-east-1"))
    with pytest.raises(GlobalComponentError, match="FAILOPEN_GLOBAL_COMPONENT") as caught:
        parse_components(body, fetched_at=0)
    assert "a (A)" in str(caught.value) and "b (B)" in str(caught.value)


def test_no_null_description_component_means_no_global() -> None:
    body = document(component("r1", description="us-east-1"),
                    component("r2", description="eu-west-1"))
    with pytest.raises(GlobalComponentError, match="description null: none") as caught:
        parse_components(body, fetched_at=0)
    assert "r1 (R1)" in str(caught.value) and "r2 (R2)" in str(caught.value)


def test_a_description_key_that_is_absent_does_not_make_a_global() -> None:
    glob = component("glob")
    del glob["description"]
    with pytest.raises(GlobalComponentError, match="description null: none"):
        parse_components(document(glob, component("r1", description="x")), fetched_at=0)


def test_a_configured_global_id_that_is_absent_is_an_error_naming_the_ids() -> None:
    with pytest.raises(GlobalComponentError, match="'nope' is neither the id") as caught:
        parse_components(document(), global_component="nope", fetched_at=0)
    assert "glob (Glob)" in str(caught.value) and "use1 (Use1)" in str(caught.value)


def test_group_components_are_neither_global_nor_regions() -> None:
    body = document(component("grp", "major_outage", group=True),
                    component("glob", "operational"),
                    component("r1", "operational", "us-east-1", group_id="grp"))
    with pytest.raises(GlobalComponentError, match="groups"):  # not the documented shape
        parse_components(body, fetched_at=0)
    report = parse_components(body, fetched_at=0, global_component="glob")
    assert report.global_status == "operational"
    assert [r.id for r in report.regions] == ["r1"]
    assert report.regions[0].group_id == "grp"


def test_an_unknown_status_is_kept_not_guessed() -> None:
    body = document(component("glob", "investigating"), component("r1", "wobbly", "us-east-1"))
    report = parse_components(body, fetched_at=0)
    assert report.global_status == "investigating"
    assert not report.known and not report.operational
    assert report.global_component is not None and not report.global_component.known
    assert [r.id for r in report.impaired_regions()] == ["r1"]


def test_unknown_extra_fields_are_tolerated() -> None:
    glob = component("glob", future_field={"nested": [1, 2]})
    body = document(glob, component("r1", description="us-east-1"), incidents=[{"id": "x"}])
    assert parse_components(body, fetched_at=0).global_status == "operational"


def test_an_odd_page_object_or_names_are_noted_not_fatal() -> None:
    for change in (lambda d: d.update(page="p1"),
                   lambda d: d["components"][0].update(name=["x"]),
                   lambda d: d["page"].update(updated_at=17)):
        report = parse_components(_mutated(change), fetched_at=0)
        assert report.global_status == "operational" and len(report.odd) == 1


def test_a_page_without_a_page_object_still_parses() -> None:
    body = json.dumps({"components": [component("glob")]}).encode()
    report = parse_components(body, fetched_at=0)
    assert report.page_updated_at is None and report.regions == ()


def _mutated(change: Any) -> bytes:
    data = json.loads(document())
    change(data)
    return json.dumps(data).encode()


MALFORMED: dict[str, bytes] = {
    "empty": b"",
    "whitespace": b" \r\n\t ",
    "not json": b"all systems go",
    "html": b"<!doctype html><html><body>maintenance</body></html>",
    "truncated json": document()[: len(document()) // 2],
    "invalid utf-8": b'{"components": "\xff\xfe"}',
    "deep nesting": b"[" * 200_000 + b"]" * 200_000,
    "duplicate key": (
        b'{"components": [{"id": "g", "status": "operational", "status": "major_outage",'
        b' "description": null}]}'
    ),
    "array": b"[]",
    "string": b'"operational"',
    "null": b"null",
    "no components": _mutated(lambda d: d.pop("components")),
    "components null": _mutated(lambda d: d.update(components=None)),
    "components object": _mutated(lambda d: d.update(components={"glob": d["components"][0]})),
    "components empty": _mutated(lambda d: d.update(components=[])),
    "component not an object": _mutated(lambda d: d["components"].append("glob")),
    "component without id": _mutated(lambda d: d["components"][1].pop("id")),
    "id not a string": _mutated(lambda d: d["components"][1].update(id=7)),
    "id empty": _mutated(lambda d: d["components"][1].update(id="")),
    "component without status": _mutated(lambda d: d["components"][0].pop("status")),
    "status not a string": _mutated(lambda d: d["components"][0].update(status=1)),
    "status null": _mutated(lambda d: d["components"][0].update(status=None)),
    "status object": _mutated(lambda d: d["components"][0].update(status={"v": "x"})),
    "description not a string": _mutated(lambda d: d["components"][1].update(description=3)),
    "duplicate ids": _mutated(lambda d: d["components"][2].update(id="use1")),
}


@pytest.mark.parametrize("body", MALFORMED.values(), ids=MALFORMED.keys())
def test_every_malformed_components_document_is_a_parse_error(body: bytes) -> None:
    with pytest.raises(StatusParseError):
        parse_components(body, fetched_at=0)


def test_parse_errors_list_at_most_twenty_ids() -> None:
    body = document(*(component(f"r{i}", description=f"region {i}") for i in range(500)))
    with pytest.raises(GlobalComponentError) as caught:
        parse_components(body, fetched_at=0)
    assert "r19 (R19)" in str(caught.value) and "r20 (R20)" not in str(caught.value)
    assert "480 more" in str(caught.value)


def test_the_indicator_none_reads_as_operational() -> None:
    body = json.dumps({"page": {"updated_at": "2024-05-01T00:00:00Z"},
                       "status": {"indicator": "none", "description": "ok"}}).encode()
    report = parse_indicator(body, fetched_at=9.0)
    assert report.global_status == "operational" and report.known
    assert report.source == "indicator" and report.global_component is None
    assert report.regions == () and report.fetched_at == 9.0
    assert report.page_updated_at == "2024-05-01T00:00:00Z"


@pytest.mark.parametrize("indicator", ["minor", "major", "critical", "maintenance", "weird"])
def test_other_indicators_are_reported_with_a_prefix_and_not_known(indicator: str) -> None:
    body = json.dumps({"status": {"indicator": indicator}}).encode()
    report = parse_indicator(body, fetched_at=0)
    assert report.global_status == f"indicator:{indicator}"
    assert not report.known


@pytest.mark.parametrize("body", [
    b"", b"nope", b"[]", b'{"status": "none"}', b'{"status": {}}', b'{"status": {"indicator": 0}}',
    b'{"status": {"indicator": ""}}', b'{"indicator": "none"}',
])
def test_malformed_indicator_documents_are_parse_errors(body: bytes) -> None:
    with pytest.raises(StatusParseError):
        parse_indicator(body, fetched_at=0)


def test_to_dict_is_json_ready_and_complete() -> None:
    body = document(component("glob", "operational"),
                    component("use1", "major_outage", "us-east-1"))
    data = parse_components(body, fetched_at=5.0).to_dict()
    assert json.loads(json.dumps(data)) == data
    assert data["global_status"] == "operational" and data["known"] is True
    assert data["source"] == "components" and data["fetched_at"] == 5.0
    assert data["global_component"]["id"] == "glob"
    assert data["regions"][0]["description"] == "us-east-1"
    assert data["impaired_regions"] == ["use1"]
    fallback = StatusReport("indicator:major", None, (), 1.0, "indicator").to_dict()
    assert fallback["global_component"] is None and fallback["known"] is False


def test_component_known_follows_its_status() -> None:
    assert Component("a", "A", "operational", None, False, None, None, True).known


# --- construction ------------------------------------------------------------------------------


@pytest.mark.parametrize("url", [
    "http://status.example.com",           # plain http off loopback
    "ftp://status.example.com",
    "status.example.com",
    "https://user:pw@status.example.com",  # credentials
    "https://status.example.com/?page=1",
    "https://status.example.com/#top",
])
def test_bad_status_urls_are_refused_at_construction(url: str) -> None:
    with pytest.raises(ConfigError, match="FAILOPEN_STATUS_URL"):
        StatusClient(url)


@pytest.mark.parametrize(("url", "base"), [
    ("https://status.x/api/v2/components.json", "https://status.x"),
    ("https://status.x/api/v2/status.json", "https://status.x"),
    ("https://status.x/api/v2/summary.json/", "https://status.x"),
    ("https://status.x/api/v2", "https://status.x"),
    ("https://status.x/API/V2/", "https://status.x"),
    ("https://status.x:8443/vendor/api/v2/components.json", "https://status.x:8443/vendor"),
    ("https://status.x/components.json", "https://status.x"),
    ("http://127.0.0.1:9/api/v2/components.json", "http://127.0.0.1:9"),
])
def test_a_status_url_with_the_document_path_is_refused_with_the_fix(url: str, base: str) -> None:
    # It used to be accepted and then requested as .../api/v2/components.json/api/v2/...
    for build in (lambda: StatusClient(url), lambda: Config(status_url=url)):
        with pytest.raises(ConfigError, match="FAILOPEN_STATUS_URL") as caught:
            build()
        assert str(caught.value).endswith(f"use {base}")


@pytest.mark.parametrize("url", [
    "https://status.x/a b", "https://status .x", " https://status.x", "https://status.x/ ",
    "https://status.x\n", "https://status.x/\t", "https://status.x/\u00a0",
    "https://status.x/\u200b", "https://status.x/\x7f",
])
def test_a_url_with_whitespace_or_control_characters_is_refused(url: str) -> None:
    with pytest.raises(ConfigError, match="FAILOPEN_STATUS_URL: contains whitespace"):
        Config(status_url=url)
    with pytest.raises(ConfigError, match="FAILOPEN_STATUS_URL: contains whitespace"):
        StatusClient(url)
    verify = url.replace("status.x", "verify.x") + "/api/v4/verify/"
    with pytest.raises(ConfigError, match="FAILOPEN_VERIFY_URL: contains whitespace"):
        Config(verify_url=verify, private_key="k")


@pytest.mark.parametrize("url", [
    "https://status.x/vendor/", "https://status.x/api/v2x", "https://status.x/json",
])
def test_base_addresses_that_only_look_close_are_accepted(url: str) -> None:
    assert Config(status_url=url).status_url == url


def test_the_verify_url_keeps_its_path_and_is_still_checked() -> None:
    # check_url is shared: the verify endpoint is a full path and must stay accepted as is.
    config = Config(verify_url="https://verify.x/api/v4/verify/", private_key="k")
    assert config.verify_url == "https://verify.x/api/v4/verify/"
    for bad in ("http://verify.x/api/v4/verify/", "https://u:p@verify.x/v", "verify.x/v"):
        with pytest.raises(ConfigError, match="FAILOPEN_VERIFY_URL"):
            Config(verify_url=bad, private_key="k")


@pytest.mark.parametrize("url", ["http://127.0.0.1:8080", "http://localhost", "http://[::1]:1"])
def test_plain_http_is_fine_on_loopback(url: str) -> None:
    client = StatusClient(url)
    try:
        assert client.components_url.startswith(url + "/"), client.components_url
        assert client.components_url.endswith("/api/v2/components.json")
    finally:
        client.close()


@pytest.mark.parametrize("kwargs", [
    {"timeout": 0}, {"timeout": -1}, {"timeout": float("nan")}, {"timeout": float("inf")},
    {"timeout": True}, {"max_bytes": 0}, {"max_bytes": 1.5}, {"global_component": ""},
    {"global_component": "  "},
])
def test_bad_options_are_refused_at_construction(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ConfigError):
        StatusClient(URL, **kwargs)


@pytest.mark.parametrize(("status_url", "path"), [
    ("https://status.test", "/api/v2/components.json"),
    ("https://status.test/", "/api/v2/components.json"),
    ("https://status.test/vendor", "/vendor/api/v2/components.json"),
    ("https://status.test/vendor/", "/vendor/api/v2/components.json"),
])
def test_the_components_url_is_built_with_or_without_a_slash(status_url: str, path: str) -> None:
    page = FakeStatusPage()
    with StatusClient(status_url, transport=page.transport()) as client:
        client.fetch()
    assert [r.path for r in page.received] == [path]


# --- reading the page in-process ---------------------------------------------------------------


def test_fetch_reads_the_fake_page() -> None:
    page = FakeStatusPage(regions=("us-east-1", "eu-west-1"))
    page.set_region("eu-west-1", "partial_outage")
    clock = FakeClock(start=1_800_000_000.0)
    with client_for(page, clock=clock) as client:
        report = client.fetch()
    assert report.global_status == "operational" and report.fetched_at == clock.time()
    assert [(r.description, r.status) for r in report.regions] == [
        ("us-east-1", "operational"), ("eu-west-1", "partial_outage"),
    ]
    assert [r.description for r in report.impaired_regions()] == ["eu-west-1"]


def test_a_global_outage_on_the_fake_is_read_as_such() -> None:
    page = FakeStatusPage()
    page.set_global("major_outage")
    with client_for(page) as client:
        assert client.fetch().global_status == "major_outage"


def test_a_configured_global_component_is_used() -> None:
    page = FakeStatusPage()
    page.set_region("us-east-1", "major_outage")
    with client_for(page, global_component=page.region_ids["us-east-1"]) as client:
        report = client.fetch()
    assert report.global_status == "major_outage"


UNAVAILABLE = {"500", "503", "429", "timeout", "slow_drip", "reset", "truncated", "huge"}
UNPARSABLE = {"malformed", "not_json", "empty", "missing_global", "wrong_shape"}


def test_the_fault_tables_cover_every_fault() -> None:
    assert UNAVAILABLE | UNPARSABLE | {"unknown_status"} == FAULTS
    assert not UNAVAILABLE & UNPARSABLE


def _expected(fault: str) -> type[Exception]:
    return StatusUnavailable if fault in UNAVAILABLE else StatusParseError


@pytest.mark.parametrize("fault", sorted(FAULTS - {"unknown_status"}))
def test_every_fault_is_an_error_in_process_even_during_an_outage(fault: str) -> None:
    page = FakeStatusPage()
    page.set_global("major_outage")  # whatever the page would say, a fault is not a reading
    page.set_fault(fault)
    with client_for(page) as client, pytest.raises(_expected(fault)):
        client.fetch()


@pytest.mark.parametrize("fault", sorted(FAULTS - {"unknown_status"}))
@pytest.mark.anyio
async def test_every_fault_is_the_same_error_with_afetch(fault: str) -> None:
    page = FakeStatusPage()
    page.set_global("major_outage")
    page.set_fault(fault)
    async with client_for(page) as client:
        with pytest.raises(_expected(fault)):
            await client.afetch()


def test_the_unknown_status_fault_is_reported_not_raised() -> None:
    page = FakeStatusPage()
    page.set_fault("unknown_status")
    with client_for(page) as client:
        report = client.fetch()
    assert report.global_status == UNKNOWN_STATUS and not report.known


@pytest.mark.parametrize("fault", ["500", "503", "429"])
def test_http_errors_carry_status_code_and_retry_after(fault: str) -> None:
    page = FakeStatusPage()
    page.set_fault(fault, retry_after=7)
    with client_for(page) as client, pytest.raises(StatusUnavailable) as caught:
        client.fetch()
    assert caught.value.status_code == int(fault)
    assert caught.value.retry_after == 7.0


def test_an_http_error_without_retry_after_has_none() -> None:
    page = FakeStatusPage()
    page.set_fault("503")
    with client_for(page) as client, pytest.raises(StatusUnavailable) as caught:
        client.fetch()
    assert caught.value.status_code == 503 and caught.value.retry_after is None


def test_a_retry_after_date_is_measured_from_the_injected_clock() -> None:
    clock = FakeClock(start=1_800_000_000.0)
    when = formatdate(clock.time() + 120, usegmt=True)

    def handler(request: FakeRequest) -> Reply:
        return Reply(503, b"", [("Retry-After", when)])

    transport = httpx.MockTransport(_adapt(handler))
    client = StatusClient(URL, transport=transport, clock=clock)
    with client, pytest.raises(StatusUnavailable) as caught:
        client.fetch()
    assert caught.value.retry_after == 120.0


def _adapt(handler: Any) -> Any:
    """A handler as an httpx MockTransport function, with an unread body like the network's."""

    def respond(request: httpx.Request) -> httpx.Response:
        headers = {k.lower(): v for k, v in request.headers.items()}
        reply = handler(FakeRequest(request.method, request.url.path, {}, headers, b""))
        assert isinstance(reply.body, bytes)
        sent = [*reply.headers, ("Content-Length", str(len(reply.body)))]
        return httpx.Response(reply.status, headers=sent, stream=httpx.ByteStream(reply.body))

    return respond


@pytest.mark.parametrize(("status", "body"), [
    (404, b"not found"), (302, b""), (304, b""), (401, b"{}"), (199, b""),
])
def test_any_non_2xx_answer_is_unavailable(status: int, body: bytes) -> None:
    transport = httpx.MockTransport(_adapt(lambda r: Reply(status, body)))
    with StatusClient(URL, transport=transport) as client, pytest.raises(StatusUnavailable) as e:
        client.fetch()
    assert e.value.status_code == status


def test_a_2xx_without_a_body_is_a_parse_error() -> None:
    transport = httpx.MockTransport(_adapt(lambda r: Reply(204, b"")))
    with StatusClient(URL, transport=transport) as client, pytest.raises(StatusParseError):
        client.fetch()


def test_the_size_cap_applies_to_a_healthy_page_too() -> None:
    page = FakeStatusPage()
    with client_for(page, max_bytes=100) as client, pytest.raises(StatusUnavailable) as caught:
        client.fetch()
    assert isinstance(caught.value.__cause__, ResponseTooLarge)


def test_huge_stops_at_the_cap_without_reading_the_rest() -> None:
    page = FakeStatusPage()
    page.set_fault("huge")
    with client_for(page) as client, pytest.raises(StatusUnavailable) as caught:
        client.fetch()
    assert isinstance(caught.value.__cause__, ResponseTooLarge)


def test_no_credentials_or_cookies_are_sent() -> None:
    page = FakeStatusPage()

    def handler(request: FakeRequest) -> Reply:
        reply = page.handle(request)
        reply.headers.append(("Set-Cookie", "session=secret; Path=/"))
        return reply

    transport = httpx.MockTransport(_adapt(handler))
    with StatusClient(URL, transport=transport) as client:
        client.fetch()
        client.fetch()
    assert len(page.received) == 2
    for request in page.received:
        assert "authorization" not in request.headers
        assert "cookie" not in request.headers
        assert request.headers["user-agent"].startswith("failopen/")
        assert request.method == "GET"


def test_a_redirect_to_another_host_is_refused_and_not_followed() -> None:
    hosts: list[str] = []
    page = FakeStatusPage()

    def respond(request: httpx.Request) -> httpx.Response:
        hosts.append(request.url.host)
        if request.url.host == "status.test":
            return httpx.Response(302, headers={"Location": "https://evil.test/api/v2/c.json"})
        return page.transport().handle_request(request)

    client = StatusClient(URL, transport=httpx.MockTransport(respond))
    with client, pytest.raises(StatusUnavailable) as caught:
        client.fetch()
    assert isinstance(caught.value.__cause__, RedirectRefused)
    assert hosts == ["status.test"]


def test_a_redirect_on_the_same_host_is_followed() -> None:
    page = FakeStatusPage()

    def respond(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/api/v2/components.json":
            return httpx.Response(301, headers={"Location": "/v2/api/v2/components.json"})
        return page.transport().handle_request(request)

    with StatusClient(URL, transport=httpx.MockTransport(respond)) as client:
        assert client.fetch().global_status == "operational"


def test_a_closed_client_is_unavailable_not_a_crash() -> None:
    page = FakeStatusPage()
    client = client_for(page)
    with client:
        client.fetch()
    with pytest.raises(StatusUnavailable, match="closed"):
        client.fetch()


@pytest.mark.anyio
async def test_afetch_reads_what_fetch_reads() -> None:
    page = FakeStatusPage()
    page.set_region("us-east-1", "degraded_performance")
    page.set_global("partial_outage")
    clock = FakeClock()
    async with client_for(page, clock=clock) as client:
        async_report = await client.afetch()
        sync_report = client.fetch()
    assert async_report == sync_report
    with pytest.raises(StatusUnavailable, match="closed"):
        await client.afetch()


# --- indicator fallback ------------------------------------------------------------------------


def test_without_fallback_status_json_is_never_asked() -> None:
    page = FakeStatusPage()
    page.set_fault("503", endpoint="components")
    with client_for(page) as client, pytest.raises(StatusUnavailable):
        client.fetch()
    assert [r.path for r in page.received] == ["/api/v2/components.json"]


@pytest.mark.parametrize("fault", ["503", "timeout", "malformed"])
@pytest.mark.parametrize(("status", "expected"), [
    ("operational", "operational"), ("major_outage", "indicator:critical"),
])
def test_the_fallback_reads_the_indicator_when_components_fail(
    fault: str, status: str, expected: str
) -> None:
    page = FakeStatusPage()
    page.set_global(status)
    page.set_fault(fault, endpoint="components")
    with client_for(page, indicator_fallback=True) as client:
        report = client.fetch()
    assert report.source == "indicator" and report.global_status == expected
    assert [r.path for r in page.received] == ["/api/v2/components.json", "/api/v2/status.json"]


def test_no_fallback_when_the_global_component_is_missing() -> None:
    # The indicator is the worst of every component: read instead of an unknown global, a
    # regional outage would pass for a global one.
    page = FakeStatusPage()
    page.set_region("us-east-1", "major_outage")
    page.set_fault("missing_global", endpoint="components")
    with client_for(page, indicator_fallback=True) as client, pytest.raises(GlobalComponentError):
        client.fetch()
    assert [r.path for r in page.received] == ["/api/v2/components.json"]


def test_the_fallback_is_not_asked_when_components_work() -> None:
    page = FakeStatusPage()
    with client_for(page, indicator_fallback=True) as client:
        assert client.fetch().source == "components"
    assert page.requests == 1


def test_no_fallback_after_a_429() -> None:
    page = FakeStatusPage()
    page.set_fault("429", retry_after=30, endpoint="components")
    with client_for(page, indicator_fallback=True) as c, pytest.raises(StatusUnavailable) as caught:
        c.fetch()
    assert caught.value.status_code == 429 and caught.value.retry_after == 30
    assert page.requests == 1


class NoIndicator(FakeStatusPage):
    """A page whose status.json answers HTML whatever else is going on."""

    def handle(self, request: FakeRequest) -> Reply:
        reply = super().handle(request)
        if request.path.endswith("/status.json"):
            return Reply(200, b"<html>down</html>", [("Content-Type", "text/html")])
        return reply


@pytest.mark.parametrize(("fault", "expected"), [
    ("500", StatusUnavailable), ("not_json", StatusParseError), ("reset", StatusUnavailable),
])
def test_when_both_fail_the_components_error_is_raised(
    fault: str, expected: type[Exception]
) -> None:
    page = NoIndicator()
    page.set_global("major_outage")
    page.set_fault(fault, endpoint="components")
    with client_for(page, indicator_fallback=True) as client, pytest.raises(expected) as caught:
        client.fetch()
    assert "components.json" in str(caught.value)
    assert [r.path for r in page.received] == ["/api/v2/components.json", "/api/v2/status.json"]


@pytest.mark.anyio
async def test_async_fallback_matches_sync() -> None:
    page = FakeStatusPage()
    page.set_global("partial_outage")
    page.set_fault("not_json", endpoint="components")
    async with client_for(page, indicator_fallback=True) as client:
        report = await client.afetch()
    assert report.global_status == "indicator:major" and report.source == "indicator"
    page.set_fault("500")
    async with client_for(page, indicator_fallback=True) as client:
        with pytest.raises(StatusUnavailable) as caught:
            await client.afetch()
    assert caught.value.status_code == 500 and "components.json" in str(caught.value)


# --- over a real loopback socket ---------------------------------------------------------------


@pytest.fixture
def page() -> FakeStatusPage:
    return FakeStatusPage()


@pytest.fixture
def server(page: FakeStatusPage) -> Iterator[LoopbackServer]:
    with page.serve() as running:
        yield running


slow = pytest.mark.slow


# "timeout" and "slow_drip" have their own tests below, which also time them.
QUICK_FAULTS = sorted(FAULTS - {"unknown_status", "timeout", "slow_drip"})


@slow
@pytest.mark.parametrize("fault", QUICK_FAULTS)
def test_every_fault_is_an_error_over_loopback(
    page: FakeStatusPage, server: LoopbackServer, fault: str
) -> None:
    page.set_global("major_outage")
    page.set_fault(fault)
    client = StatusClient(server.url)
    with client, pytest.raises(_expected(fault)):
        client.fetch()


@slow
@pytest.mark.parametrize("fault", QUICK_FAULTS)
@pytest.mark.anyio
async def test_every_fault_is_an_error_over_loopback_async(
    page: FakeStatusPage, server: LoopbackServer, fault: str
) -> None:
    page.set_global("major_outage")
    page.set_fault(fault)
    async with StatusClient(server.url) as client:
        with pytest.raises(_expected(fault)):
            await client.afetch()


@slow
def test_a_healthy_page_over_loopback(page: FakeStatusPage, server: LoopbackServer) -> None:
    page.set_region("eu-west-1", "major_outage")
    with StatusClient(server.url + "/") as client:
        report = client.fetch()
    assert report.global_status == "operational"
    assert [r.description for r in report.impaired_regions()] == ["eu-west-1"]
    assert "authorization" not in page.received[-1].headers


@slow
@pytest.mark.parametrize("fault", ["500", "503", "429"])
def test_retry_after_over_loopback(
    page: FakeStatusPage, server: LoopbackServer, fault: str
) -> None:
    page.set_fault(fault, retry_after=2.5)
    with StatusClient(server.url) as client, pytest.raises(StatusUnavailable) as caught:
        client.fetch()
    assert caught.value.status_code == int(fault) and caught.value.retry_after == 3.0


DEADLINE = 0.5
MARGIN = 1.5  # generous: a loaded CI machine must not make this flaky


@slow
@pytest.mark.parametrize("fault", ["slow_drip", "timeout"])
def test_the_overall_deadline_cuts_a_slow_answer(
    page: FakeStatusPage, server: LoopbackServer, fault: str
) -> None:
    page.set_global("major_outage")
    page.set_fault(fault)
    # Dripped whole, the answer would take this long: far beyond the deadline and the margin.
    whole = len(json.dumps(page.components_document())) * DRIP_SECONDS_PER_BYTE
    assert whole > 20 * (DEADLINE + MARGIN)
    with StatusClient(server.url, timeout=DEADLINE) as client:
        started = time.monotonic()
        with pytest.raises(StatusUnavailable, match="within"):
            client.fetch()
        elapsed = time.monotonic() - started
    assert elapsed < DEADLINE + MARGIN


@slow
@pytest.mark.parametrize("fault", ["slow_drip", "timeout"])
@pytest.mark.anyio
async def test_the_overall_deadline_cuts_a_slow_answer_async(
    page: FakeStatusPage, server: LoopbackServer, fault: str
) -> None:
    page.set_global("major_outage")
    page.set_fault(fault)
    async with StatusClient(server.url, timeout=DEADLINE) as client:
        started = time.monotonic()
        with pytest.raises(StatusUnavailable, match="within"):
            await client.afetch()
        elapsed = time.monotonic() - started
    assert elapsed < DEADLINE + MARGIN


@slow
def test_the_fallback_gets_only_what_is_left_of_the_deadline() -> None:
    paths: list[str] = []

    def handler(request: FakeRequest) -> Reply:
        paths.append(request.path)
        if request.path.endswith("/components.json"):
            return Reply(503, b"")
        return Reply.json({"status": {"indicator": "none"}}, drip=DRIP_SECONDS_PER_BYTE)

    with LoopbackServer(handler) as server:
        client = StatusClient(server.url, timeout=DEADLINE, indicator_fallback=True)
        started = time.monotonic()
        with client, pytest.raises(StatusUnavailable) as caught:
            client.fetch()
        elapsed = time.monotonic() - started
    assert caught.value.status_code == 503  # the components error, not the fallback's
    assert paths == ["/api/v2/components.json", "/api/v2/status.json"]
    assert elapsed < DEADLINE + MARGIN


@slow
def test_a_redirect_to_another_origin_is_refused_over_loopback(page: FakeStatusPage) -> None:
    elsewhere = FakeStatusPage()
    with elsewhere.serve() as other:
        def redirect(request: FakeRequest) -> Reply:
            return Reply(302, b"", [("Location", other.url + request.path)])

        with LoopbackServer(redirect) as server:
            client = StatusClient(server.url)
            with client, pytest.raises(StatusUnavailable) as caught:
                client.fetch()
    assert isinstance(caught.value.__cause__, RedirectRefused)
    assert elsewhere.requests == 0


@slow
def test_nothing_is_listening_is_unavailable() -> None:
    with LoopbackServer(lambda r: Reply()) as server:
        url = server.url
    with StatusClient(url, timeout=2) as client, pytest.raises(StatusUnavailable):
        client.fetch()


@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")
def test_forked_child_opens_its_own_connections() -> None:
    import os

    page = FakeStatusPage()
    with page.serve() as server, StatusClient(server.url) as client:
        client.fetch()
        parent_client = client._client
        read_end, write_end = os.pipe()
        pid = os.fork()
        if pid == 0:
            try:
                ok = client.fetch().global_status == "operational"
                ok = ok and client._client is not parent_client
                os.write(write_end, b"1" if ok else b"0")
            finally:
                os._exit(0)
        os.close(write_end)
        verdict = os.read(read_end, 1)
        os.waitpid(pid, 0)
        os.close(read_end)
        assert verdict == b"1"
        assert client._client is parent_client
