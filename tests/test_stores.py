"""Override stores: memory and file (many processes on one machine)."""

from __future__ import annotations

import json
import logging
import math
import multiprocessing
import os
import stat
import time
from pathlib import Path

import pytest

from failopen.config import Config
from failopen.engine.flag import EnforcementFlag, Override, rfc3339
from failopen.exceptions import ConfigError, StoreError
from failopen.stores import mask_url, open_store
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
    store.save(Override(False, "x", 1.0, 60.0))
    assert store.changed()
    assert store.load() == Override(False, "x", 1.0, 60.0)
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


# --- who may write the override file -------------------------------------------------------------
# Whoever can write the file can switch enforcement off, so the file store trusts only a regular
# file that this user or root wrote, in a directory nobody else can write.

as_root = pytest.mark.skipif(
    not hasattr(os, "geteuid") or os.geteuid() != 0, reason="chown to another uid needs root"
)
OTHER_UID = 65534  # nobody


def _dir(parent: Path, name: str, mode: int = 0o755) -> Path:
    directory = parent / name
    os.mkdir(directory, mode=0o700)
    os.chmod(directory, mode)  # explicit: mkdir's mode goes through the umask
    return directory


def _forged(path: Path) -> None:
    """A well-formed 'enforcement off' override, as an attacker would write it."""
    now = time.time()
    path.write_text(json.dumps({"enforce": False, "reason": "pwned", "set_at": now,
                                "expires_at": now + 3600}))


def test_tmp_path_is_a_safe_directory(tmp_path: Path) -> None:
    # The tests above put stores straight into tmp_path: that only works while it stays private.
    assert stat.S_IMODE(tmp_path.stat().st_mode) & 0o022 == 0


def test_world_writable_directory_is_refused_at_construction(tmp_path: Path) -> None:
    shared = _dir(tmp_path, "shared", 0o1777)  # like /tmp
    with pytest.raises(ConfigError) as info:
        FileStore(shared / "override.json")
    message = str(info.value)
    assert message.startswith("FAILOPEN_STORE: ")
    assert f"directory {shared} is writable by other users (mode 1777)" in message
    assert "mkdir -m 0755" in message
    with pytest.raises(ConfigError, match="writable by other users"):
        open_store((shared / "override.json").as_uri())


def test_group_writable_directory_is_refused(tmp_path: Path) -> None:
    group = _dir(tmp_path, "group", 0o775)
    with pytest.raises(ConfigError, match=r"writable by other users \(mode 0775\)"):
        FileStore(group / "override.json")


@as_root
def test_directory_owned_by_another_user_is_refused(tmp_path: Path) -> None:
    theirs = _dir(tmp_path, "theirs")
    os.chown(theirs, OTHER_UID, -1)
    with pytest.raises(ConfigError, match=f"owned by uid {OTHER_UID}"):
        FileStore(theirs / "override.json")


def test_writable_parent_directory_is_refused_unless_sticky(tmp_path: Path) -> None:
    # Whoever can write the parent can rename the store directory away and put theirs there.
    inner = _dir(_dir(tmp_path, "open", 0o777), "store")
    with pytest.raises(ConfigError, match=f"lets other users replace {inner}"):
        FileStore(inner / "override.json")
    # A sticky parent (like /tmp) only lets each owner rename their own entries: fine.
    FileStore(_dir(_dir(tmp_path, "sticky", 0o1777), "store") / "override.json")


def test_symlinked_directory_is_checked_where_it_really_points(tmp_path: Path) -> None:
    unsafe = _dir(tmp_path, "unsafe", 0o777)
    (tmp_path / "looks-fine").symlink_to(unsafe)
    with pytest.raises(ConfigError, match=f"directory {unsafe} is writable"):
        FileStore(tmp_path / "looks-fine" / "override.json")
    safe = _dir(tmp_path, "safe")
    (tmp_path / "link").symlink_to(safe)
    store = FileStore(tmp_path / "link" / "override.json")
    store.save(Override(False, "via link", 100.0, 200.0))
    assert store.path == tmp_path / "link" / "override.json"
    assert (safe / "override.json").is_file()
    assert store.load() == Override(False, "via link", 100.0, 200.0)


def test_symlink_at_the_path_is_refused_and_leaves_the_flag_alone(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store_dir = _dir(tmp_path, "store")
    path = store_dir / "override.json"
    store = FileStore(path)
    flag = EnforcementFlag(store=store)
    store.save(None)
    flag.refresh(force=True)
    assert flag.enforce is True
    forged = _dir(tmp_path, "elsewhere") / "forged.json"
    _forged(forged)  # a file any check on the target alone would accept
    path.unlink()
    path.symlink_to(forged)
    assert store.changed(), "a symlink swapped in counts as a change"
    with caplog.at_level(logging.ERROR, logger="failopen.flag"):
        flag.refresh()
    assert flag.enforce is True
    assert flag.state.source == "default"
    assert "symbolic link" in caplog.text
    assert "pwned" not in caplog.text
    with pytest.raises(StoreError, match="symbolic link"):
        store.load()


def test_symlink_keeps_the_override_the_flag_last_knew(tmp_path: Path) -> None:
    store_dir = _dir(tmp_path, "store")
    path = store_dir / "override.json"
    flag = EnforcementFlag(store=FileStore(path))
    flag.force_on("incident: enforce", ttl=3600)
    forged = _dir(tmp_path, "elsewhere") / "forged.json"
    _forged(forged)
    path.unlink()
    path.symlink_to(forged)
    flag.refresh()
    assert flag.enforce is True
    assert flag.state.reason == "incident: enforce"


@as_root
def test_file_owned_by_another_user_is_refused(tmp_path: Path) -> None:
    path = _dir(tmp_path, "store") / "override.json"
    store = FileStore(path)
    flag = EnforcementFlag(store=store)
    _forged(path)
    os.chown(path, OTHER_UID, OTHER_UID)
    with pytest.raises(StoreError, match=f"owned by uid {OTHER_UID}") as info:
        store.load()
    assert "pwned" not in str(info.value)
    flag.refresh()
    assert flag.enforce is True


@pytest.mark.parametrize("mode", [0o666, 0o646, 0o664], ids=oct)
def test_file_writable_by_others_is_refused(tmp_path: Path, mode: int) -> None:
    path = _dir(tmp_path, "store") / "override.json"
    store = FileStore(path)
    flag = EnforcementFlag(store=store)
    _forged(path)
    os.chmod(path, mode)
    with pytest.raises(StoreError, match=rf"writable by other users \(mode {mode:04o}\)"):
        store.load()
    flag.refresh()
    assert flag.enforce is True
    os.chmod(path, 0o644)  # what the message says to do
    assert store.load() is not None


def test_fifo_at_the_path_is_refused_without_hanging(tmp_path: Path) -> None:
    path = _dir(tmp_path, "store") / "override.json"
    store = FileStore(path)
    os.mkfifo(path, 0o600)
    with pytest.raises(StoreError, match="not a regular file"):
        store.load()


def test_saved_file_is_private_to_its_writer(tmp_path: Path) -> None:
    path = _dir(tmp_path, "store") / "override.json"
    FileStore(path).save(Override(True, "x", 1.0))
    st = os.lstat(path)
    assert stat.S_ISREG(st.st_mode)
    assert stat.S_IMODE(st.st_mode) == 0o644
    assert st.st_uid == os.geteuid()


# --- times that never lapse or cannot be shown ---------------------------------------------------


@pytest.mark.parametrize(
    "expires_at",
    ["NaN", "Infinity", "-Infinity", "1e300", "1e400", str(10**400), '"nan"', '"2000000000"',
     "true", "-1", "99.0"],  # the last one: before set_at
)
def test_stored_expiry_must_be_a_real_time(tmp_path: Path, expires_at: str) -> None:
    path = _dir(tmp_path, "store") / "override.json"
    store = FileStore(path)
    flag = EnforcementFlag(store=store)
    # Python's json reads NaN and Infinity; a forged or corrupted file can hold them.
    path.write_text(
        f'{{"enforce": false, "reason": "r", "set_at": 100.0, "expires_at": {expires_at}}}'
    )
    with pytest.raises(StoreError, match="expires_at"):
        store.load()
    flag.refresh()
    assert flag.enforce is True


@pytest.mark.parametrize("set_at", ["NaN", "Infinity", "1e300", '"100"', "false", "-5"])
def test_stored_set_at_must_be_a_real_time(set_at: str) -> None:
    with pytest.raises(StoreError, match="set_at"):
        Override.from_json(json.loads(f'{{"enforce": false, "set_at": {set_at}}}'))


def test_override_refuses_non_finite_times_from_code_too() -> None:
    for bad in (math.nan, math.inf, 1e300):
        with pytest.raises(StoreError, match="expires_at"):
            Override(False, "x", 100.0, bad)
        with pytest.raises(StoreError, match="set_at"):
            Override(False, "x", bad)
    assert Override(False, "x", 100, 200).expires_at == 200.0  # ints are fine


def test_override_errors_do_not_echo_the_stored_values() -> None:
    with pytest.raises(StoreError) as info:
        Override.from_json({"enforce": "secret-looking-value", "set_at": 1})
    assert "secret-looking-value" not in str(info.value)


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf, 1e300, -1e300])
def test_rfc3339_never_raises(value: float) -> None:
    shown = rfc3339(value)
    assert shown is not None
    assert shown.startswith("invalid time (")
    assert rfc3339(0.0) == "1970-01-01T00:00:00.000Z"
    assert rfc3339(None) is None


# --- store URLs never show a password ----------------------------------------------------------

SECRET = "s3cret-Pa55"


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("memory:", "memory:"),
        ("file:///run/failopen/override.json", "file:///run/failopen/override.json"),
        ("file:///run/ops@site/override.json", "file:///run/ops@site/override.json"),
        (f"file://u:{SECRET}@host/o.json", "file://u:***@host/o.json"),
        (f"redis://:{SECRET}@host:6379/0", "redis://:***@host:6379/0"),
        (f"rediss://default:{SECRET}@cache.example.com:6380/1",
         "rediss://default:***@cache.example.com:6380/1"),
        (f"redis://{SECRET}@host", "redis://***@host"),  # a lone userinfo may be the password
        (f"redis://:{SECRET}@@host", "redis://:***@host"),  # an unescaped @ in the password
        (f"redis://u:{SECRET}@[::1]:6379", "redis://u:***@[::1]:6379"),
        (f"redis://host/0?db=2&password={SECRET}&x=1", "redis://host/0?db=2&password=***&***"),
        (f"redis://host?x=1&auth_token={SECRET}", "redis://host?x=1&auth_token=***"),
        (f"redis://u:{SECRET}@host:notaport/0", "redis://u:***@host:notaport/0"),
        (f"redis://host#{SECRET}", "redis://host#***"),
    ],
)
def test_mask_url_hides_passwords(url: str, shown: str) -> None:
    assert mask_url(url) == shown


@pytest.mark.parametrize("odd", [f"{SECRET}", f"no scheme :{SECRET}@x", "", f"://:{SECRET}@h",
                                 f"redis://[:{SECRET}@h"])
def test_mask_url_never_echoes_what_it_cannot_read(odd: str) -> None:
    assert SECRET not in mask_url(odd)


@pytest.mark.parametrize(
    "url",
    [f"redis://:{SECRET}@/0", f"rediss://u:{SECRET}@", f"postgres://u:{SECRET}@db",
     f"file://u:{SECRET}@otherhost/run/o.json", f"{SECRET}", f"memcached://{SECRET}@h"],
)
def test_an_unusable_store_url_fails_at_config_without_its_password(url: str) -> None:
    with pytest.raises(ConfigError, match="FAILOPEN_STORE") as raised:
        Config(store=url)
    assert SECRET not in str(raised.value)
    with pytest.raises(ConfigError) as raised:
        Config.from_env({"FAILOPEN_STORE": url})
    assert SECRET not in str(raised.value)
    with pytest.raises(ConfigError) as raised:
        open_store(url)
    assert SECRET not in str(raised.value)


def test_an_unknown_store_is_refused_with_what_to_use_instead() -> None:
    with pytest.raises(ConfigError) as raised:
        Config.from_env({"FAILOPEN_STORE": f"memcached://:{SECRET}@host:11211"})
    message = str(raised.value)
    assert "redis://" in message and "file:///" in message and "memory:" in message
    assert SECRET not in message


def test_describe_and_repr_mask_the_store_url(tmp_path: Path) -> None:
    config = Config(store=f"file://{tmp_path}/override.json")
    assert config.describe()["store"] == f"file://{tmp_path}/override.json"
    # A Config only ever holds a store it can open; should a scheme with a password be built
    # later, describe() and repr() already mask it.
    masked = Config.__new__(Config)
    object.__setattr__(masked, "__dict__", {**config.__dict__,
                                            "store": f"redis://:{SECRET}@host"})
    assert SECRET not in repr(masked)
    assert masked.describe()["store"] == "redis://:***@host"


def test_a_refused_file_is_logged_once_per_change(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A file from an older version (forcing off with no expiry) is refused, once, not every
    second: the watcher's refresh asks ``changed()``, which stays False until the file changes."""
    path = _dir(tmp_path, "store") / "override.json"
    store = FileStore(path)
    path.write_text(json.dumps({"enforce": False, "reason": "old", "set_at": time.time()}))
    with caplog.at_level(logging.ERROR, logger="failopen.flag"):
        flag = EnforcementFlag(store=store)
        for _ in range(5):
            flag.refresh()
    assert flag.enforce is True
    assert [r.getMessage() for r in caplog.records].count(caplog.records[0].getMessage()) == 1
    assert "no expiry" in caplog.text
    EnforcementFlag(store=FileStore(path)).force_on("fixed")  # a good file replaces it
    flag.refresh()
    assert flag.state.source == "override" and flag.state.reason == "fixed"
