from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from failopen.rai import Cohort, Page, Session, Verify

COHORT: dict[str, Any] = {
    "cohort_id": "coh_1",
    "public_key": "PK-1",
    "customer_name": "Acme",
    "cohort_window_start": "2024-05-01T00:00:00Z",
    "cohort_window_end": "2024-05-01T06:00:00Z",
    "created_at": "2024-05-02T00:00:00Z",
    "session_count": 120,
    "tagged_session_count": 80,
    "anomaly_ids": [7, 8],
    "telltale_ids": [4101],
    "telltale_names": ["headless"],
    "telltale_owner_categories": ["threat_research"],
    "ticketing_ticket_id": "T-1",
    "ticketing_ticket_url": "https://tickets.example/T-1",
    "schema_version": "rai-v1",
}

SESSION: dict[str, Any] = {
    "session_id": "s-1",
    "session_created": "2024-05-01T01:00:00Z",
    "public_key": "PK-1",
    "cohort_id": "coh_1",
    "anomaly_id": 7,
    "original_ticket_id": "T-0",
    "attack_label": "retroactive_attack",
    "client_theme": "default",
    "render_type": "browser",
    "risk_score": 97,
    "risk_band": "high",
    "risk_category": "bot",
    "custom_risk_score": 0.5,
    "suspicion_flags": ["tor", "headless"],
    "tagged_by_telltale": True,
    "telltale_names": ["headless"],
    "verify": {"security_level": "enhanced", "solved": True, "verified": False},
    "schema_version": "rai-v1",
}


def test_cohort_reads_every_spec_field() -> None:
    cohort = Cohort.from_dict(COHORT)
    assert cohort.cohort_id == "coh_1"
    assert cohort.public_key == "PK-1"
    assert cohort.customer_name == "Acme"
    assert cohort.cohort_window_start == "2024-05-01T00:00:00Z"
    assert cohort.cohort_window_end == "2024-05-01T06:00:00Z"
    assert cohort.created_at == "2024-05-02T00:00:00Z"
    assert cohort.session_count == 120
    assert cohort.tagged_session_count == 80
    assert cohort.anomaly_ids == (7, 8)
    assert cohort.telltale_ids == (4101,)
    assert cohort.telltale_names == ("headless",)
    assert cohort.telltale_owner_categories == ("threat_research",)
    assert cohort.ticketing_ticket_id == "T-1"
    assert cohort.ticketing_ticket_url == "https://tickets.example/T-1"
    assert cohort.schema_version == "rai-v1"
    spec_fields = {f.name for f in dataclasses.fields(Cohort)} - {"raw"}
    assert spec_fields == set(COHORT)


def test_session_reads_every_spec_field_and_verify() -> None:
    session = Session.from_dict(SESSION)
    assert session.session_id == "s-1"
    assert session.session_created == "2024-05-01T01:00:00Z"
    assert session.anomaly_id == 7
    assert session.risk_score == 97.0 and isinstance(session.risk_score, float)
    assert session.custom_risk_score == 0.5
    assert session.suspicion_flags == ("tor", "headless")
    assert session.tagged_by_telltale is True
    assert session.telltale_names == ("headless",)
    assert session.verify == Verify(security_level="enhanced", solved=True, verified=False)
    assert session.risk_category == "bot"
    assert (session.attack_label, session.client_theme, session.render_type) == (
        "retroactive_attack", "default", "browser",
    )
    spec_fields = {f.name for f in dataclasses.fields(Session)} - {"raw"}
    assert spec_fields == set(SESSION)
    assert {f.name for f in dataclasses.fields(Verify)} - {"raw"} == set(SESSION["verify"])


def test_unknown_fields_are_kept_in_raw_unchanged() -> None:
    record = {**SESSION, "new_field": {"nested": [1, 2]},
              "verify": {**SESSION["verify"], "new_verify_field": 3}}
    session = Session.from_dict(record)
    assert session.raw == record
    assert session.raw["new_field"] == {"nested": [1, 2]}
    assert session.verify is not None and session.verify.raw["new_verify_field"] == 3
    cohort = Cohort.from_dict({**COHORT, "extra": None})
    assert "extra" in cohort.raw


def test_missing_fields_read_as_none_or_empty() -> None:
    cohort = Cohort.from_dict({"cohort_id": "c"})
    assert cohort.cohort_id == "c"
    assert cohort.session_count is None and cohort.customer_name is None
    assert cohort.anomaly_ids == () and cohort.telltale_names == ()
    session = Session.from_dict({})
    assert session.verify is None and session.suspicion_flags == () and session.risk_score is None


def test_wrongly_typed_fields_read_as_none_but_stay_in_raw() -> None:
    cohort = Cohort.from_dict({
        "cohort_id": 5, "session_count": True, "anomaly_ids": [1, "2"], "telltale_names": "x",
    })
    assert cohort.cohort_id is None
    assert cohort.session_count is None  # a bool is not a count
    assert cohort.anomaly_ids == ()
    assert cohort.telltale_names == ()
    assert cohort.raw["anomaly_ids"] == [1, "2"]
    session = Session.from_dict({"risk_score": "high", "tagged_by_telltale": 1, "verify": "yes"})
    assert session.risk_score is None and session.tagged_by_telltale is None
    assert session.verify is None


def test_a_record_that_is_not_an_object_is_refused() -> None:
    with pytest.raises(TypeError, match="JSON object"):
        Session.from_dict(["s-1"])  # type: ignore[arg-type]


def test_records_are_frozen_and_raw_is_out_of_repr() -> None:
    cohort = Cohort.from_dict(COHORT)
    with pytest.raises(dataclasses.FrozenInstanceError):
        cohort.cohort_id = "other"  # type: ignore[misc]
    assert "raw" not in repr(cohort)
    assert hash(cohort) == hash(Cohort.from_dict({**COHORT, "unknown": 1}))


def test_page_holds_items_and_cursor() -> None:
    page = Page([1, 2], next_page_token="t", schema_version="rai-v1")
    assert (page.items, page.next_page_token, page.schema_version) == ([1, 2], "t", "rai-v1")
    assert Page([]).next_page_token is None


@pytest.mark.parametrize("cls", [Cohort, Session, Verify])
def test_from_dict_sets_every_field_like_the_constructor(cls: Any) -> None:
    built = cls.from_dict({})
    assert set(vars(built)) == {f.name for f in dataclasses.fields(cls)}
    assert built == cls()
    assert repr(built) == repr(cls())
