"""Fresh locks, and background threads that come back, in a forked child.

A lock held by another thread at the moment of fork() stays held forever in the child, whose copy
of that thread does not exist: the child's first request that needs it would hang. Objects that
own locks register here and get new ones in every forked child (gunicorn ``--preload`` workers).
For the same reason a background thread does not exist in the child: :class:`BackgroundThread`
starts it again there if it was running in the parent.
"""

from __future__ import annotations

import logging
import os
import threading
import weakref
from typing import Any

__all__ = ["BackgroundThread", "renew_after_fork", "renew_locks_after_fork"]

_owners: weakref.WeakKeyDictionary[Any, tuple[str, ...]] = weakref.WeakKeyDictionary()


def renew_locks_after_fork(owner: Any, *attributes: str) -> None:
    """In a forked child, replace ``owner.<attribute>`` with a new ``threading.Lock``."""
    _owners[owner] = attributes


_renewals: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()


def renew_after_fork(owner: Any, method: str) -> None:
    """In a forked child, call ``owner.<method>()``: for locks an object cannot reach, such as
    those inside a third-party object it would rather make anew."""
    _renewals[owner] = method


_current_pid = os.getpid()
_threads: weakref.WeakSet[BackgroundThread] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    global _current_pid
    _current_pid = os.getpid()
    for owner, attributes in list(_owners.items()):
        for attribute in attributes:
            setattr(owner, attribute, threading.Lock())
    for owner, method in list(_renewals.items()):
        getattr(owner, method)()
    for background in list(_threads):
        background._restart_after_fork()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


class BackgroundThread:
    """A named daemon thread that runs ``_loop`` until stopped, and again in a forked child.

    ``start()`` is idempotent, ``ensure_running()`` costs two attribute reads (call it per
    request), ``stop()`` sets the Event that ``_loop`` waits on, so it ends at once. A thread that
    dies is started again on the next ``ensure_running()``.
    """

    def __init__(self, *, name: str, logger: logging.Logger) -> None:
        self._thread_name = name
        self._thread_logger = logger
        self._thread_lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._thread_pid = -1
        self._wanted = False
        _threads.add(self)

    def _loop(self) -> None:
        """The thread's body: run until ``self._stop`` is set."""
        raise NotImplementedError

    def _before_start(self) -> None:
        """Called under the thread lock by every ``start()``, before a thread is made."""

    def _after_fork(self) -> None:
        """Called in a forked child before the thread is started again: renew your locks."""

    @property
    def started(self) -> bool:
        """True from ``start()`` until ``stop()``: a thread runs, or is about to (again)."""
        return self._wanted

    @property
    def running(self) -> bool:
        """True when this process has a live thread."""
        thread = self._thread
        return thread is not None and thread.is_alive() and self._thread_pid == _current_pid

    def start(self) -> None:
        """Start the thread (idempotent)."""
        with self._thread_lock:
            self._wanted = True
            self._before_start()
            if self.running:
                return
            self._stop = threading.Event()
            self._thread = threading.Thread(target=self._run, name=self._thread_name, daemon=True)
            self._thread_pid = _current_pid
            self._thread.start()

    def ensure_running(self) -> None:
        """Start the thread if this process has none. Two attribute reads: call it per request.

        A thread that ends, for whatever reason, clears ``_thread`` on its way out (see ``_run``),
        so checking liveness costs no ``is_alive()`` call here.
        """
        if self._thread is None or self._thread_pid != _current_pid:
            self.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the thread; returns once it has ended (or after ``timeout``)."""
        with self._thread_lock:
            self._wanted = False
            self._stop.set()
            thread, self._thread = self._thread, None
        if thread is not None and thread is not threading.current_thread() and thread.is_alive():
            thread.join(timeout)

    def _restart_after_fork(self) -> None:
        # The parent's thread does not exist in the child, and its locks may be held by it.
        self._thread_lock = threading.Lock()
        self._after_fork()
        self._thread = None
        if self._wanted:
            self.start()

    def _run(self) -> None:
        try:
            self._loop()
        finally:
            with self._thread_lock:
                if self._thread is threading.current_thread():
                    self._thread = None  # the next ensure_running() starts a new one
            if not self._stop.is_set():
                self._thread_logger.error(
                    "%s thread ended unexpectedly; it restarts on next use", self._thread_name,
                    extra={"event": "failopen.thread_ended", "thread_role": self._thread_name},
                )
