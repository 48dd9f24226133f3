"""A kafka-python-shaped consumer over an Engine, alone or as a member of a consumer group: KafkaConsumer's
options and methods, whose waiting (poll(timeout_ms) and iteration) is this module's and everything else the
non-blocking core's (engine.clients.consumer_core: fetches, positions, commits, group membership), used through its
public names only, as the asyncio consumer uses it.
poll(timeout_ms) runs a membership step, fetches, and while nothing is found waits on the engine's clock for an
append (the engine's data event), waking at the heartbeat interval so what the heartbeat thread flagged (a lost
membership) is acted on, and when the group coordinator starts a rebalance (the core's `wake()`). Iteration polls
until consumer_timeout_ms passes without a record.
Byte layout: none (memory only). Crash policy: none; what survives is what was committed.
Threads: like kafka-python's, a consumer is for one thread at a time; the engine under it is thread-safe.
Engine.close() closes its consumers from its own thread, which may be in the middle of a poll(): that poll skips
the partitions taken away and never puts one back.
"""
from __future__ import annotations

import math

from engine.clients.consumer_core import ConsumerCore, positive
from engine.common.structs import TopicPartition


class Consumer(ConsumerCore):
    """kafka-python's KafkaConsumer: the core's methods, and poll() and iteration, which wait."""

    def poll(self, timeout_ms: int = 0, max_records: int | None = None) -> dict[TopicPartition, list]:
        """Records by partition, at most `max_records` (max_poll_records); waits up to `timeout_ms` for some."""
        self.check_open()
        limit = self.max_poll_records if max_records is None else positive("max_records", max_records)
        clock = self.engine.clock
        deadline = clock.time_ms() + max(0, timeout_ms)
        self.membership(deadline)
        got = self.fetch(limit)
        if got or timeout_ms <= 0:
            return got
        event = self.waiting = self.engine.watch()
        try:
            while True:
                got = self.fetch(limit)
                left = deadline - clock.time_ms()
                if got or left <= 0 or self.closed:
                    return got
                # wake at the heartbeat interval so what the heartbeat thread flagged (a lost membership) is acted on
                self.engine.wait_for_data(event, left if self.group is None else
                                           min(left, self.group.heartbeat_interval_ms))
                event.clear()
                self.membership(deadline)
        finally:
            self.waiting = None
            self.engine.unwatch(event)

    def __iter__(self):
        """Every record in order per partition; stops after consumer_timeout_ms without one (kafka-python)."""
        while not self.closed:
            wait = self.consumer_timeout_ms if math.isfinite(self.consumer_timeout_ms) else 3_600_000
            batch = self.poll(timeout_ms=wait)
            if not batch:
                if math.isfinite(self.consumer_timeout_ms):
                    return
                continue
            for records in batch.values():
                yield from records

    def __enter__(self) -> "Consumer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
