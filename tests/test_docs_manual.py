"""What the manual tells a user to type exists: every ``failopen`` verb and flag shown in the
README or a page under docs/ is one the command line accepts, the test kit's token names are the
fakes' own, and every link to a section lands on one."""

from __future__ import annotations

import argparse
import posixpath
import re
import shlex

from _manual import ROOT, manual, page, shown

from failopen.cli.command import build_parser
from failopen.testing import FakeVerifyAPI

#: The README and every page of docs/, as a reader sees them (not the notes in HTML comments).
SHOWN = {path: shown(text) for path, text in manual().items()}


def _code() -> list[str]:
    """Every fenced block's lines and every inline code span of the README and the pages."""
    found: list[str] = []
    for text in SHOWN.values():
        blocks = re.findall(r"^```[a-z]*\n(.*?)^```", text, re.S | re.M)
        spans = re.findall(r"`([^`\n]+)`", re.sub(r"^```.*?^```", "", text, flags=re.S | re.M))
        found += [line for block in blocks for line in block.splitlines()] + spans
    return found


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
    assert {"status", "override", "watch", "emulate", "rai", "demo", "check", "fleet",
            "audit"} <= verbs, verbs
    assert len(SHOWN) > 20, sorted(SHOWN)  # the README and the pages, not the README alone


def test_every_failopen_command_in_the_manual_exists() -> None:
    problems = sorted({p for words in _commands() for p in _problems(words)})
    assert not problems, "the manual shows commands the CLI refuses:\n" + "\n".join(problems)


def test_a_wrong_flag_would_be_caught() -> None:
    assert _problems(["override", "off", "--for", "30m"]) == ["failopen override: no flag --for"]
    assert _problems(["overide", "off"]) == ["failopen overide off: no such command"]
    assert _problems(["-v", "status", "--json"]) == []
    assert _problems(["--verbosity"]) == ["failopen : no flag --verbosity"]


def test_the_token_names_are_the_fakes() -> None:
    kit = page("testing.md")
    row = next(line for line in kit.splitlines() if line.startswith("| `FakeVerifyAPI`"))
    for name in ("GOOD", "BAD", "DENIED", "UNVERIFIED"):
        value = getattr(FakeVerifyAPI, name)
        assert f'`{name}` (`"{value}"`' in row, f"the FakeVerifyAPI row: show {name} as {value}"
    # What `failopen emulate verify` prints and the browser recipes use.
    assert FakeVerifyAPI.GOOD == "good-token" and "`good-token`" in kit


def _slugs(markdown: str) -> set[str]:
    """GitHub's anchors for the headings: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"^```.*?^```", "", markdown, flags=re.S | re.M)
    return {re.sub(r"[^\w\- ]", "", title.strip().lower()).replace(" ", "-")
            for title in re.findall(r"^#{1,6} (.+)$", text, re.M)}


def test_every_link_to_a_section_resolves() -> None:
    """Links between the README and the pages, and between pages, by GitHub's anchors (the
    manual's toc uses the same, so a link works on the site and in the forge alike). The site's
    build checks the pages' links again (``mkdocs build --strict``, tests/test_docs.py); this
    one also covers the README, which the site does not contain."""
    targets = {path: _slugs(text) for path, text in manual().items()}
    broken = []
    for source, text in SHOWN.items():
        for link in re.findall(r"\]\(([^)\s]*)\)", text):
            if link.startswith(("http://", "https://")):
                continue
            target, _, anchor = link.partition("#")
            path = source if target == "" else posixpath.normpath(
                posixpath.join(posixpath.dirname(source), target))
            if path not in targets:
                if not (ROOT / path).exists():
                    broken.append(f"{source}: {link}")
                continue
            if anchor and anchor not in targets[path]:
                broken.append(f"{source}: {link}")
    assert not broken, f"links to nowhere: {broken}"
