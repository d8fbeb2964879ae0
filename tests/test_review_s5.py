"""Security review of the session-5 changes: each test failed on the code before its fix."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator

import pytest

from failopen.verify import VerifyOutcome, VerifyResult
from test_probe import Site


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("FAILOPEN_"):
            monkeypatch.delenv(name)


@pytest.fixture
def sites() -> Iterator[list[Site]]:
    built: list[Site] = []
    yield built
    for s in built:
        s.close()


class _Wedged:
    """The probe's worker pool stuck (a hung DNS lookup holds both workers): no request sent."""

    def verify(self, token: str) -> VerifyResult:
        return VerifyResult(VerifyOutcome.OVERLOADED, "no free probe worker within 3s")

    async def averify(self, token: str) -> VerifyResult:
        return self.verify(token)


def test_a_probe_bypass_ends_when_the_probe_stops_giving_results(sites: list[Site]) -> None:
    # Evidence ends when failed probes stop arriving: a probe that says nothing (skipped, or no
    # result from the fleet's leader) must not keep a bypass open while the page reads
    # operational, and never past FAILOPEN_MAX_STALE_BYPASS.
    s = Site(max_stale_bypass=300.0)
    sites.append(s)
    s.api.set_fault("timeout")
    s.run(61, requests=2)
    assert not s.state.enforce and s.state.source == "probe"
    probe = s.runtime.probe
    assert probe is not None
    probe.verifier = _Wedged()
    s.run(400, requests=2)
    assert probe.counted["skipped"] > 0
    assert s.state.enforce, "a probe bypass outlived its evidence and the stale limit"


def test_the_public_flag_endpoint_shows_no_traffic_counts_in_a_probe_bypass_reason(
    sites: list[Site],
) -> None:
    # The probe block keeps request counts off the public endpoint; the flag's reason carried
    # them anyway ("37 of 40 requests' verify calls in the last 60s were unavailable"): anyone
    # could read the site's log-in volume, and the probe's error text, during an outage.
    import asyncio
    from typing import Any

    import httpx
    from failopen.integrations.asgi import FailOpenMiddleware

    s = Site()
    sites.append(s)
    s.api.set_fault("timeout")
    s.run(100, requests=7)
    assert not s.state.enforce and s.state.source == "probe"
    assert "of " in s.state.reason and "requests" in s.state.reason  # operators keep the detail

    async def app(scope: Any, receive: Any, send: Any) -> None:  # pragma: no cover - not reached
        raise AssertionError

    async def get() -> Any:
        transport = httpx.ASGITransport(app=FailOpenMiddleware(app, runtime=s.runtime))
        async with httpx.AsyncClient(transport=transport, base_url="http://site.test") as client:
            return (await client.get("/failopen/flag")).json()

    body = asyncio.run(get())
    assert body["source"] == "probe" and body["enforce"] is False
    reason = body["reason"]
    assert "verify probe failed 3 times in a row" in reason
    assert "still reads operational" in reason
    assert not re.search(r"\d+ of \d+", reason) and "verify calls in the last" not in reason
    assert "no complete answer" not in reason, "the probe's error text stays off the endpoint"
