"""A default's own string, told apart from the same text set explicitly."""

from __future__ import annotations

__all__ = ["DefaultText"]


class DefaultText(str):
    """A default's own string: Config replaces it (a vendor's preset) or treats it as unset (a
    default that needs an extra only when set explicitly), and never a value someone gave."""

    __slots__ = ()
