"""Fixtures of the browser tests; they live in _browser_kit (the test modules import from it)."""

from __future__ import annotations

from _browser_kit import (
    browser,
    fakes,
    pytest_collection_modifyitems,
    server_process,
    vendor,
    visit,
)

__all__ = ["browser", "fakes", "pytest_collection_modifyitems", "server_process", "vendor",
           "visit"]
