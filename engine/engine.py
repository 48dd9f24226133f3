"""The Engine: one open log directory, the facade an application holds. It opens and closes the directory, finds each
partition's leader (every read and write of a partition goes through its `replication.partition.Partition`, which
owns the high watermark), appends producers' batches, makes the clients (`producer()`, `consumer()`), hands out
producer ids and wakes consumers waiting for data. Its parts are made and wired by engine.composition (the
composition root), which hands each the narrow interface it uses; the facade only delegates to them:
- engine.admin_manager: topics (create, grow, delete, describe, configs, compaction) and the catalogue on open;
- engine.replica_manager: the brokers, the controller's roles for each partition's replicas, acks='all' waits,
  follower fetching and a broker's failure and restart;
- engine.coordinators: the transaction and group coordinators, made on first use, which write through
  engine.internal_topics; engine.producer_id_manager hands out producer ids;
- engine.client_registry: the clients it made, the waiters for data, whether it is closed;
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
import threading
from typing import Callable

from engine import composition
from engine.admin_manager import TopicDescription, check_external
from engine.common.closing import Steps
from engine.common.gc_pause import gc_paused
from engine.common.health import TaskFailure
from engine.common.errors import (
    InvalidConfigurationError,
    NotLeaderOrFollowerError,
    UnknownTopicOrPartitionError,
    not_supported_yet,
)
from engine.common.structs import TOPIC_OF, OffsetAndMetadata, TopicPartition
from engine.groups.group_coordinator import GroupCoordinator
from engine.groups.share_group_coordinator import DYNAMIC_CONFIGS as SHARE_GROUP_CONFIGS
from engine.groups.share_group_coordinator import ShareGroupCoordinator
from engine.groups.share_group_coordinator import group_settings as share_group_settings
from engine.log.unified_log import AppendInfo, UnifiedLog
from engine.metadata import INTERNAL_TOPICS
from engine.replication.partition import LazyPartition, Partition
from engine.segments.cleaner import CleanerStats
from engine.transactions import Transactions


class Engine:
    """An open log directory. Use `engine.open(path)`; close it (or use `with`) to shut down cleanly. Options:
    clock, fs, background, topic_defaults, producer_id_expiration_ms, fd_budget, brokers, replica_lag_time_max_ms,
    group_config, transaction_config, cleaner_config, hw_checkpoint_interval_ms, max_partitions (README)."""

    def __init__(self, path: str, **options) -> None:
        parts = composition.assemble(self, path, **options)
        self.path, self.clock, self.fs, self.defaults = parts.path, parts.clock, parts.fs, parts.defaults
        self.max_partitions, self.registry, self.heartbeats = parts.max_partitions, parts.registry, parts.heartbeats
        self.replicas, self.admin, self.coordinators = parts.replicas, parts.admin, parts.coordinators
        self.internal, self.producer_ids, self.controller = parts.internal, parts.producer_ids, parts.replicas.controller
        self._lock, self._partitions, self._catalogue = parts.admin_lock, parts.leaders, parts.catalogue
        self._logs, self._brokers, self._staged = parts.logs, parts.replicas.brokers, parts.staged
        self._check_open = self.registry.check_open

    @property
    def closed(self) -> bool:
        """Whether close() has begun (a closing engine's background tasks do nothing)."""
        return self.registry.closed

    @property
    def clean_shutdown(self) -> bool:
        """Whether the directory was closed cleanly before this open (else it was recovered)."""
        return self._logs.clean_shutdown

    # --- topics (engine.admin_manager, which documents each) -----------------------------------------
    def create_topic(self, name: str, partitions: int = 1, replication_factor: int = 1,
                     config: dict | None = None) -> TopicDescription:
        return self.admin.create_topic(name, partitions, replication_factor, config)

    def delete_topic(self, name: str) -> None:
        self.admin.delete_topic(name)

    def list_topics(self) -> list[str]:
        return self.admin.list_topics()

    def describe_topic(self, name: str) -> TopicDescription:
        return self.admin.describe_topic(name)

    def create_partitions(self, name: str, count: int) -> TopicDescription:
        return self.admin.create_partitions(name, count)

    def alter_topic_config(self, name: str, config: dict) -> dict:
        return self.admin.alter_topic_config(name, config)

    def compact(self, topic: str, partition: int | None = None,
                progress: Callable[[int, int], None] | None = None) -> dict[int, CleanerStats | None]:
        return self.admin.compact(topic, partition, progress)

    def restore_stray(self, path: str) -> TopicPartition:
        return TopicPartition(*self.admin.restore_stray(path))

    def partitions_for(self, topic: str) -> int:
        return self.admin.topic(topic).partitions

    # --- the coordinators ----------------------------------------------------------------------------
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

    @property
    def share_groups(self) -> ShareGroupCoordinator:
        """The share group coordinator: share groups, their sessions and share-partitions (loaded on first use)."""
        self._check_open()
        return self.coordinators.share_groups

    def group_configs(self, group_id: str) -> dict[str, str]:
        """The dynamic configs set for `group_id` (Kafka's GROUP config resource)."""
        return self.admin.group_configs(group_id)

    def describe_group_configs(self, group_id: str) -> tuple[dict[str, object], dict[str, str]]:
        """The effective configs of `group_id` (its dynamic ones over the engine's) and its dynamic ones."""
        dynamic = self.admin.group_configs(group_id)
        return share_group_settings(dynamic, self.coordinators.group_config), dynamic

    def alter_group_configs(self, group_id: str, changes: dict[str, str | None], validate_only: bool = False) -> None:
        """Set (a value) or remove (None) dynamic configs of `group_id`, checked as Kafka checks them: the share
        group configs (engine.groups.share_group_coordinator) are taken; the consumer group ones are not supported
        yet; any other name is INVALID_CONFIG. With `validate_only` nothing is changed."""
        if not group_id:
            raise InvalidConfigurationError("a group config resource names its group")
        configs = self.admin.group_configs(group_id)
        for name, value in changes.items():
            if name.startswith(("consumer.", "streams.")):
                raise not_supported_yet(f"the group config {name}")
            if name not in SHARE_GROUP_CONFIGS:
                raise InvalidConfigurationError(f"{name!r} is not a group config")
            if value is None:
                configs.pop(name, None)
            else:
                configs[name] = str(value)
        share_group_settings(configs, self.coordinators.group_config)  # (raises for a value Kafka refuses)
        if not validate_only:
            self.admin.set_group_configs(group_id, configs)

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

    def allocate_producer_id(self) -> int:
        """A producer id never handed out before in this directory (engine.producer_id_manager)."""
        return self.producer_ids.allocate()

    def apply_staged_writes(self, deadline: float | None = None) -> int:
        """Append, one at a time on this thread, the writes other processes staged for this directory and asked its
        owner to commit (Spark's kafkalog sink; engine.staged_writes), until none is left or the `time.monotonic()`
        `deadline` passes; returns how many were answered. With `background=True` a thread of the engine's does this
        within 200 ms of a request."""
        self._check_open()
        return self._staged.apply_pending(deadline)

    # --- partitions and logs -------------------------------------------------------------------------
    def closed_cleanly(self) -> bool:
        """Whether the last close of every live broker's directory was clean (no log needs recovering)."""
        return self.replicas.closed_cleanly()

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
            for (topic, p), slot in sorted(broker.logs.slots().items()):
                lg = slot.loaded_log
                if lg is not None:
                    notes += [f"{where}{topic}-{p}: {what}" for what in lg.recovery.describe()]
        return notes

    def log(self, topic: str, partition: int) -> UnifiedLog:
        """The log of one partition, loaded (for tools and tests; clients go through `partition()`)."""
        return self.partition(topic, partition).log

    def partitions_of(self, tps: list[TopicPartition]) -> list[Partition | None]:
        """`partition()` of many partitions at once (a consumer's poll over its assignment): None where it would
        raise, which a call of `partition()` then explains."""
        found = self._partitions.get
        if INTERNAL_TOPICS.isdisjoint(map(TOPIC_OF, tps)):  # (the common case, looked up at C speed)
            out = list(map(found, tps))
        else:
            out = [None if tp[0] in INTERNAL_TOPICS else found(tp) for tp in tps]
        if LazyPartition in set(map(type, out)):  # (partitions not made yet: made now, each loading its log)
            with gc_paused():  # (many at once: a consumer's assignment, a producer's drain)
                out = [self._made(p) if type(p) is LazyPartition else p for p in out]
        return out

    def _made(self, part: LazyPartition) -> Partition | None:
        try:
            return self.replicas.made(part)
        except NotLeaderOrFollowerError:
            return None  # (gone since: a call of `partition()` explains)

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
        return found if type(found) is not LazyPartition else self.replicas.made(found)

    # --- the produce path ----------------------------------------------------------------------------
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
        registry = self.registry
        if registry.waiters or registry.watchers:
            registry.appended(topic, partition)
        return info

    def is_replicated(self, topic: str, partition: int) -> bool:
        """Whether appends to the partition wait for followers under acks='all' (its leader has some)."""
        return bool(self.partition(topic, partition).remote)

    def wait_for_replication(self, topic: str, partition: int, info: AppendInfo, timeout_ms: int) -> None:
        """acks=all for an append made with wait=False: the HW passes it within `timeout_ms`, under the leader
        that appended it (NotLeaderOrFollowerError if leadership moved since: the producer resends)."""
        self.replicas.wait_for_replication(self.partition(topic, partition), info, timeout_ms)

    # --- replication and storage (engine.replica_manager, which documents each) ----------------------
    def replicate(self, max_rounds: int = 1000) -> int:
        return self.replicas.replicate(max_rounds)

    def shrink_isrs(self) -> int:
        return self.replicas.shrink_isrs()

    def fail_broker(self, broker_id: int) -> None:
        self.replicas.fail_broker(broker_id)

    def restart_broker(self, broker_id: int) -> None:
        self.replicas.restart_broker(broker_id)

    def health(self) -> list[TaskFailure]:
        return self.replicas.health()

    def check_storage(self) -> list[TaskFailure]:
        return self.replicas.check_storage()

    def flush(self) -> None:
        self.replicas.flush()

    def expire_producers(self) -> int:
        return self._logs.expire_producers()

    # --- waiting for data (engine.client_registry, which documents each) -----------------------------
    def wait_for_data(self, event: threading.Event, timeout_ms: float) -> None:
        """Block until an append (event registered with `watch`) or `timeout_ms` of clock time."""
        self.clock.wait(event, timeout_ms)

    def watch(self, event=None):
        return self.registry.watch(event)

    def watch_partitions(self, watcher) -> None:
        self.registry.watch_partitions(watcher)

    def unwatch(self, event) -> None:
        self.registry.unwatch(event)

    # --- clients ---------------------------------------------------------------------------------------
    def producer(self, **config):
        """A kafka-python-shaped Producer writing to this engine (see engine.clients.producer)."""
        from engine.clients.producer import Producer
        return self.registry.register(Producer(self, **config))

    def consumer(self, *topics: str, **config):
        """A kafka-python-shaped Consumer reading from this engine (see engine.clients.consumer)."""
        from engine.clients.consumer import Consumer
        return self.registry.register(Consumer(self, *topics, **config))

    def share_consumer(self, group_id: str, topics=(), **config):
        """A member of share group `group_id` (KIP-932's queues), Kafka's KafkaShareConsumer in process (see
        engine.clients.share_consumer)."""
        from engine.clients.share_consumer import ShareConsumer
        return self.registry.register(ShareConsumer(self, group_id, topics, **config))

    def serve(self, host: str = "127.0.0.1", port: int = 9092, **options):
        """A Kafka protocol listener serving this engine to any Kafka client (port=0 picks a free port); returns its
        handle, whose close() stops it (closing the engine does too). Options: engine.network.listener.Listener."""
        from engine.network.listener import Listener
        return self.registry.register(Listener(self, host, port, **options))

    # --- lifecycle -------------------------------------------------------------------------------------
    def close(self) -> None:
        """Close clients, then shut down cleanly: snapshots, checkpoints, the clean-shutdown marker. Every step runs
        whatever the one before raised (a client whose rebalance listener raises, a log that cannot be flushed): the
        directory is released either way, and the first error is raised at the end (the marker is written only when
        every log closed cleanly)."""
        with self._lock:
            clients = self.registry.to_close()
        if clients is None:
            return
        steps = Steps()
        steps.run(self._staged.close)  # a staged write under way is queued again for the next owner
        for client in clients:
            steps.run(client.close)
        with self._lock:
            late = self.registry.mark_closed(clients)  # no client registers after this
        for client in late:  # registered while the others closed
            steps.run(client.close)
        steps.run(self.heartbeats.close)
        for broker in self._brokers.values():
            steps.run(broker.stop_fetcher)
        if self.replicas.native_fetcher is not None:
            steps.run(self.replicas.native_fetcher.close)
        steps.run(lambda: self.admin.note_loaded_logs(self.producer_ids))
        for broker in self._brokers.values():
            steps.run(broker.close)
        steps.raise_first()

    def __enter__(self) -> "Engine":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Engine({self.path!r}, topics={len(self._catalogue.topics)}, closed={self.closed})"


@functools.lru_cache(maxsize=1024)
def _checked_external(topic: str) -> None:
    """check_external of a str, remembered once it passed (a group member asks for its topics' offsets at every
    rebalance; an error is raised again each time, never remembered)."""
    check_external(topic)


def open(path: str, **config) -> Engine:  # noqa: A001 (engine.open mirrors the built-in's role)
    """Open (creating if needed) the log directory `path`; see Engine for the options. The cyclic garbage collector
    is paused meanwhile (engine.common.gc_pause): a directory of many partitions makes many objects at once."""
    with gc_paused():
        return Engine(path, **config)
