"""The public API is exactly what __all__ says, and the core never imports a web framework."""

from __future__ import annotations

import subprocess
import sys
import types
import typing

import pytest

import failopen
import failopen.testing


def public_names(package: types.ModuleType) -> set[str]:
    """Names a package defines without a leading underscore, its submodules aside."""
    return {
        name
        for name, value in vars(package).items()
        if not name.startswith("_") and not isinstance(value, types.ModuleType)
    } - {"annotations"}  # from __future__


@pytest.mark.parametrize("package", [failopen, failopen.testing], ids=lambda m: m.__name__)
def test_all_matches_the_public_names(package: types.ModuleType) -> None:
    exported = set(package.__all__)
    assert len(exported) == len(package.__all__), "__all__ repeats a name"
    public = public_names(package)
    assert public - exported == set(), "public but not in __all__"
    assert exported - {"__version__"} - public == set(), "in __all__ but not defined"
    for name in public:
        module = getattr(getattr(package, name), "__module__", None) or "failopen"
        assert module.startswith("failopen"), name


def exported_classes() -> list[tuple[str, type]]:
    return [
        (f"{package.__name__}.{name}", value)
        for package in (failopen, failopen.testing)
        for name in package.__all__
        if isinstance(value := getattr(package, name), type)
    ]


@pytest.mark.parametrize("cls", [pytest.param(c, id=n) for n, c in exported_classes()])
def test_every_exported_class_has_resolvable_type_hints(cls: type) -> None:
    typing.get_type_hints(cls)  # what dataclasses, pydantic and strict users' tools rely on


def test_every_export_has_a_docstring() -> None:
    for name, cls in exported_classes():
        assert cls.__doc__, f"{name} has no docstring"


def test_core_imports_no_framework() -> None:
    code = (
        "import sys, failopen, failopen.cli, failopen.rai, failopen.testing;"
        "bad = [m for m in ('django', 'starlette', 'asgiref', 'redis') if m in sys.modules];"
        "print(','.join(bad))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""
