"""Structured event names: the documented name of :mod:`failopen.observe.events`.

Alerts match ``event == "failopen.flag_changed"``; the full list, with loggers, levels and
fields, is ``failopen.events.EVENTS``.
"""

from __future__ import annotations

from failopen.observe.events import EVENT_KEY, EVENTS

__all__ = ["EVENT_KEY", "EVENTS"]
