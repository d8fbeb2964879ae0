"""Running ``failopen`` in-process in a test: the ``run`` fixture and what it returns."""

from __future__ import annotations

import json
from typing import Any

import pytest

from failopen.cli.command import main

__all__ = ["Run", "run"]


class Run:
    """The outcome of one ``failopen`` invocation."""

    def __init__(self, code: int, out: str, err: str) -> None:
        self.code, self.out, self.err = code, out, err

    def json(self) -> Any:
        lines = self.out.splitlines()
        assert len(lines) == 1, self.out
        return json.loads(lines[0])

    def jsonl(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.out.splitlines()]


@pytest.fixture
def run(capsys: pytest.CaptureFixture[str]) -> Any:
    """Call ``main(argv)`` in-process; argparse errors come back as exit code 2 too."""

    def invoke(*argv: str) -> Run:
        capsys.readouterr()
        try:
            code = main(list(argv))
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        out, err = capsys.readouterr()
        return Run(code, out, err)

    return invoke
