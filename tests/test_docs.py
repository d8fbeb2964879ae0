"""The manual (MkDocs, docs/) builds with --strict, offline, and keeps its promises to a reader:
"the vendor is down" is one click from the landing page to the runbook's step, and every way it
says to install failopen works before a release exists.

The build runs here, in the test suite, rather than as a step of its own in .ci/run: the README's
test line (which CI runs verbatim) stays as it is, and a local ``pytest`` says what CI says.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from _manual import DOCS, README, ROOT, manual, page, section, shown
from _wheel import build_wheel

#: The runbook's steps, as the incident index links them.
STEPS = ("1-is-failopen-already-bypassing", "2-force-enforcement-off-for-a-while",
         "3-force-enforcement-on", "4-hand-back-to-the-watcher", "5-review-what-was-admitted")


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_the_manual_builds_strictly_offline(tmp_path: Path) -> None:
    """``mkdocs build --strict``: a broken link or anchor, a page left out of the nav, a missing
    included file or a docstring mkdocstrings cannot read fails the build."""
    site = tmp_path / "site"
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}  # the theme's banner, not a warning
    built = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file",
         str(ROOT / "mkdocs.yml"), "--site-dir", str(site)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=540)
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-5000:]
    assert "WARNING" not in built.stderr, built.stderr[-5000:]

    home = (site / "index.html").read_text()
    assert "ENFORCEMENT FLAG" in home  # the README's picture, included
    assert 'href="operations/#in-an-incident"' in home
    runbook = (site / "operations" / "index.html").read_text()
    for step in STEPS:
        assert f'id="{step}"' in runbook, step
    changelog = (site / "changelog" / "index.html").read_text()
    assert 'id="unreleased"' in changelog  # CHANGELOG.md, included
    api = (site / "api" / "index.html").read_text()
    assert "FailOpenMiddleware" in api and "Config" in api
    # Nothing a reader's browser would fetch from elsewhere: no web fonts, no remote scripts.
    for html in site.rglob("*.html"):
        text = html.read_text()
        assert "fonts.googleapis.com" not in text, html
        remote = re.findall(r'<(?:script|link)[^>]+(?:src|href)="(https?://[^"]+)"', text)
        assert not remote, (html, remote)


def test_the_runbook_opens_on_the_incident_index() -> None:
    """The runbook's first screen is the incident index, and it links every step, the vendor
    being down first."""
    runbook = page("operations.md")
    first_screen = "\n".join(runbook.splitlines()[:16])
    assert "## In an incident" in first_screen
    index = section(runbook, "## In an incident")
    rows = [line for line in index.splitlines() if line.startswith("|")][2:]
    assert "vendor is down" in rows[0] and f"(#{STEPS[0]})" in rows[0], rows[0]
    for step in STEPS:
        assert f"(#{step})" in index, f"the incident index does not link step {step}"
    headings = re.findall(r"^### (\d\. .+)$", runbook, re.M)
    assert len(headings) == len(STEPS), headings


def test_the_landing_pages_link_to_the_incident_index() -> None:
    """One click from the landing page (the README, and the site's home) to the index."""
    readme = README.read_text()
    first_screens = "\n".join(readme.splitlines()[:30])
    assert "(docs/operations.md#in-an-incident)" in first_screens
    home = shown(page("index.md"))
    assert "(operations.md#in-an-incident)" in home.split("## What it does")[0]


def test_the_readme_marks_the_picture_the_home_page_includes() -> None:
    readme = README.read_text()
    start, end = "<!-- --8<-- [start:picture] -->", "<!-- --8<-- [end:picture] -->"
    assert readme.index(start) < readme.index(end)
    assert "ENFORCEMENT FLAG" in readme[readme.index(start):readme.index(end)]
    assert '--8<-- "README.md:picture"' in page("index.md")
    assert '--8<-- "CHANGELOG.md"' in page("changelog.md")


def test_the_install_page_shows_the_readme_lines() -> None:
    lines = [line for line in README.read_text().splitlines()
             if line.startswith("python3 -m venv .venv &&")]
    assert len(lines) == 2, lines  # the demo line and the test line
    install = page("install.md")
    for line in lines:
        assert line in install.splitlines(), line
    assert lines[0] in page("demo.md").splitlines()


def _pip_installs() -> list[tuple[str, list[str]]]:
    """Every ``pip install ...`` the README and the pages show (code blocks and inline code),
    as words, with the file it is in."""
    found = []
    for path, text in manual().items():
        for match in re.finditer(r"pip install ([^`\n#]*)", shown(text)):
            try:
                words = shlex.split(match.group(1))
            except ValueError:
                words = match.group(1).split()
            found.append((path, words))
    return found


def test_no_install_waits_for_a_release() -> None:
    """failopen is not on PyPI yet: each ``pip install`` of failopen names a clone or a wheel,
    never the bare name a registry would have to answer."""
    installs = _pip_installs()
    assert len(installs) > 5, installs
    bare = [(path, " ".join(words)) for path, words in installs for word in words
            if re.fullmatch(r"failopen(\[[\w,]+\])?", word)]
    assert not bare, f"pip install from PyPI, which has no failopen yet: {bare}"


def test_every_extra_the_manual_installs_exists() -> None:
    extras = set(importlib.metadata.metadata("failopen").get_all("Provides-Extra") or [])
    assert {"django", "asgi", "redis", "fallback", "test"} <= extras, extras
    named = {(path, extra) for path, words in _pip_installs() for word in words
             if "failopen" in word or word.startswith(".[")
             for group in re.findall(r"\[([\w,]+)\]", word) for extra in group.split(",")}
    unknown = sorted(f"{path}: {extra}" for path, extra in named if extra not in extras)
    assert not unknown, f"extras pyproject.toml does not define: {unknown}"
    table = section(page("install.md"), "## Extras")
    listed = set(re.findall(r"^\| `([\w-]+)` \|", table, re.M))
    assert listed == extras, f"install.md's extras table: {sorted(listed ^ extras)}"


def test_the_wheel_the_manual_names_is_the_one_build_makes() -> None:
    wheel = f"failopen-{importlib.metadata.version('failopen')}-py3-none-any.whl"
    named = {name for text in manual().values()
             for name in re.findall(r"failopen-[\w.]+-py3-none-any\.whl", text)}
    assert named == {wheel}, named


@pytest.mark.slow
def test_the_install_pages_wheel_requirement_installs(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """The install page's wheel line, with the path of a wheel ``python -m build`` made, is one
    pip accepts and resolves to that file (a dry run: nothing is installed or downloaded)."""
    wheel = build_wheel(tmp_path_factory)
    line = next(line for line in section(page("install.md"), "## From a built wheel").splitlines()
                if line.startswith("pip install ") and ".whl" in line)
    words = shlex.split(line.split(" #", 1)[0])
    requirement = re.sub(r"file:///\S+\.whl", wheel.as_uri(), words[2])
    assert requirement.startswith("failopen[django] @ file:///"), requirement
    done = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--dry-run", "--no-deps", "--no-index",
         "--ignore-installed", "--disable-pip-version-check", requirement],
        capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Would install failopen-" in done.stdout, done.stdout


def _hooks() -> object:
    spec = importlib.util.spec_from_file_location("mkdocs_hooks", ROOT / "scripts" /
                                                  "mkdocs_hooks.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_pipe_escaped_for_github_reads_as_a_pipe_on_the_site() -> None:
    unescape = _hooks().unescape_table_pipes  # type: ignore[attr-defined]
    markdown = ("| a | `x\\|y` |\n"
                "text `x\\|y`\n"
                "```\n| `x\\|y` |\n```\n")
    assert unescape(markdown) == ("| a | `x|y` |\n"
                                  "text `x\\|y`\n"
                                  "```\n| `x\\|y` |\n```\n")


def test_every_page_is_in_the_nav() -> None:
    """Also a --strict warning; said here without building, naming the page."""
    nav = (ROOT / "mkdocs.yml").read_text().split("\nnav:\n", 1)[1]
    listed = set(re.findall(r":\s+(\S+\.md)$", nav, re.M))
    pages = {path.relative_to(DOCS).as_posix() for path in DOCS.rglob("*.md")}
    assert listed == pages, f"in the nav or docs/ only: {sorted(listed ^ pages)}"
