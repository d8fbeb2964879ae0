"""failopen's own routes under the WSGI middleware: the flag, the snippet, the override."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from _wsgi_kit import ADMIN_TOKEN, WsgiStack, call, environ

from failopen.stores.file import FileStore
from failopen.web import COMPANION_FILES, SOLVER_PATH

Make = Callable[..., WsgiStack]


def test_flag_endpoint_shape_no_store_and_lazy_start(make_wsgi: Make) -> None:
    stack = make_wsgi(started=False)
    response = stack.client.get("/failopen/flag")
    assert response.status_code == 200
    assert response.headers["Content-Type"] == "application/json"
    assert response.headers["Cache-Control"] == "no-store"
    body = response.get_json()
    assert body["enforce"] is True and body["mode"] == "enforce" and body["since"].endswith("Z")
    assert stack.runtime.watcher.running  # the flag endpoint starts the watcher lazily


def test_flag_confirm_during_an_outage_turns_enforcement_off(make_wsgi: Make) -> None:
    stack = make_wsgi()
    stack.page.set_global("major_outage")
    asked = stack.page.requests
    assert stack.client.get("/failopen/flag?confirm=0").get_json()["enforce"] is True
    assert stack.page.requests == asked  # no check without confirm
    confirmed = stack.client.get("/failopen/flag?confirm=1").get_json()
    assert (confirmed["enforce"], confirmed["source"]) == (False, "confirmed")
    admitted = stack.post()
    assert (admitted.status_code, admitted.get_json()["bypassed"]) == (200, True)


def test_flag_confirm_without_an_outage_keeps_enforcing(make_wsgi: Make) -> None:
    stack = make_wsgi()
    stack.page.set_region(next(iter(stack.page.region_ids)), "major_outage")  # regional only
    for fault in (None, "500", "429", "timeout", "malformed"):
        stack.page.set_fault(fault)
        assert stack.client.get("/failopen/flag?confirm=1").get_json()["enforce"] is True


def test_flag_is_get_only_and_head_has_no_body(make_wsgi: Make) -> None:
    stack = make_wsgi()
    response = stack.client.post("/failopen/flag")
    assert (response.status_code, response.headers["Allow"]) == (405, "GET, HEAD")
    status, headers, body = call(stack.app, environ("/failopen/flag", method="HEAD"))
    assert status == "200 OK" and body == b"" and int(headers["Content-Length"]) > 0


def test_routes_follow_the_prefix(make_wsgi: Make) -> None:
    stack = make_wsgi(prefix="/_ops/fo")
    assert stack.client.get("/_ops/fo/flag").status_code == 200
    assert stack.client.get("/failopen/flag").status_code == 404  # now Flask's


@pytest.fixture
def snippet(tmp_path: Path) -> Path:
    path = tmp_path / "failopen.js"
    path.write_text("/* failopen test snippet */ window.failopen = {};\n")
    return path


def test_snippet_etag_and_revalidation(make_wsgi: Make, snippet: Path) -> None:
    stack = make_wsgi(snippet_path=snippet)
    response = stack.client.get("/failopen/failopen.js")
    assert response.status_code == 200 and response.data == snippet.read_bytes()
    assert response.headers["Content-Type"] == "text/javascript; charset=utf-8"
    assert response.headers["Cache-Control"] == "public, max-age=86400"
    etag = response.headers["ETag"]
    for form in (etag, f"W/{etag}", f'"other", {etag}', "*"):
        again = stack.client.get("/failopen/failopen.js", headers={"If-None-Match": form})
        assert (again.status_code, again.data, again.headers["ETag"]) == (304, b"", etag)
    stale = stack.client.get("/failopen/failopen.js", headers={"If-None-Match": '"old"'})
    assert stale.status_code == 200
    assert stack.client.post("/failopen/failopen.js").status_code == 405


@pytest.mark.parametrize("name", sorted(set(COMPANION_FILES) - {SOLVER_PATH.name}))
def test_every_vendor_adapter_is_served_beside_the_snippet(make_wsgi: Make, name: str) -> None:
    stack = make_wsgi()
    response = stack.client.get("/failopen/" + name)
    assert response.status_code == 200 and response.data == COMPANION_FILES[name].read_bytes()
    etag = response.headers["ETag"]
    again = stack.client.get("/failopen/" + name, headers={"If-None-Match": etag})
    assert again.status_code == 304


def test_the_fallback_solver_is_served_beside_the_snippet(make_wsgi: Make, snippet: Path) -> None:
    # The package's own, also when the site serves its own snippet: it answers our challenge.
    stack = make_wsgi(snippet_path=snippet)
    response = stack.client.get("/failopen/failopen-solver.js")
    assert response.status_code == 200 and response.data == SOLVER_PATH.read_bytes()
    assert response.headers["Content-Type"] == "text/javascript; charset=utf-8"
    assert response.headers["Cache-Control"] == "public, max-age=86400"
    etag = response.headers["ETag"]
    assert etag != stack.client.get("/failopen/failopen.js").headers["ETag"]
    again = stack.client.get("/failopen/failopen-solver.js", headers={"If-None-Match": etag})
    assert (again.status_code, again.data) == (304, b"")
    assert stack.client.head("/failopen/failopen-solver.js").data == b""
    assert stack.client.post("/failopen/failopen-solver.js").status_code == 405


def test_missing_snippet_is_404_and_logged_once(
    make_wsgi: Make, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="failopen.wsgi"):
        stack = make_wsgi(snippet_path=tmp_path / "absent.js")
        for _ in range(3):
            assert stack.client.get("/failopen/failopen.js").status_code == 404
    assert [r.getMessage() for r in caplog.records if "absent.js" in r.getMessage()] != []
    assert len(caplog.records) == 1


def bearer(token: str = ADMIN_TOKEN) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@pytest.fixture
def store(tmp_path: Path) -> str:
    return f"file://{tmp_path / 'override.json'}"


def test_no_admin_token_means_no_override_route(make_wsgi: Make) -> None:
    stack = make_wsgi()
    response = stack.client.post("/failopen/override", headers=bearer(), json={"enforce": False})
    assert response.status_code == 404  # Flask's own 404: the route is not revealed
    assert stack.runtime.state.enforce is True


def test_override_off_then_auto(
    make_wsgi: Make, store: str, caplog: pytest.LogCaptureFixture
) -> None:
    stack = make_wsgi(admin_token=ADMIN_TOKEN, store=store)
    with caplog.at_level(logging.DEBUG):
        response = stack.client.post("/failopen/override", headers=bearer(),
                                     json={"enforce": False, "ttl": 900, "reason": "ticket 1"})
        assert response.status_code == 200 and response.headers["Cache-Control"] == "no-store"
        assert response.get_json()["flag"]["source"] == "override"
        assert stack.post().get_json()["bypassed"] is True
        back = stack.client.post("/failopen/override", headers=bearer(), json={"enforce": None})
        assert back.status_code == 200 and back.get_json()["override"] is None
        assert stack.post().status_code == 403
    assert any("admin-token" in r.getMessage() for r in caplog.records)
    assert ADMIN_TOKEN not in caplog.text


@pytest.mark.parametrize(("headers", "status"), [
    ({}, 401), ({"Authorization": "Basic " + "x" * 20}, 401),
    ({"Cookie": f"session={ADMIN_TOKEN}"}, 401),
    (bearer("adm-" + "z" * 40), 403), (bearer(ADMIN_TOKEN[:-1]), 403),
])
def test_override_refuses_without_the_bearer_token(
    make_wsgi: Make, store: str, headers: dict[str, str], status: int,
    caplog: pytest.LogCaptureFixture,
) -> None:
    stack = make_wsgi(admin_token=ADMIN_TOKEN, store=store)
    with caplog.at_level(logging.DEBUG):
        response = stack.client.post("/failopen/override", headers=headers,
                                     json={"enforce": False})
    assert response.status_code == status and ADMIN_TOKEN not in response.text
    if status == 401:
        assert response.headers["WWW-Authenticate"] == "Bearer"
    assert stack.runtime.state.enforce is True
    assert ADMIN_TOKEN not in caplog.text


def test_override_is_post_only_and_memory_store_is_409(make_wsgi: Make) -> None:
    stack = make_wsgi(admin_token=ADMIN_TOKEN)  # memory: store
    response = stack.client.get("/failopen/override", headers=bearer())
    assert (response.status_code, response.headers["Allow"]) == (405, "POST")
    refused = stack.client.post("/failopen/override", headers=bearer(), json={"enforce": False})
    assert refused.status_code == 409
    assert refused.get_json()["error"]["code"] == "store_not_shared"
    assert stack.runtime.state.enforce is True


@pytest.mark.parametrize("body", [b"not json", b"[]", b'{"enforce": "off"}',
                                  b'{"enforce": false, "ttl": -1}', b""])
def test_override_bad_requests_are_400(make_wsgi: Make, store: str, body: bytes) -> None:
    stack = make_wsgi(admin_token=ADMIN_TOKEN, store=store)
    response = stack.client.post("/failopen/override", headers=bearer(), data=body,
                                 content_type="application/json")
    assert response.status_code == 400 and stack.runtime.state.enforce is True


def test_override_body_is_capped(make_wsgi: Make, store: str) -> None:
    stack = make_wsgi(admin_token=ADMIN_TOKEN, store=store)
    huge = b'{"enforce": false, "reason": "' + b"x" * 5000 + b'"}'
    response = stack.client.post("/failopen/override", headers=bearer(), data=huge)
    assert response.status_code == 413 and stack.runtime.state.enforce is True


class _ExplodingStore(FileStore):
    def save(self, override: Any) -> None:
        raise KeyError("store bug")


def test_override_store_bug_is_503_not_a_crash(make_wsgi: Make, tmp_path: Path) -> None:
    store = _ExplodingStore(tmp_path / "override.json")
    stack = make_wsgi(admin_token=ADMIN_TOKEN, runtime_kwargs={"store": store})
    response = stack.client.post("/failopen/override", headers=bearer(), json={"enforce": False})
    assert response.status_code == 503
    assert response.get_json()["error"]["code"] == "internal_error"
    assert stack.runtime.state.enforce is True


def test_wrong_admin_tokens_are_logged_one_line_per_interval(
    make_wsgi: Make, store: str, caplog: pytest.LogCaptureFixture
) -> None:
    stack = make_wsgi(admin_token=ADMIN_TOKEN, store=store)
    with caplog.at_level(logging.DEBUG, logger="failopen.wsgi"):
        for _ in range(5):
            response = stack.client.post("/failopen/override", headers=bearer("x" * 40),
                                         json={"enforce": False})
            assert response.status_code == 403
    assert len([r for r in caplog.records if "wrong admin token" in r.getMessage()]) == 1
