"""Shutdown and callbacks that run whatever the step before them raised.

`Steps` runs each step of a close in turn, keeps what each raised and raises the first at the end (as Kafka's
clients close: every resource is released, the first failure is reported). `DeferringLock` is a re-entrant lock
whose holder may queue callbacks that run once the outermost holder has released it, each whatever the one before
raised (a failing one is logged): callbacks into other objects never run under the lock.
Thread-safety: a `Steps` belongs to one close; a `DeferringLock` may be used from any thread.
Leaf module: imports nothing from kafkalog.
"""
from __future__ import annotations

import logging
import threading
from typing import Callable

log = logging.getLogger("kafkalog")


class Steps:
    """The steps of one close: `run` each, then `raise_first`."""

    __slots__ = ("errors",)

    def __init__(self) -> None:
        self.errors: list[Exception] = []

    def run(self, step: Callable, *args) -> bool:
        """Run `step(*args)`; False (and its error kept) when it raised."""
        try:
            step(*args)
            return True
        except Exception as exc:  # noqa: BLE001 (every step runs; the first error is raised by raise_first)
            self.errors.append(exc)
            return False

    def raise_first(self) -> None:
        if self.errors:
            raise self.errors[0]


class DeferringLock:
    """An RLock whose holders `defer` callbacks to run after the outermost release, outside the lock."""

    __slots__ = ("_lock", "_depth", "_deferred")

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._depth = 0  # how deep the holder is (only the holder reads or writes it)
        self._deferred: list[Callable[[], object]] = []

    def __enter__(self) -> "DeferringLock":
        self._lock.acquire()
        self._depth += 1
        return self

    def __exit__(self, *exc) -> None:
        self._depth -= 1
        run = None
        if not self._depth and self._deferred:
            run, self._deferred = self._deferred, []
        self._lock.release()
        for callback in run or ():
            try:
                callback()
            except Exception:  # noqa: BLE001 (one failing callback never stops the others)
                log.exception("a deferred callback failed")

    def defer(self, callback: Callable[[], object]) -> None:
        """Run `callback` once the lock is released by its outermost holder (call with the lock held)."""
        self._deferred.append(callback)
