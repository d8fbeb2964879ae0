"""The fixtures users get from the installed pytest plugin work as documented."""

from __future__ import annotations

import httpx
import pytest

from failopen import Config, FailOpen
from failopen.rai import Client
from failopen.testing import FakeClock, FakeStatusPage, FakeVerifyAPI, RaiEmulator


def test_fake_status_page_is_served(fake_status_page: FakeStatusPage) -> None:
    fake_status_page.set_global("major_outage")
    url = fake_status_page.url + "/api/v2/components.json"
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
    client = Client(rai_emulator.base_url, rai_emulator.client_id, rai_emulator.client_secret)
    with client:
        assert client.get_cohort(rai_emulator.cohort_ids()[0]).cohort_id


def test_served_fakes_declare_server_and_urls(
    fake_status_page: FakeStatusPage, fake_verify_api: FakeVerifyAPI, rai_emulator: RaiEmulator
) -> None:
    assert fake_status_page.server is not None
    assert fake_status_page.url == fake_status_page.server.url  # the older spelling still works
    assert fake_verify_api.server is not None
    assert fake_verify_api.verify_url == fake_verify_api.server.url + FakeVerifyAPI.path
    assert rai_emulator.server is not None
    assert rai_emulator.base_url == rai_emulator.url == rai_emulator.server.url


@pytest.mark.parametrize("fake", [FakeStatusPage, FakeVerifyAPI, RaiEmulator])
def test_url_before_serve_is_a_clear_error(
    fake: type[FakeStatusPage | FakeVerifyAPI | RaiEmulator],
) -> None:
    unserved = fake()
    assert unserved.server is None
    with pytest.raises(RuntimeError, match=rf"{fake.__name__} is not served: call serve\(\)"):
        unserved.url  # noqa: B018


def test_verify_url_stays_assignable_until_the_next_serve() -> None:
    api = FakeVerifyAPI()
    api.verify_url = "http://127.0.0.1:9/elsewhere/"  # what fixtures did before it was declared
    assert api.verify_url == "http://127.0.0.1:9/elsewhere/"
    with api.serve() as server:
        assert api.verify_url == server.url + api.path
