"""examples/rai/sync.sh maps the sync's exit codes as docs/rai.md says: 5 and 143 are retried
once, 6 is a warning, anything else is an error for a person; the script exits with the code.

``failopen``, ``sleep`` and ``logger`` are stand-ins on PATH: each run of the stand-in
``failopen`` takes the next exit code from a list, and ``logger`` records its arguments.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "examples" / "rai" / "sync.sh"

pytestmark = pytest.mark.skipif(shutil.which("timeout") is None, reason="needs coreutils' timeout")


def _tool(folder: Path, name: str, body: str) -> None:
    path = folder / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)


def _run(tmp_path: Path, codes: list[int]) -> tuple[int, list[str], list[str]]:
    bin_dir, home = tmp_path / "bin", tmp_path / "home"
    bin_dir.mkdir()
    home.mkdir()
    (tmp_path / "codes").write_text("".join(f"{code}\n" for code in codes))
    _tool(
        bin_dir,
        "failopen",
        f"""echo "$*" >>{tmp_path}/calls
code=$(head -n 1 {tmp_path}/codes); sed -i 1d {tmp_path}/codes
echo '{{"exit_code": '"$code"'}}'
exit "$code"
""",
    )
    _tool(bin_dir, "sleep", "exit 0\n")
    _tool(bin_dir, "logger", f'echo "$*" >>{tmp_path}/logged\n')
    env_file = tmp_path / "rai.env"
    env_file.write_text("FAILOPEN_RAI_BASE_URL=http://127.0.0.1:9\n")
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}",
           "RAI_ENV_FILE": str(env_file), "RAI_HOME": str(home)}  # fmt: skip
    done = subprocess.run(["sh", str(SCRIPT)], env=env, timeout=60, check=False)
    calls = (tmp_path / "calls").read_text().splitlines()
    logged_file = tmp_path / "logged"
    logged = logged_file.read_text().splitlines() if logged_file.exists() else []
    assert (home / "sync.jsonl").read_text().count("exit_code") == len(calls)
    return done.returncode, calls, logged


def test_a_clean_run_is_one_call_and_no_log(tmp_path: Path) -> None:
    code, calls, logged = _run(tmp_path, [0])
    assert (code, len(calls), logged) == (0, 1, [])
    assert calls[0].startswith("rai sync ") and "--json" in calls[0]


@pytest.mark.parametrize("first", [5, 143])
def test_a_server_failure_or_sigterm_is_retried_once(tmp_path: Path, first: int) -> None:
    code, calls, logged = _run(tmp_path, [first, 0])
    assert (code, len(calls), logged) == (0, 2, [])


def test_a_retry_that_fails_again_is_logged_as_an_error(tmp_path: Path) -> None:
    code, calls, logged = _run(tmp_path, [5, 5])
    assert (code, len(calls)) == (5, 2)
    assert logged == ["-p user.err -t failopen-rai exit 5 after one retry"]


def test_a_gap_is_a_warning_without_a_retry(tmp_path: Path) -> None:
    code, calls, logged = _run(tmp_path, [6])
    assert (code, len(calls)) == (6, 1)
    assert logged[0].startswith("-p user.warning -t failopen-rai exit 6")


@pytest.mark.parametrize("first", [1, 2, 3, 4])
def test_other_codes_need_a_person_and_are_not_retried(tmp_path: Path, first: int) -> None:
    code, calls, logged = _run(tmp_path, [first])
    assert (code, len(calls)) == (first, 1)
    assert logged == [f"-p user.err -t failopen-rai exit {first}: needs a person "
                      "(docs/rai.md, Exit codes)"]  # fmt: skip
