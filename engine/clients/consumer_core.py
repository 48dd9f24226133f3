"""The consumer's non-blocking core: everything a kafka-python KafkaConsumer and an aiokafka AIOKafkaConsumer do but
wait. engine.clients.consumer (the synchronous consumer: poll() and iteration wait on the engine's clock) and
engine.aio.consumer (getmany(), getone() and `async for` wait on the loop) both wrap it, through its public names
only. Its steps: `membership(deadline)` (rebalances, auto-commit), `fetch(max_records, only)` (records up to the
fetch bound, moving positions), `commit()`, `close()`; `waiting` is the event a waiting wrapper sleeps on, which
`wake()` sets (the group coordinator's word that a rebalance began).

Reads go through each partition's `fetch()` (replication.partition): whole batches up to the high
watermark (never past it), decoded by the native core into ConsumerRecords with kafka-python's
fields. Control batches are never returned and offset gaps (compaction) are skipped. Under
isolation_level='read_committed' reads stop at the last stable offset and the batches of aborted
transactions are skipped with the fetch's aborted-transaction list (engine.log.read_committed, as Kafka's
fetcher). Positions live in the core; a fetch moves them past every record it returns. Records a wrapper fetched
and has not handed to its caller yet go into `unread` (by partition, in offset order): position(), committable()
and so commit() and the auto-commit count from the first of them, and a seek, an unsubscribe or a partition taken
away drops them.
A fetch that found every position at its partition's bound notes `engine.common.changes.LOGS` (taken before it
looked) with the position map it looked at; the next fetch returns nothing at once while both are the same (no
bound, leader or position moved: seek(), resume() and a fetch's own moves forget the note), as a fetch session does.
With a `group_id`, `subscribe()` makes the consumer a member of the group: the engine's group coordinator and the
consumer's coordinator (engine.clients.consumer_coordinator) share the partitions out with the configured
assignors (partition_assignment_strategy, Kafka's default ['range', 'cooperative-sticky']), and rebalances run
in `membership()`. With group_protocol='consumer' the member is one of the consumer group protocol (KIP-848,
engine.clients.consumer_protocol_member): the coordinator assigns (group_remote_assignor names its assignor), and
session_timeout_ms, heartbeat_interval_ms and partition_assignment_strategy, the coordinator's to decide, are refused
(as Kafka's consumer refuses them). With a `group_id` and `assign()` (Kafka's standalone consumer) there is no
membership. Either way
a partition starts from the group's committed offset (`committed()`), else from auto_offset_reset; offsets are
committed by `commit()`/`commit_async()`, every auto_commit_interval_ms by membership() (enable_auto_commit), on
close(), or by a transactional producer's send_offsets_to_transaction.
Configs are kafka-python's (auto_offset_reset='latest', max_poll_records=500,
fetch_max_bytes=52428800, max_partition_fetch_bytes=1048576, isolation_level='read_uncommitted',
consumer_timeout_ms=inf, enable_auto_commit=True, auto_commit_interval_ms=5000, session_timeout_ms=10000,
heartbeat_interval_ms=3000, max_poll_interval_ms=300000, group_instance_id=None), plus rebalance_timeout_ms (the
Java client's: max_poll_interval_ms) and kafkalog's max_decompressed_bytes (128 MiB: a compressed batch inflating
past it raises RecordTooLargeError rather than filling memory).
Byte layout: none (memory only). Crash policy: none; what survives is what was committed.
Threads: a consumer is for one thread at a time; the engine under it is thread-safe. A group member's heartbeats run
on the engine's heartbeat thread until close(). Engine.close() closes its consumers from its own thread, which may
be in the middle of a fetch: that fetch skips the partitions taken away and never puts one back.
"""
from __future__ import annotations

import collections
import itertools
import logging
import math
import operator
from concurrent.futures import Future

from engine.clients.consumer_coordinator import ConsumerCoordinator, ConsumerRebalanceListener
from engine.clients.consumer_protocol_member import ConsumerProtocolMember
from engine.common.changes import LOGS
from engine.common.errors import (
    IllegalStateError,
    InvalidConfigurationError,
    KafkaError,
    NoOffsetForPartitionError,
    NotLeaderOrFollowerError,
    OffsetOutOfRangeError,
    UnknownTopicOrPartitionError,
)
from engine.common.structs import ConsumerGroupMetadata, OffsetAndMetadata, OffsetAndTimestamp, TopicPartition
from engine.groups import assignors
from engine.groups.offsets import committed_map
from engine.record import codec
from engine.record.compression import DEFAULT_MAX_DECOMPRESSED
from engine.replication.partition import READ_COMMITTED, Partition, check_isolation
from engine.log.read_committed import AbortedFilter

RESETS = ("earliest", "latest", "none")
log = logging.getLogger("kafkalog.consumer")
_REVOKED = object()  # a partition no longer in the assignment, as _fetch finds it
_LOOK_UP = object()  # _reset: the committed offset is still to be looked up
_CLIENT_IDS = itertools.count(1)


def positive(name: str, value) -> int:
    if type(value) is not int or value < 1:
        raise InvalidConfigurationError(f"{name}={value!r} must be an int >= 1")
    return value


class ConsumerCore:
    """A consumer without the waiting (see the module docstring): kafka-python's options and its methods but poll()
    and iteration (subscribe and assign, the seeks and positions, committed offsets and commits, pause and resume, the
    offset lookups, close), the fetch and membership steps, and the positions they share; the group protocol is
    engine.clients.consumer_coordinator's. That API's breadth over the same positions is why it stays one class of
    about 480 lines."""

    def __init__(self, engine, *topics: str, group_id=None, auto_offset_reset: str = "latest",
                 max_poll_records: int = 500, fetch_max_bytes: int = 52428800,
                 max_partition_fetch_bytes: int = 1048576, isolation_level: str = "read_uncommitted",
                 consumer_timeout_ms: float = math.inf, key_deserializer=None, value_deserializer=None,
                 client_id: str | None = None, max_decompressed_bytes: int = DEFAULT_MAX_DECOMPRESSED,
                 enable_auto_commit: bool = True, auto_commit_interval_ms: int = 5000,
                 group_instance_id: str | None = None, session_timeout_ms: int | None = None,
                 heartbeat_interval_ms: int | None = None, max_poll_interval_ms: int = 300000,
                 rebalance_timeout_ms: int | None = None, partition_assignment_strategy=None,
                 group_protocol: str = "classic", group_remote_assignor: str | None = None, **unknown) -> None:
        if unknown:
            raise InvalidConfigurationError(f"unknown consumer config(s): {', '.join(sorted(unknown))}")
        if group_protocol not in ("classic", "consumer"):
            raise InvalidConfigurationError(f"group_protocol={group_protocol!r} must be 'classic' or 'consumer'")
        # as Kafka's consumer: what the coordinator decides under the consumer protocol is not the client's to set
        given = {"session_timeout_ms": session_timeout_ms, "heartbeat_interval_ms": heartbeat_interval_ms,
                 "partition_assignment_strategy": partition_assignment_strategy} if group_protocol == "consumer" \
            else {"group_remote_assignor": group_remote_assignor}
        for name, value in given.items():
            if value is not None:
                raise InvalidConfigurationError(f"{name} does not apply to group_protocol={group_protocol!r}")
        session_timeout_ms = 10000 if session_timeout_ms is None else session_timeout_ms
        heartbeat_interval_ms = 3000 if heartbeat_interval_ms is None else heartbeat_interval_ms
        if partition_assignment_strategy is None:
            partition_assignment_strategy = assignors.DEFAULT_STRATEGY
        if group_id is not None and (not isinstance(group_id, str) or not group_id):
            raise InvalidConfigurationError(f"group_id={group_id!r} must be a non-empty str")
        if group_instance_id is not None and (group_id is None or not isinstance(group_instance_id, str)
                                              or not group_instance_id):
            raise InvalidConfigurationError(f"group_instance_id={group_instance_id!r} needs a group_id and must be a "
                                            f"non-empty str")
        if not isinstance(enable_auto_commit, bool):
            raise InvalidConfigurationError(f"enable_auto_commit={enable_auto_commit!r} must be a bool")
        for name, value in (("auto_commit_interval_ms", auto_commit_interval_ms),
                            ("session_timeout_ms", session_timeout_ms),
                            ("heartbeat_interval_ms", heartbeat_interval_ms),
                            ("max_poll_interval_ms", max_poll_interval_ms)):
            positive(name, value)
        if heartbeat_interval_ms >= session_timeout_ms:
            raise InvalidConfigurationError(f"heartbeat_interval_ms={heartbeat_interval_ms} must be below "
                                            f"session_timeout_ms={session_timeout_ms}")
        rebalance_timeout_ms = max_poll_interval_ms if rebalance_timeout_ms is None else \
            positive("rebalance_timeout_ms", rebalance_timeout_ms)
        self.assignors = strategy = assignors.resolve(partition_assignment_strategy)
        self.group_id = group_id
        self.enable_auto_commit = enable_auto_commit and group_id is not None
        self.auto_commit_interval_ms = auto_commit_interval_ms
        check_isolation(isolation_level)
        if auto_offset_reset not in RESETS:
            raise InvalidConfigurationError(f"auto_offset_reset={auto_offset_reset!r} must be one of {RESETS}")
        if not (isinstance(consumer_timeout_ms, (int, float)) and consumer_timeout_ms >= 0):
            raise InvalidConfigurationError(f"consumer_timeout_ms={consumer_timeout_ms!r} must be >= 0")
        self.engine = engine
        self.isolation_level = isolation_level
        self.auto_offset_reset = auto_offset_reset
        self._bound_of = Partition.bound_reader(isolation_level)  # a partition's fetch bound at this isolation
        # where a position without a committed offset starts: the log start, or the fetch bound
        self._reset_offset = operator.attrgetter("log_start_offset") if auto_offset_reset == "earliest" else \
            self._bound_of
        self.max_poll_records = positive("max_poll_records", max_poll_records)
        self.fetch_max_bytes = positive("fetch_max_bytes", fetch_max_bytes)
        self.max_partition_fetch_bytes = positive("max_partition_fetch_bytes", max_partition_fetch_bytes)
        self.consumer_timeout_ms = consumer_timeout_ms
        self.max_decompressed_bytes = positive("max_decompressed_bytes", max_decompressed_bytes)
        self._key_de, self._value_de = key_deserializer, value_deserializer
        self.client_id = client_id or f"consumer-{group_id or ''}-{next(_CLIENT_IDS)}"
        self.group_protocol = group_protocol
        self._group_settings = dict(
            group_id=group_id, group_instance_id=group_instance_id, client_id=self.client_id,
            heartbeat_interval_ms=heartbeat_interval_ms, max_poll_interval_ms=max_poll_interval_ms,
            rebalance_timeout_ms=rebalance_timeout_ms,
            auto_commit=self._auto_commit_now if self.enable_auto_commit else None,
            **(dict(remote_assignor=group_remote_assignor) if group_protocol == "consumer" else
               dict(session_timeout_ms=session_timeout_ms, assignors=strategy)))
        self.group = None if group_id is None else self._member()
        self._next_auto_commit = engine.clock.time_ms() + auto_commit_interval_ms
        self._positions: dict[TopicPartition, int | None] = {}
        self._epochs: dict[TopicPartition, int] = {}  # the leader epoch of each position (see _move)
        self._subscription: set[str] | None = None
        self._paused: set[TopicPartition] = set()
        self._idle: tuple[int, dict] | None = None  # (LOGS.value, self._positions) of a fetch that found nothing new
        self._next = 0
        self._closed = False
        self.waiting = None  # what a wrapper waiting for records sleeps on (an Event, a LoopWake); wake() sets it
        self.unread: dict[TopicPartition, collections.deque] = {}  # fetched, not handed out yet (see the docstring)
        if topics:
            self.subscribe(list(topics))

    # --- assignment -------------------------------------------------------------------------------
    def check_open(self) -> None:
        if self._closed:
            raise IllegalStateError("the consumer is closed")

    @property
    def closed(self) -> bool:
        return self._closed

    def subscribe(self, topics, listener: ConsumerRebalanceListener | None = None) -> None:
        """Subscribe to topics. With a group_id the group's assignor shares their partitions among its members
        (from the next membership step: a poll(), a getmany()), calling `listener` around each rebalance; without
        one, this consumer is their only member and gets every partition."""
        self.check_open()
        topics = [topics] if isinstance(topics, str) else list(topics)
        if not topics or not all(isinstance(t, str) and t for t in topics):
            raise InvalidConfigurationError(f"subscribe() takes topic names, got {topics!r}")
        if self._subscription is None and self._positions:
            raise IllegalStateError("subscribe() after assign(): call unsubscribe() first")
        if listener is not None and not isinstance(listener, ConsumerRebalanceListener):
            raise InvalidConfigurationError("listener must be a ConsumerRebalanceListener")
        if self.group is not None:
            for t in topics:
                self.engine.partitions_for(t)  # raises for an unknown topic
            self._subscription = set(topics)
            self.group.listener = listener or ConsumerRebalanceListener()
            self.group.request_rejoin()
            return
        parts = [TopicPartition(t, p) for t in topics for p in range(self.engine.partitions_for(t))]
        self._subscription = set(topics)
        self._positions = {tp: self._positions.get(tp) for tp in parts}

    def _member(self) -> ConsumerCoordinator | ConsumerProtocolMember:
        """This consumer's side of its group: a classic member, or one of the consumer group protocol (KIP-848)."""
        kind = ConsumerProtocolMember if self.group_protocol == "consumer" else ConsumerCoordinator
        return kind(self, self.engine.groups, **self._group_settings)

    def assign(self, partitions) -> None:
        """Read exactly these TopicPartitions."""
        self.check_open()
        if self._subscription is not None:
            raise IllegalStateError("assign() after subscribe(): call unsubscribe() first")
        parts = [TopicPartition(*tp) for tp in partitions]
        for tp, leader in zip(parts, self.engine.partitions_of(parts)):  # (many at once: engine.partitions_of)
            if leader is None:
                self.engine.partition(tp.topic, tp.partition)  # raises for an unknown topic or partition
        self._positions = {tp: self._positions.get(tp) for tp in parts}
        self._keep_unread_assigned()

    def unsubscribe(self) -> None:
        if self.group is not None and self._subscription is not None:
            self.group.close(self.group.auto_commit)
            self.group = self._member()
        self._subscription = None
        self._positions = {}
        self._paused = set()
        self._drop_unread(list(self.unread))

    def assignment(self) -> set[TopicPartition]:
        return set(self._positions)

    def subscription(self) -> set[str] | None:
        return None if self._subscription is None else set(self._subscription)

    def topics(self) -> set[str]:
        return set(self.engine.list_topics())

    def partitions_for_topic(self, topic: str) -> set[int]:
        return set(range(self.engine.partitions_for(topic)))

    def pause(self, *partitions) -> None:
        self._paused.update(self._assigned(partitions))

    def resume(self, *partitions) -> None:
        self._paused.difference_update(partitions)
        self._idle = None

    def paused(self) -> set[TopicPartition]:
        return set(self._paused)

    def _assigned(self, partitions) -> list[TopicPartition]:
        for tp in partitions:
            if tp not in self._positions:
                raise IllegalStateError(f"{tp} is not assigned to this consumer")
        return list(partitions)

    # --- positions --------------------------------------------------------------------------------
    def partition_of(self, tp: TopicPartition) -> Partition:
        return self.engine.partition(tp.topic, tp.partition)

    def _end(self, tp: TopicPartition) -> int:
        return self._bound_of(self.partition_of(tp))

    def _reset(self, tp: TopicPartition, committed=_LOOK_UP, partition: Partition | None = None) -> int:
        """Position `tp` at its committed offset, else by auto_offset_reset (`partition`: its leader, if known)."""
        if committed is _LOOK_UP:
            committed = self.engine.committed(self.group_id, tp) if self.group_id is not None else None
        if committed is not None and self._positions.get(tp) is None:
            self._move(tp, committed.offset, committed.leader_epoch)
            return committed.offset
        if self.auto_offset_reset == "none":
            raise NoOffsetForPartitionError(f"no position for {tp} and auto_offset_reset='none'")
        pos = self._reset_offset(self.partition_of(tp) if partition is None else partition)
        self._move(tp, pos)
        return pos

    def _reset_unset(self, positions: dict, order: list[TopicPartition], leaders: list[Partition | None]) -> None:
        """_reset for the partitions of `order` (keys of the map `positions`, all of them or the fetch's `only`;
        `leaders`: their partitions_of) without a position (a rebalance just assigned them), their committed offsets
        looked up at once; one without a leader for now keeps no position (the fetch skips it)."""
        unset_count = operator.countOf(positions.values(), None)  # (at C speed, as every step up to the resets)
        if not unset_count:  # (the common case)
            return
        if unset_count == len(positions) and not self._paused:  # every one of them (just assigned)
            unset, partitions = order, leaders
        else:
            unset_at = list(map(operator.is_, map(positions.get, order), itertools.repeat(None)))
            if self._paused:
                unset_at = [u and tp not in self._paused for u, tp in zip(unset_at, order)]
            unset, partitions = list(itertools.compress(order, unset_at)), list(itertools.compress(leaders, unset_at))
            if not unset:
                return
        found = self.engine.committed_offsets(self.group_id, unset) if self.group_id is not None else {}
        if found or self.auto_offset_reset == "none" or None in partitions:
            for tp, partition in zip(unset, partitions):
                try:
                    self._reset(tp, found.get(tp), partition)
                except NotLeaderOrFollowerError:
                    continue
            return
        reset = dict(zip(unset, map(self._reset_offset, partitions)))  # none committed: all by the policy
        if positions is self._positions:  # (else another thread replaced the map meanwhile: close(), a rebalance)
            positions.update(reset)
            self._epochs.update(dict.fromkeys(reset, -1))
            self._idle = None

    def _move(self, tp: TopicPartition, offset: int, leader_epoch: int = -1) -> None:
        """Set the position of `tp` and the leader epoch that goes with it (Kafka's FetchPosition.offsetEpoch: the
        epoch of the last record consumed, or of the committed offset it started from; -1, unknown, after a seek
        or a reset), which commit() of consumed positions stores."""
        positions = self._positions
        if tp in positions:  # else taken away meanwhile by another thread (close(), a rebalance): not brought back
            positions[tp] = offset
            self._epochs[tp] = leader_epoch
            self._idle = None

    def position(self, tp: TopicPartition) -> int:
        """The offset of the next record to fetch (resolving auto_offset_reset if needed)."""
        self.check_open()
        pos = self._positions[self._assigned([tp])[0]]
        records = self.unread.get(tp)
        if records:
            return records[0].offset
        return self._reset(tp) if pos is None else pos

    def seek(self, tp: TopicPartition, offset: int) -> None:
        self.check_open()
        if type(offset) is not int or not 0 <= offset < 2**63:
            raise InvalidConfigurationError(f"offset must be an int in [0, 2**63), got {offset!r}")
        self._move(self._assigned([tp])[0], offset)
        self._drop_unread([tp])

    def seek_to_beginning(self, *partitions) -> None:
        for tp in self._assigned(partitions or list(self._positions)):
            self._move(tp, self.partition_of(tp).log_start_offset)
        self._drop_unread(partitions or list(self.unread))

    def seek_to_end(self, *partitions) -> None:
        for tp in self._assigned(partitions or list(self._positions)):
            self._move(tp, self._end(tp))
        self._drop_unread(partitions or list(self.unread))

    def _drop_unread(self, partitions) -> None:
        """Forget the unread records of `partitions`; a deque a wrapper is taking records from is emptied."""
        for tp in partitions:
            records = self.unread.pop(tp, None)
            if records is not None:
                records.clear()

    def _keep_unread_assigned(self) -> None:
        if self.unread:
            self._drop_unread([tp for tp in self.unread if tp not in self._positions])

    def beginning_offsets(self, partitions) -> dict[TopicPartition, int]:
        return {tp: self.partition_of(tp).log_start_offset for tp in partitions}

    def end_offsets(self, partitions) -> dict[TopicPartition, int]:
        """The high watermark: the offset after the last record a read_uncommitted consumer can see."""
        return {tp: self._end(tp) for tp in partitions}

    def offsets_for_times(self, timestamps: dict) -> dict[TopicPartition, OffsetAndTimestamp | None]:
        """For each partition, the first offset whose timestamp is >= the given one (None if none is visible)."""
        out = {}
        for tp, ts in timestamps.items():
            if type(ts) is not int or ts < 0:
                raise ValueError(f"timestamp for {tp} must be an int >= 0, got {ts!r}")
            found = self.partition_of(tp).offset_for_timestamp(ts, self.isolation_level)
            out[tp] = OffsetAndTimestamp(found[1], found[0], None) if found is not None else None
        return out

    def group_metadata(self) -> ConsumerGroupMetadata:
        """The member's group, generation and member id (for a transactional producer's send_offsets_to_transaction)."""
        if self.group_id is None:
            raise IllegalStateError("group_metadata() needs a group_id")
        return self.group.metadata()

    def set_assignment(self, partitions: set[TopicPartition], given: list[TopicPartition] | None = None) -> None:
        """The group gave this member `partitions` (`given`: the same, in the assignment's order, which an assignor
        mostly sorted already): keep positions of those it already had. Given the ones it has, the map stays as it
        is (a cooperative round keeps most members' partitions; an idle fetch stays idle)."""
        if self._positions.keys() == partitions:
            return
        ordered = sorted(partitions if given is None else given)
        if self._positions:
            self._positions = dict(zip(ordered, map(self._positions.get, ordered)))
            self._epochs = dict(zip(ordered, map(self._epochs.get, ordered, itertools.repeat(-1))))  # -1: unknown
        else:  # (none kept: an eager member revoked them all)
            self._positions, self._epochs = dict.fromkeys(ordered), dict.fromkeys(ordered, -1)
        if self._paused:
            self._paused &= self._positions.keys()
        self._keep_unread_assigned()

    def committable(self) -> dict[TopicPartition, OffsetAndMetadata]:
        """What commit() commits by default: each assigned partition's position (its first unread record's offset,
        if it has one) with the leader epoch that goes with it."""
        out = {tp: OffsetAndMetadata(pos, "", self._epochs.get(tp, -1)) for tp, pos in self._positions.items()
               if pos is not None}
        for tp, records in self.unread.items():
            if records and tp in out:
                out[tp] = OffsetAndMetadata(records[0].offset, "", records[0].leader_epoch)
        return out

    def committed(self, tp: TopicPartition, metadata: bool = False):
        """The group's committed offset for `tp` (an OffsetAndMetadata with metadata=True); None if none."""
        self.check_open()
        if self.group_id is None:
            raise IllegalStateError("committed() needs a group_id")
        found = self.engine.committed(self.group_id, TopicPartition(*tp))
        return found if metadata or found is None else found.offset

    def commit(self, offsets=None) -> None:
        """Commit `offsets` ({TopicPartition: OffsetAndMetadata or int}, the next offsets to read; default: the
        current position of every assigned partition that has one) for the group, at once (OffsetCommit)."""
        self.check_open()
        if self.group_id is None:
            raise IllegalStateError("commit() needs a group_id")
        committed = committed_map(self.committable() if offsets is None else offsets, self.engine.partition)
        if not committed:
            return
        if self._subscription is not None:
            self.group.commit(committed)
        else:
            self.engine.groups.commit_offsets(self.group_id, committed)

    def commit_async(self, offsets=None, callback=None) -> Future:
        """commit(), reporting to `callback(offsets, exception or None)` and through the returned Future instead of
        raising. (The engine is in this process: the commit is done when this returns.)"""
        future: Future = Future()
        target = self.committable() if offsets is None else offsets
        try:
            self.commit(target)
        except KafkaError as exc:
            future.set_exception(exc)
        else:
            future.set_result(target)
        if callback is not None:
            callback(target, future.exception())
        return future

    def _auto_commit_now(self) -> None:
        try:
            self.commit()
        except KafkaError as exc:
            log.warning("consumer %s of group %s: commit failed: %s", self.client_id, self.group_id, exc)

    # --- fetching ---------------------------------------------------------------------------------
    def fetch(self, max_records: int, only: set[TopicPartition] | None = None) -> dict[TopicPartition, list]:
        """Records of the assignment (of `only` among it, if given: engine.aio's getmany(*partitions))."""
        out: dict[TopicPartition, list] = {}
        budget, remaining = self.fetch_max_bytes, max_records
        changes, positions = LOGS.value, self._positions  # (the count first: a change after it moves it)
        idle = self._idle
        if idle is not None and idle[0] == changes and idle[1] is positions:
            return out  # no bound, leader or position moved since a fetch found nothing
        order = list(positions) if only is None else [tp for tp in positions if tp in only]
        if not order:
            return out
        start = self._next % len(order)
        self._next += 1
        leaders = self.engine.partitions_of(order)
        self._reset_unset(positions, order, leaders)
        looked = False
        for tp, partition, pos, bound in self._readable(order[start:] + order[:start],
                                                        leaders[start:] + leaders[:start]):
            looked = True
            if remaining <= 0 or budget <= 0:
                break
            if pos >= bound:  # nothing to read yet; past the log end, out of range (as a broker's fetch says)
                if pos > bound and pos > partition.log_end_offset:
                    if self.auto_offset_reset == "none":
                        raise OffsetOutOfRangeError(f"position {pos} of {tp} is past the log end "
                                                    f"{partition.log_end_offset}", offset=pos)
                    self._reset(tp)
                continue
            try:
                data = partition.fetch(pos, min(self.max_partition_fetch_bytes, budget), self.isolation_level)
            except OffsetOutOfRangeError:
                if self.auto_offset_reset == "none":
                    raise
                self._reset(tp)
                continue
            if data is None:  # the bound moved back since (a truncation)
                continue
            budget -= data.records.nbytes
            records: list = []
            nxt, epoch = pos, self._epochs.get(tp, -1)
            visible = AbortedFilter(partition.aborted_transactions(data)).visible \
                if self.isolation_level == READ_COMMITTED else None
            for batch in data.batches(partition.log.dir):
                if visible is not None and not visible(batch):
                    nxt = max(nxt, batch.next_offset)
                    continue
                got, nxt = batch.consumer_records(tp.topic, tp.partition, nxt, remaining - len(records),
                                                  self.max_decompressed_bytes)
                if got:
                    epoch = batch.partition_leader_epoch
                records += got
                if len(records) >= remaining:
                    break
            self._move(tp, nxt, epoch)
            if records:
                out[tp] = self._deserialize(records) if self._key_de or self._value_de else records
                remaining -= len(records)
        if not looked and only is None:  # (a part found idle says nothing of the rest)
            self._idle = (changes, positions)
        return out

    def _readable(self, order: list[TopicPartition], partitions: list[Partition | None]):
        """(tp, its partition, position, fetch bound) for each partition of `order` (`partitions`: their
        partitions_of) that is not paused, has a leader and may have something to say: records below the bound, or
        a position past it. A first pass at C speed (positions against bounds) leaves the loop only those whose
        position is not their bound, or all of them while one has no leader."""
        bound_of = self._bound_of
        if None in partitions:
            candidates = range(len(order))
        else:
            positions = map(self._positions.get, order, itertools.repeat(_REVOKED))
            candidates = itertools.compress(range(len(order)), map(operator.ne, positions, map(bound_of, partitions)))
        for i in candidates:
            tp, partition = order[i], partitions[i]
            if self._paused and tp in self._paused:
                continue
            if partition is None:
                try:
                    partition = self.partition_of(tp)  # raises what a missing partition means
                except NotLeaderOrFollowerError:
                    continue  # no leader for now (a failover): nothing to read from it this time
            pos = self._positions.get(tp, _REVOKED)  # (the map of now: close() replaces it)
            if pos is _REVOKED:  # close() or a rebalance on another thread took it away since `order` was read
                continue
            if pos is None:
                pos = self._reset(tp, partition=partition)
            bound = bound_of(partition)
            if pos != bound:
                yield tp, partition, pos, bound

    def _deserialize(self, records: list) -> list:
        kd, vd = self._key_de, self._value_de
        return [codec.consumer_record(
            r.topic, r.partition, r.leader_epoch, r.offset, r.timestamp, r.timestamp_type,
            kd(r.key) if kd and r.key is not None else r.key, vd(r.value) if vd and r.value is not None else r.value,
            r.headers, None, r.serialized_key_size, r.serialized_value_size, r.serialized_header_size)
            for r in records]

    def membership(self, deadline: int) -> None:
        """Keep the group membership current (rebalances, auto-commit) before fetching."""
        stable = self.group.poll(deadline) if self.group is not None and self._subscription is not None else True
        if stable and self.enable_auto_commit and self.engine.clock.time_ms() >= self._next_auto_commit:
            self._next_auto_commit = self.engine.clock.time_ms() + self.auto_commit_interval_ms
            self._auto_commit_now()

    def wake(self) -> None:
        """Wake a wrapper waiting for records (`waiting`: the group coordinator's word that a rebalance began)."""
        event = self.waiting
        if event is not None:
            event.set()

    def close(self, autocommit: bool = True) -> None:
        """Commit positions (enable_auto_commit and `autocommit`), leave the group (a static member does not) and
        stop the heartbeat thread."""
        if self._closed:
            return
        commit = self._auto_commit_now if autocommit and self.enable_auto_commit else None
        try:
            if self.group is not None and self._subscription is not None:
                self.group.close(commit)
            elif commit is not None and self._positions:
                commit()
        finally:
            self._closed = True

    def on_topic_changed(self, topic: str) -> None:
        """The engine deleted `topic` or added partitions to it: drop the partitions that are gone, and take
        new ones of a subscribed topic (their position comes from auto_offset_reset)."""
        if self.group is not None and self._subscription is not None:
            if topic in self._subscription:
                self.group.request_rejoin()  # the leader assigns the new partitions (or drops the gone ones)
            return
        try:
            count = self.engine.partitions_for(topic)
        except UnknownTopicOrPartitionError:
            count = 0
        kept = {tp: pos for tp, pos in self._positions.items() if tp.topic != topic or tp.partition < count}
        if self._subscription is not None and topic in self._subscription:
            for p in range(count):
                kept.setdefault(TopicPartition(topic, p), None)
        self._positions = kept
        self._keep_unread_assigned()

