"""The record schemas shipped with the package: JSON Schema (draft 2020-12) files in ``schema/``.

One file per kind of record (spec sections 2.1-2.3), each carrying ``schema_version``, an integer
that grows when a field is added (:data:`SCHEMA_VERSION`; the record's own ``schema_version`` is
the vendor's string, ``rai-v1``). Fields the vendor adds later are allowed
(``additionalProperties: true``) and kept by every output format; :func:`unknown_fields` names
them, so a run can say that the schema is behind the service. The Arrow schema of the Parquet
files is derived from these files (``_parquet.py``), so the two cannot drift.

No pyarrow here: the JSONL and CSV paths use this module too.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from importlib import resources
from typing import Any

__all__ = ["SCHEMA_VERSION", "KINDS", "UNKNOWN_NAMED", "json_schema", "fields", "shown_name",
           "unknown_fields"]

#: The version of the shipped schema files (their top-level ``schema_version``).
SCHEMA_VERSION = 1

#: How many fields the schema does not know a run names per kind, and how much of each name:
#: a vendor (or a proxy in front of it) sending made-up keys by the thousand costs one more
#: warning, not a log line and a summary entry per key. The records keep every field whole.
UNKNOWN_NAMED = 50
_NAME_CHARS = 100

#: The kinds of record a sync writes, and their schema files.
KINDS = {"cohorts": "cohort.schema.json", "sessions": "session.schema.json"}


def _kind(kind: str) -> str:
    # "cohort" and "session" are accepted too: the schema files are named in the singular.
    plural = kind if kind.endswith("s") else kind + "s"
    if plural not in KINDS:
        raise ValueError(f"unknown kind of record {kind!r}: one of {', '.join(KINDS)}")
    return plural


@functools.cache
def _load(kind: str) -> dict[str, Any]:
    folder = resources.files("failopen.rai").joinpath("schema")
    text = folder.joinpath(KINDS[kind]).read_text("utf-8")
    schema: dict[str, Any] = json.loads(text)
    if schema.get("schema_version") != SCHEMA_VERSION:  # a file and the code out of step
        raise RuntimeError(
            f"failopen/rai/schema/{KINDS[kind]} has schema_version "
            f"{schema.get('schema_version')!r}, the code {SCHEMA_VERSION}: reinstall failopen"
        )
    return schema


def json_schema(kind: str) -> dict[str, Any]:
    """The JSON Schema of ``kind`` ("cohorts" or "sessions"), as shipped (a copy)."""
    return json.loads(json.dumps(_load(_kind(kind))))  # type: ignore[no-any-return]


@functools.cache
def fields(kind: str) -> frozenset[str]:
    """The top-level field names the schema of ``kind`` knows."""
    return frozenset(_load(_kind(kind))["properties"])


def unknown_fields(kind: str, record: Mapping[str, Any]) -> frozenset[str]:
    """The top-level fields of ``record`` that the schema of ``kind`` does not know.

    Cheap (a set difference on the keys): a sync checks one record per page.
    """
    known = fields(kind)
    if known.issuperset(record):  # the common case, without building a set
        return frozenset()
    return frozenset(record.keys() - known)


def shown_name(name: str) -> str:
    """``name`` as a summary or a log line shows it: cut after 100 characters, ending in "…"."""
    return name if len(name) <= _NAME_CHARS else name[:_NAME_CHARS] + "…"
