"""The Engine: one open log directory, the facade an application holds. It opens and closes the directory, finds each
partition's leader (every read and write of a partition goes through its `replication.partition.Partition`, which
owns the high watermark), appends producers' batches, makes the clients (`producer()`, `consumer()`), hands out
producer ids and wakes consumers waiting for data. The rest is its collaborators':
- engine.admin_manager: topics (create, grow, delete, describe, configs, compaction) and the catalogue on open;
- engine.replica_manager: the brokers, the controller's roles for each partition's replicas, acks='all' waits,
  follower fetching and a broker's failure and restart;
- engine.coordinators: the transaction and group coordinators, made on first use;
- engine.staged_writes.queue: the writes other processes stage for this directory.

On disk: Kafka's log directory (engine.log.log_manager) plus `kafkalog.metadata` (engine.metadata). With
`brokers=N` the engine runs N in-process brokers (replication.broker): broker 0's log directory is `path`, broker
b's `path/brokers/<b>`. Transactions and consumer groups use two internal topics, `__transaction_state` and
`__consumer_offsets`, created with 50 partitions on first use and kept in the catalogue; no client API can name them.
Crash policy: each collaborator's (the catalogue's in engine.admin_manager); close() writes the clean-shutdown marker
only when every log closed cleanly.
Threads: every public method is thread-safe. The engine's locks and their order are written once, in
docs/architecture.md ("Locks"). What clients do per call never waits for the admin lock: a topic being created stays
unknown to them until it is whole. Each broker's log manager thread runs flush, retention and checkpoints (broker
0's also producer-id expiry, ISR expiry, the coordinators' timeouts and expiry), each live broker of several runs a
replica fetcher thread, one native thread runs the linked followers' steady-state fetch rounds without the GIL, and
one thread, started when another process first asks, applies staged writes, and each protocol listener (serve())
runs a network thread and a pool of request handlers; all stop on close(), whose every step runs whatever the one
before raised.
"""
from __future__ import annotations

import functools
import logging
import os
import threading
import weakref
from typing import Callable

from engine import limits, metadata
from engine.admin_manager import AdminManager, TopicDescription, check_external
from engine.clients.heartbeat_thread import HeartbeatThread
from engine.common.changes import BumpingDict
from engine.common.closing import Steps
from engine.common.clock import Clock, SystemClock
from engine.common.errors import (
    IllegalStateError,
    InvalidConfigurationError,
    InvalidLogDirectoryError,
    NotLeaderOrFollowerError,
    UnknownTopicOrPartitionError,
    not_supported_yet,
)
from engine.common.gc_pause import gc_paused
from engine.common.health import TaskFailure
from engine.common.structs import TOPIC_OF, OffsetAndMetadata, TopicPartition
from engine.coordinators import Coordinators
from engine.groups.group_coordinator import (
    OFFSETS_RETENTION_CHECK_INTERVAL_MS,
    GroupConfig,
    GroupCoordinator,
)
from engine.metadata import INTERNAL_TOPICS, Catalogue
from engine.transactions import INTERNAL_WRITE_TIMEOUT_MS, Transactions
from engine.replication.broker import Broker, broker_dir
from engine.log.log_cleaner import CleanerConfig
from engine.replica_manager import ReplicaManager
from engine.log.log_manager import LogManager
from engine.replication.partition import REPLICA_LAG_TIME_MAX_MS, Partition
from engine.segments.cleaner import CleanerStats
from engine.segments.fs import FileSystem
from engine.segments.log_config import LogConfig
from engine.staged_writes.queue import StagedWrites
from engine.txn.transaction_coordinator import EXPIRE_CHECK_INTERVAL_MS, TransactionConfig
from engine.log.unified_log import CLIENT, DEFAULT_EXPIRATION_MS, AppendInfo, UnifiedLog

log = logging.getLogger("kafkalog.engine")

PRODUCER_EXPIRATION_CHECK_MS = 600_000
MAX_BROKERS = 64
GROUP_TICK_MS = 500  # how often the background thread applies group deadlines nobody is waiting on
STAGED_WRITES_CHECK_MS = 200  # how often the background thread looks for staged writes to commit (a Spark sink's)


class Engine:
    """An open log directory. Use `engine.open(path)`; close it (or use `with`) to shut down cleanly."""

    def __init__(self, path: str, *, clock: Clock | None = None, fs: FileSystem | None = None,
                 background: bool = True, topic_defaults: dict | None = None,
                 producer_id_expiration_ms: int = DEFAULT_EXPIRATION_MS, fd_budget: int | None = None,
                 brokers: int | None = None, replica_lag_time_max_ms: int = REPLICA_LAG_TIME_MAX_MS,
                 group_config: dict | None = None, transaction_config: dict | None = None,
                 cleaner_config: dict | None = None,
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
        self._closed = False
        self._clients: weakref.WeakSet = weakref.WeakSet()
        self.heartbeats = HeartbeatThread(self.clock)  # every group member's heartbeats (a thread from the first)
        self._waiters: set[threading.Event] = set()
        self._partition_watchers: set = set()  # told which partition each append went to (the listener's purgatory)
        # each partition's leader; a change bumps changes.LOGS, which a consumer that found nothing new watches
        self._partitions: dict[tuple[str, int], Partition] = BumpingDict()
        if type(replica_lag_time_max_ms) is not int or replica_lag_time_max_ms < 1:
            raise InvalidConfigurationError(f"replica_lag_time_max_ms={replica_lag_time_max_ms!r} must be an int >= 1")
        self._background = background
        self._staged = StagedWrites(self)  # writes other processes staged: applied on a thread of its own
        txn_config = TransactionConfig.of(transaction_config)
        self.coordinators = coordinators = Coordinators(self, GroupConfig.of(group_config), txn_config)
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
        self.replicas = ReplicaManager(self.path, self.fs, self.clock, self._catalogue, self._partitions, self._lock,
                                       self._check_open, self.defaults, background=background,
                                       lag_ms=replica_lag_time_max_ms)
        self.admin = AdminManager(self.path, self.fs, self.clock, self._catalogue, self.defaults, self.max_partitions,
                                  self.replicas, self._lock, self._check_open, self._registered)
        self.controller = self.replicas.controller
        self._brokers = self.replicas.brokers  # (the same dict)
        log_options = {"producer_id_expiration_ms": producer_id_expiration_ms}
        self._logs = LogManager(
            self.path, fs=self.fs, clock=self.clock, configs=self.admin.log_config, background=background,
            log_options=log_options, topic_ids=self.admin.topic_id_of, cleaner_config=cleaner,
            hw_checkpoint_interval_ms=hw_checkpoint_interval_ms, start_recovery=False,
            tasks={name: (every, self._while_open(task)) for name, (every, task) in {
                "producer-expiration": (PRODUCER_EXPIRATION_CHECK_MS, self.expire_producers),
                "isr-expiration": (max(1, replica_lag_time_max_ms // 2), self.replicas.shrink_isrs),
                "transaction-abort": (txn_config.transaction_abort_timed_out_transaction_cleanup_interval_ms,
                                      coordinators.abort_timed_out_transactions),
                "transactional-id-expiration": (EXPIRE_CHECK_INTERVAL_MS, coordinators.expire_transactional_ids),
                "group-timeouts": (GROUP_TICK_MS, coordinators.tick_groups),
                "delete-expired-group-metadata": (OFFSETS_RETENTION_CHECK_INTERVAL_MS,
                                                  coordinators.expire_group_offsets),
                "staged-writes": (STAGED_WRITES_CHECK_MS, self._staged.poll)}.items()})
        self._brokers[0] = Broker(0, self._logs, self.replicas.new_partition)
        try:
            for b in range(1, self._catalogue.brokers):
                self._brokers[b] = Broker(b, LogManager(
                    broker_dir(self.path, b), fs=self.fs, clock=self.clock, configs=self.admin.log_config,
                    background=background, log_options=log_options, node_id=b, cleaner_config=cleaner,
                    hw_checkpoint_interval_ms=hw_checkpoint_interval_ms, start_recovery=False),
                    self.replicas.new_partition)
            self.admin.reconcile(adopt=found is None)
            for name, rec in sorted(self._catalogue.topics.items()):
                self.replicas.add_partitions(name, range(rec.partitions))
            self.replicas.start_fetchers()
            # a catalogue's block end is past every id handed out; a directory adopted without one says in its logs
            highest = -1 if found is not None else max(
                (lg.producer_state.max_producer_id() for lg in self._logs.logs().values()), default=-1)
            self._next_pid = max(self._catalogue.producer_id_block_end, highest + 1)
            self._catalogue.producer_id_block_end = self._next_pid
            self.admin.save()
            self.coordinators.load_existing()
            for broker in self._brokers.values():  # (every partition has its role: no log loads before it knows)
                if broker.alive:
                    broker.logs.start_recovery()
        except BaseException:
            steps = Steps()  # each broker closed, then the native fetcher (its links unlinked by then), whatever raised
            for broker in self._brokers.values():
                steps.run(broker.close)
            if self.replicas.native_fetcher is not None:
                steps.run(self.replicas.native_fetcher.close)
            raise

    def _while_open(self, task: Callable[[], object]) -> Callable[[], object]:
        """`task` for the background thread: nothing once close() has begun (a closing engine is not a failure)."""
        def run():
            return None if self._closed else task()
        return run

    @property
    def closed(self) -> bool:
        """Whether close() has begun (a closing engine's background tasks do nothing)."""
        return self._closed

    @property
    def clean_shutdown(self) -> bool:
        """Whether the directory was closed cleanly before this open (else it was recovered)."""
        return self._logs.clean_shutdown

    def _check_open(self) -> None:
        if self._closed:
            raise IllegalStateError("the engine is closed", file=self.path)

    # --- topics (engine.admin_manager) ----------------------------------------------------------------
    def create_topic(self, name: str, partitions: int = 1, replication_factor: int = 1,
                     config: dict | None = None) -> TopicDescription:
        """Create a topic with `partitions` partitions and config overrides (Kafka's dotted names)."""
        return self.admin.create_topic(name, partitions, replication_factor, config)

    def delete_topic(self, name: str) -> None:
        """Delete a topic: the catalogue first, then every replica's directory."""
        self.admin.delete_topic(name)

    def list_topics(self) -> list[str]:
        """The topics clients may use (the internal ones are not listed)."""
        return self.admin.list_topics()

    def describe_topic(self, name: str) -> TopicDescription:
        """Partitions (log start, LEO, high watermark, bytes, segments; leader, epoch, replicas, ISR and each
        live replica's LEO and HW) and the effective config."""
        return self.admin.describe_topic(name)

    def create_partitions(self, name: str, count: int) -> TopicDescription:
        """Grow `name` to `count` partitions (Kafka's CreatePartitions); producers and subscribed consumers
        pick the new ones up. Keyed records may map to other partitions from now on, as in Kafka."""
        return self.admin.create_partitions(name, count)

    def alter_topic_config(self, name: str, config: dict) -> dict:
        """Set config overrides (a None value removes one); returns the effective config."""
        return self.admin.alter_topic_config(name, config)

    def compact(self, topic: str, partition: int | None = None,
                progress: Callable[[int, int], None] | None = None) -> dict[int, CleanerStats | None]:
        """Compact a topic's partitions (or one) now, whatever their dirty ratio: every replica's log, up to its
        first uncleanable offset (the LSO, the HW, the active segment). Returns each partition's leader-side
        stats (None where nothing was cleanable); `progress(bytes done, bytes total)` follows each log."""
        return self.admin.compact(topic, partition, progress)

    # --- internal topics and the coordinators ---------------------------------------------------------
    def internal_topics(self) -> dict[str, int]:
        """The internal topics this directory has, with their partition counts."""
        return self.admin.internal_topics()

    def ensure_internal_topic(self, name: str) -> bool:
        """Create internal topic `name` (50 partitions; replicated up to 3 times) unless it exists; a broker's
        own partitions of it are adopted as they are. True if it was created now."""
        return self.admin.ensure_internal_topic(name)

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
        self.replicas.wait_for_replication(part, info, INTERNAL_WRITE_TIMEOUT_MS)
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
        self.replicas.wait_for_replication(part, info, timeout_ms)
        self._appended(topic, partition)
        return info

    @property
    def transactions(self) -> Transactions:
        """The transaction coordinator and the committed group offsets (created on first use)."""
        self._check_open()
        return self.coordinators.transactions

    @property
    def groups(self) -> GroupCoordinator:
        """The group coordinator: consumer groups and their committed offsets (loaded on first use)."""
        self._check_open()
        return self.coordinators.groups

    def committed(self, group_id: str, tp) -> OffsetAndMetadata | None:
        """The offset `group_id` committed for `tp` (None when it has none)."""
        return self.committed_offsets(group_id, [tp]).get(TopicPartition(*tp))

    def committed_offsets(self, group_id: str, tps) -> dict[TopicPartition, OffsetAndMetadata]:
        """committed() of many partitions at once: the ones with a committed offset, mapped to it."""
        tps = list(tps)
        if set(map(type, tps)) != {TopicPartition}:  # (a consumer's own are TopicPartitions: checked at C speed)
            tps = [TopicPartition(*tp) for tp in tps]
        for topic in set(map(TOPIC_OF, tps)):
            (_checked_external if type(topic) is str else check_external)(topic)
        return self.groups.offsets.committed(group_id, tps)

    def apply_staged_writes(self, deadline: float | None = None) -> int:
        """Append, one at a time on this thread, the writes other processes staged for this directory and asked its
        owner to commit (Spark's kafkalog sink; engine.staged_writes), until none is left or the `time.monotonic()`
        `deadline` passes; returns how many were answered. With `background=True` a thread of the engine's does this
        within 200 ms of a request."""
        self._check_open()
        return self._staged.apply_pending(deadline)

    def partitions_for(self, topic: str) -> int:
        return self.admin.topic(topic).partitions

    def closed_cleanly(self) -> bool:
        """Whether the last close of every live broker's directory was clean (no log needs recovering)."""
        return all(b.logs.clean_shutdown for b in self._brokers.values() if b.alive)

    def recovery_notes(self) -> list[str]:
        """What opening the directory (and reading it since) found damaged and repaired, in words. After an unclean
        shutdown every log is recovered first (what the background recovery has not reached yet, in this thread);
        after a clean one, the logs not used yet have not been read, so have nothing to report."""
        notes = []
        for b, broker in sorted(self._brokers.items()):
            where = f"broker {b}: " if b else ""
            notes += [where + what for what in broker.logs.repairs]
            if broker.alive and not broker.logs.clean_shutdown:
                broker.logs.recover_all()
            for (topic, p), lg in sorted(broker.logs.logs().items()):
                if lg.loaded:
                    notes += [f"{where}{topic}-{p}: {what}" for what in lg.recovery.describe()]
        return notes

    def log(self, topic: str, partition: int) -> UnifiedLog:
        """The log of one partition, loaded (for tools and tests; clients go through `partition()`)."""
        lg = self.partition(topic, partition).log
        lg.load()
        return lg

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
            check_external(topic)
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
        return self.admin.topic(topic).partitions, self.admin.log_config(topic).max_message_bytes

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
            self.replicas.wait_for_replication(part, info, timeout_ms)
        elif acks != -1:
            self.replicas.wake_followers()  # (an acks='all' append in flight wakes them when it is waited for: the
            # followers then fetch the batches in flight together)
        if self._waiters or self._partition_watchers:
            self._appended(topic, partition)
        return info

    def is_replicated(self, topic: str, partition: int) -> bool:
        """Whether appends to the partition wait for followers under acks='all' (its leader has some)."""
        return bool(self.partition(topic, partition).remote)

    def wait_for_replication(self, topic: str, partition: int, info: AppendInfo, timeout_ms: int) -> None:
        """acks=all for an append made with wait=False: the HW passes it within `timeout_ms`, under the leader
        that appended it (NotLeaderOrFollowerError if leadership moved since: the producer resends)."""
        self.replicas.wait_for_replication(self.partition(topic, partition), info, timeout_ms)

    # --- replication (engine.replica_manager) ------------------------------------------------------
    def replicate(self, max_rounds: int = 1000) -> int:
        """Run fetch rounds for every follower until nothing moves (what the fetcher threads do; with
        background=False this is how followers catch up); returns the bytes replicated."""
        return self.replicas.replicate(max_rounds)

    def shrink_isrs(self) -> int:
        """Drop followers that have not caught up within replica_lag_time_max_ms from their partitions' ISR
        (a background task); the number of partitions whose ISR shrank."""
        return self.replicas.shrink_isrs()

    def fail_broker(self, broker_id: int) -> None:
        """Stop broker `broker_id` as if its process died (for tests, demos and studying Kafka): its replicas
        stop, it leaves every ISR at once and its leaderships move to the next live in-sync replica."""
        self.replicas.fail_broker(broker_id)

    def restart_broker(self, broker_id: int) -> None:
        """Bring a failed broker back: its log directory is recovered and it rejoins as a follower (or as leader
        of a partition that had none and can take it)."""
        self.replicas.restart_broker(broker_id)

    def health(self) -> list[TaskFailure]:
        """The background tasks failing now (flush, checkpoints, retention, the cleaner, ... of every live broker):
        where, which, since when, how many attempts, the last error; and each partition directory set aside as
        `-stray` (task "stray partition": its records kept, not served until `restore_stray`). Empty while all is
        well."""
        return self.replicas.health()

    def restore_stray(self, path: str) -> TopicPartition:
        """Put the partition directory `path`, set aside as `-stray` (see `health()`), back in place of its
        partition's log, which must hold no record and not have been used since the directory was opened (as by
        `kafkalog recover --restore-stray` right after opening it); the restored log is re-validated in full as it
        first loads. InvalidRequestError when it cannot be, UnknownTopicOrPartitionError without its topic."""
        return TopicPartition(*self.admin.restore_stray(path))

    def check_storage(self) -> list[TaskFailure]:
        """Run every live broker's flush and checkpoint tasks now, as the background thread does, and a 1 MiB
        write probe; `health()`, with a failed probe added."""
        return self.replicas.check_storage()

    def flush(self) -> None:
        """fsync every partition's unflushed appends; KafkaStorageError if that (or background work) fails."""
        self.replicas.flush()

    def wait_for_data(self, event: threading.Event, timeout_ms: float) -> None:
        """Block until an append (event registered with `watch`) or `timeout_ms` of clock time."""
        self.clock.wait(event, timeout_ms)

    def watch(self, event=None):
        """Register `event` (a new threading.Event if None; anything with a `set()` method) to be set on appends."""
        ev = threading.Event() if event is None else event
        with self._registry_lock:
            self._waiters.add(ev)
        return ev

    def watch_partitions(self, watcher) -> None:
        """Register `watcher`, whose `appended(topic, partition)` is called after each append to a partition."""
        with self._registry_lock:
            self._partition_watchers.add(watcher)

    def unwatch(self, event) -> None:
        """Stop calling `event` (registered with watch or watch_partitions)."""
        with self._registry_lock:
            self._waiters.discard(event)
            self._partition_watchers.discard(event)

    def _appended(self, topic: str, partition: int) -> None:
        for ev in list(self._waiters):
            ev.set()
        for watcher in list(self._partition_watchers):
            watcher.appended(topic, partition)

    def allocate_producer_id(self) -> int:
        """A producer id never handed out before in this directory (persisted a block at a time)."""
        with self._registry_lock:
            self._check_open()
            pid = self._next_pid
            self._next_pid += 1
            if pid >= self._catalogue.producer_id_block_end:
                self._catalogue.producer_id_block_end = pid + metadata.PRODUCER_ID_BLOCK
                self.admin.save()
            return pid

    def expire_producers(self) -> int:
        return sum(lg.remove_expired_producers() for lg in self._logs.loaded_logs())

    # --- clients --------------------------------------------------------------------------------
    def producer(self, **config):
        """A kafka-python-shaped Producer writing to this engine (see engine.clients.producer)."""
        from engine.clients.producer import Producer
        return self._register(Producer(self, **config))

    def consumer(self, *topics: str, **config):
        """A kafka-python-shaped Consumer reading from this engine (see engine.clients.consumer)."""
        from engine.clients.consumer import Consumer
        return self._register(Consumer(self, *topics, **config))

    def serve(self, host: str = "127.0.0.1", port: int = 9092, **options):
        """A Kafka protocol listener serving this engine to any Kafka client (port=0 picks a free port); returns its
        handle, whose close() stops it (closing the engine does too). Options: engine.network.listener.Listener."""
        from engine.network.listener import Listener
        return self._register(Listener(self, host, port, **options))

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
        if self.replicas.native_fetcher is not None:
            steps.run(self.replicas.native_fetcher.close)
        steps.run(self._note_loaded_logs)
        for broker in self._brokers.values():
            steps.run(broker.close)
        steps.raise_first()

    def _note_loaded_logs(self) -> None:
        """Before the logs close: the catalogue notes what the logs loaded in this open hold that the next open
        must know without loading every log: the partitions with an open transaction (with those noted before whose
        log was not loaded), and a producer-id block past every producer id in them (one a tool appended with an id
        the engine never handed out)."""
        with self._lock:
            noted, highest = set(), -1
            for broker in self._brokers.values():  # (a follower's log holds its leader's transactions too)
                for tp, lg in broker.logs.loaded_items() if broker.alive else ():
                    if lg.producer_state.ongoing():
                        noted.add(tp)
                    highest = max(highest, lg.producer_state.max_producer_id())
            leaders = self._partitions
            noted |= {tp for tp in self._catalogue.open_transactions
                      if tp in leaders and not leaders[tp].log.loaded}
            with self._registry_lock:
                block_end = max(self._catalogue.producer_id_block_end, highest + 1)
                if noted != self._catalogue.open_transactions or block_end != self._catalogue.producer_id_block_end:
                    self._catalogue.open_transactions, self._catalogue.producer_id_block_end = noted, block_end
                    self.admin.save()

    def transaction_partitions(self) -> set[tuple[str, int]] | None:
        """The partitions not loaded yet that may hold a transaction its coordinator already ended: those the last
        clean close noted with an open transaction; None (every partition) after an unclean shutdown."""
        if not self.closed_cleanly():
            return None
        return set(self._catalogue.open_transactions)

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


@functools.lru_cache(maxsize=1024)
def _checked_external(topic: str) -> None:
    """check_external of a str, remembered once it passed (a group member asks for its topics' offsets at every
    rebalance; an error is raised again each time, never remembered)."""
    check_external(topic)


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
    """Open (creating if needed) the log directory `path`; see Engine for the options. The cyclic garbage collector
    is paused meanwhile (engine.common.gc_pause): a directory of many partitions makes many objects at once."""
    with gc_paused():
        return Engine(path, **config)
