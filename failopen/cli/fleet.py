"""``failopen fleet``: who polls for the fleet and since when, the last reading and its age, the
override, and the processes seen in the last minute (read from the Redis store, never written).

Each of the leader, the reading and the processes is marked ``other_page`` when it watches
another status page (or global component) than ``FAILOPEN_STATUS_URL`` and
``FAILOPEN_GLOBAL_COMPONENT`` name (without them: than the leader): another deployment sharing
the store and prefix, whose records this deployment ignores.

Exit codes as the other verbs: 0 when the store answered, 2 when it could not be read.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from typing import Any

from failopen._internal.terminal import printable
from failopen.cli.config import STORE_FIELDS, command_config
from failopen.engine.flag import rfc3339
from failopen.engine.fleet import parse_reading
from failopen.engine.fleet_identity import Watched, stored_hash
from failopen.exceptions import ConfigError, StoreError
from failopen.stores import open_store
from failopen.stores.redis import RedisStore, parse_override

__all__ = ["fleet_report", "register_fleet"]


def _json_or_none(raw: Any) -> Any:
    try:
        return json.loads(raw) if raw is not None else None
    except (ValueError, RecursionError, TypeError, UnicodeDecodeError):  # garbage: not shown
        return None


def fleet_report(store: RedisStore, *, now: float | None = None,
                 page: str | None = None) -> dict[str, Any]:
    """What the store says about the fleet, JSON-ready; ``page``: the hash of the status page
    this deployment watches (None: the leader's). Raises StoreError."""
    now = time.time() if now is None else now
    epoch, override_raw, reading_raw, leader_raw = store.snapshot()
    leader = _json_or_none(leader_raw)
    report: dict[str, Any] = {"store": store.shown, "prefix": store.prefix,
                              "keys_present": epoch is not None,
                              # A cluster: the hash slot of the keys, its primary and replicas.
                              "slot": store.where_keys()}
    if isinstance(leader, dict) and isinstance(leader.get("id"), str):
        since = leader.get("since")
        page = page if page is not None else stored_hash(leader.get("page"))
        report["leader"] = {"id": leader["id"], "since": rfc3339(since)
                            if isinstance(since, (int, float)) else None,
                            **_page_of(leader.get("page"), page)}
    else:
        report["leader"] = None
    report["page"] = page
    try:
        reading = parse_reading(reading_raw, now=now)
    except StoreError as exc:
        report["reading"] = {"error": str(exc)}
    else:
        report["reading"] = None if reading is None else {
            "global_status": reading.report.global_status, "kind": reading.kind,
            "by": reading.by, "at": rfc3339(reading.at), "age_seconds": round(now - reading.at, 3),
            "impaired_regions": [r.description or r.name
                                 for r in reading.report.impaired_regions()],
            **_page_of(reading.page, page),
        }
    try:
        override = parse_override(override_raw)
    except StoreError as exc:
        report["override"] = {"error": str(exc)}
    else:
        report["override"] = None if override is None else {
            "enforce": override.enforce, "reason": override.reason, "set_by": override.set_by,
            "set_at": rfc3339(override.set_at), "expires_at": rfc3339(override.expires_at),
        }
    processes = []
    for raw in store.processes():
        seen = _json_or_none(raw)
        age = _age(now, seen.get("seen")) if isinstance(seen, dict) else None
        if age is not None:
            processes.append({"id": seen.get("id"), "pid": seen.get("pid"),
                              "leader": seen.get("leader") is True, "polls": seen.get("polls"),
                              "last_seen_seconds": age,
                              # The hash of the override it applied (None: none, or it is an
                              # older failopen that does not say: then the key is absent).
                              "override": stored_hash(seen.get("override")),
                              "reports_override": "override" in seen,
                              **_page_of(seen.get("page"), page)})
    report["processes"] = sorted(processes, key=lambda p: str(p["id"]))
    return report


def _age(now: float, seen: Any) -> float | None:
    """Seconds since a heartbeat's ``seen`` (None: not a time failopen writes, such as an
    integer too large for a float, which would end the command)."""
    if isinstance(seen, bool) or not isinstance(seen, (int, float)):
        return None
    try:
        age = round(now - float(seen), 3)
    except OverflowError:
        return None
    return age if math.isfinite(age) else None


def _page_of(stored: Any, page: str | None) -> dict[str, Any]:
    """A record's page hash, and whether it is another than ``page`` (None: nothing to compare)."""
    theirs = stored_hash(stored)
    return {"page": theirs, "other_page": page is not None and theirs != page}


def _say(line: str) -> None:
    # Every value comes from Redis (a heartbeat, a reason): shown as text, never obeyed.
    print(printable(line))


def _print_text(report: dict[str, Any]) -> None:
    leader = report["leader"]
    _say(f"store:    {report['store']} (prefix {report['prefix']!r})")
    if report.get("slot") is not None:
        slot = report["slot"]
        _say(f"slot:     {slot['slot']} on the primary {slot['primary']}, replicas in sync: "
             f"{', '.join(slot['replicas']) or 'none'}")
    other = "; watches another status page"
    _say(f"leader:   {leader['id']} since {leader['since']}"
         f"{other if leader['other_page'] else ''}" if leader else
         "leader:   none (the next process to sync takes the lease)")
    reading = report["reading"]
    if reading is None:
        _say("reading:  none published")
    elif "error" in reading:
        _say(f"reading:  unusable: {reading['error']}")
    else:
        _say(f"reading:  global {reading['global_status']} ({reading['kind']}) by {reading['by']}"
             f" at {reading['at']}, {reading['age_seconds']:g}s ago"
             f"{other + ' (ignored by this deployment)' if reading['other_page'] else ''}")
    override = report["override"]
    if override is None:
        _say("override: none: the status page decides")
    elif "error" in override:
        _say(f"override: unusable: {override['error']}")
    else:
        _say(f"override: enforce={override['enforce']} until={override['expires_at'] or 'lifted'}"
              f" by={override['set_by'] or 'unknown'} reason={override['reason']}")
    _say(f"processes seen in the last minute: {len(report['processes'])}")
    for proc in report["processes"]:
        applied = (f"; applied override {proc['override'] or 'none'}"
                   if proc["reports_override"] else "")
        _say(f"  {proc['id']}{' (leader)' if proc['leader'] else ''}: "
             f"{proc['last_seen_seconds']:g}s ago{applied}{other if proc['other_page'] else ''}")
    strangers = sum(proc["other_page"] for proc in report["processes"])
    if strangers:
        _say(f"warning: {strangers} of these watch another status page than "
             f"{report['reference']}: another deployment shares this Redis and prefix "
             f"{report['prefix']!r}; each ignores the other's readings and polls its own page. "
             "Give each deployment its own FAILOPEN_REDIS_PREFIX or Redis database.")


def _cmd_fleet(args: argparse.Namespace) -> int:
    # Only the store's settings: a bad unrelated one must not hide the fleet in an outage.
    config = command_config(args, uses=STORE_FIELDS, store=args.store)
    store = open_store(config.store, prefix=config.redis_prefix, password=config.store_password)
    if not isinstance(store, RedisStore):
        raise ConfigError("FAILOPEN_STORE: failopen fleet reads a redis:// store; "
                          f"{store.describe()} has no fleet")
    watched = Watched.of(config.status_url, config.global_component, None)
    try:
        report = fleet_report(store, page=watched.page)
    except StoreError as exc:
        print(f"failopen fleet: {exc}", file=sys.stderr)
        return 2
    finally:
        store.close()
    if args.json:
        sys.stdout.write(json.dumps(report, sort_keys=True) + "\n")
    else:
        report["reference"] = watched.shown if watched.page is not None else "the leader"
        _print_text(report)
    return 0


def register_fleet(verbs: Any) -> None:
    """Add ``failopen fleet`` to the command's verbs."""
    fleet = verbs.add_parser("fleet", help="who polls for the fleet, the last reading, the "
                                           "override, the processes seen (redis:// store)")
    fleet.add_argument("--store", help="store URL (default: FAILOPEN_STORE)")
    fleet.add_argument("--json", action="store_true", help="print one JSON object")
    fleet.set_defaults(func=_cmd_fleet)
