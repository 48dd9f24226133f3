"""The engine's heartbeat thread: one thread sends the heartbeats of every group member of an engine. Kafka's Java
consumer runs a heartbeat thread per consumer; in one process one is enough. A member that joins a group then
starts no thread of its own, and starting one costs a few hundred microseconds on a small VM.

A member is added at its first join with its interval and the call that sends its heartbeat. It is then called every
`interval_ms` of the engine's clock, counted from when it was added and then from the start of its previous
heartbeat. `remove` returns only once no heartbeat of that member is still running, so a closed member is never called
again. The thread starts with the first member and stops on `close()`, the engine's. Heartbeats run one at a time. A
heartbeat that raises is logged once (again only after one of that member's heartbeats succeeded); the member stays
scheduled and the other members go on.
On-disk: nothing.
Thread-safety: `add`, `remove` and `close` from any thread; the schedule changes under one condition's lock, which is
never held while a heartbeat runs.
"""
from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Hashable

from engine.common.clock import Clock

log = logging.getLogger("kafkalog.consumer")

IDLE_WAIT_MS = 3_600_000  # nothing scheduled: sleep until a member is added or the thread is closed


class HeartbeatThread:
    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._cond = threading.Condition()
        self._due: dict[Hashable, list] = {}  # member -> [next heartbeat (clock ms), interval_ms, its call]
        self._next = 0  # the clock time the thread sleeps until (a member due sooner wakes it); 0: not asleep
        self._running: Hashable | None = None
        self._failing: set[Hashable] = set()  # members whose last heartbeat raised (logged once)
        self._wake = threading.Event()
        self._closed = False
        self._thread: threading.Thread | None = None

    def add(self, member: Hashable, interval_ms: int, beat: Callable[[], None]) -> bool:
        """Call `beat()` every `interval_ms` from now on (again for a member already added: from now, at this
        interval); False, nothing scheduled, once the thread is closed."""
        with self._cond:
            if self._closed:
                return False
            due = self._clock.time_ms() + interval_ms
            self._due[member] = [due, interval_ms, beat]
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="kafkalog-heartbeat", daemon=True)
                self._thread.start()
            elif due < self._next:
                self._wake.set()
        return True

    def remove(self, member: Hashable) -> None:
        """No more heartbeats for `member`; returns once none of its heartbeats runs (at once on this thread)."""
        with self._cond:
            self._due.pop(member, None)
            self._failing.discard(member)
            if threading.current_thread() is not self._thread:
                while self._running is member:
                    self._cond.wait()

    def close(self) -> None:
        """Stop the thread (the engine's close, once its consumers are closed)."""
        with self._cond:
            self._closed = True
            thread = self._thread
        self._wake.set()
        if hasattr(self._clock, "wake"):
            self._clock.wake()
        if thread is not None and thread is not threading.current_thread():
            thread.join()

    def _run(self) -> None:
        while True:
            with self._cond:
                if self._closed:
                    return
                now = self._clock.time_ms()
                member, entry = min(self._due.items(), key=_due_at, default=(None, None))
                if entry is None or entry[0] > now:
                    self._next = IDLE_WAIT_MS + now if entry is None else entry[0]
                    self._wake.clear()
                    member = None
                else:
                    entry[0] = now + entry[1]
                    self._running = member
            if member is None:
                self._clock.wait(self._wake, self._next - now)
                continue
            failed = False
            try:
                entry[2]()
            except Exception:  # noqa: BLE001 - one member's failure must not stop the others' heartbeats
                failed = True
                if member not in self._failing:
                    log.exception("heartbeat of %r failed (logged once until one succeeds)", member)
            finally:
                with self._cond:
                    if failed and member in self._due:
                        self._failing.add(member)
                    else:
                        self._failing.discard(member)
                    self._running = None
                    self._cond.notify_all()


def _due_at(item: tuple) -> int:
    return item[1][0]
