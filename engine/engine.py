"""The Engine: one open log directory with its topics, their partitions' logs, producer ids and
background work; the clients (`producer()`, `consumer()`) are made from it.

On disk: Kafka's log directory (replication.log_manager) plus `kafkalog.metadata` (engine.metadata).
Every read and write of a partition goes through its `replication.partition.Partition`, which owns the
high watermark; partitions have one replica for now, so acks=1 and acks='all' mean the same.
Crash policy: a topic is created by writing its partition directories (each with its
`partition.metadata`) and then the catalogue; it is deleted by rewriting the catalogue first and then
removing the directories. A partition directory the catalogue does not know (a crash in between,
or another topic id) is renamed `-stray`, as KRaft brokers do, so nothing is lost.
Threads: every public method is thread-safe; the log manager's background thread runs flush,
retention, checkpoints and producer-id expiry, and stops on close().
"""
from __future__ import annotations

import os
import threading
import weakref
from typing import NamedTuple

from engine import metadata
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
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
    not_supported_yet,
)
from engine.metadata import INTERNAL_TOPICS, Catalogue, TopicRecord
from replication.log_manager import LogManager
from replication.partition import Partition
from segments import names, partition_metadata
from segments.fs import FileSystem
from segments.log_config import LogConfig
from txn.unified_log import DEFAULT_EXPIRATION_MS, AppendInfo, UnifiedLog

PRODUCER_EXPIRATION_CHECK_MS = 600_000


class PartitionDescription(NamedTuple):
    partition: int
    log_start_offset: int
    log_end_offset: int
    high_watermark: int
    size_bytes: int
    segments: int


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
                 **unknown) -> None:
        if unknown:
            raise InvalidConfigurationError(f"unknown engine option(s): {', '.join(sorted(unknown))}")
        self.path = _log_dir_path(path)
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
        self._lock = threading.RLock()
        self._closed = False
        self._clients: weakref.WeakSet = weakref.WeakSet()
        self._waiters: set[threading.Event] = set()
        self._partitions: dict[tuple[str, int], Partition] = {}
        try:
            self.fs.makedirs(self.path)
        except OSError as exc:
            raise InvalidLogDirectoryError(f"cannot use {self.path} as a log directory: {exc.strerror}",
                                           file=self.path) from None
        found = metadata.read(self.fs, self.path)
        self._catalogue = found or Catalogue()
        self._logs = LogManager(
            self.path, fs=self.fs, clock=self.clock, configs=self._log_config, background=background,
            log_options={"producer_id_expiration_ms": producer_id_expiration_ms},
            tasks={"producer-expiration": (PRODUCER_EXPIRATION_CHECK_MS, self.expire_producers)})
        try:
            self._reconcile(adopt=found is None)
            for (topic, p), lg in self._logs.logs().items():
                if topic not in INTERNAL_TOPICS:
                    self._add_partition(topic, p, lg)
            highest = max((lg.producer_state.max_producer_id() for lg in self._logs.logs().values()), default=-1)
            self._next_pid = max(self._catalogue.producer_id_block_end, highest + 1)
            self._catalogue.producer_id_block_end = self._next_pid
            metadata.write(self.fs, self.path, self._catalogue)
        except BaseException:
            self._logs.close()
            raise

    # --- catalogue ------------------------------------------------------------------------------
    def _log_config(self, topic: str) -> LogConfig:
        rec = self._catalogue.topics.get(topic)
        return LogConfig.from_dict(rec.config if rec else None, base=self.defaults)

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
            elif rec is None or topic_id != rec.topic_id or partition >= rec.partitions:
                self._logs.set_aside(topic, partition, "stray")
        for name, rec in self._catalogue.topics.items():
            for p in range(rec.partitions):  # a partition the catalogue has but the disk lost
                self._logs.create_log(name, p, rec.topic_id)

    def _add_partition(self, topic: str, index: int, lg: UnifiedLog) -> None:
        partition = self._partitions[(topic, index)] = Partition(topic, index, lg)
        partition.make_leader()  # the only replica leads (Kafka's makeLeader moves the HW to the LEO)

    def _save(self) -> None:
        metadata.write(self.fs, self.path, self._catalogue)

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
            if replication_factor > 1:
                raise not_supported_yet(f"replication_factor={replication_factor} (in-process replicas)")
            LogConfig.from_dict(config, base=self.defaults)  # typed errors before anything is created
            overrides = dict(config or {})
            if name in self._catalogue.topics:
                raise TopicAlreadyExistsError(f"topic {name!r} already exists")
            rec = TopicRecord(partition_metadata.new_topic_id(), partitions, overrides)
            self._catalogue.topics[name] = rec
            try:
                for p in range(partitions):
                    self._add_partition(name, p, self._logs.create_log(name, p, rec.topic_id))
                self._save()
            except BaseException:
                del self._catalogue.topics[name]
                for p in range(partitions):
                    self._partitions.pop((name, p), None)
                    if (name, p) in self._logs.logs():
                        self._logs.delete_log(name, p)
                raise
            return self.describe_topic(name)

    def delete_topic(self, name: str) -> None:
        with self._lock:
            self._check_open()
            rec = self._topic(name)
            del self._catalogue.topics[name]
            self._save()
            for client in list(self._clients):
                client.on_topic_changed(name)
            for p in range(rec.partitions):
                del self._partitions[(name, p)]
                self._logs.delete_log(name, p)

    def list_topics(self) -> list[str]:
        with self._lock:
            self._check_open()
            return sorted(self._catalogue.topics)

    def _topic(self, name: str) -> TopicRecord:
        rec = self._catalogue.topics.get(name)
        if rec is None:
            _check_external(name)
            raise UnknownTopicOrPartitionError(f"unknown topic {name!r}", file=self.path)
        return rec

    def describe_topic(self, name: str) -> TopicDescription:
        """Partitions (log start, LEO, high watermark, bytes, segments) and the effective config."""
        with self._lock:
            self._check_open()
            rec = self._topic(name)
            parts = []
            for p in range(rec.partitions):
                part = self.partition(name, p)
                parts.append(PartitionDescription(p, part.log_start_offset, part.log_end_offset, part.high_watermark,
                                                  part.log.size_in_bytes(), len(part.log.segments)))
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
            try:
                for p in range(old, count):
                    self._add_partition(name, p, self._logs.create_log(name, p, rec.topic_id))
                rec.partitions = count
                self._save()
            except BaseException:
                rec.partitions = old
                for p in range(old, count):
                    self._partitions.pop((name, p), None)
                    if (name, p) in self._logs.logs():
                        self._logs.delete_log(name, p)
                raise
            for client in list(self._clients):
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
            rec.config = merged
            self._save()
            for p in range(rec.partitions):
                self.log(name, p).config = new
            return new.to_dict()

    def partitions_for(self, topic: str) -> int:
        with self._lock:
            return self._topic(topic).partitions

    def recovery_notes(self) -> list[str]:
        """What opening the directory (and reading it since) found damaged and repaired, in words."""
        notes = list(self._logs.repairs)
        for (topic, p), lg in sorted(self._logs.logs().items()):
            notes += [f"{topic}-{p}: {what}" for what in lg.recovery.describe()]
        return notes

    def log(self, topic: str, partition: int) -> UnifiedLog:
        """The log of one partition (for tools and tests; clients go through `partition()`)."""
        return self.partition(topic, partition).log

    def partition(self, topic: str, partition: int) -> Partition:
        """The partition every read and write of `topic`-`partition` goes through."""
        found = self._partitions.get((topic, partition))
        if found is None:
            _check_external(topic)
            raise UnknownTopicOrPartitionError(f"no log for {topic}-{partition}", file=self.path)
        return found

    # --- the produce path ----------------------------------------------------------------------
    def partition_layout(self, topic: str) -> tuple[int, int]:
        """(partition count, max.message.bytes) of `topic`: what a producer needs to build batches for it."""
        with self._lock:
            self._check_open()
            rec = self._topic(topic)
            return rec.partitions, self._log_config(topic).max_message_bytes

    def append(self, topic: str, partition: int, data, acks: int = -1) -> AppendInfo:
        """Append a producer's batch (bytes of one or more whole batches) to a partition as its leader;
        KafkaStorageError while the directory's background work is failing."""
        self._check_open()
        self._logs.check_health()
        info = self.partition(topic, partition).append(data, acks)
        if self._waiters:
            for ev in list(self._waiters):
                ev.set()
        return info

    def flush(self) -> None:
        """fsync every partition's unflushed appends; KafkaStorageError if that (or background work) fails."""
        self._check_open()
        for lg in self._logs.logs().values():
            lg.flush()
        self._logs.check_health()

    def wait_for_data(self, event: threading.Event, timeout_ms: float) -> None:
        """Block until an append (event registered with `watch`) or `timeout_ms` of clock time."""
        self.clock.wait(event, timeout_ms)

    def watch(self) -> threading.Event:
        ev = threading.Event()
        with self._lock:
            self._waiters.add(ev)
        return ev

    def unwatch(self, event: threading.Event) -> None:
        with self._lock:
            self._waiters.discard(event)

    def allocate_producer_id(self) -> int:
        """A producer id never handed out before in this directory (persisted a block at a time)."""
        with self._lock:
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
        with self._lock:
            self._check_open()
            self._clients.add(client)
        return client

    # --- lifecycle ------------------------------------------------------------------------------
    def close(self) -> None:
        """Close clients, then shut down cleanly: snapshots, checkpoints, the clean-shutdown marker."""
        with self._lock:
            if self._closed:
                return
            clients = list(self._clients)
        errors = []
        for client in clients:
            try:
                client.close()
            except KafkaError as exc:
                errors.append(exc)
        with self._lock:
            self._closed = True
        self._logs.close()
        if errors:
            raise errors[0]

    def __enter__(self) -> "Engine":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Engine({self.path!r}, topics={len(self._catalogue.topics)}, closed={self._closed})"


def _check_external(topic) -> None:
    """InvalidTopicError for a name no client may use: malformed, or one of the engine's internal topics."""
    names.validate_topic(topic)
    if topic in INTERNAL_TOPICS:
        raise InvalidTopicError(f"{topic!r} is an internal topic reserved for the engine")


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
