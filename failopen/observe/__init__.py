"""What failopen tells people: the audit trail (a logger and an optional JSON-lines file),
Prometheus metrics, the catalogue of structured event names, and paced log lines that repeat at
most once per interval. ``failopen.metrics`` and ``failopen.events`` are the documented names
of two of these modules."""

from __future__ import annotations

__all__: list[str] = []
