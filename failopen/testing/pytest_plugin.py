"""pytest fixtures for testing an application that uses failopen. Installed automatically.

* ``fake_status_page`` — a FakeStatusPage served on loopback; its base URL is
  ``fake_status_page.url``; set what it reports with ``set_global`` / ``set_fault``.
* ``fake_verify_api`` — a FakeVerifyAPI served on loopback; ``fake_verify_api.verify_url``.
* ``fake_vendor_script`` — a FakeVendorScript (the vendor's ``api.js``) served on loopback, its
  tokens accepted by ``fake_verify_api``; ``fake_vendor_script.url`` is the ``vendor_url``;
  switch it with ``set_mode("http404")`` and the like.
* ``fake_clock`` — a FakeClock to pass as ``clock=`` wherever failopen takes one.
* ``failopen_config`` — a Config pointing at both fakes, protecting ``/login``.
* ``rai_emulator`` — a RaiEmulator of the session-intelligence API served on loopback;
  ``rai_emulator.base_url``, and its test credentials ``client_id`` / ``client_secret``.

Each served fake also keeps its :class:`~failopen.testing.LoopbackServer` as ``.server``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from failopen.config import Config
    from failopen.testing.clock import FakeClock
    from failopen.testing.rai_emulator import RaiEmulator
    from failopen.testing.status_page import FakeStatusPage
    from failopen.testing.vendor_script import FakeVendorScript
    from failopen.testing.verify_api import FakeVerifyAPI

__all__ = ["fake_clock", "fake_status_page", "fake_vendor_script", "fake_verify_api",
           "failopen_config", "rai_emulator"]


@pytest.fixture
def fake_clock() -> FakeClock:
    """A clock that moves only when ``advance()`` is called."""
    from failopen.testing.clock import FakeClock

    return FakeClock()


@pytest.fixture
def fake_status_page() -> Iterator[FakeStatusPage]:
    """A fake status page served on 127.0.0.1; its base URL is ``fake_status_page.url``."""
    from failopen.testing.status_page import FakeStatusPage

    page = FakeStatusPage()
    with page.serve():
        yield page


@pytest.fixture
def fake_verify_api() -> Iterator[FakeVerifyAPI]:
    """A fake verify endpoint served on 127.0.0.1; its URL is ``fake_verify_api.verify_url``."""
    from failopen.testing.verify_api import FakeVerifyAPI

    api = FakeVerifyAPI()
    with api.serve():
        yield api


@pytest.fixture
def fake_vendor_script(fake_verify_api: FakeVerifyAPI) -> Iterator[FakeVendorScript]:
    """The vendor's client script on 127.0.0.1 (``fake_vendor_script.url``), mode ``ok``."""
    from failopen.testing.vendor_script import FakeVendorScript

    vendor = FakeVendorScript(verify_api=fake_verify_api)
    with vendor.serve():
        yield vendor


@pytest.fixture
def failopen_config(
    fake_status_page: FakeStatusPage, fake_verify_api: FakeVerifyAPI
) -> Config:
    """A Config wired to both fakes, protecting POST /login, polling fast."""
    from failopen.config import Config

    return Config(
        status_url=fake_status_page.url,
        verify_url=fake_verify_api.verify_url,
        private_key=fake_verify_api.private_key,
        protected_paths=("/login",),
        poll_interval=0.05,
        poll_jitter=0.0,
        status_timeout=2.0,
        verify_timeout=2.0,
        confirm_ttl=0.05,
    )


@pytest.fixture
def rai_emulator() -> Iterator[RaiEmulator]:
    """The session-intelligence API emulator on 127.0.0.1 (``rai_emulator.base_url``)."""
    from failopen.testing.rai_emulator import RaiEmulator

    emulator = RaiEmulator()
    with emulator.serve():
        yield emulator
