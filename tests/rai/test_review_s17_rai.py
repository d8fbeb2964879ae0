"""Review 17 of ``failopen rai sync``'s files: what a hand-edited or corrupt state may not do."""

from __future__ import annotations

import json
from pathlib import Path

from _sync_helpers import Runner, sync_args

from failopen.rai._sink import complete_renames
from failopen.rai._state import SyncState, locked
from failopen.testing.rai_emulator import RaiEmulator


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


def test_a_run_through_a_symlink_to_the_state_file_waits_for_the_same_lock(
    sync: Runner, emulator: RaiEmulator, state: Path, out: Path, tmp_path: Path
) -> None:
    # Cron names the state by one path, the DAG by a link to it: one state, so one run at a
    # time (two would deliver the same cohorts twice), and the link stays a link.
    state.write_text(json.dumps({"version": 2, "keys": {}}))
    link = tmp_path / "link.json"
    link.symlink_to(state)
    with locked(str(state)):
        result = sync(*sync_args(link, out, since="2024-05-01T00:00:00Z",
                                 until="2024-05-21T00:00:00Z"))  # fmt: skip
    assert result.code == 1 and "another failopen rai sync is running" in result.err
    assert emulator.requests == 0
    assert sync(*sync_args(link, out, since="2024-05-01T00:00:00Z",
                           until="2024-05-21T00:00:00Z")).code == 0  # fmt: skip
    assert link.is_symlink() and json.loads(state.read_text())["keys"]
