"""The flag endpoint says what an operator asks first in an incident (issue 21, B.8): the last
poll's error from the first poll that fails (not only once the reading is stale), and the regions
the last good reading showed impaired. ASGI and WSGI here; Django in
``django/test_django_views.py``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from _asgi_kit import Stack
from _wsgi_kit import WsgiStack

pytestmark = pytest.mark.anyio


def test_wsgi_flag_shows_a_failed_poll_at_once_and_clears_it(
        make_wsgi: Callable[..., WsgiStack]) -> None:
    stack = make_wsgi()
    flag = stack.client.get("/failopen/flag").get_json()
    assert (flag["error"], flag["impaired_regions"]) == (None, [])
    stack.page.set_fault("500")
    stack.runtime.poll_now()
    flag = stack.client.get("/failopen/flag").get_json()
    assert flag["stale"] is False and flag["enforce"] is True  # one failure changes nothing...
    assert "500" in flag["error"]  # ...but is said at once
    stack.page.set_fault(None)
    stack.runtime.poll_now()
    assert stack.client.get("/failopen/flag").get_json()["error"] is None


def test_wsgi_flag_lists_impaired_regions(make_wsgi: Callable[..., WsgiStack]) -> None:
    stack = make_wsgi()
    stack.page.set_region("eu-west-1", "major_outage")
    stack.runtime.poll_now()
    flag = stack.client.get("/failopen/flag").get_json()
    assert flag["impaired_regions"] == [{"region": "eu-west-1", "status": "major_outage"}]
    assert flag["enforce"] is True  # a region is diagnosis only
    stack.page.set_region("eu-west-1", "operational")
    stack.runtime.poll_now()
    assert stack.client.get("/failopen/flag").get_json()["impaired_regions"] == []


async def test_asgi_flag_shows_the_poll_error_and_regions(make_asgi: Callable[..., Stack]) -> None:
    stack = make_asgi()
    stack.page.set_region("us-east-1", "degraded_performance")
    stack.runtime.poll_now()
    flag: dict[str, Any] = (await stack.client.get("/failopen/flag")).json()
    assert flag["impaired_regions"] == [{"region": "us-east-1", "status": "degraded_performance"}]
    stack.page.set_fault("timeout")
    stack.runtime.poll_now()
    flag = (await stack.client.get("/failopen/flag")).json()
    assert flag["error"] and flag["stale"] is False
    # The last good reading's regions stand while the page cannot be read.
    assert flag["impaired_regions"] == [{"region": "us-east-1", "status": "degraded_performance"}]


def test_a_status_page_cannot_make_the_public_flag_answer_large() -> None:
    # Every page load asks the flag endpoint: a status page listing hundreds of impaired regions
    # must not make each answer as large as the page.
    from failopen.config import Config
    from failopen.engine.hysteresis import MAX_SHOWN_REGIONS
    from failopen.runtime import FailOpen
    from failopen.testing import FakeStatusPage
    from failopen.web import flag_payload

    labels = [f"region-{n:03d}" for n in range(200)]
    page = FakeStatusPage(regions=labels)
    for label in labels:
        page.set_region(label, "major_outage")
    runtime = FailOpen(Config(status_url="https://status.test", poll_interval=3600.0),
                       status_transport=page.transport())
    try:
        runtime.poll_now()
        shown = flag_payload(runtime.state, poll=runtime.watcher)["impaired_regions"]
    finally:
        runtime.stop()
    assert len(shown) == MAX_SHOWN_REGIONS == 20
    assert shown[0] == {"region": "region-000", "status": "major_outage"}
