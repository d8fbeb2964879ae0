"""Choosing the global component: what each refusal tells the operator, in full.

The refusal is what an operator reads on the flag endpoint, in ``failopen watch`` and in the log
when failopen will not decide which component stands for the platform: the fix first, then why,
then the components to choose from. tests/test_status_components.py drives the same rules
through whole status documents; here each message is pinned, since it is the only guide to the
setting that unblocks a deployment.
"""

from __future__ import annotations

import pytest

from failopen.exceptions import GlobalComponentError
from failopen.providers.global_component import (
    Candidate,
    Choice,
    choose_global,
    describe_components,
    is_region_label,
)

FIX = ("components.json: set FAILOPEN_GLOBAL_COMPONENT to the id (or exact name) of the "
       "component that stands for the whole platform; `failopen status --components` lists "
       "them. Why: ")
SHAPE = ("the page does not have the documented shape (one component with description null for "
         "the whole platform, one component per region labelled with its region, no groups), so "
         "failopen will not guess which component is global: ")


def c(id: str, name: str, description: str | None = "us-east-1", *, null: bool = False,
      group: bool = False, member: bool = False) -> Candidate:
    return Candidate(id, name, None if null else description, null, group, member)


GLOBAL = c("g1", "Global", null=True)
US = c("r1", "US East")
EU = c("r2", "EU (Frankfurt)", "EU (Frankfurt)")
PAGE = [GLOBAL, US, EU]
LISTED = "g1 (Global), r1 (US East), r2 (EU (Frankfurt))"


def refusal(candidates: list[Candidate], *, configured: str | None = None,
            pinned: tuple[str, str] | None = None, complete: bool = True) -> str:
    with pytest.raises(GlobalComponentError) as raised:
        choose_global(candidates, configured=configured, pinned=pinned, complete=complete)
    return str(raised.value)


def test_each_way_of_choosing_says_how() -> None:
    assert choose_global(PAGE, configured=None, pinned=None, complete=True) == Choice("g1", "guess")
    assert choose_global(PAGE, configured="r1", pinned=None, complete=True) == Choice("r1", "id")
    assert choose_global(PAGE, configured="Global", pinned=None, complete=True) \
        == Choice("g1", "name")
    assert choose_global(PAGE, configured="r2", pinned=("g1", "Global"), complete=False) \
        == Choice("g1", "pinned")


def test_a_pinned_component_gone_from_the_page() -> None:
    assert refusal([US, EU], pinned=("g1", "Global")) == (
        FIX + "the global component g1 (Global), chosen when this process first read the page, "
        "is no longer on it; this reading does not count; components: r1 (US East), "
        "r2 (EU (Frankfurt))")


def test_a_pinned_component_that_became_a_group() -> None:
    grouped = c("g1", "Global", null=True, group=True)
    assert refusal([grouped, US], pinned=("g1", "Global")) == (
        FIX + "the global component g1 (Global), chosen when this process first read the page, "
        "is now a group component or its group flag is unreadable (a regional outage would read "
        "as global); this reading does not count; components: g1 (Global) [group], r1 (US East)")


def test_a_configured_value_that_matches_nothing() -> None:
    assert refusal(PAGE, configured="Everything") == (
        FIX + "FAILOPEN_GLOBAL_COMPONENT 'Everything' is neither the id nor the exact name of a "
        f"component on the page; components: {LISTED}")


def test_a_configured_name_that_matches_several() -> None:
    twins = [c("a", "API"), c("b", "API"), GLOBAL]
    assert refusal(twins, configured="API") == (
        FIX + "FAILOPEN_GLOBAL_COMPONENT 'API' names 2 components (a (API), b (API)); use the id "
        "of the right one; components: a (API), b (API), g1 (Global)")


def test_a_configured_group() -> None:
    group = c("grp", "All regions", group=True)
    assert refusal([group, US], configured="grp") == (
        FIX + "FAILOPEN_GLOBAL_COMPONENT 'grp' is a group component, or its group flag is "
        "unreadable (a group reports the worst status of its members, so a regional outage "
        "would read as global); choose the component that stands for the whole platform; "
        "components: grp (All regions) [group], r1 (US East)")


def test_a_long_configured_value_is_shown_cut_to_80_characters() -> None:
    long = "x" * 200
    assert f"FAILOPEN_GLOBAL_COMPONENT '{'x' * 80}' is neither" in refusal(PAGE, configured=long)


@pytest.mark.parametrize(("candidates", "complete", "why"), [
    (PAGE, False, "some entries are not components with an id"),
    ([GLOBAL, c("r1", "US East", member=True)], True, "groups or members of groups: 1"),
    ([US, EU], True, "components with description null: none"),
    ([GLOBAL, c("g2", "Other", null=True), US], True,
     "components with description null: 2 (g1 (Global), g2 (Other))"),
    ([GLOBAL, c("r1", "API", "Requests for GitHub APIs")], True,
     "besides the one with description null, components without a region label: 1 (r1 (API))"),
])
def test_a_page_of_another_shape_is_not_guessed(
    candidates: list[Candidate], complete: bool, why: str,
) -> None:
    shown = describe_components(candidates)
    assert refusal(candidates, complete=complete) == FIX + SHAPE + why + "; components: " + shown


def test_the_listing_cuts_ids_names_and_count() -> None:
    assert describe_components([]) == "none"
    long = c("i" * 100, "n" * 100)
    assert describe_components([long]) == f"{'i' * 64} ({'n' * 80})"
    twenty = [c(f"r{n}", f"R{n}") for n in range(20)]
    assert describe_components(twenty) == ", ".join(f"r{n} (R{n})" for n in range(20))
    assert describe_components([*twenty, c("x", "X")]) == describe_components(twenty) \
        + ", ... (1 more)"


@pytest.mark.parametrize(("description", "label"), [
    ("us-east-1", True), ("EU (Frankfurt)", True), ("Asia Pacific Sydney", True),
    ("Asia Pacific South East", False), ("Requests for GitHub APIs", False), (None, False),
    ("", False), ("eu-", False), ("x" * 32, True), ("x" * 33, False),
])
def test_a_region_label_is_short_with_at_most_three_words(
    description: str | None, label: bool,
) -> None:
    assert is_region_label(description) is label


def test_a_long_pinned_id_and_name_are_shown_cut() -> None:
    # A hostile or broken page chooses these: an error line stays bounded.
    pinned = ("i" * 100, "n" * 100)
    shown = f"the global component {'i' * 64} ({'n' * 80}), chosen when"
    assert shown in refusal(PAGE, pinned=pinned)
    grouped = c("i" * 100, "Global", null=True, group=True)
    assert shown in refusal([grouped, US], pinned=pinned)
