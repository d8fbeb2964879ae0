"""``failopen check``'s store and fleet lines: can this host use the override store as the
servers will, and what would a server process report about itself?

* ``memory:`` is per process: fine for one, a warning where the environment says several
  workers serve (``WEB_CONCURRENCY`` above 1, gunicorn's ``--workers``) or the override endpoint
  is on, since an override then reaches only the worker that answered.
* ``file://``: the directory and file rules the servers apply (:mod:`failopen.stores.file`), the
  override in it, and a temporary file created and removed beside it (what every save does),
  never a write of the override file itself: a preflight must not race an operator's override.
* ``redis://`` (and ``redis+sentinel://``, naming the primary the sentinels gave, and
  ``redis+cluster://``, naming the hash slot of the keys and the primary and replicas holding
  it): connect and authenticate (PING), then a round trip under the prefix (SET with a
  30 s TTL, GET, DEL of ``<prefix>check:<random>``), then the override. The password is never
  shown: the store names itself masked, and redis-py's words are never quoted.

Run it as the app's user, where the app runs: permissions, the network and Redis ACLs are
those of whoever runs it.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import socket
import stat
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from failopen.cli.fleet import fleet_report
from failopen.cli.preflight import Check
from failopen.config import Config
from failopen.engine.flag import EnforcementFlag
from failopen.engine.fleet_identity import Watched
from failopen.exceptions import ConfigError, StoreError
from failopen.stores import OverrideStore, open_store
from failopen.stores.file import FileStore
from failopen.stores.redis import RedisStore
from failopen.stores.sentinel import open_sentinels
from failopen.stores.urls import REDIS_SCHEMES
from failopen.web import describe_override

__all__ = ["check_fleet_identity", "check_store", "several_workers"]

_SENTINEL_TIMEOUT = 0.5
_CHECK_TTL_MS = 30_000  # the round trip's key lapses by itself if the DEL never arrives
_WORKERS = re.compile(r"(?:^|\s)(?:-w|--workers)(?:\s+|=)(\d+)")


def several_workers(environ: Mapping[str, str]) -> str | None:
    """Why the environment looks like several server processes share the settings, or None."""
    concurrency = environ.get("WEB_CONCURRENCY", "").strip()
    if concurrency.isdigit() and int(concurrency) > 1:
        return f"WEB_CONCURRENCY={concurrency} (gunicorn and uvicorn start that many workers)"
    found = _WORKERS.search(environ.get("GUNICORN_CMD_ARGS", ""))
    if found and int(found.group(1)) > 1:
        return f"GUNICORN_CMD_ARGS asks for {found.group(1)} workers"
    return None


def check_store(config: Config, environ: Mapping[str, str]) -> Check:
    """Open the store as a server would, read the override, and prove a write would work."""
    url = config.store
    if url.startswith("memory:"):
        detail = ("memory: this process only; `failopen override` and the other workers cannot "
                  "reach it")
        facts: dict[str, Any] = {"kind": "memory", "store": "memory:", "override": None}
        many = several_workers(environ) or (
            "the override endpoint is on (it writes where only the worker that answered reads)"
            if config.override_endpoint else None)
        if many is not None:
            return Check("store", "warning",
                         f"{detail}, and {many}: use file:///path (one machine) or "
                         "redis://host:port/db (a fleet)", facts)
        return Check("store", "ok", f"{detail}: fine for one process", facts)
    try:
        store = open_store(url, prefix=config.redis_prefix, password=config.store_password)
    except ConfigError as exc:  # a file store's directory others could write, redis-py missing
        return Check("store", "problem", str(exc), {"kind": _kind(url), "store": None})
    try:
        if isinstance(store, RedisStore):
            return _check_redis(store)
        if isinstance(store, FileStore):
            return _check_file(store)
        return Check("store", "ok", store.describe(), {"kind": _kind(url)})  # pragma: no cover
    except StoreError as exc:
        return Check("store", "problem", str(exc),
                     {"kind": _kind(url), "store": _shown(store)})
    finally:
        if isinstance(store, RedisStore):
            store.close()


def _kind(url: str) -> str:
    return "file" if url.startswith("file:") else "redis"


def _shown(store: OverrideStore) -> str:
    return store.shown if isinstance(store, RedisStore) else store.describe()


def _override(store: OverrideStore) -> tuple[dict[str, Any] | None, str]:
    """The override in force (expired ones dropped), as JSON and as words. Raises StoreError."""
    flag = EnforcementFlag()
    flag.apply_override(store.load())  # refuses a force-off without an end, as servers do
    shown = describe_override(flag.override)["override"]
    if shown is None:
        return None, "no override (the status page decides)"
    # The reason comes from the store: the text output escapes it (failopen.cli.check).
    return shown, (f"override in force: enforce={shown['enforce']} until "
                   f"{shown['expires_at'] or 'lifted'} by {shown['set_by'] or 'unknown'}: "
                   f"{shown['reason']}")


def _check_file(store: FileStore) -> Check:
    directory = Path(os.path.realpath(store.path.parent))
    override, words = _override(store)  # the file's own rules (owner, mode, no symlink)
    st = os.stat(directory)
    try:
        # What every save does first: a new file beside the override, renamed over it later.
        fd, probe = tempfile.mkstemp(prefix=f".{store.path.name}.check.", dir=directory)
    except OSError as exc:
        raise StoreError(f"cannot create a file in {directory} ({exc.strerror}): an override "
                         f"could not be saved there by uid {os.geteuid()}") from None
    os.close(fd)
    os.unlink(probe)
    facts = {"kind": "file", "store": store.describe(), "override": override}
    return Check("store", "ok",
                 f"{store.describe()}: directory {directory} (owner uid {st.st_uid}, mode "
                 f"{stat.S_IMODE(st.st_mode):04o}) trusted and writable by uid {os.geteuid()}; "
                 f"{words}", facts)


def _check_redis(store: RedisStore) -> Check:
    client = store.client
    store.call("PING", client.ping)  # connects and authenticates: a wrong password fails here
    key, value = f"{store.prefix}check:{secrets.token_hex(8)}", secrets.token_hex(8)
    try:
        store.call("SET", client.set, key, value, px=_CHECK_TTL_MS)
        read = store.call("GET", client.get, key)
    finally:
        # The TTL removes it otherwise; the failure that matters is already raised, or next.
        with contextlib.suppress(StoreError):
            store.call("DEL", client.delete, key)
    if read != value.encode():
        raise StoreError(f"Redis store {store.shown}: wrote {key} and read back another value: "
                         "is something else answering on that port, or a replica?")
    override, words = _override(store)
    facts: dict[str, Any] = {"kind": "redis", "store": store.shown, "prefix": store.prefix,
                             "override": override}
    authenticated = ", authenticated" if store.authenticated else \
        " (no password: anyone who reaches it can switch protection off)"
    status: Literal["ok", "warning"] = "ok"
    primary = getattr(getattr(client, "connection_pool", None), "master_address", None)
    if primary is not None:  # Sentinel: which server the sentinels named, so it can be checked
        facts["primary"] = f"{primary[0]}:{primary[1]}"
        authenticated += f", to the primary {primary[0]}:{primary[1]} named by the sentinels"
        facts["open_sentinels"] = found = open_sentinels(store.url, timeout=_SENTINEL_TIMEOUT)
        if found:
            status = "warning"
            authenticated += (f" (sentinels {', '.join(found)} answer without "
                              "a password: anyone who reaches them can name another primary; "
                              "give them requirepass)")
    slot = store.where_keys()
    if slot is not None:  # a cluster: which node to watch, and whether a failover keeps them
        facts["slot"] = slot
        authenticated += (f"; its keys in hash slot {slot['slot']} on the primary "
                          f"{slot['primary']}, replicas in sync: "
                          f"{', '.join(slot['replicas']) or 'none'}")
        if not slot["replicas"]:
            status = "warning"
            authenticated += " (if that primary fails, nothing takes its slot over)"
    return Check("store", status,
                 f"{store.shown} (prefix {store.prefix!r}): connected{authenticated}; wrote, "
                 f"read and deleted {store.prefix}check:*; {words}", facts)


def check_fleet_identity(config: Config, environ: Mapping[str, str]) -> Check:
    """What a server process would report: fleet or not, its id, the page it acts on, its mode."""
    watched = Watched.of(config.status_url, config.global_component,
                         config.verify_url if config.probe else None)
    host = socket.gethostname()[:60]
    fleet = config.store.split(":", 1)[0].lower() in REDIS_SCHEMES
    facts: dict[str, Any] = {
        "fleet": fleet, "process": f"{host}:<pid>:<random>", "page": watched.page,
        "verify": watched.verify, "mode": config.mode, "evidence": sorted(config.evidence),
        "prefix": config.redis_prefix if fleet else None, "leader": None,
        "other_page_processes": 0}
    who = (f"processes report as {host}:<pid>:<random>; page {watched.page or 'none'}"
           + (f", verify {watched.verify}" if watched.verify else "")
           + f"; mode {config.mode}"
           + (" (decides and logs, never bypasses)" if config.mode == "shadow" else "")
           + f"; evidence {','.join(sorted(config.evidence))}")
    if not fleet:
        kind = "memory" if config.store.startswith("memory:") else "file"
        return Check("fleet_identity", "ok",
                     f"standalone ({kind} store: no fleet): each process polls the status page "
                     f"itself; {who}", facts)
    try:
        store = open_store(config.store, prefix=config.redis_prefix,
                           password=config.store_password)
    except ConfigError:
        return Check("fleet_identity", "ok", f"fleet member; {who}; leader unknown (the store "
                     "cannot be opened: see store)", facts)
    assert isinstance(store, RedisStore)
    try:
        report = fleet_report(store, page=watched.page)
    except StoreError:
        return Check("fleet_identity", "ok", f"fleet member on {store.shown}; {who}; leader "
                     "unknown (the store cannot be read: see store)", facts)
    finally:
        store.close()
    return _fleet_line(store, report, who, facts)


def _fleet_line(store: RedisStore, report: dict[str, Any], who: str,
                facts: dict[str, Any]) -> Check:
    leader = report["leader"]
    strangers = sum(proc["other_page"] for proc in report["processes"])
    foreign = leader is not None and leader["other_page"]
    facts.update(leader=leader, other_page_processes=strangers)
    where = f"fleet member on {store.shown} (prefix {store.prefix!r}); {who}"
    led = ("no leader yet (the first process to sync takes the lease)" if leader is None else
           f"leader {leader['id']} since {leader['since']}"
           + (" watches another status page" if foreign else ""))
    seen = f"{len(report['processes'])} processes seen in the last minute"
    if strangers or foreign:
        # Staging beside production, or a laptop with production's store URL: each ignores
        # the other's readings, but an override placed by either reaches both.
        return Check("fleet_identity", "warning",
                     f"{where}; {led}; {seen}, {strangers} of them watching another status "
                     "page: another deployment shares this Redis and prefix, and overrides are "
                     "shared by prefix; give each deployment its own FAILOPEN_REDIS_PREFIX",
                     facts)
    return Check("fleet_identity", "ok", f"{where}; {led}; {seen}", facts)
