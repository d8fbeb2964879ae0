"""What one ``failopen rai sync`` run did: its summary (``--json``) and its manifest, the file
``DIR/_manifests/<run id>.json`` written atomically at the end of every run that started (also on
a failure or SIGTERM), naming the files it wrote with their records and bytes.

The run id, ``YYYYMMDDTHHMMSSZ-<8 hex>``, sorts by start time and is unique across machines; it
names the run's files (``<run id>-<batch>.jsonl``) and its manifest.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import secrets
import tempfile
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from failopen.rai._schema import SCHEMA_VERSION, UNKNOWN_NAMED, shown_name
from failopen.rai._state import fsync_dir
from failopen.rai.exceptions import RaiError

__all__ = ["Summary", "new_run_id", "write_manifest", "MANIFESTS", "MANIFEST_VERSION"]

#: The folder of the manifests in ``--out-dir`` (an underscore: Hive and Spark readers skip it).
MANIFESTS = "_manifests"
MANIFEST_VERSION = 1

logger = logging.getLogger("failopen.rai")


def new_run_id(now: datetime) -> str:
    """The start stamp in UTC, to the second, and 32 random bits."""
    return f"{now.astimezone(timezone.utc):%Y%m%dT%H%M%SZ}-{secrets.token_hex(4)}"


@dataclass
class Summary:
    """The run report (``--json``) and the manifest's content."""

    cohorts: int = 0
    sessions: int = 0
    #: The files this run wrote, relative to --out-dir.
    files: set[str] = field(default_factory=set)
    seconds: float = 0.0
    resumed: bool = False
    undated: int = 0  # records with no usable time, in the dt=__HIVE_DEFAULT_PARTITION__ files
    #: Keys the service refused (403: not the credentials' key, or no right to it), in order,
    #: with the error; the other keys were synced and the state keeps these where they were.
    refused: dict[str, RaiError] = field(default_factory=dict)
    #: Cohorts delivered this run created more than half the lookback after their window
    #: started, and the longest such delay (seconds): what a narrower lookback would miss.
    late: int = 0
    late_max: float = 0.0
    #: Keys whose last listing was more than the reach ago (or in the future): public_key and
    #: listed_through. What the API no longer lists could have been missed: exit 6.
    gaps: list[dict[str, str]] = field(default_factory=list)
    run_id: str = ""
    started_at: str = ""
    until: str = ""  # the watermark the state records (the run's --until)
    public_keys: list[str] = field(default_factory=list)
    newest_created_at: str | None = None  # of the cohorts delivered
    #: Each file written: path (relative, "/"), kind, dt, records, bytes.
    written: list[dict[str, Any]] = field(default_factory=list)
    #: Per key: {"cohorts": n, "sessions": n} delivered.
    by_key: dict[str, dict[str, int]] = field(default_factory=dict)
    listing: bool = False  # the run got as far as listing: it writes a manifest
    #: Files a killed run had recorded as delivered, made visible by this run's first step.
    recovered: list[str] = field(default_factory=list)
    #: Top-level fields of the records written that the shipped schema does not know, by kind
    #: (the vendor added them: they are in the files all the same).
    unknown: dict[str, set[str]] = field(default_factory=dict)
    #: Kinds with more such fields than UNKNOWN_NAMED: their names stop there.
    unknown_cut: set[str] = field(default_factory=set)

    def add_unknown(self, kind: str, names: set[str]) -> None:
        """Record fields the schema does not know, each WARNING the first time this run meets
        it; past UNKNOWN_NAMED of a kind, one WARNING that there are more, and no names."""
        seen = self.unknown.setdefault(kind, set())
        for name in sorted(names - seen):
            if len(seen) >= UNKNOWN_NAMED:
                if kind not in self.unknown_cut:
                    self.unknown_cut.add(kind)
                    logger.warning("the %s records have more fields the schema does not know; "
                                   "only the first %d are named", kind, UNKNOWN_NAMED)
                return
            seen.add(name)
            logger.warning("the %s records have a field the schema (version %d) does not know: "
                           "%r; it is kept in the files (Parquet: in extra_fields)",
                           kind, SCHEMA_VERSION, shown_name(name))  # fmt: skip

    def to_json(self, exit_code: int) -> dict[str, Any]:
        return {
            "cohorts": self.cohorts, "sessions": self.sessions, "files": sorted(self.files),
            "seconds": round(self.seconds, 3), "resumed": self.resumed, "exit_code": exit_code,
            "undated": self.undated, "refused_keys": list(self.refused), "gaps": self.gaps,
            "late_cohorts": {"count": self.late, "max_delay_seconds": round(self.late_max)},
            "run_id": self.run_id, "record_schema_version": SCHEMA_VERSION,
            "unknown_fields": {kind: sorted(map(shown_name, names))
                               for kind, names in sorted(self.unknown.items())},
            "unknown_fields_truncated": sorted(self.unknown_cut),
        }  # fmt: skip

    def manifest(self, exit_code: int, finished_at: str) -> dict[str, Any]:
        """The manifest's body: the summary and what it wrote, file by file."""
        return {
            "schema_version": MANIFEST_VERSION, **self.to_json(exit_code),
            "started_at": self.started_at, "finished_at": finished_at, "until": self.until,
            "newest_created_at": self.newest_created_at, "public_keys": self.public_keys,
            "files": sorted(self.written, key=lambda f: str(f["path"])),
            "counts": {"cohorts": self.cohorts, "sessions": self.sessions},
            "counts_by_key": self.by_key,
            "recovered_files": sorted(self.recovered),
        }  # fmt: skip


def write_manifest(folder: str, summary: Summary, exit_code: int, finished_at: str) -> str:
    """Write ``folder/_manifests/<run id>.json`` atomically and durably; its path."""
    target = os.path.join(folder, MANIFESTS)
    os.makedirs(target, exist_ok=True)
    path = os.path.join(target, f"{summary.run_id}.json")
    fd, temp = tempfile.mkstemp(prefix=f".{summary.run_id}.", suffix=".tmp", dir=target)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(summary.manifest(exit_code, finished_at), f, indent=1, sort_keys=True)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        os.chmod(temp, 0o644)
        os.replace(temp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise
    fsync_dir(target)
    return path
