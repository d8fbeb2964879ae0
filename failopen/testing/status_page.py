"""A fake of the vendor's status page (interface B), for your tests and for demos.

It serves the two documents of the spec, faithfully shaped (spec 2.5, 4.7, 4.8):

* ``GET /api/v2/components.json``: a ``page`` object and one component per region (the region
  label in ``description``) plus one global component (``description`` null), every field of the
  component table present, RFC 3339 timestamps, no groups: exactly the shape on which failopen
  may guess the global component without ``FAILOPEN_GLOBAL_COMPONENT`` (its id is
  :attr:`FakeStatusPage.global_id`);
* ``GET /api/v2/status.json``: ``status.indicator`` is ``none`` while the global component is
  operational. Otherwise it follows the usual Statuspage convention, which is this fake's choice
  (the spec names no other value): ``degraded_performance`` -> ``minor``, ``partial_outage`` ->
  ``major``, ``major_outage`` -> ``critical``, ``under_maintenance`` -> ``maintenance``, any
  other value -> ``minor``. Regions do not move the indicator.

You set what it reports, and how it misbehaves::

    page = FakeStatusPage(regions=("us-east-1", "eu-west-1"))
    page.set_region("eu-west-1", "major_outage")   # failover complete: global stays operational
    page.set_global("major_outage")                # the outage failopen bypasses on
    page.set_fault("503", retry_after=30)          # the page itself fails
    page.set_fault(None)                           # and recovers

Serve it in-process (fast, no sockets) or on a real loopback socket (real time-outs and drips)::

    client = StatusClient("http://status.test", transport=page.transport())
    with page.serve() as server:
        client = StatusClient(server.url)

For in-process use, prefer :meth:`FakeStatusPage.transport` to wrapping ``page.handler`` with
``as_transport``: its bodies stay unread until the client streams them (as ``failopen``'s own
bounded reads do), ``slow_drip`` becomes a read time-out, and ``huge`` streams to async clients.

Faults (:data:`FAULTS`; they apply to both documents unless said otherwise):

==================  ==============================================================================
``"500"``           HTTP 500, text body (``Retry-After`` when ``retry_after`` is given)
``"503"``           HTTP 503, likewise
``"429"``           HTTP 429, likewise
``"timeout"``       holds the answer for an hour; stopping the server ends it
``"slow_drip"``     the current document, one byte every 50 ms (minutes in all)
``"reset"``         the connection is reset before any answer
``"truncated"``     ``Content-Length`` of the whole document, half of it sent, connection closed
``"malformed"``     HTTP 200 with the first half of the JSON document
``"not_json"``      HTTP 200 with an HTML page
``"empty"``         HTTP 200 with an empty body
``"huge"``          HTTP 200, about 50 MB of valid-looking JSON, generated lazily
``"missing_global"``  components.json without the global component (status.json unaffected)
``"unknown_status"``  the global component reports :data:`UNKNOWN_STATUS` (status.json unaffected)
``"wrong_shape"``   ``components`` is an object instead of a list; ``status`` is a string
==================  ==============================================================================

``set_fault(..., endpoint="components")`` (or ``"status"``) limits a fault to one document, for
example to exercise the indicator fallback. Every request is counted in :attr:`requests` and kept
(the last 1,000) in :attr:`received`, so a test can check what a client sent.
"""

from __future__ import annotations

import collections
import datetime
import json
import math
import threading
from collections.abc import Iterator, Sequence
from typing import Any

import httpx

from failopen.clock import SYSTEM_CLOCK, Clock
from failopen.providers.global_component import is_region_label
from failopen.testing._server import FakeRequest, Handler, LoopbackServer, Reply, as_transport

__all__ = ["FAULTS", "UNKNOWN_STATUS", "FakeStatusPage"]

FAULTS = frozenset(
    {
        "500", "503", "429", "timeout", "slow_drip", "reset", "truncated", "malformed",
        "not_json", "empty", "huge", "missing_global", "unknown_status", "wrong_shape",
    }
)
#: What the ``unknown_status`` fault reports: plausible-looking, but not a spec 3.2 value.
UNKNOWN_STATUS = "service_disruption"

COMPONENTS_PATH = "/api/v2/components.json"
STATUS_PATH = "/api/v2/status.json"
PAGE_ID = "fakepage0001"
GLOBAL_ID = "fakeglobal00"
DRIP_SECONDS_PER_BYTE = 0.05
HOLD_SECONDS = 3600.0
HUGE_BYTES = 50 * 1024 * 1024

_STATUS_FAULTS = frozenset({"500", "503", "429"})
_COMPONENTS_ONLY = frozenset({"missing_global", "unknown_status"})
_INDICATORS = {
    "operational": "none",
    "degraded_performance": "minor",
    "partial_outage": "major",
    "major_outage": "critical",
    "under_maintenance": "maintenance",
}
_REASONS = {
    "500": "Internal Server Error",
    "503": "Service Unavailable",
    "429": "Too Many Requests",
}
_HTML = (
    b"<!doctype html><html><head><title>We'll be right back</title></head>"
    b"<body><h1>We'll be right back</h1><p>The status page is being updated.</p></body></html>"
)


def _rfc3339(timestamp: float) -> str:
    moment = datetime.datetime.fromtimestamp(timestamp, datetime.timezone.utc)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _check_status(status: object) -> str:
    if not isinstance(status, str):
        raise TypeError(f"a status is a string, not {type(status).__name__}")
    return status


class FakeStatusPage:
    """A scriptable status page: set statuses and faults; serve in-process or on loopback.

    ``regions`` are the region labels, each getting its own component (ids ``fakeregion01``, ...
    in order, see :attr:`region_ids`); the global component's id is :attr:`global_id`. Everything
    starts ``operational``. ``clock`` stamps ``created_at``/``updated_at``. Thread-safe.
    """

    FAULTS = FAULTS

    def __init__(
        self, *, regions: Sequence[str] = ("us-east-1", "eu-west-1"), clock: Clock = SYSTEM_CLOCK
    ) -> None:
        labels = [regions] if isinstance(regions, str) else list(regions)
        if any(not isinstance(label, str) or not label for label in labels):
            raise ValueError("region labels are non-empty strings")
        prose = [label for label in labels if not is_region_label(label)]
        if prose:
            # A page with prose descriptions is not the documented shape, and failopen would
            # rightly refuse to guess its global component: say so here, not in a test failure.
            raise ValueError(
                f"region labels are short labels like 'us-east-1' or 'EU (Frankfurt)' (at most "
                f"32 characters and three words, no commas); not {prose[0]!r}"
            )
        if len(set(labels)) != len(labels):
            raise ValueError(f"region labels repeat: {labels!r}")
        self._clock = clock
        self._lock = threading.Lock()
        self._created = clock.time()
        self.global_id = GLOBAL_ID
        self.region_ids: dict[str, str] = {
            label: f"fakeregion{n:02d}" for n, label in enumerate(labels, start=1)
        }
        self._status: dict[str, str] = {GLOBAL_ID: "operational"}
        self._status.update(dict.fromkeys(self.region_ids.values(), "operational"))
        self._updated: dict[str, float] = dict.fromkeys(self._status, self._created)
        self._names = {GLOBAL_ID: "Global"}
        self._names.update({cid: f"Region {label}" for label, cid in self.region_ids.items()})
        self._fault: str | None = None
        self._fault_endpoint: str | None = None
        self._retry_after: float | None = None
        self._requests = 0
        self._received: collections.deque[FakeRequest] = collections.deque(maxlen=1000)
        #: The server of the latest :meth:`serve`, None until then.
        self.server: LoopbackServer | None = None

    def __repr__(self) -> str:
        return f"FakeStatusPage(regions={list(self.region_ids)!r}, fault={self._fault!r})"

    # -- what it reports ---------------------------------------------------------------------

    def set_global(self, status: str) -> None:
        """Set the global component's status (any string: unknown values are served as given)."""
        self._set(GLOBAL_ID, _check_status(status))

    def set_region(self, region: str, status: str) -> None:
        """Set one region's status, by label. Raises KeyError for a region the page lacks."""
        if region not in self.region_ids:
            raise KeyError(f"no region {region!r}; the page has {list(self.region_ids)!r}")
        self._set(self.region_ids[region], _check_status(status))

    def set_name(self, name: str, *, region: str | None = None) -> None:
        """Rename the global component, or ``region``'s: any string is served as given (to see
        how a client shows a hostile page's names)."""
        if not isinstance(name, str):
            raise TypeError(f"a name is a string, not {type(name).__name__}")
        cid = GLOBAL_ID if region is None else self.region_ids[region]
        with self._lock:
            self._names[cid] = name

    def _set(self, component_id: str, status: str) -> None:
        with self._lock:
            if self._status[component_id] != status:
                self._status[component_id] = status
                self._updated[component_id] = self._clock.time()

    def set_fault(
        self, fault: str | None, *, retry_after: float | None = None, endpoint: str | None = None
    ) -> None:
        """Misbehave as ``fault`` (one of :data:`FAULTS`) until cleared with ``None``.

        ``retry_after`` (seconds, sent rounded up) goes with ``"500"``, ``"503"`` and ``"429"``.
        ``endpoint`` (``"components"`` or ``"status"``) limits the fault to one document.
        """
        if fault is not None and fault not in FAULTS:
            raise ValueError(f"unknown fault {fault!r}; choose from {sorted(FAULTS)}")
        if retry_after is not None:
            if fault not in _STATUS_FAULTS:
                raise ValueError("retry_after goes with the '500', '503' and '429' faults")
            if not math.isfinite(retry_after) or retry_after < 0:
                raise ValueError(f"retry_after must be a non-negative number, not {retry_after!r}")
        if endpoint not in (None, "components", "status"):
            raise ValueError(f"endpoint is 'components', 'status' or None, not {endpoint!r}")
        with self._lock:
            self._fault = fault
            self._retry_after = retry_after
            self._fault_endpoint = None if fault is None else endpoint

    @property
    def fault(self) -> str | None:
        """The fault in force, or None."""
        return self._fault

    @property
    def requests(self) -> int:
        """How many requests the page has received (any path)."""
        with self._lock:
            return self._requests

    @property
    def received(self) -> tuple[FakeRequest, ...]:
        """The last 1,000 requests, oldest first."""
        with self._lock:
            return tuple(self._received)

    # -- the documents -----------------------------------------------------------------------

    def _page(self) -> dict[str, Any]:
        return {
            "id": PAGE_ID,
            "name": "Fake vendor status",
            "url": "https://status.example.com",
            "time_zone": "Etc/UTC",
            "updated_at": _rfc3339(max(self._updated.values())),
        }

    def _component(self, cid: str, position: int, label: str | None) -> dict[str, Any]:
        return {
            "id": cid,
            "name": self._names[cid],
            "status": self._status[cid],
            "created_at": _rfc3339(self._created),
            "updated_at": _rfc3339(self._updated[cid]),
            "position": position,
            "description": label,
            "showcase": True,
            "start_date": _rfc3339(self._created)[:10],
            "group_id": None,
            "page_id": PAGE_ID,
            "group": False,
            "only_show_if_degraded": False,
        }

    def _components_unlocked(self) -> dict[str, Any]:
        components = [self._component(GLOBAL_ID, 1, None)]
        for position, (label, cid) in enumerate(self.region_ids.items(), start=2):
            components.append(self._component(cid, position, label))
        return {"page": self._page(), "components": components}

    def _status_unlocked(self) -> dict[str, Any]:
        indicator = _INDICATORS.get(self._status[GLOBAL_ID], "minor")
        description = "All Systems Operational" if indicator == "none" else "Service disruption"
        status = {"indicator": indicator, "description": description}
        return {"page": self._page(), "status": status}

    def components_document(self) -> dict[str, Any]:
        """The components document it serves when no fault is set (a copy)."""
        with self._lock:
            return self._components_unlocked()

    def status_document(self) -> dict[str, Any]:
        """The status (indicator) document it serves when no fault is set (a copy)."""
        with self._lock:
            return self._status_unlocked()

    # -- serving -----------------------------------------------------------------------------

    def handle(self, request: FakeRequest) -> Reply:
        """Answer one request (the :data:`~failopen.testing._server.Handler` of this page)."""
        with self._lock:
            self._requests += 1
            self._received.append(request)
            fault, endpoint, retry_after = self._fault, self._fault_endpoint, self._retry_after
            if request.path.endswith(COMPONENTS_PATH):
                kind: str | None = "components"
                document = self._components_unlocked()
            elif request.path.endswith(STATUS_PATH):
                kind, document = "status", self._status_unlocked()
            else:
                kind, document = None, {}
        if request.method not in ("GET", "HEAD"):
            return Reply(405, b"method not allowed\n", [("Allow", "GET, HEAD")])
        if kind is None:
            return Reply(404, b"not found\n", [("Content-Type", "text/plain")])
        here = endpoint in (None, kind) and (kind == "components" or fault not in _COMPONENTS_ONLY)
        if fault is not None and here:
            return _fault_reply(fault, kind, document, retry_after)
        return Reply.json(document)

    @property
    def handler(self) -> Handler:
        """The page as a handler, e.g. for your own :class:`LoopbackServer` (in-process, prefer
        :meth:`transport`)."""
        return self.handle

    def transport(self) -> httpx.MockTransport:
        """Serve the page in-process to a sync or async httpx client; faults become httpx errors.

        ``timeout`` and ``slow_drip`` raise ``httpx.ReadTimeout`` at once (no real waiting),
        ``reset`` ``httpx.ReadError``, ``truncated`` ``httpx.RemoteProtocolError``. Use
        :meth:`serve` to exercise real time-outs and drips.
        """
        return as_transport(self.handle)

    def serve(self, port: int = 0, *, control: bool = False) -> LoopbackServer:
        """Start serving on ``127.0.0.1:port`` (0 picks a free port); stop it, or use ``with``.

        The server is also kept as :attr:`server`, so :attr:`url` names it. ``control=True`` also
        answers ``GET``/``POST /_control`` (:mod:`failopen.testing.control`).
        """
        handler: Handler = self.handle
        if control:
            from failopen.testing.control import StatusPageControls, with_control

            handler = with_control(handler, StatusPageControls(self))
        self.server = LoopbackServer(handler, port=port).start()
        return self.server

    @property
    def url(self) -> str:
        """Base URL of the latest :meth:`serve` (``FAILOPEN_STATUS_URL``); RuntimeError before."""
        if self.server is None:
            raise RuntimeError("FakeStatusPage is not served: call serve() first")
        return self.server.url


def _huge(document: dict[str, Any]) -> Iterator[bytes]:
    """About HUGE_BYTES of a components document that looks valid all along."""
    head = json.dumps({"page": document["page"]})[:-1].encode() + b', "components": ['
    component = json.dumps(document["components"][0]).encode()
    chunk = b"".join([b", " + component] * max(1, 65536 // (len(component) + 2)))
    yield head + component
    sent = len(head) + len(component)
    while sent < HUGE_BYTES:
        yield chunk
        sent += len(chunk)
    yield b"]}"


def _fault_reply(
    fault: str, kind: str, document: dict[str, Any], retry_after: float | None
) -> Reply:
    json_type = [("Content-Type", "application/json")]
    if fault in _STATUS_FAULTS:
        headers = [("Content-Type", "text/plain")]
        if retry_after is not None:
            headers.append(("Retry-After", str(math.ceil(retry_after))))
        return Reply(int(fault), f"{_REASONS[fault]}\n".encode(), headers)
    if fault == "timeout":
        return Reply.json(document, delay=HOLD_SECONDS)
    if fault == "slow_drip":
        return Reply.json(document, drip=DRIP_SECONDS_PER_BYTE)
    if fault == "reset":
        return Reply(reset=True)
    if fault == "truncated":
        return Reply.json(document, truncate=True)
    if fault == "malformed":
        text = json.dumps(document).encode()
        return Reply(200, text[: len(text) // 2], json_type)
    if fault == "not_json":
        return Reply(200, _HTML, [("Content-Type", "text/html; charset=utf-8")])
    if fault == "empty":
        return Reply(200, b"", json_type)
    if fault == "huge":
        if kind == "status":
            return Reply(200, _huge_status(), json_type)
        return Reply(200, _huge(document), json_type)
    shaped = document  # built for this request alone, so it may be reshaped in place
    if fault == "missing_global":
        shaped["components"] = [c for c in shaped["components"] if c["description"] is not None]
    elif fault == "unknown_status":
        shaped["components"][0]["status"] = UNKNOWN_STATUS
    elif kind == "components":  # wrong_shape
        shaped["components"] = {c["id"]: c for c in shaped["components"]}
    else:
        shaped["status"] = shaped["status"]["indicator"]
    return Reply.json(shaped)


def _huge_status() -> Iterator[bytes]:
    """About HUGE_BYTES of a status document whose page name never ends."""
    yield b'{"status": {"indicator": "none"}, "page": {"name": "'
    chunk = b"x" * 65536
    for _ in range(HUGE_BYTES // len(chunk)):
        yield chunk
    yield b'"}}'
