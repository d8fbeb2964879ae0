"""The overall deadline, proved on real sockets: a dripping or hanging vendor cannot hold us.

httpx timeouts bound each socket operation, not the exchange: a server that sends one byte just
inside the read timeout could keep a request open for ever. failopen promises one overall deadline
per status poll (``status_timeout``) and per verify call (``verify_timeout``). Each test here points
a client at a loopback server whose answer would take far longer than the deadline (seconds to an
hour), and checks that the call gives up within the deadline plus a generous margin, that it says
it timed out, and, where it matters, that the connection was really dropped: a worker thread left
reading a drip in the background holds a slot of a small pool, and enough of them blind the
watcher. The drip comes in the body (the fakes' ``slow_drip``, a ten-second ``Reply(drip=...)``)
and in the status line and headers (a raw socket server, :class:`HeaderDrip`).
"""

from __future__ import annotations

import json
import re
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from failopen.config import Config
from failopen.exceptions import StatusUnavailable
from failopen.providers.status import StatusClient
from failopen.providers.verify import HttpVerifier, VerifyOutcome
from failopen.runtime import FailOpen
from failopen.testing import FakeRequest, FakeStatusPage, FakeVerifyAPI, LoopbackServer, Reply
from failopen.testing.status_page import DRIP_SECONDS_PER_BYTE, HOLD_SECONDS

pytestmark = pytest.mark.slow

DEADLINE = 0.3  # seconds: the status_timeout / verify_timeout under test
MARGIN = 0.5  # generous, so a loaded 2-core CI machine does not make these flaky
SLOW_FAULTS = ["slow_drip", "timeout"]
TEN_SECONDS = 10.0
#: How a timed-out read says so: the caller's deadline ("no complete answer within 0.3s"), or the
#: worker's own check between chunks ("response still arriving at the deadline"), whichever first.
TIMED_OUT = r"within|deadline"


def within_deadline(elapsed: float, deadline: float = DEADLINE) -> bool:
    return elapsed < deadline + MARGIN


def wait_for(predicate: Callable[[], bool], timeout: float = 5.0) -> bool:
    """Poll until ``predicate()`` holds; the timeout only bounds a failure."""
    end = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > end:
            return False
        time.sleep(0.01)
    return True


def drip_seconds(page: FakeStatusPage) -> float:
    """How long the page's slow_drip fault would take to deliver the whole components document."""
    return len(json.dumps(page.components_document()).encode()) * DRIP_SECONDS_PER_BYTE


@pytest.fixture
def page() -> Iterator[FakeStatusPage]:
    fake = FakeStatusPage()
    with fake.serve():
        yield fake


@pytest.fixture
def api() -> Iterator[FakeVerifyAPI]:
    fake = FakeVerifyAPI()
    with fake.serve():
        yield fake


def ten_second_drip(page: FakeStatusPage) -> Reply:
    """The page's healthy components document, dripped so that it would take ~10 s in all."""
    body = json.dumps(page.components_document()).encode()
    return Reply(200, body, [("Content-Type", "application/json")], drip=TEN_SECONDS / len(body))


class CountingDrip:
    """A chunked answer, one byte per ``interval``, counting what the server managed to send.

    Once the client hangs up, the server's next writes fail and the generator stops being pulled:
    ``sent`` stops growing. A client that gave up on the surface but kept a worker reading in the
    background would keep it growing.
    """

    def __init__(self, total_seconds: float = TEN_SECONDS, interval: float = 0.02) -> None:
        self.interval = interval
        self.count = int(total_seconds / interval)
        self.sent = 0
        self.last_sent = 0.0

    def body(self) -> Iterator[bytes]:
        # Whitespace before a JSON document: valid so far, never complete within the deadline.
        for _ in range(self.count):
            time.sleep(self.interval)
            self.sent += 1
            self.last_sent = time.monotonic()
            yield b" "
        yield b'{"components": []}'

    def handler(self, request: FakeRequest) -> Reply:
        return Reply(200, self.body(), [("Content-Type", "application/json")])

    def stopped_growing(self, quiet: float = 0.2) -> bool:
        """True once nothing has been sent for ``quiet`` seconds."""
        return time.monotonic() - self.last_sent > quiet


class HeaderDrip:
    """A raw loopback server that drips its status line and headers, one byte per ``interval``.

    LoopbackServer can only drip a body; a header drip is the other half of a slow-loris answer.
    It records, per connection, when it last managed to send a byte; stop() closes everything.
    """

    def __init__(self, interval: float = 0.02, *, serve: FakeStatusPage | None = None) -> None:
        self.interval = interval
        self.page = serve  # when given, connections made while not ``dripping`` get its page
        self.dripping = serve is None
        self._stop = threading.Event()
        self._sock = socket.socket()
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(64)
        self._sock.settimeout(0.05)
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self.last_sent: list[float] = []
        self.url = f"http://127.0.0.1:{self._sock.getsockname()[1]}"
        self._acceptor = threading.Thread(target=self._accept, daemon=True)

    def __enter__(self) -> HeaderDrip:
        self._acceptor.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._acceptor.join(5)
        for thread in self._threads:
            thread.join(5)
        self._sock.close()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except OSError:
                continue
            with self._lock:
                index = len(self.last_sent)
                self.last_sent.append(time.monotonic())
            thread = threading.Thread(target=self._drip, args=(conn, index), daemon=True)
            self._threads.append(thread)
            thread.start()

    def _drip(self, conn: socket.socket, index: int) -> None:
        head = b"HTTP/1.1 200 OK\r\nX-Padding: " + b"a" * 100_000
        with conn:
            try:
                conn.settimeout(1.0)
                conn.recv(65536)
                if not self.dripping and self.page is not None:
                    body = json.dumps(self.page.components_document()).encode()
                    conn.sendall(
                        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                        b"Connection: close\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
                    )
                    return
                for i in range(len(head)):
                    if self._stop.wait(self.interval):
                        return
                    conn.sendall(head[i : i + 1])
                    self.last_sent[index] = time.monotonic()
            except OSError:
                return  # the client hung up: what a deadline should make it do

    def connections(self) -> int:
        return len(self.last_sent)

    def all_hung_up(self, quiet: float = 0.2) -> bool:
        """True when no connection has taken a byte for ``quiet`` seconds."""
        now = time.monotonic()
        return bool(self.last_sent) and all(now - t > quiet for t in self.last_sent)


# --- the status page ----------------------------------------------------------------------------


@pytest.mark.parametrize("fault", SLOW_FAULTS)
def test_status_fetch_gives_up_at_the_deadline(page: FakeStatusPage, fault: str) -> None:
    page.set_global("major_outage")  # what a complete answer would have said
    page.set_fault(fault)
    would_take = drip_seconds(page) if fault == "slow_drip" else HOLD_SECONDS
    assert would_take > 20 * (DEADLINE + MARGIN)
    with StatusClient(page.server.url, timeout=DEADLINE) as client:  # type: ignore[attr-defined]
        started = time.monotonic()
        with pytest.raises(StatusUnavailable, match=TIMED_OUT):
            client.fetch()
        elapsed = time.monotonic() - started
    assert within_deadline(elapsed), f"took {elapsed:.2f}s against a {DEADLINE}s deadline"


@pytest.mark.parametrize("fault", SLOW_FAULTS)
@pytest.mark.anyio
async def test_status_afetch_gives_up_at_the_deadline(page: FakeStatusPage, fault: str) -> None:
    page.set_global("major_outage")
    page.set_fault(fault)
    async with StatusClient(page.server.url, timeout=DEADLINE) as client:  # type: ignore[attr-defined]
        started = time.monotonic()
        with pytest.raises(StatusUnavailable, match=TIMED_OUT):
            await client.afetch()
        elapsed = time.monotonic() - started
    assert within_deadline(elapsed), f"took {elapsed:.2f}s against a {DEADLINE}s deadline"


def test_a_ten_second_drip_is_cut_at_the_deadline_sync(page: FakeStatusPage) -> None:
    page.set_global("major_outage")
    with LoopbackServer(lambda request: ten_second_drip(page)) as server:
        client = StatusClient(server.url, timeout=DEADLINE)
        started = time.monotonic()
        with client, pytest.raises(StatusUnavailable, match=TIMED_OUT):
            client.fetch()
        elapsed = time.monotonic() - started
    assert within_deadline(elapsed), f"took {elapsed:.2f}s of a {TEN_SECONDS:g}s drip"


@pytest.mark.anyio
async def test_a_ten_second_drip_is_cut_at_the_deadline_async(page: FakeStatusPage) -> None:
    page.set_global("major_outage")
    with LoopbackServer(lambda request: ten_second_drip(page)) as server:
        async with StatusClient(server.url, timeout=DEADLINE) as client:
            started = time.monotonic()
            with pytest.raises(StatusUnavailable, match=TIMED_OUT):
                await client.afetch()
            elapsed = time.monotonic() - started
    assert within_deadline(elapsed), f"took {elapsed:.2f}s of a {TEN_SECONDS:g}s drip"


@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.anyio
async def test_a_cut_drip_is_really_hung_up_not_read_on_in_the_background(mode: str) -> None:
    drip = CountingDrip()
    with LoopbackServer(drip.handler) as server:
        client = StatusClient(server.url, timeout=DEADLINE)
        started = time.monotonic()
        with pytest.raises(StatusUnavailable, match=TIMED_OUT):
            if mode == "sync":
                client.fetch()
            else:
                await client.afetch()
        elapsed = time.monotonic() - started
        assert within_deadline(elapsed)
        assert wait_for(drip.stopped_growing, timeout=2.0), "the connection is still being read"
        assert drip.sent < drip.count / 4, "far less than the whole drip was ever sent"
        await client.aclose()


@pytest.mark.parametrize("fault", SLOW_FAULTS)
def test_poll_now_gives_up_at_the_deadline_and_keeps_the_flag(
    page: FakeStatusPage, fault: str
) -> None:
    config = Config(status_url=page.server.url, status_timeout=DEADLINE)  # type: ignore[attr-defined]
    runtime = FailOpen(config)
    try:
        page.set_global("major_outage")
        assert runtime.poll_now().reading == "impaired"  # type: ignore[union-attr]
        page.set_global("operational")  # hidden behind the fault: must not count
        page.set_fault(fault)
        started = time.monotonic()
        result = runtime.poll_now()
        elapsed = time.monotonic() - started
        assert result is not None and result.reading == "failed"
        assert result.error is not None and re.search(TIMED_OUT, result.error)
        assert within_deadline(elapsed), f"took {elapsed:.2f}s against a {DEADLINE}s deadline"
        assert runtime.state.enforce is False, "a poll that timed out is no evidence"
    finally:
        runtime.stop()


# --- the verify call ----------------------------------------------------------------------------


@pytest.mark.parametrize("fault", SLOW_FAULTS)
@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.anyio
async def test_http_verifier_gives_up_at_the_deadline(
    api: FakeVerifyAPI, fault: str, mode: str
) -> None:
    api.set_fault(fault)
    verifier = HttpVerifier(api.verify_url, api.private_key, timeout=DEADLINE)  # type: ignore[attr-defined]
    try:
        started = time.monotonic()
        if mode == "sync":
            result = verifier.verify(FakeVerifyAPI.GOOD)
        else:
            result = await verifier.averify(FakeVerifyAPI.GOOD)
        elapsed = time.monotonic() - started
    finally:
        verifier.close()
        await verifier.aclose()
    assert result.outcome is VerifyOutcome.UNAVAILABLE
    assert result.reason.startswith("timeout")
    assert within_deadline(elapsed), f"took {elapsed:.2f}s against a {DEADLINE}s deadline"


def failopen_for(page: FakeStatusPage, api: FakeVerifyAPI, **changes: Any) -> FailOpen:
    config = Config(
        status_url=page.server.url,  # type: ignore[attr-defined]
        verify_url=api.verify_url,  # type: ignore[attr-defined]
        private_key=api.private_key,
        poll_interval=3600.0,
        status_timeout=DEADLINE,
        verify_timeout=DEADLINE,
        **changes,
    )
    return FailOpen(config)


@pytest.mark.parametrize(("fault", "mode"), [("slow_drip", "sync"), ("timeout", "async")])
@pytest.mark.anyio
async def test_one_decision_is_bounded_by_both_deadlines(
    page: FakeStatusPage, api: FakeVerifyAPI, fault: str, mode: str
) -> None:
    """The worst request: verify drips, then the outage check drips too. verify_timeout plus
    status_timeout bound it, and a status page that could not be read confirms nothing."""
    runtime = failopen_for(page, api)
    try:
        assert runtime.poll_now().reading == "operational"  # type: ignore[union-attr]
        api.set_fault(fault)
        page.set_global("major_outage")
        page.set_fault(fault)
        started = time.monotonic()
        if mode == "sync":
            decision = runtime.guard.decide(FakeVerifyAPI.GOOD, path="/login")
        else:
            decision = await runtime.guard.adecide(FakeVerifyAPI.GOOD, path="/login")
        elapsed = time.monotonic() - started
        assert (decision.allow, decision.bypassed, decision.status_code) == (False, False, 503)
        assert decision.outcome == "cannot_verify"
        assert elapsed < 2 * DEADLINE + MARGIN, f"took {elapsed:.2f}s"
        assert runtime.state.enforce is True
    finally:
        runtime.stop()
        await runtime.verifier.aclose()  # type: ignore[attr-defined]


# --- a vendor that drips its headers ------------------------------------------------------------


@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.anyio
async def test_a_header_drip_returns_to_the_caller_at_the_deadline(mode: str) -> None:
    with HeaderDrip() as drip:
        client = StatusClient(drip.url, timeout=DEADLINE)
        started = time.monotonic()
        with pytest.raises(StatusUnavailable, match=TIMED_OUT):
            if mode == "sync":
                client.fetch()
            else:
                await client.afetch()
        elapsed = time.monotonic() - started
        await client.aclose()
    assert within_deadline(elapsed), f"took {elapsed:.2f}s against a {DEADLINE}s deadline"


def test_a_verify_call_into_a_header_drip_is_hung_up_at_the_deadline() -> None:
    with HeaderDrip() as drip:
        verifier = HttpVerifier(drip.url + FakeVerifyAPI.path, "test-private-key", timeout=DEADLINE)
        with verifier:
            started = time.monotonic()
            result = verifier.verify(FakeVerifyAPI.GOOD)
            elapsed = time.monotonic() - started
            assert result.outcome is VerifyOutcome.UNAVAILABLE
            assert within_deadline(elapsed), f"took {elapsed:.2f}s against a {DEADLINE}s deadline"
            assert wait_for(drip.all_hung_up, timeout=DEADLINE + 0.5), "worker still reading"


@pytest.mark.anyio
async def test_an_async_header_drip_is_hung_up_at_the_deadline() -> None:
    with HeaderDrip() as drip:
        async with StatusClient(drip.url, timeout=DEADLINE) as client:
            with pytest.raises(StatusUnavailable):
                await client.afetch()
        assert wait_for(drip.all_hung_up, timeout=DEADLINE + 1.0)


def test_a_sync_header_drip_is_hung_up_at_the_deadline() -> None:
    """The sync worker blocked reading a dripping status line and headers never looks at the
    clock: the caller has to cut its socket at the deadline (a regression test: it used to read
    on for as long as the drip lasted)."""
    # A long-lived client, as the watcher's and the verifier's are: closing it would tear the
    # connection down under the worker and hide what the worker does on its own.
    with HeaderDrip() as drip, StatusClient(drip.url, timeout=DEADLINE) as client:
        with pytest.raises(StatusUnavailable):
            client.fetch()
        # The docstring of _http: the worker "never outlives [the deadline] by more than one
        # socket read". One socket read here is one byte, 20 ms.
        assert wait_for(drip.all_hung_up, timeout=DEADLINE + 0.5), "worker still reading"


def test_a_dripping_verify_endpoint_does_not_starve_the_outage_check(
    page: FakeStatusPage,
) -> None:
    """Verify calls stuck in a header drip must leave the status check its own workers: the
    vendor's outage is on its status page, and confirming it is what lets users in."""
    with HeaderDrip() as drip:
        config = Config(
            status_url=page.server.url,  # type: ignore[attr-defined]
            verify_url=drip.url + FakeVerifyAPI.path,
            private_key="test-private-key",
            poll_interval=3600.0,
            status_timeout=1.0,
            verify_timeout=DEADLINE,
        )
        runtime = FailOpen(config)
        try:
            assert runtime.poll_now().reading == "operational"  # type: ignore[union-attr]
            page.set_global("major_outage")  # the vendor's outage, plainly on its status page
            decisions: list[Any] = []
            threads = [
                threading.Thread(
                    target=lambda: decisions.append(runtime.guard.decide(FakeVerifyAPI.GOOD))
                )
                for _ in range(16)
            ]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(10)
            outcomes = sorted({d.outcome for d in decisions})
            # One thread per process waits for the confirmation; a thread whose verify failed
            # while it was under way is answered from the flag as it was (issue 31): refused,
            # never admitted without evidence. The status check itself was not starved:
            assert "bypassed_confirmed_outage" in outcomes, outcomes
            assert set(outcomes) <= {"bypassed_confirmed_outage", "cannot_verify"}, outcomes
            assert runtime.state.enforce is False  # the outage was confirmed
            later = runtime.guard.decide(FakeVerifyAPI.GOOD)
            assert later.outcome == "bypassed_flag_off", later.outcome  # the vendor skipped
        finally:
            runtime.stop()
    _assert_pool_recovers(page)


def test_after_a_header_drip_the_watcher_reads_the_recovery(page: FakeStatusPage) -> None:
    """Polls stuck in a header drip once kept their worker: a few of them filled the status lane,
    every later poll failed, and a bypass outlived the outage it was for."""
    with HeaderDrip(serve=page) as drip:
        runtime = FailOpen(Config(status_url=drip.url, status_timeout=0.2, close_after=1))
        try:
            page.set_global("major_outage")
            assert runtime.poll_now().reading == "impaired"
            assert runtime.state.enforce is False
            drip.dripping = True  # the page (or a proxy before it) now drips its headers
            for _ in range(6):
                assert runtime.poll_now().reading == "failed"  # no evidence: still bypassing
            assert runtime.state.enforce is False
            drip.dripping = False  # it recovers, and says the outage is over
            page.set_global("operational")
            results = [runtime.poll_now() for _ in range(2)]
            assert [r.reading for r in results] == ["operational"] * 2, [r.error for r in results]
            assert runtime.state.enforce is True, "bypassing after the outage ended"
        finally:
            runtime.stop()
    _assert_pool_recovers(page)


def _assert_pool_recovers(page: FakeStatusPage) -> None:
    """The drips are over: the workers are free again, and later tests get a working pool."""
    with StatusClient(page.server.url, timeout=2.0) as client:  # type: ignore[attr-defined]
        assert wait_for(lambda: _readable(client), timeout=5.0)


def _readable(client: StatusClient) -> bool:
    try:
        client.fetch()
    except StatusUnavailable:
        return False
    return True
