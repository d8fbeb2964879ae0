"""Prometheus metrics: the documented name of :mod:`failopen.observe.metrics`.

``failopen.metrics.install(runtime, registry=...)`` and ``failopen.metrics.Metrics`` are spelled
this way in the manual and in users' code; the module itself lives with the rest of what failopen
reports, in ``failopen.observe``.
"""

from __future__ import annotations

from failopen.observe.metrics import (
    CONFIRMATION_RESULTS,
    DECISION_OUTCOMES,
    FLAG_SOURCES,
    METRIC_NAMES,
    NO_METRICS,
    POLL_RESULTS,
    PROBE_RESULTS,
    Metrics,
    PrometheusMetrics,
    available,
    install,
    metrics_for,
)

__all__ = [
    "CONFIRMATION_RESULTS", "DECISION_OUTCOMES", "FLAG_SOURCES", "METRIC_NAMES", "Metrics",
    "NO_METRICS", "POLL_RESULTS", "PROBE_RESULTS", "PrometheusMetrics", "available", "install",
    "metrics_for",
]
