"""The record schemas shipped in failopen/rai/schema: valid JSON Schema (draft 2020-12), the
spec's fields with the spec's types (checked against the typed models, which follow the spec
tables), versioned, open to fields the vendor adds, and what the emulator serves is valid."""

from __future__ import annotations

import dataclasses
import json
import types
import typing
from pathlib import Path
from typing import Any

import pytest

from failopen.rai import _schema
from failopen.rai.models import Cohort, Session, Verify
from failopen.testing.rai_emulator import RaiEmulator

jsonschema = pytest.importorskip("jsonschema", reason='pip install -e ".[test]" (jsonschema)')

SCHEMA_DIR = Path(_schema.__file__).parent / "schema"
TIMESTAMPS = {
    "cohorts": {"cohort_window_start", "cohort_window_end", "created_at"},
    "sessions": {"session_created"},
}
# The spec says only these may be absent in substance: "if configured", "if any".
NULLABLE = {"cohorts": set(), "sessions": {"custom_risk_score", "verify"}}


def _json_type(annotation: Any) -> dict[str, Any]:
    """The JSON Schema a typed model's field annotation stands for (models.py follows the spec)."""
    base = annotation
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        (base,) = [a for a in typing.get_args(annotation) if a is not type(None)]
    if typing.get_origin(base) is tuple:
        return {"type": "array", "items": _json_type(typing.get_args(base)[0])}
    names = {str: "string", int: "integer", float: "number", bool: "boolean"}
    return {"type": names[base]} if base in names else {"$ref": "#/$defs/verify"}


def _plain(spec: dict[str, Any]) -> dict[str, Any]:
    """A property's type alone (no description, format, or null branch)."""
    if "anyOf" in spec:
        (spec,) = [s for s in spec["anyOf"] if s.get("type") != "null"]
    kinds = spec.get("type")
    if isinstance(kinds, list):
        (kinds,) = [k for k in kinds if k != "null"]
    out = {"type": kinds} if kinds else {}
    if "$ref" in spec:
        out = {"$ref": spec["$ref"]}
    if "items" in spec:
        out["items"] = _plain(spec["items"])
    return out


@pytest.mark.parametrize(("kind", "model"), [("cohorts", Cohort), ("sessions", Session)])
def test_every_spec_field_with_its_type(kind: str, model: type) -> None:
    schema = _schema.json_schema(kind)
    hints = typing.get_type_hints(model)
    fields = [f.name for f in dataclasses.fields(model) if f.name != "raw"]
    assert list(schema["properties"]) == fields  # the spec's order, nothing left out or added
    for name in fields:
        spec = schema["properties"][name]
        assert _plain(spec) == _json_type(hints[name]), name
        assert (spec.get("format") == "date-time") == (name in TIMESTAMPS[kind]), name
        nullable = "anyOf" in spec or "null" in spec.get("type", [])
        assert nullable == (name in NULLABLE[kind]), name


def test_verify_is_an_object_of_its_spec_fields() -> None:
    verify = _schema.json_schema("sessions")["$defs"]["verify"]
    hints = typing.get_type_hints(Verify)
    assert verify["type"] == "object" and verify["additionalProperties"] is True
    names = [f.name for f in dataclasses.fields(Verify) if f.name != "raw"]
    assert list(verify["properties"]) == names
    for name in names:
        assert _plain(verify["properties"][name]) == _json_type(hints[name])


@pytest.mark.parametrize("kind", ["cohorts", "sessions"])
def test_versioned_open_and_valid_draft_2020_12(kind: str) -> None:
    schema = _schema.json_schema(kind)
    assert schema["schema_version"] == _schema.SCHEMA_VERSION == 1
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert schema["additionalProperties"] is True
    jsonschema.Draft202012Validator.check_schema(schema)
    shipped = json.loads((SCHEMA_DIR / _schema.KINDS[kind]).read_text())
    assert shipped == schema


def _validator(kind: str) -> Any:
    return jsonschema.Draft202012Validator(
        _schema.json_schema(kind), format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER
    )


def test_what_the_emulator_serves_is_valid_and_a_bad_record_is_not() -> None:
    emulator = RaiEmulator(cohorts=4, sessions_per_cohort=(30, 30), unknown_fields=True)
    data = emulator.timeline
    for index in range(4):
        plan = data.plan(index)
        assert not list(_validator("cohorts").iter_errors(plan.record))
        for j in range(30):
            session = json.loads(plan.session_json(j))
            assert not list(_validator("sessions").iter_errors(session))
    session = json.loads(data.plan(0).session_json(0))
    for field, value in [("session_id", 123), ("verify", {"solved": "yes"}),
                         ("suspicion_flags", [1]), ("tagged_by_telltale", 1)]:  # fmt: skip
        assert list(_validator("sessions").iter_errors({**session, field: value})), field


def test_unknown_fields_names_the_top_level_fields_the_schema_does_not_know() -> None:
    emulator = RaiEmulator(cohorts=1, sessions_per_cohort=(1, 1), unknown_fields=False)
    session = json.loads(emulator.timeline.plan(0).session_json(0))
    assert _schema.unknown_fields("sessions", session) == frozenset()
    assert _schema.unknown_fields("sessions", {}) == frozenset()
    grown = {**session, "device_id": "d1", "geo": {"cc": "DE"}}
    assert _schema.unknown_fields("sessions", grown) == {"device_id", "geo"}
    # A session's field is not a cohort's: each kind has its own schema.
    assert _schema.unknown_fields("cohorts", {"cohort_id": "c", "risk_score": 1}) == {"risk_score"}
    assert _schema.unknown_fields("session", grown) == {"device_id", "geo"}
    with pytest.raises(ValueError, match="unknown kind of record 'tickets'"):
        _schema.unknown_fields("tickets", {})


def test_the_schema_module_does_not_import_pyarrow() -> None:
    import subprocess
    import sys

    code = (
        "import sys, failopen.rai, failopen.rai._schema as s, failopen.rai._formats; "
        "s.json_schema('sessions'); assert 'pyarrow' not in sys.modules, 'pyarrow imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
