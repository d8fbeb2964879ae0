"""The project's wheel, built once per test session, and a fresh virtualenv that has it installed.

The venv lives outside the repository and holds failopen as a normal (non-editable) install:
what a user gets from ``pip install failopen``. Its other dependencies (httpx, Django, uvicorn,
...) are the ones this test run already has, reached through a ``.pth`` file, so no registry is
asked for anything; the venv's own site-packages comes first, so ``failopen`` is the wheel's.
"""

from __future__ import annotations

import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

__all__ = ["ROOT", "build_wheel", "installed_venv"]

ROOT = Path(__file__).resolve().parent.parent

# What pip writes for a console script: run as a file, the script's own folder is sys.path[0],
# never the current directory.
_CONSOLE_SCRIPT = """#!{python}
import sys
from {module} import {function}
sys.exit({function}())
"""


_built: dict[str, Path] = {}


def build_wheel(tmp: pytest.TempPathFactory) -> Path:
    """``python -m build --wheel`` of the repository, once per test session."""
    if "wheel" in _built:
        return _built["wheel"]
    out = tmp.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "build", "--wheel", "--outdir", str(out), str(ROOT)],
                   check=True, capture_output=True)
    (wheel,) = out.glob("failopen-*.whl")
    _built["wheel"] = wheel
    return wheel


def installed_venv(tmp: pytest.TempPathFactory) -> Path:
    """A venv outside the repository with the wheel installed; its ``bin/`` has ``failopen``,
    ``uvicorn`` and ``gunicorn`` as console scripts. Returns the venv's folder."""
    if "venv" in _built:
        return _built["venv"]
    venv = tmp.mktemp("venv")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q",
                    "--no-deps", "--no-index", str(build_wheel(tmp))],
                   check=True, capture_output=True)
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()"
                           "['purelib'])"], check=True, capture_output=True, text=True)
    (Path(site.stdout.strip()) / "zz_test_dependencies.pth").write_text(
        sysconfig.get_paths()["purelib"] + "\n")
    for name, module, function in (("uvicorn", "uvicorn.main", "main"),
                                   ("gunicorn", "gunicorn.app.wsgiapp", "run")):
        script = venv / "bin" / name
        script.write_text(_CONSOLE_SCRIPT.format(python=python, module=module,
                                                 function=function))
        script.chmod(0o755)
    _built["venv"] = venv
    return venv
