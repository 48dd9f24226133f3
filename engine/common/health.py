"""The state of an engine's background work: which tasks are failing, since when, how often, and why.

A background task that fails (a full disk, a device error) is retried with a growing backoff, from `RETRY_MS` up to
`MAX_RETRY_MS`, and never more often than its own interval allows. It is logged once when it starts failing, once
more only when the kind of failure changes (another exception type or errno), and once when it succeeds again, so a
full disk says so in a few lines however long it lasts. `Health.failing()` lists what is failing now
(`Engine.health()`, `kafkalog health`).
Byte layout: none. Crash policy: none (memory only). Thread-safety: every method may be called from many threads.
"""
from __future__ import annotations

import logging
import threading
from typing import NamedTuple

RETRY_MS = 1_000
MAX_RETRY_MS = 5_000


class TaskFailure(NamedTuple):
    """A background task failing now: where, what, since when (engine clock, ms), how many attempts, the last error."""

    where: str
    task: str
    since_ms: int
    attempts: int
    error: str


def _kind(exc: BaseException) -> tuple:
    """What makes two failures the same kind: the exception's type, its errno, and its cause's."""
    cause = exc.__cause__
    return (type(exc).__name__, getattr(exc, "errno", None),
            None if cause is None else (type(cause).__name__, getattr(cause, "errno", None)))


class Health:
    """The failing tasks of one component (a broker's log directory, its cleaner), named by `where`."""

    def __init__(self, where: str, log: logging.Logger) -> None:
        self.where, self._log = where, log
        self._lock = threading.Lock()
        self._failing: dict[str, tuple[TaskFailure, tuple]] = {}

    def failed(self, task: str, exc: BaseException, now_ms: int, interval_ms: int) -> int:
        """Record a failure of `task` (logged when it is the first of its kind); the delay before the next try."""
        kind = _kind(exc)
        with self._lock:
            before = self._failing.get(task)
            attempts = 1 if before is None else before[0].attempts + 1
            since = now_ms if before is None else before[0].since_ms
            self._failing[task] = (TaskFailure(self.where, task, since, attempts, str(exc)), kind)
        if before is None or before[1] != kind:
            self._log.error("%s: background %s task failed (retrying with backoff; logged again only when it "
                            "recovers or fails otherwise): %s", self.where, task, exc)
        backoff = min(MAX_RETRY_MS, RETRY_MS << min(attempts - 1, 16))
        return min(backoff, max(interval_ms, RETRY_MS))

    def succeeded(self, task: str, now_ms: int) -> None:
        """Record a success of `task` (logged when it was failing)."""
        if task not in self._failing:
            return
        with self._lock:
            before = self._failing.pop(task, None)
        if before is not None:
            failure = before[0]
            self._log.warning("%s: background %s task recovered after %d failed attempts over %d ms", self.where,
                              task, failure.attempts, now_ms - failure.since_ms)

    def failing(self) -> list[TaskFailure]:
        with self._lock:
            return [failure for failure, _ in self._failing.values()]

    def clear(self) -> None:
        with self._lock:
            self._failing.clear()
