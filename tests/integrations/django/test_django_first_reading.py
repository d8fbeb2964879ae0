"""Django: a worker's first protected request during an outage, with Django's test client and
async client. The runtime's watcher starts with that request (as in every fresh worker); its
first status reading comes while the request waits, and the request is admitted (bypassed) as on
a worker that has been running all along, with one status request for it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from failopen.testing import FakeStatusPage, FakeVerifyAPI


def test_the_first_tokenless_login_of_a_fresh_worker_is_bypassed_during_an_outage(
    make_client: Callable[..., Any], client_kind: str, use_failopen: Any,
    fake_status_page: FakeStatusPage, fake_verify_api: FakeVerifyAPI,
) -> None:
    fake_status_page.set_global("major_outage")
    use_failopen(POLL_INTERVAL=30.0)
    client = make_client()
    response = client.post("/login/", {"username": "ann"}, headers={"accept": "application/json"})
    assert response.status_code == 200, response.content
    decision = response.json()["failopen"]
    assert (decision["bypassed"], decision["outcome"]) == (True, "bypassed_flag_off")
    assert response.json()["form"] == "ann", "the view still reads the form"
    assert fake_status_page.requests == 1
    assert fake_verify_api.requests == 0


def test_a_fresh_worker_keeps_refusing_when_the_page_cannot_be_read(
    make_client: Callable[..., Any], client_kind: str, use_failopen: Any,
    fake_status_page: FakeStatusPage,
) -> None:
    fake_status_page.set_global("major_outage")
    fake_status_page.set_fault("503")
    use_failopen(POLL_INTERVAL=30.0)
    response = make_client().post("/login/", {"username": "ann"},
                                  headers={"accept": "application/json"})
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "missing_token"
