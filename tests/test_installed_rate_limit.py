"""A site installed exactly as its page of the manual says has the outage rate limit in force
(issue 31, item 11).

Step 1 of the Django page installs ``failopen[django]``, the ASGI page ``failopen[asgi]``, the
WSGI page failopen alone: none brings ``limits``, and before issue 31 every such site logged
"the outage rate limit (20/minute) is off" and admitted every token-less request to an ``open``
route during an outage. Each site here runs from the wheel, in a venv holding only what its
install line brings, with an operator's override turning enforcement off.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
from _manual import page
from _wheel import ROOT, extra_venv

pytestmark = pytest.mark.slow

#: The adapter, the page that installs it, and the extras its install line names.
PAGES = {"django": "django.md", "asgi": "asgi.md", "wsgi": "wsgi.md"}


def _extras(kind: str) -> tuple[str, ...]:
    """The extras in the first ``pip install`` line of the adapter's page (none: ``()``)."""
    line = next(line for line in page(PAGES[kind]).splitlines()
                if line.startswith("pip install"))
    found = re.search(r"failopen\[([a-z,]+)\]", line)
    return tuple(found.group(1).split(",")) if found else ()


def test_the_pages_install_lines_are_the_ones_this_test_installs() -> None:
    assert {kind: _extras(kind) for kind in PAGES} == {
        "django": ("django",), "asgi": ("asgi",), "wsgi": ()}


@pytest.mark.parametrize("kind", list(PAGES))
def test_a_site_installed_as_its_page_says_counts_the_default_outage_rate(
        kind: str, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    venv = extra_venv(tmp_path_factory, _extras(kind))
    python = str(venv / "bin" / "python")
    store = f"file://{tmp_path}/override.json"
    subprocess.run([python, "-I", "-m", "failopen.cli", "override", "off", "--ttl", "30m", "--wait",
                    "0", "--reason", "vendor incident", "--store", store],
                   check=True, capture_output=True, cwd=tmp_path, timeout=60)
    done = subprocess.run([python, "-I", str(ROOT / "tests" / "_installed_site.py"), kind, store],
                          capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert done.returncode != 3, "limits can be imported: the venv brings more than the install"
    assert done.returncode == 0, done.stderr
    # The default 20/minute per client and route: 20 admitted, the 21st refused.
    assert json.loads(done.stdout) == [200] * 20 + [429], done.stderr
    assert "is off" not in done.stderr, done.stderr
