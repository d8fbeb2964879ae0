"""Override stores: memory and file (many processes on one machine)."""

from __future__ import annotations

import json
import multiprocessing
from pathlib import Path

import pytest

from failopen.exceptions import ConfigError, StoreError
from failopen.flag import EnforcementFlag, Override
from failopen.stores import open_store
from failopen.stores.file import FileStore
from failopen.stores.memory import MemoryStore


def test_open_store_by_url(tmp_path: Path) -> None:
    assert isinstance(open_store("memory:"), MemoryStore)
    store = open_store(f"file://{tmp_path}/override.json")
    assert isinstance(store, FileStore)
    assert store.path == tmp_path / "override.json"
    with pytest.raises(ConfigError, match="FAILOPEN_STORE"):
        open_store("ftp://x")
    with pytest.raises(ConfigError, match="does not exist"):
        open_store("file:///no/such/dir/override.json")
    with pytest.raises(ConfigError, match="absolute"):
        FileStore("relative.json")


def test_memory_store_changed_tracks_loads() -> None:
    store = MemoryStore()
    assert store.load() is None
    assert not store.changed()
    store.save(Override(False, "x", 1.0))
    assert store.changed()
    assert store.load() == Override(False, "x", 1.0)
    assert not store.changed()


def test_file_store_round_trip_and_change_detection(tmp_path: Path) -> None:
    path = tmp_path / "override.json"
    writer, reader = FileStore(path), FileStore(path)
    assert reader.load() is None
    assert not reader.changed()
    writer.save(Override(False, "outage", 100.0, 200.0))
    assert reader.changed()
    assert reader.load() == Override(False, "outage", 100.0, 200.0)
    assert not reader.changed()
    writer.save(None)
    assert reader.changed()
    assert reader.load() is None
    assert json.loads(path.read_text()) is None
    leftovers = [p for p in tmp_path.iterdir() if p.name != "override.json"]
    assert leftovers == [], "atomic writes leave no temporary files behind"


def test_file_store_rejects_garbage_without_guessing(tmp_path: Path) -> None:
    path = tmp_path / "override.json"
    store = FileStore(path)
    path.write_text("{not json")
    with pytest.raises(StoreError, match="not valid JSON"):
        store.load()
    path.write_text(json.dumps({"enforce": "false", "set_at": 1}))
    with pytest.raises(StoreError):
        store.load()
    path.write_bytes(b" " * 70_000)
    with pytest.raises(StoreError, match="larger"):
        store.load()


def test_file_store_write_error_is_a_store_error(tmp_path: Path) -> None:
    directory = tmp_path / "gone"
    directory.mkdir()
    store = FileStore(directory / "override.json")
    directory.rmdir()
    with pytest.raises(StoreError, match="cannot write"):
        store.save(None)


def _force_off_in_child(path: str) -> None:
    EnforcementFlag(store=FileStore(path)).force_off("set by another process", ttl=300)


def test_another_process_sees_the_override(tmp_path: Path) -> None:
    path = tmp_path / "override.json"
    flag = EnforcementFlag(store=FileStore(path))
    assert flag.enforce is True
    ctx = multiprocessing.get_context("spawn")
    child = ctx.Process(target=_force_off_in_child, args=(str(path),))
    child.start()
    child.join(30)
    assert child.exitcode == 0
    flag.refresh()
    assert flag.enforce is False
    assert flag.state.reason == "set by another process"
