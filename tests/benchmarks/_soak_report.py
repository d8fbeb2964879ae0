"""The chaos soak's report: requests by outcome, every violation with its time, process and the
flag's reason, bypasses without an audit line, status requests per poll interval for the whole
fleet, and worker RSS growth per hour.

Nothing here prints a secret: requests are shown by route, kind and outcome (never their tokens
or solutions), the audit files hold hashes of User-Agents, and the settings shown are the knobs.
"""

from __future__ import annotations

import collections
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from _soak_oracle import Oracle, Request
from _soak_schedule import (
    FAULT_KINDS,
    FLEET_DISRUPTIONS,
    SENTINEL_FAILOVER,
    SENTINEL_KINDS,
    Fault,
    Knobs,
)

from failopen.observe.audit_file import hash_user_agent

__all__ = ["Measures", "build_report", "render"]

#: Violations the soak fails on (each must be 0).
MUST_BE_ZERO = ("wrong_bypass", "wrong_refusal", "missed_bypass", "failopen_5xx",
                "unaudited_bypass", "transport_error", "unprotected_failed", "fault_not_applied")


@dataclass
class Measures:
    """What the soak sampled while it ran, besides the requests."""

    #: (seconds after start, the fake status page's request count)
    status_counts: list[tuple[float, int]] = field(default_factory=list)
    #: (seconds after start, app, pid, VmRSS kB)
    rss: list[tuple[float, str, int, int]] = field(default_factory=list)
    #: app -> audit file
    audit_files: dict[str, Path] = field(default_factory=dict)
    #: (seconds after start, the app whose worker held the lease, or None)
    leaders: list[tuple[float, str | None]] = field(default_factory=list)
    injector_errors: list[str] = field(default_factory=list)


def _audited(files: dict[str, Path]) -> dict[str, set[str]]:
    """app -> the User-Agent hashes of its request lines (rotated files included)."""
    seen: dict[str, set[str]] = {}
    for app, path in files.items():
        hashes = seen.setdefault(app, set())
        for candidate in [path, *sorted(path.parent.glob(path.name + ".*"))]:
            if not candidate.exists():
                continue
            for line in candidate.read_text().splitlines():
                try:
                    data = json.loads(line)
                except ValueError:
                    continue
                if "ua" in data and "event" not in data:
                    hashes.add(str(data["ua"]))
    return seen


def _status_per_interval(counts: list[tuple[float, int]], faults: list[Fault], knobs: Knobs,
                         leaders: list[tuple[float, str | None]]) -> dict[str, float | None]:
    """Status requests per poll interval: over the whole run, and in the stretches where the
    fleet was whole (no Redis fault, killed leader or recycled workers within a lease), also
    by which server's worker held the lease then."""
    if len(counts) < 2:
        return {"whole_run": None, "fleet_whole": None}
    intervals = (counts[-1][0] - counts[0][0]) / knobs.poll_interval
    total = (counts[-1][1] - counts[0][1]) / intervals
    quiet: dict[str, list[float]] = collections.defaultdict(lambda: [0.0, 0.0])
    for (t1, c1), (t2, c2) in zip(counts, counts[1:], strict=False):
        if not any(f.start - 1 <= t2 and t1 <= f.end + knobs.fleet_gap + knobs.poll_interval
                   for f in faults if f.kind in FLEET_DISRUPTIONS):
            near = [app for t, app in leaders if t1 - 0.5 <= t <= t2 + 0.5]
            keys = ["fleet_whole"]
            if near and all(app == near[0] for app in near):
                keys.append(f"fleet_whole_{near[0]}_leads")
            for key in keys:
                quiet[key][0] += c2 - c1
                quiet[key][1] += t2 - t1
    shown: dict[str, float | None] = {"whole_run": round(total, 2), "fleet_whole": None}
    for key, (requests, seconds) in quiet.items():
        shown[key] = round(requests / (seconds / knobs.poll_interval), 2) if seconds else None
    return shown


def _slope_mb_per_hour(points: list[tuple[float, float]]) -> float | None:
    """Least-squares slope of (seconds, kB) points, in MB per hour."""
    n = len(points)
    if n < 5:
        return None
    mt = sum(t for t, _ in points) / n
    mk = sum(kb for _, kb in points) / n
    den = sum((t - mt) ** 2 for t, _ in points)
    if not den:
        return None
    return round(sum((t - mt) * (kb - mk) for t, kb in points) / den * 3600 / 1024, 1)


def _rss_growth(samples: list[tuple[float, str, int, int]]) -> dict[str, Any]:
    """Per worker that lived at least 30 s past its first 20 s (start-up: imports, first
    requests), the slope of its VmRSS in MB per hour (the largest and the median); and, since
    the soak recycles and kills workers, the slope of each server's mean worker RSS over the
    whole run after its first minute."""
    by_pid: dict[tuple[str, int], list[tuple[float, float]]] = collections.defaultdict(list)
    by_tick: dict[tuple[str, float], list[int]] = collections.defaultdict(list)
    for t, app, pid, kb in samples:
        by_pid[(app, pid)].append((t, kb))
        by_tick[(app, t)].append(kb)
    slopes: dict[str, float] = {}
    for (app, pid), points in by_pid.items():
        points = [p for p in points if p[0] >= points[0][0] + 20]
        slope = _slope_mb_per_hour(points)
        if slope is not None and points[-1][0] - points[0][0] >= 30:
            slopes[f"{app}:{pid}"] = slope
    ordered = sorted(slopes.values())
    mean_slope: dict[str, float | None] = {}
    mean_mb: dict[str, list[float]] = {}
    for app in sorted({app for app, _t in by_tick}):
        means = sorted((t, sum(kbs) / len(kbs)) for (a, t), kbs in by_tick.items() if a == app)
        mean_slope[app] = _slope_mb_per_hour([p for p in means if p[0] >= 60])
        if means:
            mean_mb[app] = [round(means[0][1] / 1024, 1), round(means[-1][1] / 1024, 1)]
    return {"mb_per_hour_max": ordered[-1] if ordered else None,
            "mb_per_hour_median": ordered[len(ordered) // 2] if ordered else None,
            "workers_measured": len(ordered), "per_worker": slopes,
            "mean_worker_mb_per_hour": mean_slope, "mean_worker_mb_first_last": mean_mb}


def build_report(*, records: list[Request], oracle: Oracle, schedule: list[Fault],
                 applied: list[Fault], measures: Measures, flag_at: Any, seconds: float,
                 seed: int, minutes: float, sentinel: bool = False) -> dict[str, Any]:
    """Every figure and violation of one soak, as a JSON-ready dict."""
    knobs = oracle.knobs
    kinds = SENTINEL_KINDS if sentinel else FAULT_KINDS
    outcomes: collections.Counter[str] = collections.Counter()
    expected: collections.Counter[str] = collections.Counter()
    violations: list[dict[str, Any]] = []
    audited = _audited(measures.audit_files)

    def violation(kind: str, r: Request | None, why: str, t: float = 0.0,
                  app: str = "") -> None:
        entry: dict[str, Any] = {"kind": kind, "why": why}
        if r is not None:
            flag = flag_at(r.app, r.sent)
            entry.update(t=round(r.sent, 2), app=r.app, pid=r.pid, route=r.route,
                         request_kind=r.kind, status=r.status, outcome=r.outcome,
                         reason=r.reason[:300], seq=r.seq, took=round(r.received - r.sent, 2),
                         flag=None if flag is None else
                         {"t": round(flag.t, 2), "enforce": flag.enforce, "source": flag.source,
                          "reason": flag.reason[:300]})
        else:
            entry.update(t=round(t, 2), app=app)
        violations.append(entry)

    for r in records:
        label = "no_answer" if r.status is None else f"{r.status} {r.outcome}".strip()
        outcomes[f"{r.app} {r.route} {r.kind}: {label}"] += 1
        judged = oracle.judge(r)
        expected[judged.expected] += 1
        if judged.violation:
            violation(judged.violation, r, judged.why)
        if r.status == 200 and r.bypassed \
                and hash_user_agent(r.ua) not in audited.get(r.app, ()) \
                and not oracle.process_ended(r.app, r.received, r.received + 2.0, slack=0.0):
            # A SIGKILL loses the lines still queued for the writer thread: excused.
            violation("unaudited_bypass", r, "admitted unchecked; no audit line found")
    applied_kinds = {f.kind for f in applied}
    for kind in kinds:
        if kind not in applied_kinds and any(f.kind == kind for f in schedule):
            violation("fault_not_applied", None, f"{kind} was scheduled but never applied")
    for error in measures.injector_errors:
        violation("fault_not_applied", None, error)
    counts = collections.Counter(v["kind"] for v in violations)
    summary = collections.Counter()
    for key, n in outcomes.items():
        summary[key.split(": ", 1)[1]] += n
    return {
        "command": f"python tests/benchmarks/soak.py --minutes {minutes:g} --seed {seed}"
                   + (" --sentinel" if sentinel else ""),
        "seed": seed, "minutes": minutes, "seconds_run": round(seconds, 1),
        "knobs": asdict(knobs),
        "tolerances_s": {"detection": round(knobs.detection, 2),
                         "detection_after_page_failures": round(knobs.detection_after_failures, 2),
                         "recovery": round(knobs.recovery, 2),
                         "override_propagation": round(knobs.propagation, 2),
                         "fleet_gap": round(knobs.fleet_gap, 2),
                         "probe_earliest": round(knobs.probe_earliest, 2),
                         "probe_recovery": round(knobs.probe_recovery, 2)},
        "requests": len(records),
        "outcomes": dict(summary.most_common()),
        "outcomes_detail": dict(sorted(outcomes.items())),
        "expected": dict(expected),
        "violations_by_kind": {k: counts.get(k, 0) for k in MUST_BE_ZERO},
        "violations": violations,
        "faults_applied": collections.Counter(f.kind for f in applied),
        "fault_kinds_missing": [k for k in kinds if k not in applied_kinds],
        # Kill to promotion (down-after-milliseconds plus the promotion), per failover.
        "failover_seconds": [round(f.end - f.start, 2) for f in applied
                             if f.kind == SENTINEL_FAILOVER],
        "status_requests_per_interval": _status_per_interval(
            measures.status_counts, applied, knobs, measures.leaders),
        "worker_rss": _rss_growth(measures.rss),
        "ok": not violations,
    }


def render(report: dict[str, Any]) -> str:
    """The report as text for a terminal."""
    lines = [f"chaos soak: {report['command']}  ({report['seconds_run']} s)",
             f"requests: {report['requests']}"]
    lines += [f"  {n:6d}  {label}" for label, n in report["outcomes"].items()]
    lines.append("faults applied: " + ", ".join(
        f"{k} x{n}" for k, n in sorted(report["faults_applied"].items())))
    if report["fault_kinds_missing"]:
        lines.append("fault kinds NOT applied: " + ", ".join(report["fault_kinds_missing"]))
    if report.get("failover_seconds"):
        lines.append("sentinel failovers, kill to promotion (s): " + ", ".join(
            f"{s:.2f}" for s in report["failover_seconds"]))
    lines.append("tolerances (s): " + ", ".join(
        f"{k} {v}" for k, v in report["tolerances_s"].items()))
    spi = report["status_requests_per_interval"]
    lines.append("status requests per poll interval: " + ", ".join(
        f"{value} ({key.replace('_', ' ')})" for key, value in spi.items()))
    rss = report["worker_rss"]
    lines.append(f"worker RSS growth: max {rss['mb_per_hour_max']} MB/h, median "
                 f"{rss['mb_per_hour_median']} MB/h over {rss['workers_measured']} workers; "
                 f"mean worker per server {rss['mean_worker_mb_per_hour']} MB/h "
                 f"(MB first, last: {rss['mean_worker_mb_first_last']})")
    lines.append("violations: " + ", ".join(
        f"{k} {n}" for k, n in report["violations_by_kind"].items()))
    for v in report["violations"][:50]:
        lines.append("  " + json.dumps(v, sort_keys=True))
    if len(report["violations"]) > 50:
        lines.append(f"  ... {len(report['violations']) - 50} more (--json has them all)")
    lines.append("OK" if report["ok"] else "FAILED")
    return "\n".join(lines)
