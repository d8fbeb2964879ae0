"""The fake status page: its documents follow the spec, its statuses and faults do as named."""

from __future__ import annotations

import datetime
import json
import re
import socket
import sys
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from failopen.providers.status import KNOWN_STATUSES
from failopen.testing._server import FakeRequest, LoopbackServer, Reply, as_transport
from failopen.testing.clock import FakeClock
from failopen.testing.status_page import (
    DRIP_SECONDS_PER_BYTE,
    FAULTS,
    HOLD_SECONDS,
    HUGE_BYTES,
    UNKNOWN_STATUS,
    FakeStatusPage,
)

COMPONENTS = "/api/v2/components.json"
STATUS = "/api/v2/status.json"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def get(path: str = COMPONENTS, method: str = "GET", **headers: str) -> FakeRequest:
    return FakeRequest(method, path, {}, {k.lower(): v for k, v in headers.items()}, b"")


def served(page: FakeStatusPage, path: str = COMPONENTS) -> Any:
    reply = page.handle(get(path))
    assert reply.status == 200
    assert isinstance(reply.body, bytes)
    return json.loads(reply.body)


RFC3339 = re.compile(
    r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$"
)


def is_rfc3339(value: Any) -> bool:
    if not isinstance(value, str) or not RFC3339.match(value):
        return False
    datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
    return True


# spec 2.5, field by field: name -> check of the value's type.
PAGE_FIELDS = {
    "id": lambda v: isinstance(v, str),
    "name": lambda v: isinstance(v, str),
    "url": lambda v: isinstance(v, str),
    "time_zone": lambda v: isinstance(v, str),
    "updated_at": is_rfc3339,
}
COMPONENT_FIELDS = {
    "id": lambda v: isinstance(v, str) and v != "",
    "name": lambda v: isinstance(v, str),
    "status": lambda v: v in KNOWN_STATUSES,
    "created_at": is_rfc3339,
    "updated_at": is_rfc3339,
    "position": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "description": lambda v: v is None or isinstance(v, str),
    "showcase": lambda v: isinstance(v, bool),
    "start_date": lambda v: isinstance(v, str) and bool(datetime.date.fromisoformat(v)),
    "group_id": lambda v: v is None or isinstance(v, str),
    "page_id": lambda v: isinstance(v, str),
    "group": lambda v: isinstance(v, bool),
    "only_show_if_degraded": lambda v: isinstance(v, bool),
}


# --- the documents -----------------------------------------------------------------------------


def test_the_components_document_has_every_field_of_the_spec_tables() -> None:
    page = FakeStatusPage(regions=("us-east-1", "eu-west-1", "ap-south-1"))
    doc = served(page)
    assert set(doc) == {"page", "components"}
    assert set(doc["page"]) == set(PAGE_FIELDS)
    for name, check in PAGE_FIELDS.items():
        assert check(doc["page"][name]), name
    assert len(doc["components"]) == 4
    for component in doc["components"]:
        assert set(component) == set(COMPONENT_FIELDS)
        for name, check in COMPONENT_FIELDS.items():
            assert check(component[name]), (component["id"], name)
        assert component["page_id"] == doc["page"]["id"]
        assert component["group"] is False and component["group_id"] is None
    assert len({c["id"] for c in doc["components"]}) == 4
    assert len({c["position"] for c in doc["components"]}) == 4


def test_one_global_component_with_a_null_description_and_one_per_region() -> None:
    page = FakeStatusPage(regions=("us-east-1", "eu-west-1"))
    components = served(page)["components"]
    globals_ = [c for c in components if c["description"] is None]
    assert [c["id"] for c in globals_] == [page.global_id]
    regions = {c["description"]: c["id"] for c in components if c["description"] is not None}
    assert regions == page.region_ids == {"us-east-1": "fakeregion01", "eu-west-1": "fakeregion02"}


def test_the_served_document_is_components_document() -> None:
    page = FakeStatusPage(clock=FakeClock())
    assert served(page) == page.components_document()
    assert served(page, STATUS) == page.status_document()


def test_timestamps_follow_the_injected_clock() -> None:
    clock = FakeClock(start=1_700_000_000.25)
    page = FakeStatusPage(clock=clock)
    doc = page.components_document()
    assert doc["page"]["updated_at"] == "2023-11-14T22:13:20.250Z"
    assert doc["components"][0]["start_date"] == "2023-11-14"
    clock.advance(60)
    page.set_region("eu-west-1", "major_outage")
    later = page.components_document()
    region = next(c for c in later["components"] if c["description"] == "eu-west-1")
    untouched = next(c for c in later["components"] if c["description"] == "us-east-1")
    assert region["updated_at"] == "2023-11-14T22:14:20.250Z"
    assert untouched["updated_at"] == "2023-11-14T22:13:20.250Z"
    assert later["page"]["updated_at"] == "2023-11-14T22:14:20.250Z"
    assert region["created_at"] == "2023-11-14T22:13:20.250Z"


def test_setting_the_same_status_again_does_not_touch_updated_at() -> None:
    clock = FakeClock()
    page = FakeStatusPage(clock=clock)
    before = page.components_document()
    clock.advance(60)
    page.set_global("operational")
    assert page.components_document() == before


def test_set_global_and_set_region() -> None:
    page = FakeStatusPage()
    page.set_global("partial_outage")
    page.set_region("us-east-1", "major_outage")
    statuses = {c["description"]: c["status"] for c in served(page)["components"]}
    assert statuses == {None: "partial_outage", "us-east-1": "major_outage",
                        "eu-west-1": "operational"}


def test_a_regional_impairment_can_leave_the_global_operational() -> None:
    page = FakeStatusPage()
    page.set_region("eu-west-1", "major_outage")
    statuses = {c["description"]: c["status"] for c in served(page)["components"]}
    assert statuses[None] == "operational" and statuses["eu-west-1"] == "major_outage"
    assert served(page, STATUS)["status"]["indicator"] == "none"


def test_any_status_string_is_served_as_given() -> None:
    page = FakeStatusPage()
    page.set_global("something_new")
    assert served(page)["components"][0]["status"] == "something_new"


def test_bad_statuses_and_regions_are_refused() -> None:
    page = FakeStatusPage()
    with pytest.raises(KeyError, match="ap-south-1"):
        page.set_region("ap-south-1", "major_outage")
    with pytest.raises(TypeError):
        page.set_global(None)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        page.set_region("us-east-1", 3)  # type: ignore[arg-type]


@pytest.mark.parametrize("regions", [
    ("a", "a"), ("",), (None,), ("Requests for GitHub APIs",), ("Frankfurt, Germany",),
])
def test_bad_region_labels_are_refused(regions: Any) -> None:
    with pytest.raises(ValueError):
        FakeStatusPage(regions=regions)


def test_a_page_without_regions_has_only_the_global() -> None:
    page = FakeStatusPage(regions=())
    assert [c["id"] for c in served(page)["components"]] == [page.global_id]


@pytest.mark.parametrize(("status", "indicator"), [
    ("operational", "none"),
    ("degraded_performance", "minor"),
    ("partial_outage", "major"),
    ("major_outage", "critical"),
    ("under_maintenance", "maintenance"),
    ("something_new", "minor"),
])
def test_the_indicator_follows_the_global_status(status: str, indicator: str) -> None:
    page = FakeStatusPage()
    page.set_global(status)
    doc = served(page, STATUS)
    assert doc["status"]["indicator"] == indicator
    assert isinstance(doc["status"]["description"], str)
    assert set(doc["page"]) == set(PAGE_FIELDS)


def test_other_paths_and_methods_are_refused() -> None:
    page = FakeStatusPage()
    assert page.handle(get("/api/v2/incidents.json")).status == 404
    refused = page.handle(get(COMPONENTS, method="POST"))
    assert refused.status == 405 and ("Allow", "GET, HEAD") in refused.headers


def test_the_documents_are_served_under_a_path_prefix_too() -> None:
    page = FakeStatusPage()
    assert served(page, "/vendor" + COMPONENTS) == page.components_document()


def test_requests_are_counted_and_kept() -> None:
    page = FakeStatusPage()
    page.handle(get(COMPONENTS, authorization="Bearer x"))
    page.handle(get("/nowhere"))
    assert page.requests == 2
    assert [r.path for r in page.received] == [COMPONENTS, "/nowhere"]
    assert page.received[0].headers["authorization"] == "Bearer x"


def test_the_request_log_is_bounded() -> None:
    page = FakeStatusPage()
    for _ in range(1_005):
        page.handle(get())
    assert page.requests == 1_005 and len(page.received) == 1_000


PER_THREAD = 20_000  # enough for threads to interleave: fewer and each runs alone


def test_the_counter_is_thread_safe() -> None:
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as possible, to provoke lost updates
    try:
        page = FakeStatusPage()
        request = get("/nowhere")
        start = threading.Barrier(8)

        def hammer() -> None:
            start.wait()
            for _ in range(PER_THREAD):
                page.handle(request)

        threads = [threading.Thread(target=hammer) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        sys.setswitchinterval(old)
    assert page.requests == 8 * PER_THREAD


# --- faults ------------------------------------------------------------------------------------


def test_the_faults_are_exactly_the_named_ones() -> None:
    assert FakeStatusPage.FAULTS == FAULTS == {
        "500", "503", "429", "timeout", "slow_drip", "reset", "truncated", "malformed",
        "not_json", "empty", "huge", "missing_global", "unknown_status", "wrong_shape",
    }


def test_bad_fault_settings_are_refused() -> None:
    page = FakeStatusPage()
    with pytest.raises(ValueError, match="unknown fault"):
        page.set_fault("404")
    with pytest.raises(ValueError, match="retry_after"):
        page.set_fault("timeout", retry_after=3)
    with pytest.raises(ValueError, match="retry_after"):
        page.set_fault("503", retry_after=-1)
    with pytest.raises(ValueError, match="retry_after"):
        page.set_fault("503", retry_after=float("nan"))
    with pytest.raises(ValueError, match="endpoint"):
        page.set_fault("503", endpoint="incidents")
    assert page.fault is None


@pytest.mark.parametrize("fault", ["500", "503", "429"])
@pytest.mark.parametrize("path", [COMPONENTS, STATUS])
def test_http_error_faults(fault: str, path: str) -> None:
    page = FakeStatusPage()
    page.set_fault(fault)
    reply = page.handle(get(path))
    assert reply.status == int(fault)
    assert not any(name.lower() == "retry-after" for name, _ in reply.headers)
    page.set_fault(fault, retry_after=2.5)
    assert ("Retry-After", "3") in page.handle(get(path)).headers  # whole seconds, rounded up


def test_timeout_holds_the_answer() -> None:
    page = FakeStatusPage()
    page.set_fault("timeout")
    assert page.handle(get()).delay == HOLD_SECONDS >= 600


def test_slow_drip_drips_the_current_document() -> None:
    page = FakeStatusPage()
    page.set_global("major_outage")
    page.set_fault("slow_drip")
    reply = page.handle(get())
    assert reply.drip == DRIP_SECONDS_PER_BYTE >= 0.05
    assert isinstance(reply.body, bytes)
    assert json.loads(reply.body) == page.components_document()
    assert len(reply.body) * DRIP_SECONDS_PER_BYTE > 30  # no sane deadline outlasts it


def test_reset_and_truncated() -> None:
    page = FakeStatusPage()
    page.set_fault("reset")
    assert page.handle(get()).reset
    page.set_fault("truncated")
    reply = page.handle(get())
    assert reply.truncate and isinstance(reply.body, bytes)
    assert json.loads(reply.body) == page.components_document()


@pytest.mark.parametrize("path", [COMPONENTS, STATUS])
def test_malformed_is_half_a_document(path: str) -> None:
    page = FakeStatusPage()
    page.set_fault("malformed")
    reply = page.handle(get(path))
    assert reply.status == 200 and isinstance(reply.body, bytes)
    page.set_fault(None)
    whole = page.handle(get(path)).body
    assert isinstance(whole, bytes)
    assert whole.startswith(reply.body) and len(reply.body) == len(whole) // 2
    with pytest.raises(ValueError):
        json.loads(reply.body)


@pytest.mark.parametrize("path", [COMPONENTS, STATUS])
def test_not_json_and_empty(path: str) -> None:
    page = FakeStatusPage()
    page.set_fault("not_json")
    html = page.handle(get(path))
    assert html.status == 200 and isinstance(html.body, bytes)
    assert html.body.startswith(b"<!doctype html>")
    with pytest.raises(ValueError):
        json.loads(html.body)
    page.set_fault("empty")
    empty = page.handle(get(path))
    assert empty.status == 200 and empty.body == b""


@pytest.mark.parametrize("path", [COMPONENTS, STATUS])
def test_huge_is_lazy_and_about_fifty_megabytes(path: str) -> None:
    page = FakeStatusPage()
    page.set_fault("huge")
    reply = page.handle(get(path))
    assert reply.status == 200
    assert not isinstance(reply.body, (bytes, bytearray))  # generated as it is sent
    chunks = iter(reply.body)
    first = next(chunks)
    assert first.startswith(b'{"')
    total = len(first) + sum(len(chunk) for chunk in chunks)
    assert total >= HUGE_BYTES >= 50 * 1024 * 1024


def test_huge_looks_like_a_components_document_all_along() -> None:
    page = FakeStatusPage()
    page.set_fault("huge")
    body = page.handle(get()).body
    assert not isinstance(body, bytes)
    chunks = iter(body)
    head = next(chunks) + next(chunks)
    assert head.startswith(b'{"page": {')
    assert b'"components": [{"id": "fakeglobal00"' in head


def test_missing_global() -> None:
    page = FakeStatusPage()
    page.set_fault("missing_global")
    components = served(page)["components"]
    assert all(c["description"] is not None for c in components)
    assert page.global_id not in {c["id"] for c in components}
    assert served(page, STATUS) == page.status_document()  # status.json unaffected


def test_unknown_status() -> None:
    page = FakeStatusPage()
    page.set_fault("unknown_status")
    assert UNKNOWN_STATUS not in KNOWN_STATUSES
    components = served(page)["components"]
    assert components[0]["id"] == page.global_id
    assert components[0]["status"] == UNKNOWN_STATUS
    assert served(page, STATUS) == page.status_document()


def test_wrong_shape() -> None:
    page = FakeStatusPage()
    page.set_fault("wrong_shape")
    doc = served(page)
    assert isinstance(doc["components"], dict)
    assert set(doc["components"]) == {page.global_id, *page.region_ids.values()}
    assert served(page, STATUS)["status"] == "none"


def test_a_fault_can_target_one_endpoint_and_clears() -> None:
    page = FakeStatusPage()
    page.set_fault("503", endpoint="status")
    assert page.handle(get(COMPONENTS)).status == 200
    assert page.handle(get(STATUS)).status == 503
    page.set_fault("503", endpoint="components")
    assert page.handle(get(COMPONENTS)).status == 503
    assert page.handle(get(STATUS)).status == 200
    page.set_fault(None)
    assert page.fault is None
    assert page.handle(get(COMPONENTS)).status == page.handle(get(STATUS)).status == 200


# --- serving: in-process and on loopback -------------------------------------------------------


def test_transport_serves_a_sync_client() -> None:
    page = FakeStatusPage(clock=FakeClock())
    with httpx.Client(transport=page.transport(), base_url="https://status.test") as client:
        response = client.get(COMPONENTS, params={"a": ["1", "2"]})
    assert response.status_code == 200 and response.json() == page.components_document()
    assert response.headers["content-type"] == "application/json"
    assert page.received[0].query == {"a": ["1", "2"]}


@pytest.mark.parametrize(("fault", "error"), [
    ("timeout", httpx.ReadTimeout), ("slow_drip", httpx.ReadTimeout), ("reset", httpx.ReadError),
    ("truncated", httpx.RemoteProtocolError),
])
def test_transport_turns_connection_faults_into_httpx_errors(
    fault: str, error: type[Exception]
) -> None:
    page = FakeStatusPage()
    page.set_fault(fault)
    with httpx.Client(transport=page.transport()) as client, pytest.raises(error):
        client.get("https://status.test" + COMPONENTS)


@pytest.mark.anyio
async def test_transport_streams_huge_to_an_async_client() -> None:
    page = FakeStatusPage()
    page.set_fault("huge")
    received = 0
    client = httpx.AsyncClient(transport=page.transport())
    async with client, client.stream("GET", "https://status.test" + COMPONENTS) as response:
        async for chunk in response.aiter_raw():
            received += len(chunk)
            if received > 1_000_000:
                break
    assert 1_000_000 < received < HUGE_BYTES


def test_the_handler_works_with_as_transport_and_streamed_reads() -> None:
    page = FakeStatusPage()
    client = httpx.Client(transport=as_transport(page.handler))
    with client, client.stream("GET", "https://status.test" + COMPONENTS) as response:
        body = b"".join(response.iter_raw())
    assert json.loads(body) == page.components_document()


@pytest.fixture
def page() -> FakeStatusPage:
    return FakeStatusPage(clock=FakeClock())


@pytest.fixture
def server(page: FakeStatusPage) -> Iterator[LoopbackServer]:
    with page.serve() as running:
        yield running


@pytest.mark.slow
def test_serve_on_loopback(page: FakeStatusPage, server: LoopbackServer) -> None:
    assert server.url.startswith("http://127.0.0.1:")
    with httpx.Client(base_url=server.url) as client:
        assert client.get(COMPONENTS).json() == page.components_document()
        assert client.get(STATUS).json() == page.status_document()
    assert page.requests == 2


@pytest.mark.slow
def test_serve_returns_a_started_server_the_caller_stops() -> None:
    page = FakeStatusPage()
    server = page.serve()
    try:
        assert httpx.get(server.url + COMPONENTS).status_code == 200
    finally:
        server.stop()
    with pytest.raises(httpx.ConnectError):
        httpx.get(server.url + COMPONENTS)


@pytest.mark.slow
def test_timeout_on_loopback_holds_until_the_server_stops(page: FakeStatusPage) -> None:
    page.set_fault("timeout")
    server = page.serve()
    outcome: list[BaseException] = []

    def call() -> None:
        try:
            httpx.get(server.url + COMPONENTS, timeout=30)
        except httpx.HTTPError as exc:
            outcome.append(exc)

    caller = threading.Thread(target=call)
    caller.start()
    caller.join(0.3)
    assert caller.is_alive()  # still held
    server.stop()
    caller.join(10)
    assert not caller.is_alive()
    assert outcome and isinstance(outcome[0], httpx.RemoteProtocolError)


@pytest.mark.slow
def test_slow_drip_on_loopback_sends_one_byte_at_a_time(
    page: FakeStatusPage, server: LoopbackServer
) -> None:
    page.set_fault("slow_drip")
    with httpx.Client() as client, client.stream("GET", server.url + COMPONENTS) as response:
        assert response.status_code == 200
        length = int(response.headers["content-length"])
        chunks = response.iter_raw()
        first, second = next(chunks), next(chunks)
    assert (first, second) == (b"{", b'"')
    assert length == len(json.dumps(page.components_document()))


@pytest.mark.slow
@pytest.mark.parametrize("fault", ["reset", "truncated"])
def test_connection_faults_on_loopback(
    page: FakeStatusPage, server: LoopbackServer, fault: str
) -> None:
    page.set_fault(fault)
    with pytest.raises((httpx.RemoteProtocolError, httpx.ReadError)):
        httpx.get(server.url + COMPONENTS)


@pytest.mark.slow
def test_truncated_on_loopback_announces_more_than_it_sends(
    page: FakeStatusPage, server: LoopbackServer
) -> None:
    page.set_fault("truncated")
    host, port = server.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=5) as sock:
        sock.sendall(f"GET {COMPONENTS} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = int(re.search(rb"Content-Length: (\d+)", head).group(1))  # type: ignore[union-attr]
    assert 0 < len(body) < length


@pytest.mark.slow
def test_huge_on_loopback_is_chunked_and_stops_when_the_client_does(
    page: FakeStatusPage, server: LoopbackServer
) -> None:
    page.set_fault("huge")
    with httpx.Client() as client, client.stream("GET", server.url + COMPONENTS) as response:
        assert response.headers["transfer-encoding"] == "chunked"
        received = 0
        for chunk in response.iter_raw():
            received += len(chunk)
            if received > 2_000_000:
                break
    assert page.handle(get("/nowhere")).status == 404  # still serving after the hang-up


@pytest.mark.slow
def test_a_custom_handler_can_wrap_the_page(page: FakeStatusPage) -> None:
    def handler(request: FakeRequest) -> Reply:
        reply = page.handle(request)
        reply.headers.append(("X-Wrapped", "yes"))
        return reply

    with LoopbackServer(handler) as server:
        response = httpx.get(server.url + COMPONENTS)
    assert response.headers["x-wrapped"] == "yes"
