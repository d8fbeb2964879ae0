"""Review 17 of ``failopen rai sync``'s files: what a hand-edited or corrupt state may not do."""

from __future__ import annotations

import json
from pathlib import Path

from failopen.rai._sink import complete_renames
from failopen.rai._state import SyncState


def test_a_recorded_rename_never_replaces_a_delivered_file(tmp_path: Path) -> None:
    # A file, once visible, is never written again: a state (edited by hand, or restored from a
    # backup) whose rename points at a delivered file must not replace it with other records.
    day = tmp_path / "out" / "kind=sessions" / "dt=2026-11-01"
    day.mkdir(parents=True)
    final = day / "20261101T000000Z-0123abcd-0001.jsonl"
    final.write_text('{"id":"delivered"}\n')
    temp = day / ".failopen-sync-0123456789abcdef-x1.part"
    temp.write_text('{"id":"other"}\n')
    state = tmp_path / "state.json"
    state.write_text(json.dumps({"version": 3, "keys": {}, "renames": [[str(temp), str(final)]]}))
    renames = SyncState.load(str(state)).renames
    assert complete_renames(renames) == []
    assert final.read_text() == '{"id":"delivered"}\n'
