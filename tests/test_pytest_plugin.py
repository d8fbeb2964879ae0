"""The fixtures users get from the installed pytest plugin work as documented."""

from __future__ import annotations

import httpx

from failopen import Config, FailOpen
from failopen.rai import Client
from failopen.testing import FakeClock, FakeStatusPage, FakeVerifyAPI, RaiEmulator


def test_fake_status_page_is_served(fake_status_page: FakeStatusPage) -> None:
    fake_status_page.set_global("major_outage")
    url = fake_status_page.server.url + "/api/v2/components.json"  # type: ignore[attr-defined]
    statuses = {c["status"] for c in httpx.get(url).json()["components"]}
    assert "major_outage" in statuses


def test_failopen_config_wires_both_fakes(
    failopen_config: Config, fake_verify_api: FakeVerifyAPI, fake_status_page: FakeStatusPage
) -> None:
    fo = FailOpen(failopen_config)
    try:
        assert fo.decide(FakeVerifyAPI.GOOD, path="/login").allow
        assert not fo.decide(FakeVerifyAPI.BAD, path="/login").allow
        fake_verify_api.set_fault("503")
        fake_status_page.set_global("major_outage")
        assert fo.decide("anything", path="/login").bypassed
    finally:
        fo.stop()


def test_fake_clock(fake_clock: FakeClock) -> None:
    before = fake_clock.time()
    fake_clock.advance(5)
    assert fake_clock.time() == before + 5


def test_rai_emulator_is_served(rai_emulator: RaiEmulator) -> None:
    client = Client(rai_emulator.base_url, rai_emulator.client_id,  # type: ignore[attr-defined]
                    rai_emulator.client_secret)
    with client:
        assert client.get_cohort(rai_emulator.cohort_ids()[0]).cohort_id
