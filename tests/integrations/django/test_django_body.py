"""The token in a body: read once, bounded, and no anonymous upload spooled for a refusal.

Django's upload handlers see every file part that ``request.POST`` parses (the temporary-file
handler writes each one over FILE_UPLOAD_MAX_MEMORY_SIZE to FILE_UPLOAD_TEMP_DIR). A recording
handler in front of Django's own shows whether anything parsed the form before the refusal.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from django.core.files.uploadhandler import TemporaryFileUploadHandler
from django.test import override_settings

from failopen.testing import FakeVerifyAPI

GOOD = FakeVerifyAPI.GOOD
JSON = {"accept": "application/json"}
CAP = 64 * 1024
FILE_PARTS: list[str] = []


class RecordingUploadHandler(TemporaryFileUploadHandler):
    """Django's temporary-file handler, noting each file part it is given."""

    def new_file(self, *args: Any, **kwargs: Any) -> None:
        FILE_PARTS.append(str(args[1] if len(args) > 1 else kwargs.get("file_name")))
        super().new_file(*args, **kwargs)


@pytest.fixture
def client(make_client: Callable[..., Any], client_kind: str) -> Any:
    return make_client()


@pytest.fixture
def uploads(tmp_path: Path) -> Iterator[Path]:
    """Every file part goes to disk, in a directory of the test's own."""
    FILE_PARTS.clear()
    spool = tmp_path / "spool"
    spool.mkdir()
    with override_settings(FILE_UPLOAD_HANDLERS=[f"{__name__}.RecordingUploadHandler"],
                           FILE_UPLOAD_MAX_MEMORY_SIZE=0, FILE_UPLOAD_TEMP_DIR=str(spool)):
        yield spool
    FILE_PARTS.clear()


def upload(tmp_path: Path, size: int) -> Path:
    big = tmp_path / "big.bin"
    big.write_bytes(b"x" * size)
    return big


def test_big_anonymous_upload_is_refused_unspooled(
    client: Any, use_failopen: Any, uploads: Path, tmp_path: Path
) -> None:
    use_failopen(MAX_BODY_BYTES=CAP)
    with upload(tmp_path, 4 * CAP).open("rb") as handle:
        response = client.post("/login/", {"username": "ann", "avatar": handle}, headers=JSON)
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "body_too_large"
    assert FILE_PARTS == []
    assert list(uploads.iterdir()) == []


def test_small_anonymous_upload_is_refused_unparsed(
    client: Any, use_failopen: Any, uploads: Path, tmp_path: Path
) -> None:
    use_failopen(MAX_BODY_BYTES=CAP)
    with upload(tmp_path, CAP // 2).open("rb") as handle:
        response = client.post("/login/", {"username": "ann", "avatar": handle}, headers=JSON)
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "missing_token"
    assert FILE_PARTS == []  # the token was looked for in the bytes, not in a parsed form


def test_upload_with_token_field_reaches_the_view_intact(
    client: Any, use_failopen: Any, uploads: Path, tmp_path: Path
) -> None:
    use_failopen(MAX_BODY_BYTES=CAP)
    with upload(tmp_path, CAP // 2).open("rb") as handle:
        response = client.post("/login/", {"username": "ann", "enforcement-token": GOOD,
                                           "avatar": handle})
    assert response.status_code == 200
    assert response.json()["form"] == "ann"  # request.POST, parsed by the view
    assert FILE_PARTS == ["big.bin"]  # ... which is where the file part was first handled


def test_view_reads_the_raw_multipart_body_after_the_guard(
    client: Any, use_failopen: Any, tmp_path: Path
) -> None:
    use_failopen()
    with upload(tmp_path, 1000).open("rb") as handle:
        response = client.post("/login/raw/", {"enforcement-token": GOOD, "avatar": handle})
    assert response.status_code == 200
    assert response.json() == {"bytes": response.json()["bytes"], "outcome": "valid"}
    assert response.json()["bytes"] > 1000


def test_form_post_with_token_keeps_request_post(client: Any, use_failopen: Any) -> None:
    use_failopen(MAX_BODY_BYTES=CAP)
    response = client.post("/login/", {"username": "ann", "enforcement-token": GOOD})
    assert response.status_code == 200
    assert response.json()["form"] == "ann"


def test_big_upload_with_header_token_is_not_capped(
    client: Any, use_failopen: Any, tmp_path: Path
) -> None:
    """The cap bounds what failopen reads; with the token in the header it reads nothing."""
    use_failopen(MAX_BODY_BYTES=CAP)
    with upload(tmp_path, 4 * CAP).open("rb") as handle:
        response = client.post("/login/", {"username": "ann", "avatar": handle},
                               headers={"X-Enforcement-Token": GOOD})
    assert response.status_code == 200


def test_big_urlencoded_form_is_refused(client: Any, use_failopen: Any) -> None:
    use_failopen(MAX_BODY_BYTES=CAP)
    response = client.post("/login/", f"enforcement-token={GOOD}&pad={'x' * 2 * CAP}",
                           content_type="application/x-www-form-urlencoded", headers=JSON)
    assert response.status_code == 413


def test_big_upload_to_a_protected_view_is_refused_before_csrf_parses_it(
    make_client: Callable[..., Any], client_kind: str, use_failopen: Any, uploads: Path,
    tmp_path: Path,
) -> None:
    """CsrfViewMiddleware's process_view reads request.POST before ours: judged earlier."""
    use_failopen(PROTECTED_PATHS=[], MAX_BODY_BYTES=CAP)
    client = make_client(enforce_csrf_checks=True)
    client.cookies["csrftoken"] = "a" * 32
    with override_settings(ROOT_URLCONF="django_test_urls_views"), \
            upload(tmp_path, 4 * CAP).open("rb") as handle:
        response = client.post("/alias/", {"csrfmiddlewaretoken": "a" * 32, "avatar": handle})
    assert response.status_code == 413
    assert FILE_PARTS == []


def test_flag_off_reads_no_body(
    client: Any, use_failopen: Any, uploads: Path, tmp_path: Path, fake_status_page: Any
) -> None:
    runtime = use_failopen(MAX_BODY_BYTES=CAP)
    fake_status_page.set_global("major_outage")
    runtime.poll_now()
    with upload(tmp_path, 4 * CAP).open("rb") as handle:
        response = client.post("/login/", {"username": "ann", "avatar": handle})
    assert response.status_code == 200
    assert response.json()["failopen"]["outcome"] == "bypassed_flag_off"


def test_chunked_body_under_asgi_is_read_no_further_than_the_cap(use_failopen: Any) -> None:
    """Django's ASGI request stream is the whole body: without a Content-Length only the
    cap bounds what failopen reads."""
    import asyncio
    import json

    from django.core.handlers.asgi import ASGIHandler
    from failopen.integrations.django import conf

    use_failopen(MAX_BODY_BYTES=CAP)
    padded = json.dumps({"enforcement-token": GOOD, "pad": "x" * 2 * CAP}).encode()
    small = json.dumps({"enforcement-token": GOOD}).encode()

    async def post(body: bytes) -> int:
        scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
                 "method": "POST", "path": "/login/json/", "raw_path": b"/login/json/",
                 "query_string": b"", "root_path": "", "scheme": "http",
                 "headers": [(b"host", b"testserver"), (b"content-type", b"application/json"),
                             (b"transfer-encoding", b"chunked")],
                 "client": ("127.0.0.1", 5000), "server": ("testserver", 80)}
        chunks = [{"type": "http.request", "body": body[i:i + 4096], "more_body": True}
                  for i in range(0, len(body), 4096)]
        chunks.append({"type": "http.request", "body": b"", "more_body": False})
        sent: list[dict[str, Any]] = []

        async def receive() -> dict[str, Any]:
            if chunks:
                return chunks.pop(0)
            await asyncio.Event().wait()
            raise AssertionError("unreachable")

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)

        await ASGIHandler()(scope, receive, send)
        return int(next(m["status"] for m in sent if m["type"] == "http.response.start"))

    async def scenario() -> list[int]:
        try:
            return [await post(padded), await post(small)]
        finally:
            await conf.runtime().aclose()

    chain = ["failopen.integrations.django.middleware.FailOpenMiddleware"]  # no CSRF check
    with override_settings(MIDDLEWARE=chain):
        assert asyncio.run(scenario()) == [413, 200]  # the view read the small body after us
