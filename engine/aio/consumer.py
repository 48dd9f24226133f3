"""aiokafka's AIOKafkaConsumer over an open engine: the same names, the engine's semantics.

The fetching, positions, commits and group membership are the consumer core's (engine.clients.consumer_core and its
coordinator, which the synchronous consumer wraps too), used through its public steps on the loop's thread; they
never block there: a rebalance step runs with a deadline of "now" and the consumer then waits, on the loop, for what
it needs. A `getmany()` that found nothing waits on a LoopWake that the engine sets when a fetch bound moves anywhere
(engine.common.changes.LOGS: an append, the high watermark, the last stable offset, a new leader), when the group
coordinator starts a rebalance, and when a JoinGroup or SyncGroup answer it waits for comes in; the group's own
deadlines and the heartbeat interval bound each wait.
Rebalances happen inside getmany()/getone() (and commit(), stop()), never between a fetch and the commit after it.
A rebalance listener's callbacks may be coroutines: a rebalance step that may call them runs on a worker thread
that runs each callback on the loop and waits for it, so the step sees it finished, as a synchronous listener.
Records `getone()` and `async for` fetched but did not return yet stay in the core's `unread`: position(), commit()
and the auto-commit count from the first of them, and seek(), pause() and a revocation drop or hold them back; a
cancelled wait returns nothing and moves no position.
Defaults are aiokafka's where they differ from the synchronous consumer's: max_poll_records=None (getmany()
returns what one fetch finds, up to fetch_max_bytes) and partition_assignment_strategy=('roundrobin',) (under
group_protocol='classic': under 'consumer' the coordinator assigns). Configs
only a networked client has (bootstrap_servers, security and SASL, fetch_max_wait_ms, request_timeout_ms,
retry_backoff_ms, consumer_timeout_ms, metadata ages) are refused; check_crcs, exclude_internal_topics and
fetch_min_bytes take their default values only (the engine always checks CRCs and never shows internal topics).
Threads: none of its own (the engine's heartbeat thread beats for the group members); use a consumer from its
loop's thread.
"""
from __future__ import annotations

import asyncio
import collections
import inspect
import re
import threading

from engine.aio.loop_wake import LoopWake
from engine.aio.producer import refuse_network_configs
from engine.clients.consumer_core import ConsumerCore
from engine.clients.consumer_coordinator import ConsumerRebalanceListener as SyncListener
from engine.common.changes import LOGS
from engine.common.errors import IllegalStateError, InvalidConfigurationError
from engine.common.structs import OffsetAndMetadata, TopicPartition

CONSUMER_NETWORK_ONLY = frozenset(("fetch_max_wait_ms", "request_timeout_ms", "retry_backoff_ms",
                                   "consumer_timeout_ms"))
GETONE_FETCH = 500  # records one fetch of getone()/async for takes at most (max_poll_records when set)
_HOUR_S = 3600.0


class ConsumerRebalanceListener:
    """aiokafka's listener: override what you need; each callback may be a coroutine function."""

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        """Before partitions are taken away: commit what was processed of them."""

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        """After partitions arrived."""

    async def on_partitions_lost(self, lost: set[TopicPartition]) -> None:
        """The membership was lost: the partitions may belong to another member already (no commit)."""
        await _finish(self.on_partitions_revoked(lost))


async def _finish(result) -> None:
    if inspect.isawaitable(result):
        await result


class _ListenerBridge(SyncListener):
    """The user's listener behind the synchronous coordinator: on a worker thread each callback runs on the loop
    and is waited for; on the loop's own thread (an Engine.close() called there) a coroutine callback must finish
    without suspending."""

    def __init__(self, listener, loop: asyncio.AbstractEventLoop, loop_thread: int) -> None:
        self._listener, self._loop, self._loop_thread = listener, loop, loop_thread
        self.calling = False  # a callback is running on the loop (the step waiting for it must not be waited for)

    def on_partitions_revoked(self, revoked) -> None:
        self._call(self._listener.on_partitions_revoked, revoked)

    def on_partitions_assigned(self, assigned) -> None:
        self._call(self._listener.on_partitions_assigned, assigned)

    def on_partitions_lost(self, lost) -> None:
        self._call(getattr(self._listener, "on_partitions_lost", self._listener.on_partitions_revoked), lost)

    async def _run(self, callback, partitions) -> None:
        self.calling = True
        try:
            await _finish(callback(partitions))
        finally:
            self.calling = False

    def _call(self, callback, partitions) -> None:
        if threading.get_ident() != self._loop_thread:
            asyncio.run_coroutine_threadsafe(self._run(callback, set(partitions)), self._loop).result()
            return
        result = callback(set(partitions))
        if not inspect.isawaitable(result):
            return
        step = result.__await__()
        try:
            step.send(None)
        except StopIteration:
            return
        step.close()
        raise IllegalStateError("a rebalance callback awaited while its consumer was closed from the event loop's "
                                "own thread (Engine.close() there): stop() the consumer first")


class AIOKafkaConsumer:
    """`AIOKafkaConsumer(*topics, engine=eng, **configs)`: start/stop or `async with`, subscribe (topics, pattern,
    listener), assign, getone, getmany, `async for`, the seeks, position, highwater, last_stable_offset, commit and
    committed, offsets_for_times, beginning/end_offsets, pause/resume."""

    def __init__(self, *topics: str, engine, max_poll_records: int | None = None,
                 partition_assignment_strategy=None, check_crcs: bool = True,
                 exclude_internal_topics: bool = True, fetch_min_bytes: int = 1, **configs) -> None:
        refuse_network_configs(configs, "consumer")
        found = sorted(CONSUMER_NETWORK_ONLY.intersection(configs))
        if found:
            raise InvalidConfigurationError(f"{', '.join(found)}: a networked consumer's fetch settings, with no "
                                            f"meaning in-process (getmany(timeout_ms=...) says how long to wait)")
        for name, value, only in (("check_crcs", check_crcs, True), ("fetch_min_bytes", fetch_min_bytes, 1),
                                  ("exclude_internal_topics", exclude_internal_topics, True)):
            if value != only or type(value) is not type(only):
                raise InvalidConfigurationError(f"{name}={value!r}: only {only!r} is supported in-process")
        if max_poll_records is not None and (type(max_poll_records) is not int or max_poll_records < 1):
            raise InvalidConfigurationError(f"max_poll_records={max_poll_records!r} must be None or an int >= 1")
        if partition_assignment_strategy is None and configs.get("group_protocol", "classic") == "classic":
            partition_assignment_strategy = ("roundrobin",)  # (aiokafka's default; the consumer protocol has none)
        self._engine = engine
        self._max_poll_records = max_poll_records
        self._consumer: ConsumerCore = engine.registry.register(ConsumerCore(
            engine, max_poll_records=max_poll_records or 2**31 - 1,
            partition_assignment_strategy=partition_assignment_strategy, **configs))
        self._before_start: tuple | None = ("subscribe", (topics,), {}) if topics else None  # applied by start()
        self._pattern: re.Pattern | None = None
        self._matched: list[str] = []
        self._listener = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread = -1
        self._wake: LoopWake | None = None
        self._step: asyncio.Future | None = None  # a rebalance step running on a worker thread
        self._current: collections.deque | None = None  # the unread records `async for` takes from
        self._stopping = self._closed = False

    # --- lifecycle ------------------------------------------------------------------------------
    async def start(self) -> None:
        if self._stopping:
            raise IllegalStateError("the consumer was stopped")
        if self._loop is not None:
            return
        self._loop, self._loop_thread = asyncio.get_running_loop(), threading.get_ident()
        self._wake = LoopWake(self._loop)
        if self._before_start is not None:
            name, args, kwargs = self._before_start
            getattr(self, name)(*args, **kwargs)

    async def stop(self) -> None:
        """Commit positions (enable_auto_commit), leave the group (a static member does not)."""
        if self._stopping:
            return
        self._stopping = True
        if self._wake is not None:
            self._wake.set()  # a getmany()/getone() waiting returns (getone() raises)
        try:
            await self._await_step()
            await self._off_loop(self._consumer.close)  # (its revocation's callbacks may still commit)
        finally:
            self._closed = True

    async def __aenter__(self) -> "AIOKafkaConsumer":
        await self.start()
        return self

    async def __aexit__(self, *exc) -> None:
        await self.stop()

    def _check(self) -> None:
        if self._loop is None or self._closed or self._stopping and not (self._listener and self._listener.calling):
            raise IllegalStateError("the consumer is not started" if self._loop is None else
                                    "the consumer is stopped")

    # --- assignment -------------------------------------------------------------------------------
    def subscribe(self, topics=(), pattern: str | None = None, listener=None) -> None:
        """Subscribe to `topics`, or to every topic matching `pattern` (new ones join as they are created);
        `listener` is called around each rebalance (its callbacks may be coroutine functions). Before start(), the
        call is kept for start() to make (as aiokafka allows)."""
        if self._loop is None and not self._stopping:
            self._before_start = ("subscribe", (topics, pattern, listener), {})
            return
        self._check()
        if (not topics) == (pattern is None):
            raise InvalidConfigurationError("subscribe() takes topics or a pattern, one of them")
        if listener is not None and not all(callable(getattr(listener, name, None)) for name in
                                            ("on_partitions_revoked", "on_partitions_assigned")):
            raise InvalidConfigurationError("listener must have on_partitions_revoked and on_partitions_assigned")
        self._listener = None if listener is None else _ListenerBridge(listener, self._loop, self._loop_thread)
        self._current = None
        if pattern is None:
            self._pattern = None
            self._consumer.subscribe([topics] if isinstance(topics, str) else list(topics), self._listener)
            return
        try:
            self._pattern = re.compile(pattern)
        except (re.error, TypeError) as exc:
            raise InvalidConfigurationError(f"pattern={pattern!r} is not a regular expression: {exc}") from None
        self._matched = []
        self._match()

    def _match(self) -> None:
        """A pattern subscription follows the topics that exist (checked before each fetch)."""
        matched = [t for t in self._engine.list_topics() if self._pattern.fullmatch(t)]
        if matched == self._matched:
            return
        self._matched = matched
        if matched:
            self._consumer.subscribe(matched, self._listener)
        elif self._consumer.subscription() is not None:
            self._consumer.unsubscribe()

    def assign(self, partitions) -> None:
        """Read exactly these partitions (before start(): kept for start() to make)."""
        if self._loop is None and not self._stopping:
            self._before_start = ("assign", (list(partitions),), {})
            return
        self._check()
        self._current = None
        self._consumer.assign(partitions)

    def unsubscribe(self) -> None:
        self._check()
        self._pattern, self._current = None, None
        self._consumer.unsubscribe()

    def assignment(self) -> set[TopicPartition]:
        return self._consumer.assignment()

    def subscription(self) -> set[str]:
        return self._consumer.subscription() or set()

    async def topics(self) -> set[str]:
        return self._consumer.topics()

    def partitions_for_topic(self, topic: str) -> set[int]:
        return self._consumer.partitions_for_topic(topic)

    def pause(self, *partitions) -> None:
        self._current = None
        self._consumer.pause(*partitions)

    def resume(self, *partitions) -> None:
        self._consumer.resume(*partitions)

    def paused(self) -> set[TopicPartition]:
        return self._consumer.paused()

    # --- positions and offsets ------------------------------------------------------------------
    async def position(self, partition: TopicPartition) -> int:
        self._check()
        return self._consumer.position(partition)

    def seek(self, partition: TopicPartition, offset: int) -> None:
        self._check()
        self._current = None
        self._consumer.seek(partition, offset)

    async def seek_to_beginning(self, *partitions) -> None:
        self._check()
        self._current = None
        self._consumer.seek_to_beginning(*partitions)

    async def seek_to_end(self, *partitions) -> None:
        self._check()
        self._current = None
        self._consumer.seek_to_end(*partitions)

    async def seek_to_committed(self, *partitions) -> dict[TopicPartition, int | None]:
        """Each partition to its group's committed offset (those without one keep their position); returns the
        committed offsets."""
        self._check()
        self._current = None
        found = {}
        for tp in partitions or sorted(self._consumer.assignment()):
            found[tp] = offset = self._consumer.committed(tp)
            if offset is not None:
                self._consumer.seek(tp, offset)
        return found

    def highwater(self, partition: TopicPartition) -> int:
        """The partition's high watermark now."""
        return self._consumer.partition_of(self._assigned(partition)).high_watermark

    def last_stable_offset(self, partition: TopicPartition) -> int:
        """The partition's last stable offset now (below it, every transaction is decided)."""
        return self._consumer.partition_of(self._assigned(partition)).log.last_stable_offset

    def _assigned(self, partition: TopicPartition) -> TopicPartition:
        if partition not in self._consumer.assignment():
            raise IllegalStateError(f"{partition} is not assigned to this consumer")
        return partition

    async def offsets_for_times(self, timestamps: dict):
        return self._consumer.offsets_for_times(timestamps)

    async def beginning_offsets(self, partitions) -> dict[TopicPartition, int]:
        return self._consumer.beginning_offsets(partitions)

    async def end_offsets(self, partitions) -> dict[TopicPartition, int]:
        return self._consumer.end_offsets(partitions)

    async def committed(self, partition: TopicPartition) -> int | None:
        self._check()
        return self._consumer.committed(partition)

    async def commit(self, offsets=None) -> None:
        """Commit `offsets` ({TopicPartition: offset, (offset, metadata) or OffsetAndMetadata}; default: the position
        of every assigned partition, after the records returned so far)."""
        self._check()
        if self._listener is None or not self._listener.calling:  # (a callback's commit is part of the step)
            await self._await_step()
        if offsets is not None:
            offsets = {tp: OffsetAndMetadata(*om) if type(om) is tuple else om for tp, om in offsets.items()}
        self._consumer.commit(offsets)

    def group_metadata(self):
        """The member's group, generation and member id, for a transactional producer's
        send_offsets_to_transaction (its membership is then checked)."""
        return self._consumer.group_metadata()

    # --- fetching ---------------------------------------------------------------------------------
    async def getmany(self, *partitions: TopicPartition, timeout_ms: int = 0,
                      max_records: int | None = None) -> dict[TopicPartition, list]:
        """Records by partition (of `partitions`, or of the assignment), at most `max_records`; waits up to
        `timeout_ms` for some."""
        self._check()
        if max_records is not None and (type(max_records) is not int or max_records < 1):
            raise InvalidConfigurationError(f"max_records={max_records!r} must be None or an int >= 1")
        if type(timeout_ms) not in (int, float) or timeout_ms < 0:
            raise InvalidConfigurationError(f"timeout_ms={timeout_ms!r} must be a number >= 0")
        limit = max_records or self._max_poll_records or 2**31 - 1
        self._current = None
        out = self._unread(partitions, limit)
        if out:
            return out
        return await self._fetch(partitions, limit, timeout_ms / 1000)

    async def getone(self, *partitions: TopicPartition):
        """The next record (of `partitions`, or of the assignment), waiting for one as long as it takes."""
        self._check()
        while True:
            if self._stopping:
                raise IllegalStateError("the consumer is stopped")
            current = self._current
            if current and not partitions:
                return current.popleft()
            record = self._take_one(partitions)
            if record is not None:
                return record
            got = await self._fetch(partitions, self._max_poll_records or GETONE_FETCH, _HOUR_S)
            unread = self._consumer.unread
            for tp, records in got.items():
                unread.setdefault(tp, collections.deque()).extend(records)

    def __aiter__(self) -> "AIOKafkaConsumer":
        self._check()
        return self

    async def __anext__(self):
        current = self._current
        if current:
            return current.popleft()
        if self._stopping:
            raise StopAsyncIteration
        try:
            return await self.getone()
        except IllegalStateError:
            if self._stopping:
                raise StopAsyncIteration from None
            raise

    def _take_one(self, partitions):
        """One unread record (getone's), from the first partition in line that is assigned and not paused; the
        partition it came from becomes `async for`'s current one."""
        consumer = self._consumer
        paused = consumer.paused()
        for tp, records in list(consumer.unread.items()):
            if not records:
                del consumer.unread[tp]
            elif tp not in paused and (not partitions or tp in partitions):
                self._current = records if not paused and not partitions else None
                return records.popleft()
        return None

    def _unread(self, partitions, limit: int) -> dict[TopicPartition, list]:
        """Unread records getone() left (of `partitions`, if given), at most `limit`."""
        consumer = self._consumer
        out = {}
        paused = consumer.paused()
        for tp, records in list(consumer.unread.items()):
            if limit <= 0:
                break
            if tp in paused or (partitions and tp not in partitions):
                continue
            taken = [records.popleft() for _ in range(min(limit, len(records)))]
            if not records:
                del consumer.unread[tp]
            if taken:
                out[tp] = taken
                limit -= len(taken)
        return out

    async def _fetch(self, partitions, limit: int, timeout_s: float) -> dict[TopicPartition, list]:
        """Fetch until something is found or `timeout_s` passed, keeping the membership current in between."""
        loop, wake, consumer = self._loop, self._wake, self._consumer
        deadline = loop.time() + timeout_s
        while True:
            if self._stopping:  # (a stop() during the wait: no rejoin after it left the group)
                return {}
            if self._pattern is not None:
                self._match()
            await self._membership()
            wake.arm()
            LOGS.listen(wake)
            consumer.waiting = wake
            try:
                pending = consumer.group.in_flight() if consumer.group is not None else None
                if pending is not None:
                    pending.watch(wake)
                got = consumer.fetch(limit, set(partitions) if partitions else None)
                left = deadline - loop.time()
                if got or left <= 0 or self._stopping:
                    return got
                await wake.wait(min(left, self._wait_bound_s()))
            finally:
                consumer.waiting = None
                LOGS.unlisten(wake)

    def _wait_bound_s(self) -> float:
        """How long a wait may last before the membership must be looked at again: the heartbeat interval (what the
        heartbeat thread flags is acted on) and the group coordinator's next deadline (a rebalance timeout)."""
        group = self._consumer.group
        if group is None or self._consumer.subscription() is None:
            return _HOUR_S
        bound = group.heartbeat_interval_ms
        nxt = self._engine.groups.next_deadline() if group.rebalancing() else None
        if nxt is not None:
            bound = min(bound, max(1, nxt - self._engine.clock.time_ms()))
        return bound / 1000

    async def _membership(self) -> None:
        """One rebalance step (it never waits); on a worker thread when a user's listener may be called."""
        await self._await_step()
        consumer = self._consumer
        now = self._engine.clock.time_ms()
        group = consumer.group
        if self._listener is None or group is None or not group.rebalancing():
            consumer.membership(now)
            return
        self._step = self._loop.run_in_executor(None, consumer.membership, now)
        await self._await_step()

    async def _await_step(self) -> None:
        """Until a rebalance step on a worker thread is over (a cancelled caller leaves it to the next call)."""
        step = self._step
        if step is None:
            return
        await asyncio.shield(step)
        if self._step is step:
            self._step = None
        step.result()

    async def _off_loop(self, call) -> None:
        """`call()` on a worker thread if it may call a user's rebalance listener, else here."""
        if self._listener is None:
            call()
            return
        await self._loop.run_in_executor(None, call)
