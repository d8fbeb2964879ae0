"""The stable names of failopen's log records, for JSON formatters and log-based alerts.

Every record failopen's core logs carries ``extra={"event": "<name>", ...fields}``: a JSON
formatter (python-json-logger, ``structlog.stdlib.ExtraAdder``, Datadog, ECS) writes ``event``
and the fields as top-level keys next to the message, so an alert can match
``event == "failopen.flag_changed"`` instead of a message text that may be reworded. Field names
never collide with ``LogRecord`` attributes, and no field carries a secret (the private key, the
admin token, store passwords, enforcement tokens). Paths and client addresses appear only in the
audit events (``failopen.bypass``, ``failopen.bypass_summary``, ``failopen.shadow_bypass``) and
in ``failopen.rejected`` / ``failopen.allowed``, as they do in the messages.

The names are a contract: tests/test_events.py checks that every log call in the core carries
one of them and that each one listed here is used.
"""

from __future__ import annotations

__all__ = ["EVENT_KEY", "EVENTS"]

#: The ``extra`` key that holds the event name.
EVENT_KEY = "event"

#: Event name -> (logger, level, when, fields besides ``event``).
EVENTS: dict[str, tuple[str, str, str, str]] = {
    "failopen.flag_changed": (
        "failopen.flag", "INFO on / WARNING off",
        "enforcement turned on or off (once per change of the value)",
        "enforce, source, reason, global_status, expires_at, stale, error"),
    "failopen.override_set": (
        "failopen.flag", "WARNING", "an operator placed an override",
        "enforce, ttl, expires_at, reason, set_by"),
    "failopen.override_lifted": (
        "failopen.flag", "WARNING", "an override was lifted (back to automatic)",
        "enforce, reason"),
    "failopen.override_expired": (
        "failopen.flag", "WARNING", "an override reached its expiry",
        "enforce, reason, expires_at"),
    "failopen.store_unreadable": (
        "failopen.flag", "ERROR", "the override store could not be read; last override kept",
        "error"),
    "failopen.stale": (
        "failopen.flag", "WARNING",
        "no good status reading for longer than FAILOPEN_STALE_AFTER; the flag keeps its value",
        "as flag_changed"),
    "failopen.stale_ended": (
        "failopen.flag", "INFO", "a good status reading arrived again", "as flag_changed"),
    "failopen.listener_failed": (
        "failopen.flag / failopen.listeners", "ERROR",
        "a flag listener or on_change callback raised (one line per minute)",
        "callback, suppressed"),
    "failopen.listener_dropped": (
        "failopen.listeners", "WARNING",
        "on_change callbacks fell more than 1,000 changes behind; the oldest was dropped",
        "dropped"),
    "failopen.poll_failed": (
        "failopen.watcher", "WARNING", "a status poll gave no usable answer (flag unchanged)",
        "failures, error, retry_after"),
    "failopen.stale_bypass_ended": (
        "failopen.watcher", "ERROR",
        "a bypass ended: no good reading for FAILOPEN_MAX_STALE_BYPASS",
        "age_seconds, limit_seconds, error"),
    "failopen.unknown_status": (
        "failopen.watcher", "WARNING", "the global component reports a status the spec does not "
        "list (not acted on)", "global_status"),
    "failopen.regions_changed": (
        "failopen.watcher", "INFO", "the set of impaired regions changed (diagnosis only)",
        "global_status, impaired"),
    "failopen.reading_superseded": (
        "failopen.watcher", "DEBUG", "a reading older than the last one applied was dropped",
        "source"),
    "failopen.watcher_error": (
        "failopen.watcher", "ERROR", "a bug in a poll, a tick or an on_poll callback (the "
        "thread goes on)", "-"),
    "failopen.bypass": (
        "failopen.audit", "WARNING",
        "a bypassed request (each one with FAILOPEN_AUDIT=each; else the first after a change)",
        "path, client, outcome, route, policy, challenge (altcha or the second vendor's name, "
        "for bypassed_fallback; else null), reason"),
    "failopen.bypass_summary": (
        "failopen.audit", "WARNING",
        "bypassed requests since the last summary (every 10 s while bypassing, and when the "
        "flag changes)", "requests, seconds, paths, outcomes, distinct_clients, busiest_clients"),
    "failopen.shadow_bypass": (
        "failopen.audit", "WARNING", "shadow mode: a request that would have been bypassed (an "
        "open route)", "path, client, policy, reason"),
    "failopen.shadow_outage_policy": (
        "failopen.audit", "WARNING", "shadow mode: a request that enforce mode would have "
        "refused or sent to the fallback challenge (a closed or fallback route)",
        "path, client, policy, challenge (a fallback route's: altcha or the second vendor's "
        "name; else null), reason"),
    "failopen.rejected": (
        "failopen.guard", "INFO", "a request refused (403 or 503)",
        "path, status_code, outcome, reason"),
    "failopen.allowed": (
        "failopen.guard", "DEBUG", "a request admitted with a valid token",
        "path, outcome, reason"),
    "failopen.confirm_failed": (
        "failopen.guard", "WARNING", "an on-demand outage check could not read the status page "
        "(not bypassing)", "error"),
    "failopen.confirm_waited": (
        "failopen.guard", "DEBUG", "a caller answered from the flag while another's check ran",
        "-"),
    "failopen.guard_error": (
        "failopen.guard", "ERROR", "a bug in the guard; the request is refused (503)", "-"),
    "failopen.verify": (
        "failopen.verify", "DEBUG", "a verify call's outcome", "outcome, reason"),
    "failopen.verify_failed": (
        "failopen.verify", "WARNING (one per interval) / DEBUG",
        "the verify call was unavailable, rate-limited or overloaded", "outcome, reason, "
        "suppressed"),
    "failopen.verify_credentials_rejected": (
        "failopen.verify", "ERROR", "the vendor answered 401/403 to our private key",
        "status_code, verify_url"),
    "failopen.probe_alone_opens": (
        "failopen.probe", "WARNING", "start-up: the verify probe alone (FAILOPEN_EVIDENCE=probe) "
        "can turn enforcement off for an open route", ""),
    "failopen.verify_test_secret": (
        "failopen.verify", "WARNING", "the private key is the vendor's documented test secret "
        "(every token passes)", "vendor"),
    "failopen.action_unchecked": (
        "failopen.verify", "WARNING", "an action was asked of a vendor whose answers name none "
        "(once per verifier)", "vendor"),
    "failopen.verify_misconfigured": (
        "failopen.verify", "ERROR", "a vendor said our secret, site key, URL or request is "
        "wrong (its codes and what to change; at most every 5 minutes)",
        "vendor, codes, status_code, verify_url"),
    "failopen.global_component_pinned": (
        "failopen.status", "INFO", "the global component was chosen for this process",
        "component_id, component_name, global_status, chosen_by"),
    "failopen.status_odd_fields": (
        "failopen.status", "WARNING / INFO when cleared",
        "fields of the status page read oddly (the reading still counts)", "odd_fields"),
    "failopen.status_fallback": (
        "failopen.status", "INFO", "components.json failed; status.json was tried",
        "error, fallback_error"),
    "failopen.check_error": (
        "failopen.check", "DEBUG", "a check of `failopen check` failed unexpectedly (its line says "
        "so; -v shows the traceback)", "-"),
    "failopen.probe_error": (
        "failopen.probe", "ERROR", "a bug in the verify probe (no evidence either way; the "
        "watcher goes on)", "-"),
    "failopen.probe_stale_bypass_ended": (
        "failopen.probe", "WARNING", "healthy verify probes ended a bypass while the status page "
        "could not be read", "healthy_probes"),
    "failopen.audit_file_failed": (
        "failopen.audit", "ERROR", "the audit file cannot be written (once per kind of error); "
        "requests go on", "file, error, lost"),
    "failopen.audit_file_back": (
        "failopen.audit", "WARNING", "the audit file is written again after an error",
        "file, error, lost"),
    "failopen.audit_error": (
        "failopen.audit", "ERROR", "a bug noting a flag change in the audit file (the flag and "
        "requests go on)", "-"),
    "failopen.audit_file_dropped": (
        "failopen.audit", "WARNING", "audit lines dropped: more bypasses than the writer keeps "
        "up with", "file, dropped"),
    "failopen.override_request": (
        "failopen.audit", "WARNING", "the override endpoint changed the override (who, what)",
        "enforce, expires_at, actor, reason"),
    "failopen.override_failed": (
        "failopen.audit", "ERROR", "the override endpoint could not write the store",
        "actor, error"),
    "failopen.override_not_shared": (
        "failopen.audit", "WARNING",
        "the override endpoint refused: the memory: store reaches one process only (409)",
        "actor"),
    "failopen.override_not_reached": (
        "failopen.audit", "WARNING", "an override the endpoint stored reached no live process "
        "of the deployment within the wait (answered 202)", "actor, processes"),
    "failopen.override_reach_unknown": (
        "failopen.audit", "ERROR", "an override was stored, but the store could not be read "
        "to count the processes that applied it", "actor"),
    "failopen.override_refused": (
        "the adapter's", "WARNING", "an override attempt was refused (one line per minute)",
        "why, client, unlogged"),
    "failopen.fleet_leader": (
        "failopen.fleet", "INFO / WARNING", "this process started or stopped polling for the "
        "fleet", "leader, member, why"),
    "failopen.fleet_store_unusable": (
        "failopen.fleet", "ERROR", "the fleet's Redis store failed; this process polls itself",
        "why"),
    "failopen.fleet_store_back": (
        "failopen.fleet", "WARNING", "the fleet's Redis store answers again", "store"),
    "failopen.fleet_foreign": (
        "failopen.fleet", "ERROR", "a record of another deployment sharing the Redis store and "
        "prefix (another status page or verify URL) was ignored (one line per 5 minutes)",
        "record, member, why, suppressed"),
    "failopen.fleet_evidence_differs": (
        "failopen.fleet", "WARNING", "a probing process does not follow a poller of its own "
        "status page that does not probe: it polls and probes itself (FAILOPEN_EVIDENCE differs "
        "between processes; one line per 5 minutes)", "member, suppressed"),
    "failopen.fleet_foreign_ended": (
        "failopen.fleet", "WARNING", "the poller's lease is no longer another deployment's",
        "leader"),
    "failopen.fleet_override_resurrected": (
        "failopen.fleet", "WARNING", "this process removed an override it saw lifted or "
        "replaced, which a process the change never reached put back after Redis lost its "
        "keys", "override"),
    "failopen.fleet_error": (
        "failopen.fleet", "ERROR", "a bug in a fleet sync (the watcher goes on)", "-"),
    "failopen.store_unreplicated": (
        "failopen.fleet", "WARNING", "a Sentinel store: no replica acknowledged an override's "
        "write or lift within the store's timeout (a failover now could lose it)", "store"),
    "failopen.memory_per_worker": (
        "failopen", "WARNING", "the WSGI server says it runs several worker processes while "
        "the outage rate limit or the used fallback solutions are kept in each process's memory "
        "(no Redis store): each worker counts and remembers on its own; once per process, on "
        "its first request", "adapter, kept"),
    "failopen.fallback_redis_failed": (
        "failopen.fallback", "WARNING", "the outage fallback's Redis (used solutions, rate limit) "
        "failed or was slow; this process uses its own memory meanwhile (one line per minute)",
        "store, purpose, suppressed"),
    "failopen.fallback_memory_full": (
        "failopen.fallback", "WARNING", "this process remembers as many unexpired used "
        "solutions as it may: it forgets the earliest issued, and refuses every solution issued "
        "at or before the last one forgotten (one line per minute)",
        "max_entries, suppressed"),
    "failopen.outage_rate_full": (
        "failopen.fallback", "WARNING", "the outage rate limit counts as many clients in this "
        "process's memory as it may (FAILOPEN_OUTAGE_RATE_MAX_CLIENTS), all within their "
        "window: new clients share one window of the rate until some leave (one line per "
        "minute)", "max_clients, suppressed"),
    "failopen.fallback_error": (
        "failopen.fallback", "ERROR", "a bug in the outage fallback's record or rate limit "
        "(the solution is refused, or the request not counted)", "-"),
    "failopen.thread_ended": (
        "failopen.watcher / failopen.listeners", "ERROR",
        "a background thread ended unexpectedly (it restarts on next use)", "thread_role"),
    "failopen.started": (
        "the adapter's", "INFO", "an adapter built its runtime: what it protects, with which "
        "evidence, store (password masked) and mode", "adapter, protects, vendor, evidence, store, "
        "mode"),
    "failopen.protects_nothing": (
        "the adapter's", "WARNING", "an adapter protects no path or view: nothing is checked",
        "adapter"),
    "failopen.unknown_variable": (
        "the adapter's", "WARNING", "a FAILOPEN_* environment variable failopen does not read "
        "(once per process, with the closest known name)", "-"),
    "failopen.metrics_failed": (
        "failopen.*", "ERROR", "reporting a metric raised (the decision or poll is unaffected)",
        "-"),
    "failopen.metrics_conflict": (
        "failopen.metrics", "WARNING",
        "a failopen metric name is already taken in the registry; that one is not exported",
        "-"),
}
