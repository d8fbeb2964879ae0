"""Which component of a status page is the global one: configured, pinned, or guessed.

The global component decides every bypass, so it is chosen strictly; everything else on the page
is read leniently (see :mod:`failopen.providers.status_documents`).

In order:

1. **Pinned.** Once a client has chosen, it keeps the chosen id for its lifetime. If that id later
   disappears from the page, the reading is a :class:`GlobalComponentError`: never a bypass, and
   never a quiet switch to another component.
2. **Configured** (``FAILOPEN_GLOBAL_COMPONENT``): a component id, or else an exact, unique
   component name. Ids win over names. A name that matches several components, a value that
   matches none, and a group component (Statuspage reports a group as the worst of its members,
   so a regional outage would read as global) are errors that list the components.
3. **Guessed**, only when the page has the documented shape exactly (spec 2.5: one global
   component whose ``description`` is null and one component per region, each labelled with its
   region). Exactly means all of:

   * every entry of ``components`` is an object with an id;
   * no group components and no component inside a group (``group`` true or a ``group_id``);
     the spec's list holds no groups, and pages that group components (by region, by product)
     are shaped differently;
   * exactly one component carries ``"description": null`` (the key present, the value null);
   * every other component's description is a region label: 1 to 32 characters from letters,
     digits, spaces and ``. _ ( ) / -``, ending in a letter, digit or ``)``, at most three
     words. Prose (``"Requests for GitHub APIs"``) is not a label, so a page whose components
     are described in sentences, with one link placeholder left null, is not taken for the
     vendor's.

Anything else is a :class:`GlobalComponentError` that lists the components as ``id (name)`` and
says to set ``FAILOPEN_GLOBAL_COMPONENT``. A stricter rule only ever costs a setting; a looser
one could elect a region and turn a regional outage into a bypass.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from failopen.exceptions import GlobalComponentError

__all__ = ["Choice", "choose_global", "describe_components", "is_region_label"]

_MAX_SHOWN = 20
_LABEL = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9 ._()/-]{0,30}[A-Za-z0-9)])?")
_MAX_LABEL_WORDS = 3
_WHAT_TO_SET = (
    "set FAILOPEN_GLOBAL_COMPONENT to the id (or exact name) of the component that stands for "
    "the whole platform; `failopen status --components` lists them"
)


@dataclass(frozen=True)
class Candidate:
    """What the chooser needs to know about one component."""

    id: str
    name: str
    description: str | None
    null_description: bool  # "description": null, the key present
    group: bool  # a group component, or one whose group flag could not be read
    member: bool  # belongs to a group (a group_id)


@dataclass(frozen=True)
class Choice:
    """The chosen component's id and how it was chosen (``pinned``, ``id``, ``name``, ``guess``)."""

    id: str
    how: str


def is_region_label(description: str | None) -> bool:
    """True for a short label like ``us-east-1`` or ``EU (Frankfurt)``, not for prose."""
    if description is None or not _LABEL.fullmatch(description):
        return False
    return len(description.split()) <= _MAX_LABEL_WORDS


def describe_components(candidates: Iterable[Candidate]) -> str:
    """``id (name), ...``, at most twenty, for error messages."""
    items = list(candidates)
    shown = ", ".join(
        f"{c.id[:64]} ({c.name[:80]})" + (" [group]" if c.group else "")
        for c in items[:_MAX_SHOWN]
    )
    if len(items) > _MAX_SHOWN:
        shown += f", ... ({len(items) - _MAX_SHOWN} more)"
    return shown or "none"


def _refuse(reason: str, shown: Iterable[Candidate]) -> GlobalComponentError:
    return GlobalComponentError(
        # The fix first: the flag endpoint and the watch output cut a poll error at 300
        # characters, and the long listing must not push the advice out.
        f"components.json: {_WHAT_TO_SET}. Why: {reason}; components: "
        f"{describe_components(shown)}"
    )


def choose_global(
    candidates: Sequence[Candidate],
    *,
    configured: str | None,
    pinned: tuple[str, str] | None,
    complete: bool,
) -> Choice:
    """Choose the global component. ``pinned`` is (id, name) of an earlier choice; ``complete``
    is False when some entry of the page could not be read as a component. Raises
    GlobalComponentError."""
    by_id = {c.id: c for c in candidates}
    if pinned is not None:
        pinned_id, pinned_name = pinned
        if pinned_id not in by_id:
            raise _refuse(
                f"the global component {pinned_id[:64]} ({pinned_name[:80]}), chosen when this "
                "process first read the page, is no longer on it; this reading does not count",
                candidates,
            )
        if by_id[pinned_id].group:
            # The same rule as a configured one: a group reports its members' worst status.
            raise _refuse(
                f"the global component {pinned_id[:64]} ({pinned_name[:80]}), chosen when this "
                "process first read the page, is now a group component or its group flag is "
                "unreadable (a regional outage would read as global); this reading does not "
                "count", candidates,
            )
        return Choice(pinned_id, "pinned")
    if configured is not None:
        return _configured(candidates, by_id, configured)
    return _guess(candidates, complete)


def _configured(
    candidates: Sequence[Candidate], by_id: dict[str, Candidate], configured: str
) -> Choice:
    shown = repr(configured[:80])
    chosen = by_id.get(configured)
    how = "id"
    if chosen is None:
        named = [c for c in candidates if c.name == configured]
        if not named:
            raise _refuse(
                f"FAILOPEN_GLOBAL_COMPONENT {shown} is neither the id nor the exact name of a "
                "component on the page", candidates,
            )
        if len(named) > 1:
            raise _refuse(
                f"FAILOPEN_GLOBAL_COMPONENT {shown} names {len(named)} components "
                f"({describe_components(named)}); use the id of the right one", candidates,
            )
        chosen, how = named[0], "name"
    if chosen.group:
        # A member of a group is fine: its status is its own.
        raise _refuse(
            f"FAILOPEN_GLOBAL_COMPONENT {shown} is a group component, or its group flag is "
            "unreadable (a group reports the worst status of its members, so a regional outage "
            "would read as global); choose the component that stands for the whole platform",
            candidates,
        )
    return Choice(chosen.id, how)


def _guess(candidates: Sequence[Candidate], complete: bool) -> Choice:
    shape = (
        "the page does not have the documented shape (one component with description null for "
        "the whole platform, one component per region labelled with its region, no groups), so "
        "failopen will not guess which component is global: "
    )
    if not complete:
        raise _refuse(shape + "some entries are not components with an id", candidates)
    grouped = [c for c in candidates if c.group or c.member]
    if grouped:
        raise _refuse(shape + f"groups or members of groups: {len(grouped)}", candidates)
    nulls = [c for c in candidates if c.null_description]
    if len(nulls) != 1:
        found = f"{len(nulls)} ({describe_components(nulls)})" if nulls else "none"
        raise _refuse(shape + f"components with description null: {found}", candidates)
    unlabelled = [c for c in candidates if c is not nulls[0] and not is_region_label(c.description)]
    if unlabelled:
        raise _refuse(
            shape + "besides the one with description null, components without a region "
            f"label: {len(unlabelled)} ({describe_components(unlabelled)})", candidates,
        )
    return Choice(nulls[0].id, "guess")
