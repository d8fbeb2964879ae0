"""What the README tells a user to type exists: every ``failopen`` verb and flag it shows is one
the command line accepts, and the test kit's token names are the fakes' own."""

from __future__ import annotations

import argparse
import re
import shlex
from pathlib import Path

from failopen.cli.command import build_parser
from failopen.testing import FakeVerifyAPI

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
# What a reader sees: not the notes left in HTML comments.
SHOWN = re.sub(r"<!--.*?-->", "", README, flags=re.S)


def _code() -> list[str]:
    """Every fenced block's lines and every inline code span of the README."""
    blocks = re.findall(r"^```[a-z]*\n(.*?)^```", SHOWN, re.S | re.M)
    spans = re.findall(r"`([^`\n]+)`", re.sub(r"^```.*?^```", "", SHOWN, flags=re.S | re.M))
    return [line for block in blocks for line in block.splitlines()] + spans


def _commands() -> list[list[str]]:
    """The words after ``failopen`` in each command shown (not ``manage.py failopen``, nor the
    template tag library's ``{% load failopen %}``)."""
    found = []
    for text in _code():
        for match in re.finditer(r"(?:^|[\s(&;|])(?:\.venv/bin/)?failopen ([^#&;)]*)", text):
            if "manage.py failopen" in text[:match.end()] or match.group(1).startswith("%}"):
                continue
            try:
                words = shlex.split(match.group(1))
            except ValueError:
                words = match.group(1).split()
            if words:
                found.append(words)
    return found


def _sub(parser: argparse.ArgumentParser, word: str) -> argparse.ArgumentParser | None:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction) and word in action.choices:
            return action.choices[word]  # type: ignore[no-any-return]
    return None


def _problems(words: list[str]) -> list[str]:
    parsers, verbs = [build_parser()], []
    for word in words:
        if word.startswith("-"):
            continue  # an option: checked below, against the verbs it follows
        if word.startswith("[") or word.upper() == word:
            break
        # "status|watch|override": check the first; each is checked where shown alone too.
        sub = _sub(parsers[-1], word.split("|")[0])
        if sub is None:
            if not verbs:
                return [f"failopen {' '.join(words)}: no such command"]
            break
        parsers, verbs = [*parsers, sub], [*verbs, word.split("|")[0]]
    known = {option for parser in parsers for option in parser._option_string_actions}
    return [f"failopen {' '.join(verbs)}: no flag {flag}"
            for flag in (word.strip("[]").split("=")[0] for word in words)
            if flag.startswith("-") and flag not in known]


def test_the_scan_sees_the_commands() -> None:
    verbs = {words[0] for words in _commands()}
    assert {"status", "override", "watch", "emulate", "rai", "demo"} <= verbs, verbs


def test_every_failopen_command_in_the_readme_exists() -> None:
    problems = sorted({p for words in _commands() for p in _problems(words)})
    assert not problems, "the README shows commands the CLI refuses:\n" + "\n".join(problems)


def test_a_wrong_flag_would_be_caught() -> None:
    assert _problems(["override", "off", "--for", "30m"]) == ["failopen override: no flag --for"]
    assert _problems(["overide", "off"]) == ["failopen overide off: no such command"]
    assert _problems(["-v", "status", "--json"]) == []
    assert _problems(["--verbosity"]) == ["failopen : no flag --verbosity"]


def test_the_token_names_are_the_fakes() -> None:
    row = next(line for line in README.splitlines() if line.startswith("| `FakeVerifyAPI`"))
    for name in ("GOOD", "BAD", "DENIED", "UNVERIFIED"):
        value = getattr(FakeVerifyAPI, name)
        assert f'`{name}` (`"{value}"`' in row, f"the FakeVerifyAPI row: show {name} as {value}"
    # What `failopen emulate verify` prints and the browser recipes use.
    assert FakeVerifyAPI.GOOD == "good-token" and "`good-token`" in README


def _slugs(markdown: str) -> set[str]:
    """GitHub's anchors for the headings: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"^```.*?^```", "", markdown, flags=re.S | re.M)
    return {re.sub(r"[^\w\- ]", "", title.strip().lower()).replace(" ", "-")
            for title in re.findall(r"^#{1,6} (.+)$", text, re.M)}


def test_every_link_to_a_section_resolves() -> None:
    targets = {"": _slugs(README)}
    for doc in (ROOT / "docs").glob("*.md"):
        targets[f"docs/{doc.name}"] = _slugs(doc.read_text())
    links = [("README.md", m) for m in re.findall(r"\]\(([^)\s]*)\)", SHOWN)]
    for doc in (ROOT / "docs").glob("*.md"):
        links += [(f"docs/{doc.name}", m)
                  for m in re.findall(r"\]\(([^)\s]*)\)", doc.read_text())]
    broken = []
    for source, link in links:
        if link.startswith(("http://", "https://")):
            continue
        page, _, anchor = link.partition("#")
        if source.startswith("docs/") and page == "":
            page = source
        if page not in targets:
            if not (ROOT / page).exists():
                broken.append(f"{source}: {link}")
            continue
        if anchor and anchor not in targets[page]:
            broken.append(f"{source}: {link}")
    assert not broken, f"links to nowhere: {broken}"
