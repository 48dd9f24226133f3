"""Injected time: every component that reads time or waits takes a `Clock`.

`SystemClock` is wall time. `ManualClock` only moves when a test calls
`advance()`/`set()`; threads blocked in `wait()` wake when the clock passes
their deadline or their event is set, so tests drive rolls, flushes and
timeouts deterministically. Both are thread-safe. Leaf module.
"""
from __future__ import annotations

import abc
import threading
import time


class Clock(abc.ABC):
    """Wall-clock milliseconds plus a wait that honours the clock's notion of time."""

    @abc.abstractmethod
    def time_ms(self) -> int:
        """Milliseconds since the Unix epoch."""

    @abc.abstractmethod
    def wait(self, event: threading.Event, timeout_ms: float) -> bool:
        """Block until `event` is set (True) or `timeout_ms` of clock time passed (False)."""


class SystemClock(Clock):
    """The real clock."""

    def time_ms(self) -> int:
        return time.time_ns() // 1_000_000

    def wait(self, event: threading.Event, timeout_ms: float) -> bool:
        return event.wait(max(0.0, timeout_ms) / 1000.0)


class ManualClock(Clock):
    """A clock that tests move by hand."""

    def __init__(self, start_ms: int = 1_700_000_000_000) -> None:
        self._now = int(start_ms)
        self._cond = threading.Condition()
        self._events: set[threading.Event] = set()

    def time_ms(self) -> int:
        with self._cond:
            return self._now

    def advance(self, ms: int) -> int:
        """Move forward by `ms` (≥ 0) and wake waiters; returns the new time."""
        if ms < 0:
            raise ValueError("a ManualClock never goes backwards")
        with self._cond:
            self._now += int(ms)
            self._cond.notify_all()
            return self._now

    def set(self, now_ms: int) -> None:
        """Jump to `now_ms` (not earlier than the current time)."""
        with self._cond:
            if now_ms < self._now:
                raise ValueError("a ManualClock never goes backwards")
            self._now = int(now_ms)
            self._cond.notify_all()

    def wake(self) -> None:
        """Wake waiters so they re-check their events (call after setting one)."""
        with self._cond:
            self._cond.notify_all()

    def wait(self, event: threading.Event, timeout_ms: float) -> bool:
        with self._cond:
            deadline = self._now + timeout_ms
            while not event.is_set() and self._now < deadline:
                # a short real timeout so an event set without wake() is still seen
                self._cond.wait(0.05)
            return event.is_set()
