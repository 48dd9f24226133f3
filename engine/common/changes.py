"""A count of the changes to what a consumer's fetch can find, so a consumer that found nothing new looks again only
once something moved (what a Kafka broker's incremental fetch session does for its clients, KIP-227: it answers
only for the partitions that changed).

`LOGS` counts, for every log in the process that a consumer can read (not an internal topic's), each change to a
fetch bound (the high watermark, the last stable offset, the log start) and, for every engine, each change to which
partition object leads a topic-partition. A reader takes `LOGS.value` before it reads bounds; when the value is
still the same later, no bound it read moved. A writer bumps after its change, never before. The count only grows:
a reader never sees an old value again. A waiter that cannot block a thread on it (an asyncio consumer) registers
with `listen()`: each bump then calls its `set()`, after the count moved.
Byte layout: none. Crash policy: none (memory only). Thread-safety: bump() from any thread, under a lock (two
threads' increments are never one); listen/unlisten from any thread; a listener's set() runs in the bumping thread,
often under a log's lock, so it must only hand the wake-up on (asyncio's call_soon_threadsafe does).
"""
from __future__ import annotations

import threading


class ChangeCount:
    """A count that only grows; `value` is read without a lock."""

    def __init__(self) -> None:
        self.value = 0
        self._lock = threading.Lock()
        self._listeners: set = set()

    def bump(self) -> None:
        with self._lock:
            self.value += 1
        if self._listeners:
            for listener in list(self._listeners):  # (a copy: another thread may listen or unlisten meanwhile)
                listener.set()

    def listen(self, listener) -> None:
        """Call `listener.set()` on every bump until `unlisten`."""
        self._listeners.add(listener)

    def unlisten(self, listener) -> None:
        self._listeners.discard(listener)


LOGS = ChangeCount()


class BumpingDict(dict):
    """A dict whose every change bumps `LOGS` (an engine's map of the partition leading each topic-partition);
    reads are dict's own."""

    def __setitem__(self, key, value) -> None:
        super().__setitem__(key, value)
        LOGS.bump()

    def __delitem__(self, key) -> None:
        super().__delitem__(key)
        LOGS.bump()

    def pop(self, *args):
        try:
            return super().pop(*args)
        finally:
            LOGS.bump()

    def popitem(self):
        try:
            return super().popitem()
        finally:
            LOGS.bump()

    def setdefault(self, key, default=None):
        try:
            return super().setdefault(key, default)
        finally:
            LOGS.bump()

    def update(self, *args, **kwargs) -> None:
        super().update(*args, **kwargs)
        LOGS.bump()

    def __ior__(self, other):
        self.update(other)
        return self

    def clear(self) -> None:
        super().clear()
        LOGS.bump()

    def swap(self, key, old, new) -> bool:
        """Put `new` in place of `old` at `key` without a bump (the same partition, made: no bound or leader moved);
        False, nothing changed, if `key` does not hold `old`."""
        if super().get(key) is not old:
            return False
        super().__setitem__(key, new)
        return True
