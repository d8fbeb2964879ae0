"""scripts/unasync.py: the blocking client is generated from the asyncio one, and CI's
``--check`` catches a generated file that is stale."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parent.parent.parent
SCRIPT = ROOT / "scripts" / "unasync.py"
SOURCE = "failopen/rai/_async_client.py"
GENERATED = "failopen/rai/_client.py"


def _load_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("unasync_script", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


unasync = _load_script()


def run(*args: str) -> subprocess.CompletedProcess[str]:
    """The script as CI runs it: from the repository root, standard library only (-I)."""
    return subprocess.run([sys.executable, "-I", str(SCRIPT), *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)  # fmt: skip


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A copy of the source and the generated file, as they are committed."""
    for name in (SOURCE, GENERATED):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(ROOT / name, tmp_path / name)
    return tmp_path


def test_the_committed_client_is_current() -> None:
    done = run("--check")
    assert done.returncode == 0, done.stderr
    assert unasync.stale(ROOT) == []


def test_a_hand_edit_of_the_generated_file_fails_the_check(tree: Path) -> None:
    generated = tree / GENERATED
    generated.write_text(generated.read_text().replace("    def close(self)", "    def shut(self)"))
    assert unasync.stale(tree) == [generated]
    done = run("--check", "--root", str(tree))
    assert done.returncode == 1
    assert f"{GENERATED} is stale" in done.stderr
    assert "run `python scripts/unasync.py`" in done.stderr
    assert "-    def shut(self)" in done.stderr and "+    def close(self)" in done.stderr


def test_a_source_change_not_regenerated_fails_the_check_until_the_script_runs(
    tree: Path,
) -> None:
    source = tree / SOURCE
    source.write_text(source.read_text().replace(
        "    # --- lifetime ---\n",
        "    # --- lifetime ---\n\n    async def ping(self) -> bytes:\n"
        '        """Ask the service."""\n        return await self._request("GET", "/ping")\n\n',
    ))  # fmt: skip
    assert run("--check", "--root", str(tree)).returncode == 1
    assert run("--root", str(tree)).returncode == 0  # rewrites the generated file
    assert run("--check", "--root", str(tree)).returncode == 0
    text = (tree / GENERATED).read_text()
    assert '    def ping(self) -> bytes:\n        """Ask the service."""\n' in text
    assert 'return self._request("GET", "/ping")' in text


def test_a_missing_generated_file_fails_the_check(tree: Path) -> None:
    (tree / GENERATED).unlink()
    assert run("--check", "--root", str(tree)).returncode == 1


def test_the_generated_file_says_what_made_it_in_its_first_lines() -> None:
    first = "\n".join((ROOT / GENERATED).read_text().splitlines()[:3])
    assert "GENERATED" in first and SOURCE in first and "do not edit" in first
    assert "python scripts/unasync.py" in first and "--check" in first


@pytest.mark.skipif(importlib.util.find_spec("ruff") is None, reason="ruff is not installed")
@pytest.mark.parametrize("command", [["check"], ["format", "--check"]])
def test_the_generated_file_satisfies_ruff(command: list[str]) -> None:
    # Sorted imports after the renames, no unused name, `yield from` (UP028), line lengths.
    done = subprocess.run([sys.executable, "-m", "ruff", *command, GENERATED], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_spellings() -> None:
    # ``import time`` is in the source: the script renames and drops imports, it adds none.
    source = '''"""The asyncio client."""

# unasync: a note for the source's reader only

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from contextlib import aclosing

import httpx

from failopen.rai._async_pipeline import Pipeline


class AsyncClient:
    def __init__(self, sleep: Callable[[float], Awaitable[object]] = asyncio.sleep) -> None:
        self.slots = asyncio.BoundedSemaphore(2)
        self.http = httpx.AsyncClient(transport=httpx.AsyncBaseTransport())
        self.pipeline = Pipeline

    async def items(self, pages: AsyncGenerator[list[int], None]) -> AsyncIterator[int]:
        async with aclosing(pages):
            async for page in pages:
                for item in page:
                    yield item

    async def __aenter__(self) -> AsyncClient:
        await self.http.aclose()
        return await anext(self.items(self.pages()))
'''
    result = unasync.unasync_text(source, "src/x.py")
    assert result.startswith("# GENERATED by `python scripts/unasync.py` from src/x.py:\n")
    body = result.split("\n", 3)[3]
    assert body == '''"""The blocking client."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Generator, Iterator
from contextlib import closing

import httpx

from failopen.rai._pipeline import Pipeline


class Client:
    def __init__(self, sleep: Callable[[float], None] = time.sleep) -> None:
        self.slots = threading.BoundedSemaphore(2)
        self.http = httpx.Client(transport=httpx.BaseTransport())
        self.pipeline = Pipeline

    def items(self, pages: Generator[list[int], None, None]) -> Iterator[int]:
        with closing(pages):
            for page in pages:
                yield from page

    def __enter__(self) -> Client:
        self.http.close()
        return next(self.items(self.pages()))
'''


def test_an_async_construct_without_a_sync_spelling_stops_the_script() -> None:
    source = "import asyncio\n\n\nasync def both() -> None:\n    await asyncio.gather()\n"
    with pytest.raises(SystemExit, match=r"no sync spelling for 'asyncio'.*asyncio\.gather"):
        unasync.unasync_text(source, "src/x.py")


def test_only_a_loop_that_just_re_yields_becomes_yield_from() -> None:
    source = (
        "async def f(pages: list[list[int]]) -> None:\n"
        "    for page in pages:\n        yield page\n        print(page)\n"
        "    for page in pages:\n        yield page\n\n        print(page)\n"
        "    for page in pages:\n        yield page\n    else:\n        print(pages)\n"
        "    for page in pages:\n        yield page\n    print(pages)\n"
    )
    body = unasync.unasync_text(source, "x.py").split("\n", 3)[3]
    assert body == source.replace("async def", "def").replace(
        "    for page in pages:\n        yield page\n    print", "    yield from pages\n    print"
    )


def test_imports_are_sorted_again_after_a_rename() -> None:
    source = (
        "from failopen.rai._arguments import Params\n"
        "from failopen.rai._async_twin import Twin\n"
        "from failopen.rai._base import BaseClient\n"
        "from failopen.rai._pager import Pager\n"
        "\n\nclass C(BaseClient, Twin, Pager[Params]): ...\n"
    )
    assert unasync.unasync_text(source, "x.py").split("\n", 3)[3].splitlines()[:4] == [
        "from failopen.rai._arguments import Params",
        "from failopen.rai._base import BaseClient",
        "from failopen.rai._pager import Pager",
        "from failopen.rai._twin import Twin",
    ]
