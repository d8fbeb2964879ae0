"""Run-time control of a served fake from outside its process: ``GET`` / ``POST /_control``.

``failopen emulate status|verify|vendor`` serve it (so does ``fake.serve(control=True)``), and
``failopen emulate status --set global=major_outage`` is its client. ``GET /_control`` answers the
fake's state; ``POST /_control`` with a JSON object changes it and answers the new state. Keys may
be combined in one body; nothing changes unless the whole body is valid:

* status page: ``{"global": "major_outage"}``; ``{"region": "eu-west-1", "status":
  "degraded_performance"}``; ``{"regions": {"eu-west-1": "partial_outage"}}``; ``{"fault":
  "500"}`` (any of ``FakeStatusPage.FAULTS``), ``{"fault": null}`` to clear it;
* verify API: ``{"fault": "503"}`` (any of ``FakeVerifyAPI.FAULTS``), ``{"fault": null}``;
* vendor script: ``{"down": true}`` (``api.js`` answers 404, as in a vendor outage),
  ``{"down": false}`` (back to ``ok``), ``{"mode": "error_then_ok:2"}`` (any of its modes); a
  captcha vendor's browser-script fake (``failopen emulate vendor --vendor NAME``) takes the same.

Statuses are the five of spec 3.2 (``operational``, ``degraded_performance``,
``partial_outage``, ``major_outage``, ``under_maintenance``). Answers: 200 with the state
(``{"fake": "status", "global": ..., "regions": {...}, "fault": ..., "requests": N}``,
``{"fake": "verify", "fault": ..., "requests": N}``, ``{"fake": "vendor", "mode": ..., "down":
..., "script_requests": N}``); 400 ``{"error": "..."}`` naming what is wrong with the body; 403
for a client or a ``Host`` that is not loopback (a web page the developer visits must not be able
to drive the fake through DNS rebinding); 415 for a POST that is not ``application/json`` (which a
page could send cross-origin without asking); 405 for other methods. Control requests bypass the
fake's fault, so a status page that "times out" still answers its control route at once.
"""

from __future__ import annotations

import ipaddress
import json
from abc import ABC, abstractmethod
from collections.abc import Callable
from functools import partial
from typing import Any, Protocol

import httpx

from failopen.providers.status_documents import KNOWN_STATUSES
from failopen.testing._server import FakeRequest, Handler, Reply
from failopen.testing._vendor_modes import SCRIPT_KINDS, parse_mode

__all__ = [
    "CONTROL_PATH", "ControlError", "Controls", "StatusPageControls", "VendorScriptControls",
    "VerifyAPIControls", "answer_control", "check_fault", "check_status", "control_url",
    "loopback_refusal", "read_control", "send_control", "with_control",
]

CONTROL_PATH = "/_control"
MAX_BODY = 4096
STATUSES = tuple(sorted(KNOWN_STATUSES))
_LOOPBACK_NAMES = frozenset({"localhost", "localhost.", "127.0.0.1", "::1"})


class ControlError(ValueError):
    """A control request that cannot be applied, or could not be sent; the message says why."""


class Controls(ABC):
    """What one fake lets a control request read and change."""

    kind: str
    #: The body keys this fake takes, and an example body, for error messages.
    keys: tuple[str, ...] = ()
    example: str = "{}"

    @abstractmethod
    def state(self) -> dict[str, Any]:
        """The fake's current state, as ``GET /_control`` answers it."""

    @abstractmethod
    def plan(self, body: dict[str, Any]) -> list[Callable[[], None]]:
        """The changes ``body`` asks for, checked and not yet made; ControlError if invalid."""

    def apply(self, body: Any) -> dict[str, Any]:
        """Check the whole body, then apply it; the new state. ControlError names the problem."""
        if not isinstance(body, dict):
            raise ControlError(f"the body is a JSON object like {self.example}, "
                               f"not {type(body).__name__}")
        unknown = sorted(set(body) - set(self.keys))
        if unknown:
            raise ControlError(f"unknown key {unknown[0]!r}; the {self.kind} fake takes "
                               f"{', '.join(self.keys)}, e.g. {self.example}")
        changes = self.plan(body)
        if not changes:
            raise ControlError(f"nothing to change; send e.g. {self.example}")
        for change in changes:
            change()
        return self.state()


def check_status(value: Any, where: str) -> str:
    """``value`` if it is a status of spec 3.2; ControlError starting with ``where`` if not."""
    if not isinstance(value, str) or value not in KNOWN_STATUSES:
        raise ControlError(f"{where}: {value!r} is not a status; choose from {', '.join(STATUSES)}")
    return str(value)


def check_fault(value: Any, faults: frozenset[str], where: str = "fault") -> str | None:
    """``value`` if it is one of ``faults`` or None; ControlError starting with ``where`` if not."""
    if value is not None and (not isinstance(value, str) or value not in faults):
        raise ControlError(f"{where}: {value!r} is not a fault; choose from "
                           f"{', '.join(sorted(faults))}, or null to clear it")
    return None if value is None else str(value)


# The fakes serve this module's route, so it knows each fake only by what its controls read and
# change (FakeStatusPage, FakeVerifyAPI and FakeVendorScript have these members).
class ControlledFake(Protocol):
    """What every fault-injecting fake's controls use: its faults, its fault, its requests."""

    @property
    def FAULTS(self) -> frozenset[str]: ...  # the fake's class attribute

    @property
    def fault(self) -> str | None: ...

    @property
    def requests(self) -> int: ...

    def set_fault(self, fault: str | None) -> None: ...


class ControlledStatusPage(ControlledFake, Protocol):
    """What the status page's controls use of :class:`~failopen.testing.FakeStatusPage`."""

    @property
    def region_ids(self) -> dict[str, str]: ...

    @property
    def global_id(self) -> str: ...

    def components_document(self) -> dict[str, Any]: ...

    def set_global(self, status: str) -> None: ...

    def set_region(self, region: str, status: str) -> None: ...


class ControlledVendorScript(Protocol):
    """What the vendor script's controls use of :class:`~failopen.testing.FakeVendorScript`."""

    @property
    def mode(self) -> str: ...

    @property
    def script_requests(self) -> int: ...

    def set_mode(self, mode: str) -> None: ...


class StatusPageControls(Controls):
    """Control of a :class:`~failopen.testing.FakeStatusPage`."""

    kind = "status"
    keys = ("global", "region", "status", "regions", "fault")
    example = '{"global": "major_outage"}'

    def __init__(self, page: ControlledStatusPage) -> None:
        self.page = page

    def state(self) -> dict[str, Any]:
        """Global and regional statuses, the fault, and the request count."""
        status = {c["id"]: c["status"] for c in self.page.components_document()["components"]}
        return {
            "fake": self.kind,
            # By id, not by a null description: a page shaped like Cloudflare's (``--shape``)
            # has hundreds of components without one, and no regions in the spec's sense.
            "global": status[self.page.global_id],
            "regions": {label: status[cid] for label, cid in self.page.region_ids.items()},
            "fault": self.page.fault,
            "requests": self.page.requests,
        }

    def plan(self, body: dict[str, Any]) -> list[Callable[[], None]]:
        """Checks every key before anything changes."""
        page = self.page
        changes: list[Callable[[], None]] = []
        regions: dict[str, str] = {}
        if "region" in body or "status" in body:
            if "region" not in body or "status" not in body:
                raise ControlError('"region" and "status" go together: '
                                   '{"region": "eu-west-1", "status": "degraded_performance"}')
            region = body["region"]
            if not isinstance(region, str):
                raise ControlError(f"region: a region label like 'eu-west-1', not {region!r}")
            regions[region] = check_status(body["status"], f"region {region!r}")
        if "regions" in body:
            given = body["regions"]
            if not isinstance(given, dict):
                raise ControlError('"regions" is an object: {"eu-west-1": "partial_outage"}')
            for name, status in given.items():
                regions[name] = check_status(status, f"region {name!r}")
        for name in regions:
            if name not in page.region_ids:
                raise ControlError(f"no region {name!r}; the page has "
                                   f"{', '.join(page.region_ids)}")
        if "global" in body:
            changes.append(partial(page.set_global, check_status(body["global"], "global")))
        changes.extend(partial(page.set_region, name, status) for name, status in regions.items())
        if "fault" in body:
            changes.append(partial(page.set_fault, check_fault(body["fault"], page.FAULTS)))
        return changes


class VerifyAPIControls(Controls):
    """Control of a :class:`~failopen.testing.FakeVerifyAPI`."""

    kind = "verify"
    keys = ("fault",)
    example = '{"fault": "503"}'

    def __init__(self, api: ControlledFake) -> None:
        self.api = api

    def state(self) -> dict[str, Any]:
        """The fault and the request count."""
        return {"fake": self.kind, "fault": self.api.fault, "requests": self.api.requests}

    def plan(self, body: dict[str, Any]) -> list[Callable[[], None]]:
        """Checks the fault before setting it."""
        if "fault" not in body:
            return []
        return [partial(self.api.set_fault, check_fault(body["fault"], self.api.FAULTS))]


class VendorScriptControls(Controls):
    """Control of a :class:`~failopen.testing.FakeVendorScript`, or of a captcha vendor's
    browser-script fake (``kinds``: the modes it plays, :data:`~._vendor_modes.WIDGET_KINDS`)."""

    kind = "vendor"
    keys = ("down", "mode")
    example = '{"down": true}'

    def __init__(self, script: ControlledVendorScript,
                 kinds: frozenset[str] = SCRIPT_KINDS) -> None:
        self.script = script
        # Checked before anything changes: a mode this fake cannot play is a 400, not a 500.
        self.kinds = kinds

    def state(self) -> dict[str, Any]:
        """The mode, whether the script is down (answers 404), and how often it was asked."""
        mode = self.script.mode
        return {"fake": self.kind, "mode": mode, "down": mode == "http404",
                "script_requests": self.script.script_requests}

    def plan(self, body: dict[str, Any]) -> list[Callable[[], None]]:
        """``down`` wins over ``mode`` only when they agree; otherwise the body is refused."""
        mode: str | None = None
        if "mode" in body:
            try:
                parse_mode(body["mode"], self.kinds)
            except ValueError as exc:
                raise ControlError(f"mode: {exc}") from None
            mode = str(body["mode"])
        if "down" in body:
            down = body["down"]
            if not isinstance(down, bool):
                raise ControlError(f"down: true or false, not {down!r}")
            wanted = "http404" if down else "ok"
            if mode is not None and (mode == "http404") != down:
                raise ControlError(f"down: {str(down).lower()} contradicts mode {mode!r}")
            mode = mode if mode is not None else wanted
        if mode is None:
            return []
        return [partial(self.script.set_mode, mode)]


# --- the server side ------------------------------------------------------------------------------


def _is_loopback_address(address: str) -> bool:
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return False
    mapped = getattr(ip, "ipv4_mapped", None)
    return bool(ip.is_loopback or (mapped is not None and mapped.is_loopback))


def _host_is_loopback(host: str | None) -> bool:
    if not host:
        return False
    host = host.strip().lower()
    if host.startswith("["):  # [::1]:8401
        name = host[1:].split("]", 1)[0]
    else:
        name = host.rsplit(":", 1)[0] if host.count(":") == 1 else host
    return name in _LOOPBACK_NAMES or _is_loopback_address(name)


def _error(status: int, message: str, headers: list[tuple[str, str]] | None = None) -> Reply:
    return Reply.json({"error": message}, status=status,
                      headers=[("Cache-Control", "no-store"), *(headers or [])])


def loopback_refusal(client: str | None, host: str | None) -> str | None:
    """Why a control request from ``client`` naming ``host`` is refused, or None if it is not.

    ``client`` None means in-process (the same process asked). The ``Host`` check stops a page
    whose name resolves to 127.0.0.1 (DNS rebinding) from driving a developer's fakes.
    """
    if client is not None and not _is_loopback_address(client):
        return f"control requests come from loopback only, not {client}"
    if not _host_is_loopback(host):
        return "control requests name a loopback Host (127.0.0.1, localhost, [::1])"
    return None


def answer_control(request: FakeRequest, controls: Controls) -> Reply:
    """Answer one request to :data:`CONTROL_PATH` (the caller routed it here)."""
    refusal = loopback_refusal(request.client, request.headers.get("host"))
    if refusal is not None:
        return _error(403, refusal)
    if request.method in ("GET", "HEAD"):
        return Reply.json(controls.state(), headers=[("Cache-Control", "no-store")])
    if request.method != "POST":
        return _error(405, "GET or POST", [("Allow", "GET, HEAD, POST")])
    content_type = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if content_type != "application/json":
        return _error(415, "send the body as Content-Type: application/json")
    if len(request.body) > MAX_BODY:
        return _error(413, f"a control body is at most {MAX_BODY} bytes")
    try:
        body = json.loads(request.body)
    except ValueError as exc:
        return _error(400, f"the body is not JSON ({exc}); send e.g. {controls.example}")
    try:
        return Reply.json(controls.apply(body), headers=[("Cache-Control", "no-store")])
    except (ControlError, KeyError, ValueError) as exc:
        return _error(400, str(exc.args[0]) if exc.args else str(exc))


def with_control(handler: Handler, controls: Controls) -> Handler:
    """``handler`` with :data:`CONTROL_PATH` answered by ``controls`` (loopback clients only).

    The control route comes first: the fake's fault, request count and access log never see it.
    """

    def controlled(request: FakeRequest) -> Reply:
        if request.path == CONTROL_PATH:
            return answer_control(request, controls)
        return handler(request)

    return controlled


# --- the client side ------------------------------------------------------------------------------


def control_url(base_url: str) -> str:
    """``http://127.0.0.1:8401`` -> ``http://127.0.0.1:8401/_control``."""
    return base_url.rstrip("/") + CONTROL_PATH


def _exchange(method: str, base_url: str, body: dict[str, Any] | None,
              timeout: float) -> dict[str, Any]:
    url = control_url(base_url)
    try:
        answer = httpx.request(method, url, json=body, timeout=timeout)
    except httpx.ConnectError:
        raise ControlError(f"nothing listens at {base_url}; start the fake first "
                           "(failopen emulate status|verify|vendor)") from None
    except httpx.HTTPError as exc:
        raise ControlError(f"{url}: {type(exc).__name__}: {exc}") from None
    try:
        data = answer.json()
    except ValueError:
        data = None
    if answer.status_code == 200 and isinstance(data, dict):
        return data
    if isinstance(data, dict) and isinstance(data.get("error"), str):
        raise ControlError(f"{url} answered {answer.status_code}: {data['error']}")
    raise ControlError(f"{url} answered {answer.status_code}: not a failopen fake with control "
                       "(failopen emulate serves one)")


def read_control(base_url: str, *, timeout: float = 5.0) -> dict[str, Any]:
    """``GET /_control`` of the fake at ``base_url``; ControlError says what went wrong."""
    return _exchange("GET", base_url, None, timeout)


def send_control(base_url: str, body: dict[str, Any], *, timeout: float = 5.0) -> dict[str, Any]:
    """``POST /_control`` to the fake at ``base_url``; its new state. ControlError on refusal."""
    return _exchange("POST", base_url, body, timeout)
