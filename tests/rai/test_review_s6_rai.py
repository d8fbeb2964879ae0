"""The outsider's review of issue 18 (rai): a hostile API's JSON nested deeper than the decoder
goes ends a run as any other malformed answer does, never as a crash with exit 2."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from _hostile import run_cli
from _sync_helpers import KEY, SECRET

from failopen.rai import Client, InvalidResponse, RaiError
from failopen.testing._rai_requests import route
from failopen.testing._server import FakeRequest, LoopbackServer, Reply, as_transport
from failopen.testing.rai_emulator import RaiEmulator

NESTED = b"[" * 100_000  # json.loads raises RecursionError, which is no ValueError
JSON = [("content-type", "application/json")]
ANSWERS = {
    "whole-body": Reply(200, NESTED, JSON),
    "one-record": Reply(200, b'{"sessions":[' + NESTED + b'],"next_page_token":""}', JSON),
    "error-body": Reply(500, NESTED, JSON),
}


class Nested:
    """The emulator, but the sessions listing answers ``answer``."""

    def __init__(self, answer: Reply) -> None:
        self.emulator = RaiEmulator(client_secret=SECRET, cohorts=2, sessions_per_cohort=(1, 2))
        self.answer = answer

    def handler(self, request: FakeRequest) -> Reply:
        endpoint, _ = route(request.method, request.path)
        return self.answer if endpoint == "list_sessions" else self.emulator.handler(request)


@pytest.mark.parametrize("answer", ANSWERS.values(), ids=ANSWERS.keys())
def test_the_client_raises_a_rai_error(answer: Reply) -> None:
    hostile = Nested(answer)
    start, end = hostile.emulator.data_window
    client = Client("https://rai.test", "test-client", SECRET,
                    transport=as_transport(hostile.handler), sleep=lambda _: None)
    with client, pytest.raises(RaiError) as caught:
        list(client.iter_sessions(start, end, [KEY]))
    if answer.status == 200:
        assert isinstance(caught.value, InvalidResponse)


@pytest.fixture
def served() -> Iterator[tuple[Nested, str]]:
    hostile = Nested(ANSWERS["one-record"])
    with LoopbackServer(hostile.handler) as server:
        yield hostile, server.url


def test_the_export_command_ends_with_exit_5_and_no_traceback(
    served: tuple[Nested, str], tmp_path: Path
) -> None:
    hostile, url = served
    start, end = hostile.emulator.data_window
    out = tmp_path / "export.jsonl"
    result = run_cli(url, SECRET, "rai", "sessions", "--from", start, "--to", end,
                     "--public-key", KEY, "--parallel", "1", "--out", str(out))  # fmt: skip
    assert result.returncode == 5, result.stderr
    assert result.stderr.startswith("failopen rai sessions: service_error: ")
    assert "Traceback" not in result.stderr and "unexpected error" not in result.stderr
    assert list(tmp_path.iterdir()) == []
