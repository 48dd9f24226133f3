"""An open engine's clients and waiters: the producers, consumers and listeners it made (closed with it), the events
set on every append (a consumer waiting for data) and the watchers told which partition each append went to (a
listener's parked fetches), and whether the engine is closed (no client registers after that).

State: a weak set of clients (a client dropped by its owner is forgotten), the events and watchers, the closed flag.
On disk: nothing. Thread-safety: every method is thread-safe under one short lock (`lock`), never held while a client
closes or a watcher runs.
"""
from __future__ import annotations

import threading
import weakref

from engine.common.closing import Steps
from engine.common.errors import IllegalStateError


class ClientRegistry:
    """The clients and waiters of the engine open on `path` (see the module docstring)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.lock = threading.Lock()
        self.closed = False
        self._clients: weakref.WeakSet = weakref.WeakSet()
        self.waiters: set = set()  # set() on every append
        self.watchers: set = set()  # appended(topic, partition) after every append

    def check_open(self) -> None:
        if self.closed:
            raise IllegalStateError("the engine is closed", file=self.path)

    def register(self, client):
        """Keep `client` to close with the engine; an engine closed meanwhile closes it and raises."""
        with self.lock:
            if not self.closed:
                self._clients.add(client)
                return client
        Steps().run(client.close)  # made while the engine closed: its threads stop, and the caller is told
        raise IllegalStateError("the engine is closed", file=self.path)

    def registered(self) -> list:
        with self.lock:  # (a WeakSet is iterated in Python: an add meanwhile would break the iteration)
            return list(self._clients)

    def to_close(self) -> list | None:
        """The clients to close, None when the engine is closed already."""
        with self.lock:
            return None if self.closed else list(self._clients)

    def mark_closed(self, closed: list) -> list:
        """The engine is closed: no client registers after this; the clients registered since `closed` was taken."""
        with self.lock:
            self.closed = True
            return [c for c in self._clients if c not in closed]

    def watch(self, event=None):
        """Register `event` (a new threading.Event if None; anything with a `set()` method) to be set on appends."""
        ev = threading.Event() if event is None else event
        with self.lock:
            self.waiters.add(ev)
        return ev

    def watch_partitions(self, watcher) -> None:
        """Register `watcher`, whose `appended(topic, partition)` is called after each append to a partition."""
        with self.lock:
            self.watchers.add(watcher)

    def unwatch(self, event) -> None:
        """Stop calling `event` (registered with watch or watch_partitions)."""
        with self.lock:
            self.waiters.discard(event)
            self.watchers.discard(event)

    def appended(self, topic: str, partition: int) -> None:
        """Wake the waiters and tell the watchers: `topic`-`partition` took an append."""
        for ev in list(self.waiters):
            ev.set()
        for watcher in list(self.watchers):
            watcher.appended(topic, partition)
