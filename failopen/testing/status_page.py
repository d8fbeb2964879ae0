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

Other shapes of page: ``FakeStatusPage(components=[PageComponent(...), ...], global_id=...)``
serves any list of components, groups included (a group's status is the worst of its members', as
Statuspage reports it; ``status.indicator`` is the worst of every component's unless
:meth:`~FakeStatusPage.set_indicator` says otherwise), with the same faults, counters and
serving; ``global_id`` names the component the faults ``missing_global`` and ``unknown_status``
act on and :meth:`~FakeStatusPage.set_global` sets. :mod:`failopen.testing.vendor_status_pages`
builds Cloudflare's and hCaptcha's pages this way.
"""

from __future__ import annotations

import collections
import math
import threading
from collections.abc import Sequence
from typing import Any

import httpx

from failopen.clock import SYSTEM_CLOCK, Clock
from failopen.testing._server import FakeRequest, Handler, LoopbackServer, Reply, as_transport
from failopen.testing._status_faults import DRIP_SECONDS_PER_BYTE as DRIP_SECONDS_PER_BYTE
from failopen.testing._status_faults import FAULTS as FAULTS
from failopen.testing._status_faults import HOLD_SECONDS as HOLD_SECONDS
from failopen.testing._status_faults import HUGE_BYTES as HUGE_BYTES
from failopen.testing._status_faults import STATUS_FAULTS, fault_applies, fault_reply
from failopen.testing._status_faults import UNKNOWN_STATUS as UNKNOWN_STATUS
from failopen.testing._status_layout import (
    GLOBAL_ID,
    PageComponent,
    PageInfo,
    check_layout,
    positions,
    region_layout,
    rfc3339,
    severity,
)

__all__ = ["FAULTS", "UNKNOWN_STATUS", "FakeStatusPage", "PageComponent", "PageInfo"]

COMPONENTS_PATH = "/api/v2/components.json"
STATUS_PATH = "/api/v2/status.json"

_INDICATORS = {
    "operational": "none",
    "degraded_performance": "minor",
    "partial_outage": "major",
    "major_outage": "critical",
    "under_maintenance": "maintenance",
}

def _check_status(status: object) -> str:
    if not isinstance(status, str):
        raise TypeError(f"a status is a string, not {type(status).__name__}")
    return status


class FakeStatusPage:
    """A scriptable status page: set statuses and faults; serve in-process or on loopback.

    ``regions`` are the region labels, each getting its own component (ids ``fakeregion01``, ...
    in order, see :attr:`region_ids`); the global component's id is :attr:`global_id`. Everything
    starts ``operational``. ``clock`` stamps ``created_at``/``updated_at``. Thread-safe.
    Instead of ``regions``, ``components`` (with ``global_id`` and ``page``) serves any list of
    components, groups included (see the module docstring).
    """

    FAULTS = FAULTS

    def __init__(
        self, *, regions: Sequence[str] | None = None, clock: Clock = SYSTEM_CLOCK,
        components: Sequence[PageComponent] | None = None, global_id: str | None = None,
        page: PageInfo | None = None,
    ) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._created = clock.time()
        self.region_ids: dict[str, str] = {}
        if components is None:
            if global_id is not None:
                raise ValueError("global_id goes with components=")
            layout = region_layout(("us-east-1", "eu-west-1") if regions is None else regions,
                                    self._created)
            self.region_ids = {c.description: c.id for c in layout if c.description is not None}
            global_id = GLOBAL_ID
        else:
            if regions is not None:
                raise ValueError("give regions= or components=, not both")
            layout = list(components)
            if global_id is None:
                raise ValueError("components= needs global_id=, the component that decides")
            check_layout(layout, global_id)
        # The spec's shape: the indicator follows the global component alone (regions never
        # move it). A page built from components reports its worst component, as Statuspage.
        self._indicator_follows_global = components is None
        self._indicator: str | None = None
        self._info = page or PageInfo()
        self._layout = tuple(layout)
        self._by_id = {c.id: c for c in self._layout}
        self._positions = positions(self._layout)
        self.global_id = global_id
        self._status = {c.id: "operational" for c in self._layout if not c.group}
        self._updated: dict[str, float] = dict.fromkeys(self._status, self._created)
        self._names = {c.id: c.name for c in self._layout}
        self._fault: str | None = None
        self._fault_endpoint: str | None = None
        self._retry_after: float | None = None
        self._requests = 0
        self._received: collections.deque[FakeRequest] = collections.deque(maxlen=1000)
        #: The server of the latest :meth:`serve`, None until then.
        self.server: LoopbackServer | None = None

    def __repr__(self) -> str:
        if not self._indicator_follows_global:
            return (f"{type(self).__name__}(components={len(self._layout)}, "
                    f"global_id={self.global_id!r}, fault={self._fault!r})")
        return f"FakeStatusPage(regions={list(self.region_ids)!r}, fault={self._fault!r})"

    # -- what it reports ---------------------------------------------------------------------

    def set_global(self, status: str) -> None:
        """Set the global component's status (any string: unknown values are served as given)."""
        self._set(self.global_id, _check_status(status))

    def set_region(self, region: str, status: str) -> None:
        """Set one region's status, by label. Raises KeyError for a region the page lacks."""
        if region not in self.region_ids:
            raise KeyError(f"no region {region!r}; the page has {list(self.region_ids)!r}")
        self._set(self.region_ids[region], _check_status(status))

    def component_id(self, component: str) -> str:
        """The id of ``component``, given by id or by exact name; KeyError if no component (or
        several) answers to it."""
        if component in self._by_id:
            return component
        with self._lock:
            named = [cid for cid, name in self._names.items() if name == component]
        if len(named) != 1:
            found = "several components" if named else "no component"
            raise KeyError(f"{found} with the id or name {component!r}")
        return named[0]

    def set_component(self, component: str, status: str) -> None:
        """Set one component's status, by id or exact name (not a group's: see
        :meth:`set_group`). Any string is served as given."""
        cid = self.component_id(component)
        if self._by_id[cid].group:
            raise ValueError(f"{component!r} is a group: its status is its members' worst; "
                             "set_group() sets every member")
        self._set(cid, _check_status(status))

    def set_group(self, group: str, status: str) -> None:
        """Set every member of a group (by id or exact name) to ``status``."""
        gid = self.component_id(group)
        if not self._by_id[gid].group:
            raise ValueError(f"{group!r} is not a group component")
        _check_status(status)
        for member in self._by_id[gid].members:
            self._set(member, status)

    def set_indicator(self, indicator: str | None) -> None:
        """Serve ``indicator`` in status.json whatever the components say; None follows them
        again. Real pages set it by hand too (an incident's impact)."""
        if indicator is not None:
            _check_status(indicator)
        with self._lock:
            self._indicator = indicator

    def set_name(self, name: str, *, region: str | None = None,
                 component: str | None = None) -> None:
        """Rename the global component, or ``region``'s, or ``component`` (an id): any string is
        served as given (to see how a client shows a hostile page's names)."""
        if not isinstance(name, str):
            raise TypeError(f"a name is a string, not {type(name).__name__}")
        cid = self.global_id if region is None else self.region_ids[region]
        if component is not None:
            if component not in self._by_id:
                raise KeyError(f"no component with the id {component!r}")
            cid = component
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
            if fault not in STATUS_FAULTS:
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
            "id": self._info.id,
            "name": self._info.name,
            "url": self._info.url,
            "time_zone": "Etc/UTC",
            "updated_at": rfc3339(max(self._updated.values())),
        }

    def _worst(self, ids: Sequence[str]) -> str:
        return max((self._status[cid] for cid in ids),
                   key=severity, default="operational")

    def _component(self, item: PageComponent) -> dict[str, Any]:
        cid = item.id
        updated = (max(self._updated[m] for m in item.members) if item.group
                   else self._updated[cid])
        component = {
            "id": cid,
            "name": self._names[cid],
            "status": self._worst(item.members) if item.group else self._status[cid],
            "created_at": rfc3339(self._created),
            "updated_at": rfc3339(updated),
            "position": self._positions[cid],
            "description": item.description,
            "showcase": item.showcase,
            "start_date": item.start_date,
            "group_id": item.group_id,
            "page_id": self._info.id,
            "group": item.group,
            "only_show_if_degraded": False,
        }
        if item.group:
            component["components"] = list(item.members)
        return component

    def _components_unlocked(self) -> dict[str, Any]:
        components = [self._component(item) for item in self._layout]
        return {"page": self._page(), "components": components}

    def _status_unlocked(self) -> dict[str, Any]:
        if self._indicator is not None:
            indicator = self._indicator
        elif self._indicator_follows_global:
            indicator = _INDICATORS.get(self._status[self.global_id], "minor")
        else:
            indicator = _INDICATORS.get(self._worst(list(self._status)), "minor")
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
        if fault is not None and fault_applies(fault, endpoint, kind):
            return fault_reply(fault, kind, document, retry_after, self.global_id)
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
