"""What a fleet member acts on, as short hashes its records carry, and the ERROR about another's.

Two deployments that share one Redis and one ``FAILOPEN_REDIS_PREFIX`` (staging and production, a
laptop running ``failopen emulate status`` with production's store URL) meet in one set of keys.
Each record a member writes says what it watched: ``page``, a hash of the normalised status URL
and the configured global component (readings, the leader's lease, heartbeats); ``verify``, a
hash of the verify URL (probe results, and the lease of a leader that probes). A member acts only
on records of its own page (and, for probe results, its own verify URL); a record of another, or
one without a hash (an older failopen, garbage), is foreign: ignored, and named in one ERROR at
most per :data:`FOREIGN_LOG_INTERVAL`. Hashes, not addresses: nothing about the configuration
beyond "the same or not" is written to Redis, and nothing there is secret.
"""

from __future__ import annotations

import hashlib
import logging
import re
from dataclasses import dataclass
from typing import Any

import httpx

from failopen.clock import SYSTEM_CLOCK, Clock
from failopen.observe.paced import PacedLog

__all__ = ["FOREIGN_LOG_INTERVAL", "LEADER_DOES_NOT_PROBE", "ForeignRecords", "Watched",
           "stored_hash"]

logger = logging.getLogger("failopen.fleet")

#: Why a probing member does not follow a leader of its own page that names no verify URL.
LEADER_DOES_NOT_PROBE = "does not probe the verify API (or runs an older failopen)"

#: Seconds between two ERROR lines about another deployment's records (the first is at once).
FOREIGN_LOG_INTERVAL = 300.0

_HASH = re.compile(r"[0-9a-f]{16}")


def _digest(*parts: str) -> str:
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:16]


def _normal_url(url: str) -> str:
    # httpx lowercases the scheme and host and drops a default port; a trailing slash is the
    # same page (the status client joins the document path either way).
    parsed = httpx.URL(url)
    return str(parsed.copy_with(path=parsed.path.rstrip("/") or "/"))


def stored_hash(value: Any) -> str | None:
    """A hash read back from Redis: the value when failopen could have written it, else None."""
    return value if isinstance(value, str) and _HASH.fullmatch(value) else None


@dataclass(frozen=True)
class Watched:
    """What this process acts on: its page's hash (None: no status page) and the verify URL's
    its probe calls (None: it does not probe)."""

    page: str | None = None
    verify: str | None = None
    #: For the ERROR line only (this process's own settings, never written to Redis).
    shown: str = "no status page"

    @classmethod
    def of(cls, status_url: str | None, global_component: str | None,
           verify_url: str | None) -> Watched:
        """From the settings (URLs already validated: no credentials in them); ``verify_url``
        only when the verify probe runs."""
        page = None if status_url is None else _digest(
            "page", _normal_url(status_url), global_component or "")
        verify = None if verify_url is None else _digest("verify", _normal_url(verify_url))
        shown = "no status page" if status_url is None else status_url + (
            f" (global component {global_component!r})" if global_component else "")
        return cls(page, verify, shown)


class ForeignRecords:
    """Says, as one paced ERROR, that this process ignores records of another deployment."""

    def __init__(self, watched: Watched, where: str, *, clock: Clock = SYSTEM_CLOCK,
                 interval: float = FOREIGN_LOG_INTERVAL) -> None:
        self.watched = watched
        self._where = where  # the store and prefix (password masked)
        self._paced = PacedLog(interval, clock=clock)

    def page_differs(self, page: str | None) -> str | None:
        """How a record's page differs from ours, as "it ..." goes on (None: the same)."""
        if page is not None and page == self.watched.page:
            return None
        return "watches another status page or global component" if page else \
            "names no status page (an older failopen, or a value failopen did not write)"

    def verify_differs(self, verify: str | None) -> str | None:
        """How a probe record's verify URL differs from ours (None: the same)."""
        if verify is not None and verify == self.watched.verify:
            return None
        return "probes another verify URL" if verify else \
            "names no verify URL (it does not probe, or is an older failopen)"

    def leader_differs(self, token: dict[str, Any]) -> str | None:
        """How the leader's lease differs from what we watch (None: we may follow it)."""
        why = self.page_differs(stored_hash(token.get("page")))
        if why is None and self.watched.verify is not None:  # we probe: so must our leader
            verify = stored_hash(token.get("verify"))
            why = LEADER_DOES_NOT_PROBE if verify is None else self.verify_differs(verify)
        return why

    def ignored(self, record: str, member: Any, why: str) -> None:
        """Log (paced) that ``record`` of ``member`` was ignored; ``why`` says how it differs."""
        suppressed = self._paced.due()
        if suppressed is None:
            return
        shown = repr(member)[:80] if isinstance(member, str) else "unknown"
        more = f" [{suppressed} more ignored since the last line]" if suppressed else ""
        if why is LEADER_DOES_NOT_PROBE:
            # Our own deployment, set up unevenly: not another deployment, and no prefix to change.
            logger.warning(
                "not following the poller %s: it watches this status page but %s, and this "
                "process probes (FAILOPEN_EVIDENCE=status,probe), so it polls and probes for "
                "itself, and the fleet makes more status requests than one poller would. Set "
                "FAILOPEN_EVIDENCE the same in every process of this deployment%s", shown, why,
                more, extra={"event": "failopen.fleet_evidence_differs", "member": shown,
                             "suppressed": suppressed})
            return
        logger.error(
            "ignored %s of process %s: it %s, so it belongs to another deployment that shares "
            "the Redis store %s; this process acts only on its own status page (%s)%s, polls it "
            "itself and keeps enforcing on its own readings. Give each deployment its own "
            "FAILOPEN_REDIS_PREFIX or Redis database (overrides are shared by prefix)%s",
            record, shown, why, self._where, self.watched.shown,
            " and verify URL" if self.watched.verify is not None else "", more,
            extra={"event": "failopen.fleet_foreign", "record": record, "member": shown,
                   "why": why, "suppressed": suppressed})
