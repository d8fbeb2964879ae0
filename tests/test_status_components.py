"""Which component is global, on pages shaped like real Statuspage captures; quirks beside it.

The fixtures under tests/fixtures/statuspage/ are written by hand in the public Statuspage
``/api/v2/components.json`` format: ``github_like`` (components described in prose, one link
placeholder with a null description), ``cloudflare_like`` (groups of many regional components,
descriptions null), ``grouped_described`` (a Linode-like page: groups, nothing null),
``regions_null_global_described`` and ``one_region_null_global_described`` (the dangerous pages:
the global component is described and regions are not, with a region in outage), and
``vendor_shape`` (spec 2.5 exactly, with a region in outage and the global operational).
"""

from __future__ import annotations

import copy
import json
import logging
from pathlib import Path
from typing import Any

import httpx
import pytest

from failopen.config import Config
from failopen.exceptions import ConfigError, GlobalComponentError, StatusParseError
from failopen.providers.status import StatusClient, list_components, parse_components
from failopen.runtime import FailOpen

FIXTURES = Path(__file__).parent / "fixtures" / "statuspage"
URL = "https://status.test"


def load(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((FIXTURES / f"{name}.json").read_text())
    return data


def body(doc: dict[str, Any]) -> bytes:
    return json.dumps(doc).encode()


def parse(doc: dict[str, Any], **kwargs: Any) -> Any:
    return parse_components(body(doc), fetched_at=0.0, **kwargs)


class Page:
    """A components document served in-process, changeable between readings."""

    def __init__(self, doc: dict[str, Any]) -> None:
        self.doc = doc
        self.indicator_requests = 0

    def handle(self, request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/status.json"):
            self.indicator_requests += 1
            return httpx.Response(200, json={"status": {"indicator": "critical"}})
        return httpx.Response(200, content=body(self.doc))

    def client(self, **kwargs: Any) -> StatusClient:
        return StatusClient(URL, transport=httpx.MockTransport(self.handle), **kwargs)


def by_name(doc: dict[str, Any], name: str) -> dict[str, Any]:
    found: dict[str, Any] = next(c for c in doc["components"] if c["name"] == name)
    return found


# --- C7: guess only on the documented shape -----------------------------------------------------


def test_the_documented_shape_is_guessed_and_a_regional_outage_is_not_global() -> None:
    report = parse(load("vendor_shape"))
    assert report.global_component.id == "g0b4lqv7n2xs"
    assert report.chosen_by == "guess"
    assert report.global_status == "operational"
    assert [r.id for r in report.impaired_regions()] == ["e7w2lx4n9pcd"]


def test_a_github_like_page_is_not_guessed_its_link_placeholder_is_not_global() -> None:
    with pytest.raises(GlobalComponentError) as caught:
        parse(load("github_like"))
    message = str(caught.value)
    assert "0l2p9nhqnxpd (Visit www.githubstatus.com for more information)" in message
    assert "8l4ygp009s5s (Git Operations)" in message
    assert "set FAILOPEN_GLOBAL_COMPONENT" in message


@pytest.mark.parametrize("fixture", [
    "cloudflare_like", "grouped_described", "regions_null_global_described",
    "one_region_null_global_described",
])
def test_pages_of_another_shape_are_never_guessed(fixture: str) -> None:
    with pytest.raises(GlobalComponentError, match="set FAILOPEN_GLOBAL_COMPONENT") as caught:
        parse(load(fixture))
    first = load(fixture)["components"][0]
    assert f"{first['id']} ({first['name']})" in str(caught.value)


def test_a_regional_outage_on_a_page_with_an_unlabelled_region_never_bypasses() -> None:
    # The old guess elected "US East" (the one null description) and its major_outage bypassed.
    page = Page(load("one_region_null_global_described"))
    runtime = FailOpen(Config(status_url=URL), status_transport=httpx.MockTransport(page.handle))
    try:
        result = runtime.watcher.poll_once()
        assert result.reading == "failed"
        assert "FAILOPEN_GLOBAL_COMPONENT" in (result.error or "")
        assert runtime.flag.state.enforce
    finally:
        runtime.stop()


def test_with_the_global_component_configured_the_dangerous_page_reads_right() -> None:
    report = parse(load("one_region_null_global_described"), global_component="r8d2kq0wz5mn")
    assert report.global_status == "operational"
    assert "c7m4tx1bq9vl" in [r.id for r in report.impaired_regions()]


def test_a_configured_exact_name_finds_the_component() -> None:
    report = parse(load("github_like"), global_component="Git Operations")
    assert report.global_component.id == "8l4ygp009s5s"
    assert report.chosen_by == "name"


def test_a_name_is_exact_not_a_prefix_or_another_case() -> None:
    for near in ("git operations", "Git", "Git Operations "):
        with pytest.raises(GlobalComponentError, match="neither the id nor the exact name"):
            parse(load("github_like"), global_component=near)


def test_a_name_shared_by_several_components_is_an_error_listing_them() -> None:
    doc = load("github_like")
    by_name(doc, "Pages")["name"] = "Actions"
    with pytest.raises(GlobalComponentError, match="names 2 components") as caught:
        parse(doc, global_component="Actions")
    assert "br0l2tvcx85d (Actions)" in str(caught.value)
    assert "vg70hn9s2tyj (Actions)" in str(caught.value)


def test_ids_win_over_names() -> None:
    doc = load("github_like")
    by_name(doc, "Issues")["name"] = "8l4ygp009s5s"  # a name that is another component's id
    report = parse(doc, global_component="8l4ygp009s5s")
    assert report.global_component.name == "Git Operations"
    assert report.chosen_by == "id"


def test_a_configured_group_is_refused_but_a_member_of_a_group_is_fine() -> None:
    doc = load("cloudflare_like")
    with pytest.raises(GlobalComponentError, match="is a group component"):
        parse(doc, global_component="Africa")
    report = parse(doc, global_component="b6r7n8b1w9kv")  # "API", inside a group
    assert report.global_status == "operational"
    assert all(not r.group for r in report.regions)


@pytest.mark.parametrize("description", [
    "Requests for GitHub APIs", "eu-west-1, the Irish region", "Global platform.", "",
    "x" * 33,
])
def test_prose_or_empty_descriptions_are_not_region_labels(description: str) -> None:
    doc = load("vendor_shape")
    doc["components"][2]["description"] = description
    with pytest.raises(GlobalComponentError, match="components without a region label"):
        parse(doc)


@pytest.mark.parametrize("description", ["us-east-1", "EU (Frankfurt)", "US East", "AP/SE 2"])
def test_region_labels_in_common_spellings_are_accepted(description: str) -> None:
    doc = load("vendor_shape")
    doc["components"][2]["description"] = description
    assert parse(doc).global_component.id == "g0b4lqv7n2xs"


def test_an_unreadable_entry_or_group_flag_stops_the_guess() -> None:
    doc = load("vendor_shape")
    doc["components"].append("not a component")
    with pytest.raises(GlobalComponentError, match="not components with an id"):
        parse(doc)
    doc = load("vendor_shape")
    doc["components"][1]["group"] = "maybe"
    with pytest.raises(GlobalComponentError, match="groups"):
        parse(doc)


# --- C7: the choice is pinned for the life of the client ----------------------------------------


def test_the_guess_is_pinned_and_logged_once_with_id_and_name(
    caplog: pytest.LogCaptureFixture,
) -> None:
    page = Page(load("vendor_shape"))
    caplog.set_level(logging.INFO, logger="failopen.status")
    with page.client() as client:
        assert client.fetch().global_component.id == "g0b4lqv7n2xs"
        # The page changes so that a fresh guess would elect a region: the pin holds.
        by_name(page.doc, "Vendor Platform")["description"] = "Vendor platform"
        by_name(page.doc, "US East")["description"] = None
        by_name(page.doc, "US East")["status"] = "major_outage"
        report = client.fetch()
        assert report.global_component.id == "g0b4lqv7n2xs"
        assert report.global_status == "operational"
        assert report.chosen_by == "guess"  # how it was chosen, once
        assert client.pinned == ("g0b4lqv7n2xs", "Vendor Platform")
    pinned = [r for r in caplog.records if "g0b4lqv7n2xs" in r.getMessage()]
    assert len(pinned) == 1 and pinned[0].levelno == logging.INFO
    assert "Vendor Platform" in pinned[0].getMessage()


def test_a_pinned_component_that_leaves_the_page_is_unreadable_and_never_falls_back() -> None:
    page = Page(load("vendor_shape"))
    with page.client(indicator_fallback=True) as client:
        client.fetch()
        doc = page.doc
        doc["components"] = [c for c in doc["components"] if c["id"] != "g0b4lqv7n2xs"]
        by_name(doc, "US East")["description"] = None  # a fresh guess would elect it
        by_name(doc, "US East")["status"] = "major_outage"
        with pytest.raises(GlobalComponentError, match="no longer on it") as caught:
            client.fetch()
        assert "g0b4lqv7n2xs (Vendor Platform)" in str(caught.value)
    assert page.indicator_requests == 0


def test_an_ambiguous_page_never_falls_back_to_the_page_wide_indicator() -> None:
    # status.json's indicator is the worst of every component: a regional outage would read as
    # "indicator:critical" and bypass for a user who listed it.
    page = Page(load("regions_null_global_described"))
    with page.client(indicator_fallback=True) as client, pytest.raises(GlobalComponentError):
        client.fetch()
    assert page.indicator_requests == 0


def test_a_configured_name_is_pinned_to_its_id_and_survives_a_rename() -> None:
    page = Page(load("github_like"))
    with page.client(global_component="Git Operations") as client:
        client.fetch()
        by_name(page.doc, "Git Operations")["name"] = "Git"
        by_name(page.doc, "Issues")["name"] = "Git Operations"
        report = client.fetch()
    assert report.global_component.id == "8l4ygp009s5s"


@pytest.mark.anyio
async def test_afetch_pins_the_same_way() -> None:
    page = Page(load("vendor_shape"))
    transport = httpx.MockTransport(page.handle)
    async with StatusClient(URL, async_transport=transport) as client:
        await client.afetch()
        page.doc["components"][0]["description"] = "Vendor platform"  # not guessable any more
        assert (await client.afetch()).global_component.id == "g0b4lqv7n2xs"
        assert client.pinned == ("g0b4lqv7n2xs", "Vendor Platform")


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


# --- --components: the listing ------------------------------------------------------------------


def test_the_listing_shows_every_component_even_when_none_can_be_chosen() -> None:
    listing = list_components(body(load("cloudflare_like")))
    assert len(listing.components) == 13
    assert listing.global_id is None and "set FAILOPEN_GLOBAL_COMPONENT" in (listing.error or "")
    groups = [c.id for c in listing.components if c.group]
    assert groups == ["1km35smx8p41", "gkbyv4pgrx5p", "t5kq0l3ptg9v"]
    data = listing.to_dict()
    assert json.loads(json.dumps(data)) == data
    assert data["components"][1]["group_id"] == "1km35smx8p41"


def test_the_listing_names_the_chosen_component() -> None:
    listing = list_components(body(load("vendor_shape")))
    assert (listing.global_id, listing.chosen_by, listing.error) == ("g0b4lqv7n2xs", "guess", None)


# --- C8: quirks beside the point ----------------------------------------------------------------


def quirky(change: Any) -> dict[str, Any]:
    doc = load("vendor_shape")
    change(doc["components"])
    return doc


QUIRKS: dict[str, Any] = {
    "region status null": lambda cs: cs[1].update(status=None),
    "region updated_at numeric": lambda cs: cs[1].update(updated_at=1716379200),
    "global updated_at numeric": lambda cs: cs[0].update(updated_at=1716379200.5),
    'region "group": "false"': lambda cs: cs[2].update(group="false"),
    'global "group": "false"': lambda cs: cs[0].update(group="false"),
    "region name null": lambda cs: cs[3].update(name=None),
    "region name a number": lambda cs: cs[3].update(name=7),
    "group_id a number": lambda cs: cs[1].update(group_id=0),
    "optional fields missing": lambda cs: [
        c.pop(k) for c in cs for k in ("created_at", "updated_at", "position", "showcase",
                                       "start_date", "group_id", "page_id", "group",
                                       "only_show_if_degraded")
    ],
}


@pytest.mark.parametrize("change", QUIRKS.values(), ids=QUIRKS.keys())
def test_a_quirk_beside_the_point_leaves_the_reading_counting(change: Any) -> None:
    for kwargs in ({}, {"global_component": "g0b4lqv7n2xs"}):
        doc = quirky(change)
        by_name(doc, "Vendor Platform")["status"] = "major_outage"
        report = parse(doc, **kwargs)
        assert report.global_component.id == "g0b4lqv7n2xs"
        assert report.global_status == "major_outage" and report.known


def test_odd_fields_are_reported_and_the_odd_region_left_out_of_regions() -> None:
    doc = quirky(QUIRKS["region status null"])
    QUIRKS["region updated_at numeric"](doc["components"])
    report = parse(doc)
    assert any("'u5e1qz8m3kwr': status is null" in line for line in report.odd)
    assert "u5e1qz8m3kwr" not in [r.id for r in report.regions]
    assert [r.id for r in report.regions] == ["e7w2lx4n9pcd", "a3s6pt1v8hjy"]
    assert report.to_dict()["odd"] == list(report.odd)
    doc = quirky(QUIRKS['region "group": "false"'])
    report = parse(doc)
    assert "e7w2lx4n9pcd" in [r.id for r in report.regions]
    assert any("group is str" in line for line in report.odd)


@pytest.mark.parametrize("status", [None, 3, {"v": "x"}])
def test_the_global_component_without_a_status_string_is_unreadable(status: Any) -> None:
    doc = load("vendor_shape")
    doc["components"][0]["status"] = status
    with pytest.raises(StatusParseError, match="no status string"):
        parse(doc)


def test_an_unknown_global_status_is_read_and_stays_neutral() -> None:
    doc = quirky(QUIRKS["region status null"])
    doc["components"][0]["status"] = "degraded_everything"
    page = Page(doc)
    runtime = FailOpen(Config(status_url=URL), status_transport=httpx.MockTransport(page.handle))
    try:
        result = runtime.watcher.poll_once()
        assert result.reading == "neutral" and runtime.flag.state.enforce
    finally:
        runtime.stop()


def test_a_quirky_page_in_a_global_outage_still_bypasses() -> None:
    doc = quirky(QUIRKS["region status null"])
    QUIRKS['region "group": "false"'](doc["components"])
    doc["components"][0]["status"] = "major_outage"
    page = Page(doc)
    runtime = FailOpen(Config(status_url=URL), status_transport=httpx.MockTransport(page.handle))
    try:
        assert runtime.watcher.poll_once().reading == "impaired"
        assert not runtime.flag.state.enforce
    finally:
        runtime.stop()


def test_quirks_are_logged_once_per_change(caplog: pytest.LogCaptureFixture) -> None:
    page = Page(quirky(QUIRKS["region status null"]))
    caplog.set_level(logging.INFO, logger="failopen.status")
    with page.client() as client:
        client.fetch()
        client.fetch()
        page.doc = copy.deepcopy(page.doc)
        page.doc["components"][2]["updated_at"] = 5
        client.fetch()
        client.fetch()
    odd = [r for r in caplog.records if "read oddly" in r.getMessage()]
    assert len(odd) == 2 and all(r.levelno == logging.WARNING for r in odd)
    assert "updated_at is int" in odd[1].getMessage()


@pytest.mark.parametrize("value", ["Git Operations\n", " 8l4ygp009s5s"])
def test_a_global_component_with_stray_whitespace_is_refused_at_configuration(value: str) -> None:
    with pytest.raises(ConfigError, match="FAILOPEN_GLOBAL_COMPONENT.*whitespace"):
        Config(status_url=URL, global_component=value)


def test_a_global_component_name_with_inner_spaces_is_accepted() -> None:
    assert Config(global_component="Git Operations").global_component == "Git Operations"


def test_the_odd_list_is_bounded() -> None:
    doc = load("vendor_shape")
    doc["components"] += [{"id": f"x{i}", "status": None} for i in range(500)]
    report = parse(doc, global_component="g0b4lqv7n2xs")
    assert len(report.odd) == 51 and report.odd[-1] == "... and 450 more"
