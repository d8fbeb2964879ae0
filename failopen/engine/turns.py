"""What the status watcher's thread asks of the fleet and of the verify probe on its turns.

The fleet and the probe hold the watcher and call back into it; the watcher knows them only by
what it asks of them, so the engine's modules import each other in one direction. These
Protocols are that knowledge, apart from the watcher that uses it.
:mod:`failopen.engine.watcher` re-exports them.
"""

from __future__ import annotations

from typing import Literal, Protocol

from failopen.engine.fleet_reading import FleetReading, Kind
from failopen.engine.probe_record import ProbeResult
from failopen.engine.readings import Reading
from failopen.providers.status import StatusReport

__all__ = ["FleetTurn", "ProbeTurn"]


class FleetTurn(Protocol):
    """What the watcher (and the probe) ask of the fleet: :class:`failopen.engine.fleet.Fleet`."""

    leader: bool
    last_reading: FleetReading | None

    @property
    def polls(self) -> bool: ...

    def sync(self) -> None: ...

    def published(self, report: StatusReport, at: float, kind: Kind = "watcher") -> None: ...

    def published_probe(self, result: ProbeResult) -> None: ...


class ProbeTurn(Protocol):
    """What the watcher (and the fleet) ask of the verify probe:
    :class:`failopen.engine.probe.VerifyProbe`."""

    interval: float

    def due(self) -> bool: ...

    def run_due(self) -> ProbeResult | None: ...

    def check_open(self) -> None: ...

    def observe(self, result: ProbeResult) -> None: ...

    def on_reading(
        self, reading: Reading, status: str, enforce: bool,
        source: Literal["watcher", "confirmed"], reason: str,
    ) -> tuple[bool, Literal["watcher", "confirmed", "probe"], str]: ...
