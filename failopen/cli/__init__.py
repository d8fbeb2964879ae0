"""The ``failopen`` command: ``status``, ``watch``, ``override``, ``fleet``, ``audit``,
``check``, ``demo``, ``emulate`` and ``rai``. :func:`main` is its entry point
(``failopen.cli:main``)."""

from __future__ import annotations

from failopen.cli.command import main

__all__ = ["main"]
