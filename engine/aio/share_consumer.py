"""An asyncio share consumer over an open engine (KIP-932's queues): `AIOShareConsumer(*topics, engine=eng,
group_id=...)`, the synchronous share consumer's core (engine.clients.share_consumer) used through its public steps
on the loop's thread.

`getmany(timeout_ms)` takes the previous call's acknowledgements (implicit mode: all of its records, accepted), then
acquires records; while it finds none it waits on a LoopWake that the engine sets when a fetch bound moves anywhere
(engine.common.changes.LOGS), looking again at least every RELEASE_LOOK_MS for records another member released or
whose lock timed out. `acknowledge()` marks a record (explicit mode), `commit()` sends the marks, `stop()` sends them,
leaves the group and closes the share session.
Byte layout: none (memory only). Crash policy: the core's. Threads: none of its own (the engine's heartbeat thread
beats for the member); use it from its loop's thread.
"""
from __future__ import annotations

import asyncio

from engine.aio.loop_wake import LoopWake
from engine.clients.share_consumer import RELEASE_LOOK_MS, AcknowledgeType, ShareRecord
from engine.common.changes import LOGS
from engine.common.errors import IllegalStateError, KafkaError
from engine.common.structs import TopicPartition


class AIOShareConsumer:
    """A member of share group `group_id`, asyncio's way; options as engine.clients.share_consumer.ShareConsumer's."""

    def __init__(self, *topics: str, engine, group_id: str, **config) -> None:
        self._engine = engine
        self._core = engine.share_consumer(group_id, **config)
        self._topics = topics
        self._wake: LoopWake | None = None

    async def start(self) -> None:
        if self._wake is None:
            self._wake = LoopWake(asyncio.get_running_loop())
            if self._topics:
                self._core.subscribe(self._topics)

    def subscribe(self, topics) -> None:
        self._core.subscribe(topics)

    def assignment(self) -> set[TopicPartition]:
        return self._core.assignment()

    async def getmany(self, timeout_ms: int = 0) -> list[ShareRecord]:
        """Up to max_poll_records records acquired for this member, waiting up to `timeout_ms` for some."""
        if self._wake is None:
            raise IllegalStateError("getmany() before start()")
        core, wake = self._core, self._wake
        core.begin_poll()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(0, timeout_ms) / 1000
        while True:
            wake.arm()
            LOGS.listen(wake)
            try:
                records = core.fetch_now()
                left = deadline - loop.time()
                if records or left <= 0 or core.closed:
                    return records
                await wake.wait(min(left, RELEASE_LOOK_MS / 1000))
            finally:
                LOGS.unlisten(wake)

    def acknowledge(self, record: ShareRecord, type: AcknowledgeType = AcknowledgeType.ACCEPT) -> None:
        self._core.acknowledge(record, type)

    async def commit(self) -> dict[TopicPartition, KafkaError | None]:
        return self._core.commit_sync()

    async def stop(self) -> None:
        self._core.close()
        if self._wake is not None:
            self._wake.set()

    async def __aenter__(self) -> AIOShareConsumer:
        await self.start()
        return self

    async def __aexit__(self, *exc) -> None:
        await self.stop()
