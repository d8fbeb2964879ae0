"""Fresh locks in a forked child.

A lock held by another thread at the moment of fork() stays held forever in the child, whose copy
of that thread does not exist: the child's first request that needs it would hang. Objects that
own locks register here and get new ones in every forked child (gunicorn ``--preload`` workers).
"""

from __future__ import annotations

import os
import threading
import weakref
from typing import Any

__all__ = ["renew_locks_after_fork"]

_owners: weakref.WeakKeyDictionary[Any, tuple[str, ...]] = weakref.WeakKeyDictionary()


def renew_locks_after_fork(owner: Any, *attributes: str) -> None:
    """In a forked child, replace ``owner.<attribute>`` with a new ``threading.Lock``."""
    _owners[owner] = attributes


def _after_fork_in_child() -> None:
    for owner, attributes in list(_owners.items()):
        for attribute in attributes:
            setattr(owner, attribute, threading.Lock())


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
