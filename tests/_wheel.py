"""The project's wheel, built once per test session, and a fresh virtualenv that has it installed.

The venv lives outside the repository and holds failopen as a normal (non-editable) install:
what a user gets from ``pip install failopen``. Its other dependencies (httpx, Django, uvicorn,
...) are the ones this test run already has, reached through a ``.pth`` file, so no registry is
asked for anything; the venv's own site-packages comes first, so ``failopen`` is the wheel's.
"""

from __future__ import annotations

import fcntl
import importlib.metadata
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

__all__ = ["ROOT", "build_wheel", "extra_venv", "installed_venv"]

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
    # xdist workers build at once in the one build/ folder setuptools uses: one at a time.
    (ROOT / "build").mkdir(exist_ok=True)
    with (ROOT / "build" / "wheel.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        subprocess.run([sys.executable, "-m", "build", "--wheel", "--outdir", str(out),
                        str(ROOT)], check=True, capture_output=True)
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


def _closure(requirements: list[str], extras: set[str]) -> set[str]:
    """The distributions ``requirements`` (with ``extras``) bring, recursively, by canonical
    name: what pip would install, read from this test run's installed metadata."""
    wanted: list[tuple[str, set[str]]] = [(r, extras) for r in requirements]
    found: set[str] = set()
    while wanted:
        text, chosen = wanted.pop()
        requirement = Requirement(text)
        if requirement.marker is not None and not any(
                requirement.marker.evaluate({"extra": extra}) for extra in chosen or {""}):
            continue
        name = canonicalize_name(requirement.name)
        if name in found:
            continue
        found.add(name)
        dist = importlib.metadata.distribution(requirement.name)
        wanted.extend((r, set(requirement.extras)) for r in dist.requires or ())
    return found


def extra_venv(tmp: pytest.TempPathFactory, extras: tuple[str, ...]) -> Path:
    """A venv with the wheel installed as ``pip install "failopen[<extras>]"`` would install it:
    its dependencies, and only those, reached through a ``.pth`` file to a folder of links into
    this test run's site-packages (no registry asked). Another optional package, ``limits``
    say, cannot be imported there. Returns the venv's folder; built once per set of extras."""
    key = "venv[" + ",".join(sorted(extras)) + "]"
    if key in _built:
        return _built[key]
    venv = tmp.mktemp("venv-" + ("-".join(sorted(extras)) or "bare"))
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q",
                    "--no-deps", "--no-index", str(build_wheel(tmp))],
                   check=True, capture_output=True)
    requires = subprocess.run([str(python), "-I", "-c", "import importlib.metadata as m; "
                               "print('\\n'.join(m.requires('failopen')))"],
                              check=True, capture_output=True, text=True).stdout.splitlines()
    names = _closure(requires, set(extras))
    here = Path(sysconfig.get_paths()["purelib"])
    deps = venv / "deps"
    deps.mkdir()
    for dist in importlib.metadata.distributions():
        if canonicalize_name(dist.metadata["Name"]) not in names:
            continue
        for file in dist.files or ():
            top = Path(file).parts[0]
            if top not in ("..", "__pycache__") and (here / top).exists() \
                    and not (deps / top).exists():
                (deps / top).symlink_to(here / top)
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()"
                           "['purelib'])"], check=True, capture_output=True, text=True)
    (Path(site.stdout.strip()) / "zz_test_dependencies.pth").write_text(f"{deps}\n")
    _built[key] = venv
    return venv
