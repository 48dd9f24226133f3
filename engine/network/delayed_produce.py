"""DelayedProduce: an acks=all Produce whose batches wait for the ISR, parked in the listener's purgatory instead of
holding a request handler thread while they wait.

The Produce handler appends each partition's batches (Engine.append with wait=False) and gives them one short wait
(FIRST_WAIT_MS): in one process a follower's fetch is a call, so the high watermark usually passes at once. When one
is still short of it (a follower stalled on its disk, a fetcher stopped, the ISR not yet shrunk), the handler returns
Delayed with a DelayedProduce as its source and keeps the partitions' answers in the request's state. The
purgatory's one thread looks at every parked produce each CHECK_S while any is parked (the native fetcher raises high
watermarks where Python cannot be told; nothing is looked at while nothing is parked) and wakes one once each of its
partitions has a high watermark past its batches or a new leader. The handler then runs again and answers: error 0,
NOT_ENOUGH_REPLICAS_AFTER_APPEND, NOT_LEADER_OR_FOLLOWER, or REQUEST_TIMED_OUT at the request's deadline (the socket
server runs it again then whatever the purgatory saw).

On disk: nothing. Crash policy: a parked produce dies with its process unanswered, as a broker's does: the batches
are in the log, and the producer's retry is deduplicated when it is idempotent. Thread-safety: park() is called from
the network thread, close() from any; the purgatory's thread reads partitions (thread-safe) and calls the wakers
(thread-safe).
"""
from __future__ import annotations

import threading
import time

from engine.common.errors import KafkaError

FIRST_WAIT_MS = 10  # the handler's own wait for the ISR before it parks the request
CHECK_S = 0.005     # how often the purgatory looks at the parked produces


class DelayedProduce:
    """What a parked acks=all Produce waits for: `waits` are (topic, partition, AppendInfo) whose high watermark
    has not passed the appended batches; `deadline` is the request's (time.monotonic())."""
    __slots__ = ("engine", "purgatory", "waits", "deadline")

    def __init__(self, engine, purgatory: "ProducePurgatory", waits: list, deadline: float) -> None:
        self.engine, self.purgatory, self.waits, self.deadline = engine, purgatory, waits, deadline

    def ready(self) -> bool:
        """Whether the handler can answer now: every wait's high watermark passed, or its leader moved (or the
        partition went: the handler's next look says so)."""
        for topic, index, info in self.waits:
            try:
                part = self.engine.partition(topic, index)
            except KafkaError:
                continue
            if part.is_leader and part.leader_epoch == info.leader_epoch and \
                    part.high_watermark <= info.last_offset:
                return False
        return True

    def watch(self, waker) -> None:
        """Delayed's source protocol: `waker.set()` once ready()."""
        self.purgatory.park(self, waker)


class ProducePurgatory:
    """The listener's parked acks=all produces and the thread that wakes them (started by the first park, stopped
    by close())."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._parked: list[tuple[DelayedProduce, object]] = []
        self._thread: threading.Thread | None = None
        self._closed = False

    def park(self, produce: DelayedProduce, waker) -> None:
        with self._cond:
            if self._closed:
                return  # the listener is closing: its connections go with it
            self._parked.append((produce, waker))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="kafkalog-produce-purgatory", daemon=True)
                self._thread.start()
            self._cond.notify()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._parked and not self._closed:
                    self._cond.wait()
                if self._closed:
                    return
                parked = list(self._parked)
            now = time.monotonic()
            settled = [(p, w) for p, w in parked if now >= p.deadline or p.ready()]
            with self._cond:
                gone = {id(p) for p, _ in settled}
                self._parked = [(p, w) for p, w in self._parked if id(p) not in gone]
            for produce, waker in settled:
                if now < produce.deadline:  # (at its deadline the socket server runs it again anyway)
                    waker.set()
            with self._cond:
                if self._parked and not self._closed:
                    self._cond.wait(CHECK_S)

    def close(self) -> None:
        """Stop the thread; what was parked is dropped (the socket server closes its connections)."""
        with self._cond:
            self._closed = True
            self._parked = []
            self._cond.notify_all()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join()
