"""The public API is exactly what __all__ says, and the core never imports a web framework."""

from __future__ import annotations

import subprocess
import sys

import failopen


def test_all_names_exist_and_every_public_name_is_listed() -> None:
    for name in failopen.__all__:
        assert hasattr(failopen, name), name
    public = {
        name
        for name, value in vars(failopen).items()
        if not name.startswith("_") and getattr(value, "__module__", "").startswith("failopen")
    }
    assert public <= set(failopen.__all__), public - set(failopen.__all__)


def test_every_export_has_a_docstring() -> None:
    for name in failopen.__all__:
        value = getattr(failopen, name)
        if callable(value) and isinstance(value, type):
            assert value.__doc__, f"{name} has no docstring"


def test_core_imports_no_framework() -> None:
    code = (
        "import sys, failopen, failopen.cli, failopen.rai, failopen.testing;"
        "bad = [m for m in ('django', 'starlette', 'asgiref', 'redis') if m in sys.modules];"
        "print(','.join(bad))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""
