"""The Engine: one open log directory with its topics, their partitions' logs, producer ids and
background work; the clients (`producer()`, `consumer()`) are made from it.

On disk: Kafka's log directory (replication.log_manager) plus `kafkalog.metadata` (engine.metadata).
Every read and write of a partition goes through its leader's `replication.partition.Partition`, which owns
the high watermark. With `brokers=N` the engine runs N in-process brokers (replication.broker): broker 0's log
directory is `path`, broker b's `path/brokers/<b>`; the controller (replication.controller) assigns replicas,
elects leaders and keeps their state in the catalogue; `fail_broker`/`restart_broker` simulate a broker's
process dying and coming back.
Crash policy: a topic is created by writing its partition directories (each with its
`partition.metadata`) and then the catalogue; it is deleted by rewriting the catalogue first and then
removing the directories. A partition directory the catalogue does not know (a crash in between,
or another topic id) is renamed `-stray`, as KRaft brokers do, so nothing is lost.
Transactions (engine.transactions) and consumer groups (engine.groups.group_coordinator) use two internal topics,
`__transaction_state` and `__consumer_offsets`, created with 50 partitions on first use and kept in the catalogue;
no client API can name them.
Threads: every public method is thread-safe. Changes to topics and brokers (create, grow, delete, alter, internal
topics, broker failure and restart) take the engine's admin lock and may do file I/O under it (a topic's partition
directories, a broker's recovery); what clients do per call (a producer's partition layout, registering a client, a
producer id, a consumer's watch, a group or transaction record, the coordinators once made) never waits for them: a
topic being created stays unknown to them until it is whole. Each broker's log manager thread runs flush, retention and
checkpoints (broker 0's also producer-id expiry, ISR expiry, aborting timed-out transactions, expiring
transactional ids, group session and rebalance timeouts and expiring group offsets), each live broker of
several runs a replica fetcher thread, one native thread runs the linked followers' steady-state fetch rounds
without the GIL (replication.replica_fetcher; on the system clock and a plain file system), and one thread, started
when another process first asks, applies staged writes (engine.staged_writes.queue); all stop on close(), whose
every step runs whatever the one before raised.
"""
from __future__ import annotations

import functools
import logging
import os
import threading
import weakref
from typing import Callable, NamedTuple

from engine import limits, metadata
from engine.clients.heartbeat_thread import HeartbeatThread
from engine.common.changes import BumpingDict
from engine.common.closing import Steps
from engine.common.clock import Clock, SystemClock
from engine.common.errors import (
    IllegalStateError,
    InvalidConfigurationError,
    InvalidLogDirectoryError,
    InvalidPartitionsError,
    InvalidReplicationFactorError,
    InvalidTopicError,
    KafkaError,
    KafkaStorageError,
    NotLeaderOrFollowerError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
    not_supported_yet,
)
from engine.common.health import TaskFailure
from engine.common.structs import TOPIC_OF, OffsetAndMetadata, TopicPartition, topic_partitions
from engine.groups import offsets as group_offsets
from engine.groups.group_coordinator import (
    OFFSETS_RETENTION_CHECK_INTERVAL_MS,
    GroupConfig,
    GroupCoordinator,
    GroupLog,
)
from engine.metadata import COMPACTED_INTERNAL_TOPICS, INTERNAL_TOPICS, Catalogue, TopicRecord
from engine.record import batch_format as bf
from engine.transactions import INTERNAL_WRITE_TIMEOUT_MS, Transactions
from engine.replication.broker import Broker, broker_dir
from engine.replication.controller import Controller
from engine.replication.log_cleaner import CleanerConfig, log_to_clean
from engine.replication.log_manager import LogManager
from engine.replication.partition import REPLICA_LAG_TIME_MAX_MS, Partition
from engine.replication.replica_fetcher import ReplicaFetcher, native_fetcher
from engine.segments import names, partition_metadata
from engine.segments.cleaner import CleanerStats
from engine.segments.fs import FileSystem
from engine.segments.log_config import LogConfig, warn_deprecated
from engine.staged_writes.queue import StagedWrites
from engine.txn.transaction_coordinator import ABORT_CHECK_INTERVAL_MS, EXPIRE_CHECK_INTERVAL_MS
from engine.txn.unified_log import CLIENT, DEFAULT_EXPIRATION_MS, AppendInfo, UnifiedLog

log = logging.getLogger("kafkalog.engine")

PRODUCER_EXPIRATION_CHECK_MS = 600_000
MAX_BROKERS = 64
INTERNAL_PARTITIONS = 50  # offsets.topic.num.partitions, transaction.state.log.num.partitions
INTERNAL_SEGMENT_BYTES = 104_857_600
GROUP_TICK_MS = 500  # how often the background thread applies group deadlines nobody is waiting on
STAGED_WRITES_CHECK_MS = 200  # how often the background thread looks for staged writes to commit (a Spark sink's)


class ReplicaDescription(NamedTuple):
    log_end_offset: int
    high_watermark: int


class PartitionDescription(NamedTuple):
    partition: int
    log_start_offset: int
    log_end_offset: int
    high_watermark: int          # the partition's (its leader's); -1 while it has no leader
    size_bytes: int
    segments: int
    leader: int = 0              # broker ids; -1 for no leader
    leader_epoch: int = 0
    replicas: list[int] = [0]
    isr: list[int] = [0]
    replica_states: dict[int, ReplicaDescription] = {}  # each live replica's LEO and HW, by broker
    dirty_ratio: float | None = None  # a compacted log's share of bytes not yet cleaned (None: not compacted)


class TopicDescription(NamedTuple):
    name: str
    topic_id: str
    partitions: list[PartitionDescription]
    config: dict                 # the effective config, defaults included
    overrides: dict | None = None  # only the configs set on this topic


class Engine:
    """An open log directory. Use `engine.open(path)`; close it (or use `with`) to shut down cleanly."""

    def __init__(self, path: str, *, clock: Clock | None = None, fs: FileSystem | None = None,
                 background: bool = True, topic_defaults: dict | None = None,
                 producer_id_expiration_ms: int = DEFAULT_EXPIRATION_MS, fd_budget: int | None = None,
                 brokers: int | None = None, replica_lag_time_max_ms: int = REPLICA_LAG_TIME_MAX_MS,
                 group_config: dict | None = None, cleaner_config: dict | None = None,
                 hw_checkpoint_interval_ms: int = LogManager.HW_CHECKPOINT_MS,
                 max_partitions: int = limits.DEFAULT_MAX_PARTITIONS, **unknown) -> None:
        if unknown:
            raise InvalidConfigurationError(f"unknown engine option(s): {', '.join(sorted(unknown))}")
        self.path = _log_dir_path(path)
        self.max_partitions = limits.check_max_partitions(max_partitions)
        self.clock = clock or SystemClock()
        if fd_budget is not None and (not isinstance(fd_budget, int) or isinstance(fd_budget, bool)
                                      or fd_budget < 4):
            raise InvalidConfigurationError(f"fd_budget={fd_budget!r} must be an int >= 4")
        self.fs = fs or FileSystem(fd_budget)
        if fs is not None and fd_budget is not None:
            fs.fd_budget = fd_budget
        self.defaults = LogConfig.from_dict(topic_defaults)
        if not isinstance(producer_id_expiration_ms, int) or producer_id_expiration_ms < 1:
            raise InvalidConfigurationError(f"producer.id.expiration.ms={producer_id_expiration_ms!r} must be >= 1")
        self._lock = threading.RLock()  # the admin lock: topic and broker changes, close()
        self._registry_lock = threading.Lock()  # a short lock: clients, waiters, producer ids
        self._coordinators_lock = threading.RLock()  # making the transaction and group coordinators on first use
        self._creating: set[str] = set()  # topics being created: unknown to clients until whole
        self._closed = False
        self._clients: weakref.WeakSet = weakref.WeakSet()
        self.heartbeats = HeartbeatThread(self.clock)  # every group member's heartbeats (a thread from the first)
        self._waiters: set[threading.Event] = set()
        # each partition's leader; a change bumps changes.LOGS, which a consumer that found nothing new watches
        self._partitions: dict[tuple[str, int], Partition] = BumpingDict()
        self._hw_seen: dict[tuple[str, int], int] = {}  # the highest HW a leader had before it failed
        if type(replica_lag_time_max_ms) is not int or replica_lag_time_max_ms < 1:
            raise InvalidConfigurationError(f"replica_lag_time_max_ms={replica_lag_time_max_ms!r} must be an int >= 1")
        self._lag_ms = replica_lag_time_max_ms
        self._background = background
        self._staged = StagedWrites(self)  # writes other processes staged: applied on a thread of its own
        self._native_fetcher = None  # the native replica fetcher's thread (engine._native._replica_fetcher), if any
        self._controller_lock = threading.Lock()  # a leaf lock: the catalogue's states and its file
        self._txn: Transactions | None = None
        self._groups: GroupCoordinator | None = None
        self._group_config = GroupConfig.of(group_config)
        cleaner = CleanerConfig.of(cleaner_config)
        if type(hw_checkpoint_interval_ms) is not int or hw_checkpoint_interval_ms < 1:
            raise InvalidConfigurationError(f"hw_checkpoint_interval_ms={hw_checkpoint_interval_ms!r} must be an int "
                                            f">= 1")
        try:
            self.fs.makedirs(self.path)
        except OSError as exc:
            raise InvalidLogDirectoryError(f"cannot use {self.path} as a log directory: {exc.strerror}",
                                           file=self.path) from None
        found = metadata.read(self.fs, self.path)
        self._catalogue = found or Catalogue()
        self._catalogue.brokers = _broker_count(brokers, found)
        self._catalogue.controller_epoch += 1  # a new controller for this open
        self.controller = Controller(self._catalogue.brokers, self._catalogue.controller_epoch)
        log_options = {"producer_id_expiration_ms": producer_id_expiration_ms}
        self._logs = LogManager(
            self.path, fs=self.fs, clock=self.clock, configs=self._log_config, background=background,
            log_options=log_options, cleaner_config=cleaner, hw_checkpoint_interval_ms=hw_checkpoint_interval_ms,
            tasks={name: (every, self._while_open(task)) for name, (every, task) in {
                "producer-expiration": (PRODUCER_EXPIRATION_CHECK_MS, self.expire_producers),
                "isr-expiration": (max(1, replica_lag_time_max_ms // 2), self.shrink_isrs),
                "transaction-abort": (ABORT_CHECK_INTERVAL_MS, self.abort_timed_out_transactions),
                "transactional-id-expiration": (EXPIRE_CHECK_INTERVAL_MS, self.expire_transactional_ids),
                "group-timeouts": (GROUP_TICK_MS, self.tick_groups),
                "delete-expired-group-metadata": (OFFSETS_RETENTION_CHECK_INTERVAL_MS, self.expire_group_offsets),
                "staged-writes": (STAGED_WRITES_CHECK_MS, self._staged.poll)}.items()})
        self._brokers = {0: Broker(0, self._logs, self._new_partition)}
        try:
            for b in range(1, self._catalogue.brokers):
                self._brokers[b] = Broker(b, LogManager(
                    broker_dir(self.path, b), fs=self.fs, clock=self.clock, configs=self._log_config,
                    background=background, log_options=log_options, node_id=b, cleaner_config=cleaner,
                    hw_checkpoint_interval_ms=hw_checkpoint_interval_ms),
                    self._new_partition)
            self._reconcile(adopt=found is None)
            for name, rec in sorted(self._catalogue.topics.items()):
                for p in range(rec.partitions):
                    self._add_partition(name, p)
            self._start_fetchers()
            highest = max((lg.producer_state.max_producer_id() for lg in self._logs.logs().values()), default=-1)
            self._next_pid = max(self._catalogue.producer_id_block_end, highest + 1)
            self._catalogue.producer_id_block_end = self._next_pid
            self._save()
            if group_offsets.TOPIC in self.internal_topics():
                self.groups  # noqa: B018 (load groups and offsets now, so their timeouts and expiry run)
            self._txn = Transactions(self) if self.internal_topics() else None
        except BaseException:
            steps = Steps()  # each broker closed, then the native fetcher (its links unlinked by then), whatever raised
            for broker in self._brokers.values():
                steps.run(broker.close)
            if self._native_fetcher is not None:
                steps.run(self._native_fetcher.close)
            raise

    def _while_open(self, task: Callable[[], object]) -> Callable[[], object]:
        """`task` for the background thread: nothing once close() has begun (a closing engine is not a failure)."""
        def run():
            return None if self._closed else task()
        return run

    # --- catalogue ------------------------------------------------------------------------------
    def _log_config(self, topic: str) -> LogConfig:
        rec = self._catalogue.topics.get(topic)
        base = self.defaults
        if topic in COMPACTED_INTERNAL_TOPICS:  # as Kafka creates them, also in directories older than compaction
            base = LogConfig.from_dict({"cleanup.policy": "compact"}, base=base)
        return LogConfig.from_dict(rec.config if rec else None, base=base)

    def _reconcile(self, adopt: bool) -> None:
        """Match partition directories with the catalogue: adopt them (no catalogue yet) or set strays aside."""
        for (topic, partition), lg in sorted(self._logs.logs().items()):
            if topic in INTERNAL_TOPICS:
                continue  # a broker's internal topics stay as they are, outside the catalogue
            rec = self._catalogue.topics.get(topic)
            try:
                topic_id = partition_metadata.read(self.fs, lg.dir)
            except KafkaStorageError as exc:  # unreadable: the catalogue (or a new id) says which topic it is
                topic_id = rec.topic_id if rec is not None else None
                lg.recovery.note(f"rewrote {exc.file}: {exc.message}")
                if topic_id is not None:
                    partition_metadata.write(self.fs, lg.dir, topic_id)
            if adopt:
                if rec is None:
                    rec = self._catalogue.topics[topic] = TopicRecord(topic_id or partition_metadata.new_topic_id(), 0)
                rec.partitions = max(rec.partitions, partition + 1)
                if topic_id is None:
                    partition_metadata.write(self.fs, lg.dir, rec.topic_id)
            elif topic_id is None and rec is not None and partition < rec.partitions:
                # partition.metadata lost (deleted, or an unclean shutdown) in a partition the catalogue names: Kafka
                # takes it for a stray that never received data (LogManager.isStrayKraftReplica) and its records
                # vanish from the topic; the catalogue says whose it is, so it keeps them
                partition_metadata.write(self.fs, lg.dir, rec.topic_id)
                lg.recovery.note(f"wrote the missing partition.metadata of {lg.dir} with topic {topic!r}'s id "
                                 f"{rec.topic_id}, keeping its {lg.log_end_offset - lg.log_start_offset} records")
            elif rec is None or topic_id != rec.topic_id or partition >= rec.partitions:
                why = ("no topic of that name" if rec is None else f"topic id {topic_id}, not {rec.topic_id}"
                       if topic_id != rec.topic_id else f"the topic has {rec.partitions} partitions")
                moved = self._logs.set_aside(topic, partition, "stray")
                self._logs.repairs.append(f"set {lg.dir} aside as {moved}: the catalogue has {why}")
                log.warning("%s", self._logs.repairs[-1])
        for name, rec in self._catalogue.topics.items():
            for p in range(rec.partitions):  # a partition the catalogue has but the disk lost
                self._logs.create_log(name, p, rec.topic_id)
        for b, broker in self._brokers.items():  # the other brokers hold only the replicas assigned to them
            for (topic, partition) in sorted(broker.logs.logs()) if b else ():
                rec = self._catalogue.topics.get(topic)
                state = rec.states.get(partition) if rec is not None else None
                if state is None or b not in state.replicas:
                    broker.logs.set_aside(topic, partition, "stray")

    def _new_partition(self, topic: str, index: int, log: UnifiedLog, broker_id: int) -> Partition:
        return Partition(topic, index, log, broker_id=broker_id, clock=self.clock,
                         replica_lag_time_max_ms=self._lag_ms, alter_isr=self._alter_isr)

    def _add_partition(self, topic: str, index: int) -> None:
        """Host `topic`-`index` on its replicas' brokers and give each its role."""
        rec = self._catalogue.topics[topic]
        state = rec.states.get(index)
        if state is None:  # a single replica on broker 0, leading in the log's own latest epoch
            self._partitions[_key(topic, index)] = part = self._brokers[0].host(topic, index, rec.topic_id)
            part.make_leader()
            return
        for b in state.replicas:
            if self._brokers[b].alive:
                self._brokers[b].host(topic, index, rec.topic_id)
        with self._controller_lock:
            self.controller.elect(state, self._unclean(topic))  # a partition left without a leader
        self._apply(topic, index)

    def _apply(self, topic: str, index: int) -> None:
        """Give every live replica of `topic`-`index` its role in the controller's state (LeaderAndIsr); a new
        leader's HW starts at the highest HW the partition had in this process (every ISR member holds that much,
        so a reader never sees the HW go down across a failover)."""
        hw_floor = self._hw_seen.get((topic, index), 0)
        state = self._catalogue.topics[topic].states[index]
        epoch = self.controller.epoch
        leader = self._brokers[state.leader].partitions.get((topic, index)) if state.leader >= 0 else None
        if leader is None:
            self._partitions.pop((topic, index), None)
        else:
            leader.make_leader(state.leader_epoch, state.isr, state.replicas, hw_floor, controller_epoch=epoch)
            self._partitions[_key(topic, index)] = leader
        for b in state.replicas:
            part = self._brokers[b].partitions.get((topic, index)) if self._brokers[b].alive else None
            if part is None or part is leader:
                continue
            if leader is None:
                part.make_offline()
            else:
                part.make_follower(state.leader, state.leader_epoch, state.replicas, state.isr, controller_epoch=epoch)
        self._wake_followers()

    def _alter_isr(self, partition: Partition, isr: frozenset) -> bool:
        """AlterPartition: a leader's ISR change, accepted by the controller and persisted before it holds."""
        with self._controller_lock:
            rec = self._catalogue.topics.get(partition.topic)
            state = rec.states.get(partition.index) if rec is not None else None
            if state is None or not self.controller.alter_isr(state, partition.broker_id, partition.leader_epoch,
                                                              isr):
                return False
            metadata.write(self.fs, self.path, self._catalogue)
            return True

    def _start_fetchers(self) -> None:
        if self._background and self._catalogue.brokers > 1:
            for broker in self._brokers.values():
                if broker.alive:
                    broker.start_fetcher(self._leader_of, self._native())

    def _native(self):
        """The native replica fetcher, started on first use (None where it cannot run: see native_fetcher)."""
        if self._native_fetcher is None:
            self._native_fetcher = native_fetcher(self.fs, self.clock)
        return self._native_fetcher

    def _leader_of(self, follower: Partition) -> Partition | None:
        return self._partitions.get((follower.topic, follower.index))

    def _save(self) -> None:
        with self._controller_lock:
            metadata.write(self.fs, self.path, self._catalogue)

    def _save_after_rollback(self) -> None:
        """Rewrite the catalogue after a topic change failed and was undone: another thread may have written it
        meanwhile (an ISR change, a producer-id block) with the change half made. The change's own error is the one
        raised; a failure here is logged."""
        try:
            self._save()
        except KafkaError as exc:
            log.warning("could not rewrite %s after undoing a failed topic change: %s", self.path, exc)

    @property
    def clean_shutdown(self) -> bool:
        """Whether the directory was closed cleanly before this open (else it was recovered)."""
        return self._logs.clean_shutdown

    def _check_open(self) -> None:
        if self._closed:
            raise IllegalStateError("the engine is closed", file=self.path)

    # --- topics ---------------------------------------------------------------------------------
    def create_topic(self, name: str, partitions: int = 1, replication_factor: int = 1,
                     config: dict | None = None) -> TopicDescription:
        """Create a topic with `partitions` partitions and config overrides (Kafka's dotted names)."""
        with self._lock:
            self._check_open()
            metadata.validate_new_topic(name, self._catalogue.topics)
            if type(partitions) is not int or partitions < 1:
                raise InvalidPartitionsError(f"partitions must be an int >= 1, got {partitions!r}")
            if type(replication_factor) is not int or replication_factor < 1:
                raise InvalidReplicationFactorError(
                    f"replication_factor must be an int >= 1, got {replication_factor!r}")
            if replication_factor > self._catalogue.brokers:
                raise InvalidReplicationFactorError(
                    f"replication_factor={replication_factor} is larger than the engine's {self._catalogue.brokers} "
                    f"broker(s) (engine.open(path, brokers=N))")
            effective = LogConfig.from_dict(config, base=self.defaults)  # typed errors before anything is created
            warn_deprecated(config or {})
            if effective.min_insync_replicas > replication_factor:
                raise InvalidConfigurationError(
                    f"min.insync.replicas={effective.min_insync_replicas} is larger than replication_factor="
                    f"{replication_factor}")
            overrides = dict(config or {})
            if name in self._catalogue.topics:
                raise TopicAlreadyExistsError(f"topic {name!r} already exists")
            self._check_capacity(partitions * replication_factor, f"topic {name!r}")
            rec = TopicRecord(partition_metadata.new_topic_id(), partitions, overrides, replication_factor)
            self._creating.add(name)
            self._catalogue.topics[name] = rec
            try:
                self._add_partitions(name, 0, partitions)
                self._save()
            except BaseException:
                del self._catalogue.topics[name]
                self._drop_partitions(name, 0, partitions)
                self._save_after_rollback()
                raise
            finally:
                self._creating.discard(name)
            return self.describe_topic(name)

    def _check_capacity(self, adding: int, what: str) -> None:
        """engine.limits.check_capacity for `adding` more partition replicas (nothing is created when it raises)."""
        hosted = sum(rec.partitions * rec.replication_factor for rec in self._catalogue.topics.values())
        limits.check_capacity(self.path, hosted, adding, self.max_partitions, self.fs.fd_budget, what)

    def _add_partitions(self, name: str, start: int, end: int) -> None:
        rec = self._catalogue.topics[name]
        for p in range(start, end):
            if self._catalogue.brokers > 1:
                with self._controller_lock:
                    state = rec.states[p] = self.controller.new_partition(p, rec.replication_factor)
                    self.controller.elect(state, False)  # a dead preferred leader: the next live replica
            self._add_partition(name, p)

    def _drop_partitions(self, name: str, start: int, end: int) -> None:
        rec = self._catalogue.topics.get(name)
        for p in range(start, end):
            self._partitions.pop((name, p), None)
            if rec is not None:
                rec.states.pop(p, None)
            for broker in self._brokers.values():
                if broker.alive:
                    broker.drop(name, p)

    def delete_topic(self, name: str) -> None:
        with self._lock:
            self._check_open()
            rec = self._topic(name)
            del self._catalogue.topics[name]
            self._save()
            for client in self._registered():
                client.on_topic_changed(name)
            for p in range(rec.partitions):
                self._partitions.pop((name, p), None)
                for broker in self._brokers.values():  # every replica offline first: a link's descriptors of
                    broker.stop_hosting(name, p)  # the leader's files would make their last close free their pages
                for broker in self._brokers.values():
                    broker.drop(name, p)  # a broker that is down removes the directory as a stray later

    def list_topics(self) -> list[str]:
        """The topics clients may use (the internal ones are not listed)."""
        self._check_open()
        return sorted(name for name in list(self._catalogue.topics)
                      if name not in INTERNAL_TOPICS and name not in self._creating)

    def _topic(self, name: str) -> TopicRecord:
        rec = self._catalogue.topics.get(name) if name not in INTERNAL_TOPICS and name not in self._creating else None
        if rec is None:
            _check_external(name)
            raise UnknownTopicOrPartitionError(f"unknown topic {name!r}", file=self.path)
        return rec

    # --- internal topics --------------------------------------------------------------------------
    def internal_topics(self) -> dict[str, int]:
        """The internal topics this directory has, with their partition counts."""
        return {name: rec.partitions for name, rec in list(self._catalogue.topics.items())
                if name in INTERNAL_TOPICS and name not in self._creating}

    def ensure_internal_topic(self, name: str) -> bool:
        """Create internal topic `name` (50 partitions; replicated up to 3 times) unless it exists; a broker's
        own partitions of it are adopted as they are. True if it was created now."""
        # every group and transaction record asks: one that exists is answered without the admin lock
        if name in self._catalogue.topics and name not in self._creating:
            self._check_open()
            return False
        with self._lock:
            self._check_open()
            if name in self._catalogue.topics:
                return False
            found = {p: lg for (topic, p), lg in sorted(self._logs.logs().items()) if topic == name}
            topic_id = None
            for lg in found.values():
                try:
                    topic_id = topic_id or partition_metadata.read(self.fs, lg.dir)
                except KafkaStorageError:
                    continue
            rf = min(3, self._catalogue.brokers)
            self._check_capacity(INTERNAL_PARTITIONS * rf - len(found), f"internal topic {name!r}")
            config = {"cleanup.policy": "compact", "retention.ms": -1, "segment.bytes": INTERNAL_SEGMENT_BYTES,
                      "min.insync.replicas": min(2, rf)}
            self._creating.add(name)
            self._catalogue.topics[name] = TopicRecord(topic_id or partition_metadata.new_topic_id(),
                                                       INTERNAL_PARTITIONS, config, rf)
            try:
                self._add_partitions(name, 0, INTERNAL_PARTITIONS)
                self._save()
            except BaseException:
                del self._catalogue.topics[name]
                for p in range(INTERNAL_PARTITIONS):
                    if p in found:  # a broker's partition that was there before: stop hosting it, keep its data
                        self._partitions.pop((name, p), None)
                        self._brokers[0].partitions.pop((name, p), None)
                    else:
                        self._drop_partitions(name, p, p + 1)
                self._save_after_rollback()
                raise
            finally:
                self._creating.discard(name)
            return True

    def internal_partition(self, topic: str, partition: int) -> Partition:
        """The leader of an internal topic's partition (NotLeaderOrFollowerError when it has none)."""
        found = self._partitions.get((topic, partition))
        if found is None:
            raise NotLeaderOrFollowerError(f"{topic}-{partition} has no leader", file=self.path)
        return found

    def leaders(self) -> dict[tuple[str, int], Partition]:
        """Every partition's leader, internal topics included (for tools)."""
        return dict(self._partitions)

    def append_internal(self, topic: str, partition: int, data, origin: str = CLIENT) -> AppendInfo:
        """A coordinator's append to an internal topic, acks='all'."""
        self._check_open()
        part = self.internal_partition(topic, partition)
        info = part.append(data, -1, origin)
        self._wait_for_replication(part, info, INTERNAL_WRITE_TIMEOUT_MS)
        return info

    def append_marker(self, topic: str, partition: int, commit: bool, producer_id: int, producer_epoch: int,
                      coordinator_epoch: int, timeout_ms: int) -> AppendInfo:
        """WriteTxnMarkers to one partition (any topic), acks='all'."""
        self._check_open()
        part = self._partitions.get((topic, partition))
        if part is None:
            rec = self._catalogue.topics.get(topic)
            if rec is None or partition >= rec.partitions:
                raise UnknownTopicOrPartitionError(f"no log for {topic}-{partition}", file=self.path)
            raise NotLeaderOrFollowerError(f"{topic}-{partition} has no leader", file=self.path)
        info = part.append_marker(commit, producer_id, producer_epoch, coordinator_epoch)
        self._wait_for_replication(part, info, timeout_ms)
        for ev in list(self._waiters):
            ev.set()
        return info

    @property
    def transactions(self) -> Transactions:
        """The transaction coordinator and the committed group offsets (created on first use)."""
        self._check_open()
        if self._txn is None:
            with self._coordinators_lock:
                if self._txn is None:
                    self._txn = Transactions(self)
        return self._txn

    def abort_timed_out_transactions(self) -> int:
        """Fence and abort transactions open past their timeout (a background task every 10 s)."""
        return self._txn.coordinator.abort_timed_out() if self._txn is not None and not self._closed else 0

    def expire_transactional_ids(self) -> int:
        """Forget transactional ids idle past transactional.id.expiration.ms (a background task, hourly)."""
        return self._txn.coordinator.expire_ids() if self._txn is not None and not self._closed else 0

    @property
    def groups(self) -> GroupCoordinator:
        """The group coordinator: consumer groups and their committed offsets (loaded on first use)."""
        self._check_open()
        if self._groups is None:
            with self._coordinators_lock:
                if self._groups is None:
                    groups = GroupCoordinator(GroupLog(self), self.clock, self._group_config)
                    if group_offsets.TOPIC in self.internal_topics():
                        groups.load()
                    self._groups = groups
        return self._groups

    def tick_groups(self) -> int:
        """Apply group deadlines (session and rebalance timeouts) nobody is waiting on (a background task)."""
        return self._groups.tick() if self._groups is not None and not self._closed else 0

    def expire_group_offsets(self) -> int:
        """Tombstone offsets past offsets.retention.minutes (a background task every 10 minutes)."""
        return self._groups.expire_offsets() if self._groups is not None and not self._closed else 0

    def committed(self, group_id: str, tp) -> OffsetAndMetadata | None:
        """The offset `group_id` committed for `tp` (None when it has none)."""
        return self.committed_offsets(group_id, [tp]).get(TopicPartition(*tp))

    def committed_offsets(self, group_id: str, tps) -> dict[TopicPartition, OffsetAndMetadata]:
        """committed() of many partitions at once: the ones with a committed offset, mapped to it."""
        tps = list(tps)
        if set(map(type, tps)) != {TopicPartition}:  # (a consumer's own are TopicPartitions: checked at C speed)
            tps = [TopicPartition(*tp) for tp in tps]
        for topic in set(map(TOPIC_OF, tps)):
            (_checked_external if type(topic) is str else _check_external)(topic)
        return self.groups.offsets.committed(group_id, tps)

    def describe_topic(self, name: str) -> TopicDescription:
        """Partitions (log start, LEO, high watermark, bytes, segments; leader, epoch, replicas, ISR and each
        live replica's LEO and HW) and the effective config."""
        with self._lock:
            self._check_open()
            rec = self._topic(name)
            parts = []
            for p in range(rec.partitions):
                state = rec.states.get(p)
                part = self._partitions.get((name, p))
                hosted = {b: broker.partitions[(name, p)] for b, broker in self._brokers.items()
                          if (name, p) in broker.partitions}
                for replica in hosted.values():
                    replica.take_linked()  # (a linked follower's LEO as its link wrote it)
                shown = part or hosted.get(0) or next(iter(hosted.values()), None)
                replicas = state.replicas if state else [0]
                parts.append(PartitionDescription(
                    p, shown.log_start_offset if shown else -1, shown.log_end_offset if shown else -1,
                    part.high_watermark if part else -1, shown.log.size_in_bytes() if shown else 0,
                    len(shown.log.segments) if shown else 0,
                    part.broker_id if part else -1, part.leader_epoch if part else (state.leader_epoch if state else 0),
                    list(replicas), sorted(part.isr, key=replicas.index) if part else list(state.isr if state else []),
                    {b: ReplicaDescription(r.log_end_offset, r.log.high_watermark) for b, r in sorted(hosted.items())},
                    log_to_clean((name, p), shown.log, self.clock.time_ms()).ratio
                    if shown and shown.log.config.compact else None))
            return TopicDescription(name, rec.topic_id, parts, self._log_config(name).to_dict(), dict(rec.config))

    def create_partitions(self, name: str, count: int) -> TopicDescription:
        """Grow `name` to `count` partitions (Kafka's CreatePartitions); producers and subscribed consumers
        pick the new ones up. Keyed records may map to other partitions from now on, as in Kafka."""
        with self._lock:
            self._check_open()
            rec = self._topic(name)
            if type(count) is not int or count <= rec.partitions:
                raise InvalidPartitionsError(f"topic {name!r} has {rec.partitions} partitions: the new count must "
                                             f"be larger, got {count!r}")
            old = rec.partitions
            self._check_capacity((count - old) * rec.replication_factor, f"growing topic {name!r} to {count}")
            try:
                self._add_partitions(name, old, count)
                rec.partitions = count
                self._save()
            except BaseException:
                rec.partitions = old
                self._drop_partitions(name, old, count)
                self._save_after_rollback()
                raise
            for client in self._registered():
                client.on_topic_changed(name)
            return self.describe_topic(name)

    def alter_topic_config(self, name: str, config: dict) -> dict:
        """Set config overrides (a None value removes one); returns the effective config."""
        with self._lock:
            self._check_open()
            rec = self._topic(name)
            merged = {**rec.config, **config}
            merged = {k: v for k, v in merged.items() if v is not None}
            new = LogConfig.from_dict(merged, base=self.defaults)
            warn_deprecated({k: v for k, v in config.items() if v is not None})
            if new.min_insync_replicas > rec.replication_factor:
                raise InvalidConfigurationError(f"min.insync.replicas={new.min_insync_replicas} is larger than "
                                                f"the topic's replication factor {rec.replication_factor}")
            rec.config = merged
            self._save()
            for broker in self._brokers.values():
                for (topic, _), part in list(broker.partitions.items()):
                    if topic == name:
                        part.log.config = new
            return new.to_dict()

    def compact(self, topic: str, partition: int | None = None,
                progress: Callable[[int, int], None] | None = None) -> dict[int, CleanerStats | None]:
        """Compact a topic's partitions (or one) now, whatever their dirty ratio: every replica's log, up to its
        first uncleanable offset (the LSO, the HW, the active segment). Returns each partition's leader-side
        stats (None where nothing was cleanable); `progress(bytes done, bytes total)` follows each log."""
        with self._lock:
            self._check_open()
            rec = self._catalogue.topics.get(topic) if topic in COMPACTED_INTERNAL_TOPICS else self._topic(topic)
            if rec is None:
                raise UnknownTopicOrPartitionError(f"{topic!r} does not exist in this directory yet", file=self.path)
            config = self._log_config(topic)
            if not config.compact:
                raise InvalidConfigurationError(f"topic {topic!r} has cleanup.policy={config.cleanup_policy!r}: only "
                                                f"a topic whose policy holds 'compact' is compacted")
            wanted = range(rec.partitions) if partition is None else [partition]
            if partition is not None and (type(partition) is not int or not 0 <= partition < rec.partitions):
                raise bf.bad_partition(topic, partition, rec.partitions)
        out: dict[int, CleanerStats | None] = {}
        for p in wanted:
            leader = self._partitions.get((topic, p))
            for b, broker in self._brokers.items():
                if (topic, p) in broker.partitions:
                    stats = broker.logs.compact(topic, p, progress)
                    if leader is None or leader.broker_id == b:
                        out.setdefault(p, stats)
        return out

    def apply_staged_writes(self, deadline: float | None = None) -> int:
        """Append, one at a time on this thread, the writes other processes staged for this directory and asked its
        owner to commit (Spark's kafkalog sink; engine.staged_writes), until none is left or the `time.monotonic()`
        `deadline` passes; returns how many were answered. With `background=True` a thread of the engine's does this
        within 200 ms of a request."""
        self._check_open()
        return self._staged.apply_pending(deadline)

    def partitions_for(self, topic: str) -> int:
        return self._topic(topic).partitions

    def recovery_notes(self) -> list[str]:
        """What opening the directory (and reading it since) found damaged and repaired, in words."""
        notes = []
        for b, broker in sorted(self._brokers.items()):
            where = f"broker {b}: " if b else ""
            notes += [where + what for what in broker.logs.repairs]
            for (topic, p), lg in sorted(broker.logs.logs().items()):
                notes += [f"{where}{topic}-{p}: {what}" for what in lg.recovery.describe()]
        return notes

    def log(self, topic: str, partition: int) -> UnifiedLog:
        """The log of one partition (for tools and tests; clients go through `partition()`)."""
        return self.partition(topic, partition).log

    def partitions_of(self, tps: list[TopicPartition]) -> list[Partition | None]:
        """`partition()` of many partitions at once (a consumer's poll over its assignment): None where it would
        raise, which a call of `partition()` then explains."""
        found = self._partitions.get
        if INTERNAL_TOPICS.isdisjoint(map(TOPIC_OF, tps)):  # (the common case, looked up at C speed)
            return list(map(found, tps))
        return [None if tp[0] in INTERNAL_TOPICS else found(tp) for tp in tps]

    def partition(self, topic: str, partition: int) -> Partition:
        """The partition every read and write of `topic`-`partition` goes through."""
        found = self._partitions.get((topic, partition)) if topic not in INTERNAL_TOPICS else None
        if found is None:
            _check_external(topic)
            rec = self._catalogue.topics.get(topic)
            if rec is not None and type(partition) is int and 0 <= partition < rec.partitions:
                raise NotLeaderOrFollowerError(f"{topic}-{partition} has no leader (no live in-sync replica)",
                                               file=self.path)
            raise UnknownTopicOrPartitionError(f"no log for {topic}-{partition}", file=self.path)
        return found

    # --- the produce path ----------------------------------------------------------------------
    def partition_layout(self, topic: str) -> tuple[int, int]:
        """(partition count, max.message.bytes) of `topic`: what a producer needs to build batches for it."""
        self._check_open()
        return self._topic(topic).partitions, self._log_config(topic).max_message_bytes

    def append(self, topic: str, partition: int, data, acks: int = -1, timeout_ms: int = 30_000,
               wait: bool = True) -> AppendInfo:
        """Append a producer's batch (bytes of one or more whole batches) to a partition as its leader. With
        acks=-1 ('all') it returns once the high watermark passed the batch, waiting at most `timeout_ms`
        (KafkaTimeoutError; NotEnoughReplicasError before the append and NotEnoughReplicasAfterAppendError
        after it when the ISR is below min.insync.replicas); with wait=False that wait is left to
        `wait_for_replication`, so a producer can have several batches in flight. KafkaStorageError while the
        directory's background work is failing."""
        self._check_open()
        self._logs.check_health()
        part = self.partition(topic, partition)
        info = part.append(data, acks)
        if acks == -1 and wait:
            self._wait_for_replication(part, info, timeout_ms)
        elif acks != -1:
            self._wake_followers()  # (an acks='all' append in flight wakes them when it is waited for: the
            # followers then fetch the batches in flight together)
        if self._waiters:
            for ev in list(self._waiters):
                ev.set()
        return info

    def is_replicated(self, topic: str, partition: int) -> bool:
        """Whether appends to the partition wait for followers under acks='all' (its leader has some)."""
        return bool(self.partition(topic, partition).remote)

    def wait_for_replication(self, topic: str, partition: int, info: AppendInfo, timeout_ms: int) -> None:
        """acks=all for an append made with wait=False: the HW passes it within `timeout_ms`, under the leader
        that appended it (NotLeaderOrFollowerError if leadership moved since: the producer resends)."""
        self._wait_for_replication(self.partition(topic, partition), info, timeout_ms)

    def _wait_for_replication(self, part: Partition, info: AppendInfo, timeout_ms: int) -> None:
        # leadership first: a leader whose broker just died has no followers left (make_offline), which must not
        # read as "nothing to wait for" (an append not yet replicated would be acknowledged, then lost on failover)
        if part.leader_epoch != info.leader_epoch or not part.is_leader:
            raise NotLeaderOrFollowerError(f"{part.topic}-{part.index} changed leader since offset "
                                           f"{info.last_offset} was appended", file=self.path, offset=info.last_offset)
        if not part.remote:
            return
        if not self._background:
            self.replicate()
        else:
            deadline = part.clock.time_ms() + timeout_ms
            while part.high_watermark <= info.last_offset:
                left = deadline - part.clock.time_ms()
                if left <= 0:
                    break  # (the wait below raises the timeout)
                if part.wait_linked(info.last_offset, min(left, 50)):
                    continue  # every follower is linked: the native fetcher moves the HW
                if not self._drive_followers(part, info.last_offset):
                    self._wake_followers()
                    break
        part.wait_for_high_watermark(info.last_offset, timeout_ms)

    def _drive_followers(self, part: Partition, offset: int, rounds: int = 3) -> bool:
        """Run the followers' fetch rounds for `part` in the waiting thread until the HW passes `offset` (in one
        process a fetch is a call: no hand-off to the fetcher threads and back); a fetch that appended sends its
        next request at once, so one round can move the HW. A follower whose own thread is fetching is left to it.
        True if the HW passed."""
        for _ in range(rounds):
            if part.high_watermark > offset:
                return True
            for b in list(part.remote):
                broker = self._brokers[b]
                follower = broker.partitions.get((part.topic, part.index)) if broker.alive else None
                fetcher = broker.fetcher
                if follower is not None and fetcher is not None and not follower.is_leader:
                    if follower.link is not None and follower.link.running:
                        continue  # its rounds are the native fetcher's
                    try:
                        fetcher.fetch_once(follower, blocking=False, send_next=True)
                    except Exception:  # noqa: BLE001 - its fetcher thread meets (and logs) the same error
                        return False  # the wait below decides
        return part.high_watermark > offset

    def _wake_followers(self) -> None:
        for broker in self._brokers.values():
            broker.wake.set()

    # --- replication -----------------------------------------------------------------------------
    def replicate(self, max_rounds: int = 1000) -> int:
        """Run fetch rounds for every follower until nothing moves (what the fetcher threads do; with
        background=False this is how followers catch up); returns the bytes replicated."""
        total = 0
        fetchers = {b: ReplicaFetcher(b, self._leader_of) for b, broker in self._brokers.items()}
        for _ in range(max_rounds):
            with self._lock:
                followers = [(b, p) for b, broker in self._brokers.items() if broker.alive
                             for p in broker.followers()]
            before = [(p.log.log_end_offset, p.log.high_watermark) for _, p in followers]
            total += sum(fetchers[b].fetch_once(p) for b, p in followers)
            if before == [(p.log.log_end_offset, p.log.high_watermark) for _, p in followers]:
                break
        return total

    def shrink_isrs(self) -> int:
        """Drop followers that have not caught up within replica_lag_time_max_ms from their partitions' ISR
        (a background task); the number of partitions whose ISR shrank."""
        return sum(part.maybe_shrink_isr() for part in list(self._partitions.values()) if part.remote)

    def fail_broker(self, broker_id: int) -> None:
        """Stop broker `broker_id` as if its process died (for tests, demos and studying Kafka): its replicas
        stop, it leaves every ISR at once and its leaderships move to the next live in-sync replica."""
        with self._lock:
            self._check_open()
            broker = self._broker(broker_id, alive=True)
            for tp, part in self._partitions.items():  # what readers may have seen stays visible after failover
                self._hw_seen[tp] = max(self._hw_seen.get(tp, 0), part.high_watermark)
            broker.crash()
            with self._controller_lock:
                self.controller.alive.discard(broker_id)
                leaders = {(name, p): state.leader for name, rec in self._catalogue.topics.items()
                           for p, state in rec.states.items()}
                for name, rec in self._catalogue.topics.items():
                    for state in rec.states.values():
                        self.controller.broker_failed(broker_id, state, self._unclean(name))
                metadata.write(self.fs, self.path, self._catalogue)
            for name, rec in self._catalogue.topics.items():
                for p in range(rec.partitions):
                    if rec.states.get(p) is None:
                        if broker_id == 0:
                            self._partitions.pop((name, p), None)  # a single replica on the broker that died
                    elif rec.states[p].leader != leaders[(name, p)]:
                        self._apply(name, p)  # a new leader (or none): every live replica gets its role
                    elif broker_id in rec.states[p].replicas and (name, p) in self._partitions:
                        self._partitions[(name, p)].remove_from_isr(broker_id)  # the leader stays: ISR only

    def restart_broker(self, broker_id: int) -> None:
        """Bring a failed broker back: its log directory is recovered and it rejoins as a follower (or as leader
        of a partition that had none and can take it)."""
        with self._lock:
            self._check_open()
            broker = self._broker(broker_id, alive=False)
            broker.restart()
            with self._controller_lock:
                self.controller.alive.add(broker_id)
                elected = {(name, p) for name, rec in self._catalogue.topics.items()
                           for p, state in rec.states.items()
                           if self.controller.broker_started(broker_id, state, self._unclean(name))}
                metadata.write(self.fs, self.path, self._catalogue)
            for (topic, p) in sorted(broker.logs.logs()):
                rec = self._catalogue.topics.get(topic)
                state = rec.states.get(p) if rec is not None else None
                if (rec is None or p >= rec.partitions or state is None and broker_id
                        or state is not None and broker_id not in state.replicas):
                    broker.logs.set_aside(topic, p, "stray")  # deleted or reassigned while the broker was down
            for name, rec in sorted(self._catalogue.topics.items()):
                for p in range(rec.partitions):
                    state = rec.states.get(p)
                    if state is None and broker_id == 0:
                        self._add_partition(name, p)
                    elif state is not None and broker_id in state.replicas:
                        part = broker.host(name, p, rec.topic_id)
                        if (name, p) in elected or state.leader < 0:
                            self._apply(name, p)
                        else:
                            part.make_follower(state.leader, state.leader_epoch, state.replicas, state.isr,
                                               controller_epoch=self.controller.epoch)
            if self._background:
                broker.start_fetcher(self._leader_of, self._native())

    def _broker(self, broker_id, alive: bool) -> Broker:
        broker = self._brokers.get(broker_id) if type(broker_id) is int else None
        if broker is None:
            raise InvalidConfigurationError(f"broker {broker_id!r} is not one of this engine's brokers "
                                            f"0..{self._catalogue.brokers - 1}")
        if broker.alive != alive:
            raise IllegalStateError(f"broker {broker_id} is {'already down' if alive else 'running'}")
        return broker

    def _unclean(self, topic: str) -> bool:
        return self._log_config(topic).unclean_leader_election_enable

    def health(self) -> list[TaskFailure]:
        """The background tasks failing now (flush, checkpoints, retention, the cleaner, ... of every live broker):
        where, which, since when, how many attempts, the last error; empty while all is well."""
        return [f for b in self._live_brokers() for f in b.logs.health.failing() + b.logs.cleaner.health.failing()]

    def check_storage(self) -> list[TaskFailure]:
        """Run every live broker's flush and checkpoint tasks now, as the background thread does (a failure is
        recorded, logged once and retried with backoff there too), and a 1 MiB write probe; `health()`, with a
        failed probe added."""
        self._check_open()
        probes = [f for broker in self._live_brokers() for f in broker.logs.run_storage_tasks()]
        return self.health() + probes

    def _live_brokers(self) -> list[Broker]:
        with self._lock:
            return [b for b in self._brokers.values() if b.alive]

    def flush(self) -> None:
        """fsync every partition's unflushed appends; KafkaStorageError if that (or background work) fails."""
        self._check_open()
        for broker in list(self._brokers.values()):
            for lg in broker.logs.logs().values():
                lg.flush()
            broker.logs.check_health()

    def wait_for_data(self, event: threading.Event, timeout_ms: float) -> None:
        """Block until an append (event registered with `watch`) or `timeout_ms` of clock time."""
        self.clock.wait(event, timeout_ms)

    def watch(self) -> threading.Event:
        ev = threading.Event()
        with self._registry_lock:
            self._waiters.add(ev)
        return ev

    def unwatch(self, event: threading.Event) -> None:
        with self._registry_lock:
            self._waiters.discard(event)

    def allocate_producer_id(self) -> int:
        """A producer id never handed out before in this directory (persisted a block at a time)."""
        with self._registry_lock:
            self._check_open()
            pid = self._next_pid
            self._next_pid += 1
            if pid >= self._catalogue.producer_id_block_end:
                self._catalogue.producer_id_block_end = pid + metadata.PRODUCER_ID_BLOCK
                self._save()
            return pid

    def expire_producers(self) -> int:
        return sum(lg.remove_expired_producers() for lg in self._logs.logs().values())

    # --- clients --------------------------------------------------------------------------------
    def producer(self, **config):
        """A kafka-python-shaped Producer writing to this engine (see engine.clients.producer)."""
        from engine.clients.producer import Producer
        return self._register(Producer(self, **config))

    def consumer(self, *topics: str, **config):
        """A kafka-python-shaped Consumer reading from this engine (see engine.clients.consumer)."""
        from engine.clients.consumer import Consumer
        return self._register(Consumer(self, *topics, **config))

    def _register(self, client):
        with self._registry_lock:
            if not self._closed:
                self._clients.add(client)
                return client
        Steps().run(client.close)  # made while the engine closed: its threads stop, and the caller is told
        raise IllegalStateError("the engine is closed", file=self.path)

    def _registered(self) -> list:
        with self._registry_lock:  # (a WeakSet is iterated in Python: an add meanwhile would break the iteration)
            return list(self._clients)

    # --- lifecycle ------------------------------------------------------------------------------
    def close(self) -> None:
        """Close clients, then shut down cleanly: snapshots, checkpoints, the clean-shutdown marker. Every step runs
        whatever the one before raised (a client whose rebalance listener raises, a log that cannot be flushed): the
        directory is released either way, and the first error is raised at the end (the marker is written only when
        every log closed cleanly)."""
        with self._lock, self._registry_lock:
            if self._closed:
                return
            clients = list(self._clients)
        steps = Steps()
        steps.run(self._staged.close)  # a staged write under way is queued again for the next owner
        for client in clients:
            steps.run(client.close)
        with self._lock, self._registry_lock:
            self._closed = True  # no client registers after this
            late = [c for c in self._clients if c not in clients]
        for client in late:  # registered while the others closed
            steps.run(client.close)
        steps.run(self.heartbeats.close)
        for broker in self._brokers.values():
            steps.run(broker.stop_fetcher)
        if self._native_fetcher is not None:
            steps.run(self._native_fetcher.close)
        for broker in self._brokers.values():
            steps.run(broker.close)
        steps.raise_first()

    def __enter__(self) -> "Engine":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Engine({self.path!r}, topics={len(self._catalogue.topics)}, closed={self._closed})"


def _broker_count(brokers, found: Catalogue | None) -> int:
    """The directory's broker count: as stored, or `brokers` for a new one (a typed error otherwise)."""
    stored = found.brokers if found is not None else None
    if brokers is None:
        return stored or 1
    if type(brokers) is not int or not 1 <= brokers <= MAX_BROKERS:
        raise InvalidConfigurationError(f"brokers={brokers!r} must be an int in [1, {MAX_BROKERS}]")
    if stored is not None and brokers != stored:
        raise not_supported_yet(f"changing the broker count of a log directory (it has {stored}, got {brokers})")
    return brokers


def _key(topic: str, index: int) -> TopicPartition:
    """The key of a partition in the engine's map: the TopicPartition structs.topic_partitions shares, so a lookup
    by a consumer's own (shared) TopicPartitions matches on identity without reading the key."""
    return topic_partitions(topic, [index])[0]


def _check_external(topic) -> None:
    """InvalidTopicError for a name no client may use: malformed, or one of the engine's internal topics."""
    names.validate_topic(topic)
    if topic in INTERNAL_TOPICS:
        raise InvalidTopicError(f"{topic!r} is an internal topic reserved for the engine")


@functools.lru_cache(maxsize=1024)
def _checked_external(topic: str) -> None:
    """_check_external of a str, remembered once it passed (a group member asks for its topics' offsets at every
    rebalance; an error is raised again each time, never remembered)."""
    _check_external(topic)


def _log_dir_path(path) -> str:
    """`path` as an absolute log directory path, or a typed error for what cannot name one."""
    if isinstance(path, os.PathLike):
        path = os.fspath(path)
    if isinstance(path, bytes):
        path = os.fsdecode(path)
    if not isinstance(path, str):
        raise InvalidConfigurationError(f"the log directory path must be a str or os.PathLike, got "
                                        f"{type(path).__name__}")
    if not path or "\0" in path:
        raise InvalidConfigurationError(f"{path!r} is not a log directory path (empty, or holds a NUL)")
    return os.path.abspath(path)


def open(path: str, **config) -> Engine:  # noqa: A001 (engine.open mirrors the built-in's role)
    """Open (creating if needed) the log directory `path`; see Engine for the options."""
    return Engine(path, **config)
