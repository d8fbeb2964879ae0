"""The flag endpoint and the override endpoint, with the test client and the async client."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from failopen.engine.flag import EnforcementFlag
from failopen.stores import open_store
from failopen.testing import FakeStatusPage

ADMIN_TOKEN = "an-admin-token-long-enough-to-count"
FLAG_KEYS = {"enforce", "source", "reason", "since", "stale"}


@pytest.fixture
def client(make_client: Callable[..., Any], client_kind: str) -> Any:
    return make_client()


def wait_for(predicate: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.005)


# --- GET /failopen/flag ---------------------------------------------------------------------


def test_flag_endpoint_shape_and_headers(client: Any, use_failopen: Any) -> None:
    use_failopen()
    response = client.get("/failopen/flag")
    assert response.status_code == 200
    assert response["Cache-Control"] == "no-store"
    assert response["Content-Type"] == "application/json"
    data = response.json()
    assert set(data) >= FLAG_KEYS
    assert data["enforce"] is True
    assert data["since"].endswith("Z")
    assert data["mode"] == "enforce"


def test_flag_endpoint_shows_the_flag_off(
    client: Any, use_failopen: Any, fake_status_page: FakeStatusPage
) -> None:
    runtime = use_failopen()
    fake_status_page.set_global("major_outage")
    runtime.poll_now()
    data = client.get("/failopen/flag").json()
    assert data["enforce"] is False
    assert data["source"] == "watcher"


def test_flag_endpoint_says_a_failed_poll_at_once_and_the_impaired_regions(
    client: Any, use_failopen: Any, fake_status_page: FakeStatusPage
) -> None:
    runtime = use_failopen()
    fake_status_page.set_region("eu-west-1", "partial_outage")
    runtime.poll_now()
    fake_status_page.set_fault("malformed")
    runtime.poll_now()
    data = client.get("/failopen/flag").json()
    assert data["stale"] is False and data["error"]  # one failed poll: said, not yet stale
    assert data["impaired_regions"] == [{"region": "eu-west-1", "status": "partial_outage"}]
    fake_status_page.set_fault(None)
    runtime.poll_now()
    assert client.get("/failopen/flag").json()["error"] is None


def test_flag_endpoint_starts_the_watcher(
    client: Any, use_failopen: Any, fake_status_page: FakeStatusPage
) -> None:
    runtime = use_failopen()
    assert not runtime.watcher.running
    fake_status_page.set_global("major_outage")
    client.get("/failopen/flag")
    wait_for(lambda: not runtime.state.enforce)


def test_confirm_turns_enforcement_off_only_on_a_confirmed_outage(
    client: Any, use_failopen: Any, fake_status_page: FakeStatusPage
) -> None:
    runtime = use_failopen(POLL_INTERVAL=3600, CONFIRM_TTL=0.01)
    runtime.ensure_started()
    wait_for(lambda: runtime.state.source == "watcher")
    requests = fake_status_page.requests
    # No outage: however often a client asks, enforcement stays on.
    for _ in range(3):
        assert client.get("/failopen/flag?confirm=1").json()["enforce"] is True
    assert fake_status_page.requests > requests  # it did check the status page
    fake_status_page.set_global("major_outage")
    time.sleep(0.02)  # past CONFIRM_TTL
    assert client.get("/failopen/flag").json()["enforce"] is True  # no confirm: no check
    data = client.get("/failopen/flag?confirm=1").json()
    assert data["enforce"] is False
    assert data["source"] == "confirmed"


def test_confirm_is_cached(
    client: Any, use_failopen: Any, fake_status_page: FakeStatusPage
) -> None:
    runtime = use_failopen(POLL_INTERVAL=3600, CONFIRM_TTL=60)
    runtime.ensure_started()
    wait_for(lambda: runtime.state.source == "watcher")
    before = fake_status_page.requests
    for _ in range(5):
        client.get("/failopen/flag?confirm=1")
    assert fake_status_page.requests - before == 1


def test_flag_endpoint_in_shadow_mode_tells_the_browser_to_enforce(
    client: Any, use_failopen: Any, fake_status_page: FakeStatusPage
) -> None:
    runtime = use_failopen(MODE="shadow")
    fake_status_page.set_global("major_outage")
    runtime.poll_now()
    data = client.get("/failopen/flag").json()
    assert data["enforce"] is True
    assert data["would_bypass"] is True
    assert data["mode"] == "shadow"


def test_flag_endpoint_refuses_post(client: Any, use_failopen: Any) -> None:
    use_failopen()
    assert client.post("/failopen/flag").status_code == 405


def test_flag_endpoint_with_broken_settings_is_503(client: Any, use_failopen: Any) -> None:
    use_failopen(POLL_INTERVAL="soon")
    response = client.get("/failopen/flag")
    assert response.status_code == 503
    assert response["Cache-Control"] == "no-store"


# --- POST /failopen/override ----------------------------------------------------------------


def override(client: Any, body: dict[str, Any], **headers: str) -> Any:
    return client.post("/failopen/override", json.dumps(body), content_type="application/json",
                       headers=headers)


@pytest.fixture
def staff(django_db: None) -> Any:
    from django.contrib.auth.models import User

    user, _ = User.objects.get_or_create(username="ops", defaults={"is_staff": True})
    return user


@pytest.fixture
def member(django_db: None) -> Any:
    from django.contrib.auth.models import User

    user, _ = User.objects.get_or_create(username="member", defaults={"is_staff": False})
    return user


def test_override_endpoint_is_404_unless_enabled(client: Any, use_failopen: Any) -> None:
    use_failopen(ADMIN_TOKEN=ADMIN_TOKEN)
    response = override(client, {"enforce": False}, Authorization=f"Bearer {ADMIN_TOKEN}")
    assert response.status_code == 404
    assert client.get("/failopen/override").status_code == 404


def test_override_endpoint_is_post_only(client: Any, use_failopen: Any) -> None:
    use_failopen(OVERRIDE_ENDPOINT=True, ADMIN_TOKEN=ADMIN_TOKEN)
    assert client.get("/failopen/override").status_code == 405


def test_admin_token_turns_enforcement_off_and_back(
    make_client: Callable[..., Any], client_kind: str, use_failopen: Any, tmp_path: Path
) -> None:
    runtime = use_failopen(OVERRIDE_ENDPOINT=True, ADMIN_TOKEN=ADMIN_TOKEN,
                           STORE=f"file://{tmp_path / 'override.json'}")
    client = make_client(enforce_csrf_checks=True)  # a bearer token needs no CSRF token
    response = override(client, {"enforce": False, "ttl": 600, "reason": "vendor down"},
                        Authorization=f"Bearer {ADMIN_TOKEN}")
    assert response.status_code == 200
    assert response["Cache-Control"] == "no-store"
    data = response.json()
    assert data["override"]["enforce"] is False
    assert data["flag"]["enforce"] is False
    assert "(by admin-token)" in data["override"]["reason"]
    assert not runtime.state.enforce
    assert make_client().post("/login/").status_code == 200  # token-less, CSRF checks off
    back = override(client, {"enforce": None}, Authorization=f"Bearer {ADMIN_TOKEN}")
    assert back.json()["override"] is None
    assert runtime.state.enforce


@pytest.mark.parametrize("authorization", [None, "Bearer wrong", f"Bearer {ADMIN_TOKEN}x",
                                           f"Basic {ADMIN_TOKEN}"])
def test_override_refuses_everyone_else_alike(
    client: Any, use_failopen: Any, authorization: str | None
) -> None:
    runtime = use_failopen(OVERRIDE_ENDPOINT=True, ADMIN_TOKEN=ADMIN_TOKEN)
    headers = {"Authorization": authorization} if authorization else {}
    response = override(client, {"enforce": False}, **headers)
    assert response.status_code == 403
    assert response.json() == {"error": {"code": "forbidden", "message": "not allowed"}}
    assert runtime.state.enforce


def test_staff_session_with_csrf_token_may_override(
    make_client: Callable[..., Any], client_kind: str, use_failopen: Any, staff: Any,
    tmp_path: Path,
) -> None:
    runtime = use_failopen(OVERRIDE_ENDPOINT=True, STORE=f"file://{tmp_path / 'override.json'}")
    client = make_client(enforce_csrf_checks=True)
    client.force_login(staff)
    client.get("/page/")  # any page; the CSRF cookie comes from get_token below
    from django.middleware.csrf import _get_new_csrf_string

    secret = _get_new_csrf_string()
    client.cookies["csrftoken"] = secret
    refused = override(client, {"enforce": False})
    assert refused.status_code == 403  # no CSRF token
    assert runtime.state.enforce
    response = override(client, {"enforce": False}, **{"X-CSRFToken": secret})
    assert response.status_code == 200
    assert "(by staff:ops)" in response.json()["override"]["reason"]
    assert not runtime.state.enforce


def test_non_staff_user_may_not_override(
    make_client: Callable[..., Any], client_kind: str, use_failopen: Any, member: Any
) -> None:
    runtime = use_failopen(OVERRIDE_ENDPOINT=True)
    client = make_client()  # CSRF checks off: only the staff check stands in the way
    client.force_login(member)
    assert override(client, {"enforce": False}).status_code == 403
    assert runtime.state.enforce


def test_bad_override_body_is_400(client: Any, use_failopen: Any, tmp_path: Path) -> None:
    use_failopen(OVERRIDE_ENDPOINT=True, ADMIN_TOKEN=ADMIN_TOKEN,
                 STORE=f"file://{tmp_path / 'override.json'}")
    auth = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
    response = override(client, {"enforce": "off"}, **auth)
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "bad_request"
    big = client.post("/failopen/override", b"{" + b" " * 5000 + b"}",
                      content_type="application/json", headers=auth)
    assert big.status_code == 400


def test_override_writes_through_the_configured_store(
    client: Any, use_failopen: Any, tmp_path: Path
) -> None:
    store = f"file://{tmp_path / 'override.json'}"
    use_failopen(OVERRIDE_ENDPOINT=True, ADMIN_TOKEN=ADMIN_TOKEN, STORE=store)
    response = override(client, {"enforce": False, "ttl": 60},
                        Authorization=f"Bearer {ADMIN_TOKEN}")
    assert response.status_code == 200
    other_worker = EnforcementFlag(store=open_store(store))
    assert other_worker.state.enforce is False
    assert other_worker.state.source == "override"


def test_admin_token_never_logged(
    client: Any, use_failopen: Any, caplog: pytest.LogCaptureFixture
) -> None:
    use_failopen(OVERRIDE_ENDPOINT=True, ADMIN_TOKEN=ADMIN_TOKEN)
    override(client, {"enforce": False}, Authorization=f"Bearer {ADMIN_TOKEN}")
    override(client, {"enforce": False}, Authorization=f"Bearer {ADMIN_TOKEN[:-1]}")
    assert caplog.records
    assert ADMIN_TOKEN[:-1] not in caplog.text
