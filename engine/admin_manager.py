"""Topic administration (Kafka's admin requests: CreateTopics, DeleteTopics, CreatePartitions, DescribeConfigs,
AlterConfigs, and a compaction on demand) and the topic catalogue on open: partition directories matched with the
catalogue, adopted or set aside.

State: the catalogue's topics (engine.metadata; shared with the engine and its replica manager, which writes the
partitions' states), the topics being created (unknown to clients until whole), the topic defaults and the partition
capacity.
On disk: `kafkalog.metadata`, rewritten whole (engine.metadata), and the partition directories, each with its
`partition.metadata`. Crash policy: a topic is created by writing its partition directories and then the catalogue,
and deleted by rewriting the catalogue first and then removing its directories; a directory the catalogue does not
know (a crash in between, or another topic id) is renamed `-stray` on the next open, as KRaft brokers do.
Threads: every change takes the engine's admin lock and may do file I/O under it; the catalogue's file is written
under the replica manager's controller lock (a leaf). Lookups by clients (`topic`, `list_topics`) take no lock.
"""
from __future__ import annotations

import logging
import os
import threading
from typing import Callable, NamedTuple

from engine import limits, metadata
from engine.common.clock import Clock
from engine.common.errors import (
    InvalidConfigurationError,
    InvalidPartitionsError,
    InvalidRequestError,
    InvalidReplicationFactorError,
    InvalidTopicError,
    KafkaError,
    KafkaStorageError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)
from engine.common.gc_pause import gc_paused
from engine.metadata import COMPACTED_INTERNAL_TOPICS, INTERNAL_TOPICS, Catalogue, TopicRecord
from engine.record import batch_format as bf
from engine.producer_id_manager import ProducerIdManager
from engine.replica_manager import ReplicaManager
from engine.log.log_cleaner import log_to_clean
from engine.log.log_manager import LogManager
from engine.segments import names, partition_metadata
from engine.segments.cleaner import CleanerStats
from engine.segments.fs import FileSystem
from engine.segments.log_config import LogConfig, warn_deprecated

log = logging.getLogger("kafkalog.engine")

INTERNAL_PARTITIONS = 50  # offsets.topic.num.partitions, transaction.state.log.num.partitions
INTERNAL_SEGMENT_BYTES = 104_857_600


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
    set_aside: tuple[str, ...] = ()  # directories of this partition set aside as -stray: records kept, not served


class TopicDescription(NamedTuple):
    name: str
    topic_id: str
    partitions: list[PartitionDescription]
    config: dict                 # the effective config, defaults included
    overrides: dict | None = None  # only the configs set on this topic


class AdminManager:
    """The topics of one engine: their creation, growth, deletion, configs, descriptions and compaction. Each reads
    and changes the catalogue under the engine's admin lock and saves it, which is why it stays one class of about
    400 lines."""

    def __init__(self, path: str, fs: FileSystem, clock: Clock, catalogue: Catalogue, defaults: LogConfig,
                 max_partitions: int, replicas: ReplicaManager, admin_lock: threading.RLock,
                 check_open: Callable[[], None], registered: Callable[[], list]) -> None:
        self.path, self.fs, self.clock, self.catalogue, self.defaults = path, fs, clock, catalogue, defaults
        self.max_partitions, self.replicas = max_partitions, replicas
        self._lock, self._check_open, self._registered = admin_lock, check_open, registered
        self.leaders, self.brokers = replicas.leaders, replicas.brokers
        self.creating: set[str] = set()  # topics being created: unknown to clients until whole
        self._configs: dict[str, tuple[dict | None, LogConfig]] = {}  # each topic's effective config, by overrides
        self._names_by_id: dict[str, str] = {}  # topic id -> name, made again when a lookup finds it stale

    @property
    def logs(self) -> LogManager:
        """Broker 0's log manager: the directory the engine was opened on."""
        return self.brokers[0].logs

    def log_config(self, topic: str) -> LogConfig:
        """A topic's effective config: its overrides over the engine's defaults (made once per overrides: a
        LogConfig is immutable, so a topic's partitions share it)."""
        rec = self.catalogue.topics.get(topic)
        overrides = rec.config if rec is not None else None
        cached = self._configs.get(topic)
        if cached is None or cached[0] is not overrides:
            cached = self._configs[topic] = (overrides, self.catalogue.log_config(topic, self.defaults))
        return cached[1]

    def reconcile(self, adopt: bool) -> None:
        """Match partition directories with the catalogue: adopt them (no catalogue yet) or set strays aside. With a
        catalogue, a directory's name is matched, not its partition.metadata: a partition's topic id is checked as
        its log loads (engine.log.log_manager: a missing file is written again, another topic's directory is set
        aside as a stray then), so opening reads nothing per partition."""
        topics = self.catalogue.topics
        found = self.logs.slots().items()
        if not adopt:  # (only the names the catalogue lacks are looked at)
            found = [(tp, slot) for tp, slot in found
                     if tp[0] not in INTERNAL_TOPICS and (tp[0] not in topics or tp[1] >= topics[tp[0]].partitions)]
        for (topic, partition), slot in sorted(found, key=lambda item: item[0]):
            if topic in INTERNAL_TOPICS:
                continue  # a broker's internal topics stay as they are, outside the catalogue
            rec = topics.get(topic)
            if not adopt:
                if rec is None or partition >= rec.partitions:
                    why = "no topic of that name" if rec is None else f"the topic has {rec.partitions} partitions"
                    moved = self.logs.set_aside(topic, partition, "stray")
                    self.logs.repairs.append(f"set {slot.dir} aside as {moved}: the catalogue has {why}")
                    log.warning("%s", self.logs.repairs[-1])
                continue
            try:
                topic_id = partition_metadata.read(self.fs, slot.dir)
            except KafkaStorageError as exc:  # unreadable: a new id says which topic it is
                topic_id = None
                slot.load().recovery.note(f"rewrote {exc.file}: {exc.message}")
            if rec is None:
                rec = topics[topic] = TopicRecord(topic_id or partition_metadata.new_topic_id(), 0)
            rec.partitions = max(rec.partitions, partition + 1)
            if topic_id is None:
                partition_metadata.write(self.fs, slot.dir, rec.topic_id)
        have = self.logs.slots()
        for name, rec in self.catalogue.topics.items():
            for p in range(rec.partitions):  # a partition the catalogue has but the disk lost
                if (name, p) not in have:
                    self.logs.create_slot(name, p, rec.topic_id)
        self.logs.sync_created()
        for b, broker in self.brokers.items():  # the other brokers hold only the replicas assigned to them
            for (topic, partition) in sorted(broker.logs.slots()) if b else ():
                rec = self.catalogue.topics.get(topic)
                state = rec.states.get(partition) if rec is not None else None
                if state is None or b not in state.replicas:
                    broker.logs.set_aside(topic, partition, "stray")

    def create_topic(self, name: str, partitions: int = 1, replication_factor: int = 1,
                     config: dict | None = None) -> TopicDescription:
        """Create a topic with `partitions` partitions and config overrides (Kafka's dotted names)."""
        with self._lock:
            self._check_open()
            metadata.validate_new_topic(name, self.catalogue.topics)
            if type(partitions) is not int or partitions < 1:
                raise InvalidPartitionsError(f"partitions must be an int >= 1, got {partitions!r}")
            if type(replication_factor) is not int or replication_factor < 1:
                raise InvalidReplicationFactorError(
                    f"replication_factor must be an int >= 1, got {replication_factor!r}")
            if replication_factor > self.catalogue.brokers:
                raise InvalidReplicationFactorError(
                    f"replication_factor={replication_factor} is larger than the engine's {self.catalogue.brokers} "
                    f"broker(s) (engine.open(path, brokers=N))")
            effective = LogConfig.from_dict(config, base=self.defaults)  # typed errors before anything is created
            warn_deprecated(config or {})
            if effective.min_insync_replicas > replication_factor:
                raise InvalidConfigurationError(
                    f"min.insync.replicas={effective.min_insync_replicas} is larger than replication_factor="
                    f"{replication_factor}")
            overrides = dict(config or {})
            if name in self.catalogue.topics:
                raise TopicAlreadyExistsError(f"topic {name!r} already exists")
            self.check_capacity(partitions * replication_factor, f"topic {name!r}")
            rec = TopicRecord(partition_metadata.new_topic_id(), partitions, overrides, replication_factor)
            self.creating.add(name)
            self.catalogue.topics[name] = rec
            try:
                self.add_partitions(name, 0, partitions)
                self.save()
            except BaseException:
                del self.catalogue.topics[name]
                self.drop_partitions(name, 0, partitions)
                self.save_after_rollback()
                raise
            finally:
                self.creating.discard(name)
            return self.describe_topic(name, range(partitions))

    def topic_id_of(self, topic: str) -> str | None:
        """The catalogue's id of a topic that is not internal (None for an internal or unknown one)."""
        rec = self.catalogue.topics.get(topic) if topic not in INTERNAL_TOPICS else None
        return rec.topic_id if rec is not None else None

    def topic_named(self, topic_id: str) -> str | None:
        """The name of the topic (internal ones included) whose id is `topic_id` (None when none is)."""
        name = self._names_by_id.get(topic_id)
        rec = self.catalogue.topics.get(name) if name is not None else None
        if rec is None or rec.topic_id != topic_id:
            self._names_by_id = {r.topic_id: n for n, r in list(self.catalogue.topics.items())}
            name = self._names_by_id.get(topic_id)
        return name

    def check_capacity(self, adding: int, what: str) -> None:
        """engine.limits.check_capacity for `adding` more partition replicas (nothing is created when it raises)."""
        hosted = sum(rec.partitions * rec.replication_factor for rec in self.catalogue.topics.values())
        limits.check_capacity(self.path, hosted, adding, self.max_partitions, self.fs.fd_budget, what)

    def add_partitions(self, name: str, start: int, end: int) -> None:
        with gc_paused():  # (many partitions' objects made at once)
            self._add_partitions(name, start, end)

    def _add_partitions(self, name: str, start: int, end: int) -> None:
        rec = self.catalogue.topics[name]
        if self.catalogue.brokers == 1:
            self.replicas.add_partitions(name, range(start, end))
        else:
            for p in range(start, end):
                with self.replicas.controller_lock:
                    state = rec.states[p] = self.replicas.controller.new_partition(p, rec.replication_factor)
                    self.replicas.controller.elect(state, False)  # a dead preferred leader: the next live replica
                self.replicas.add_partition(name, p)
        for broker in self.brokers.values():  # one sync per broker for the whole request, before the catalogue
            if broker.alive:                  # names the partitions
                broker.logs.sync_created()

    def drop_partitions(self, name: str, start: int, end: int) -> None:
        rec = self.catalogue.topics.get(name)
        for p in range(start, end):
            self.leaders.pop((name, p), None)
            if rec is not None:
                rec.states.pop(p, None)
            for broker in self.brokers.values():
                if broker.alive:
                    broker.drop(name, p)

    def delete_topic(self, name: str) -> None:
        with self._lock:
            self._check_open()
            rec = self.topic(name)
            del self.catalogue.topics[name]
            self.save()
            for client in self._registered():
                client.on_topic_changed(name)
            for p in range(rec.partitions):
                self.leaders.pop((name, p), None)
                for broker in self.brokers.values():  # every replica offline first: a link's descriptors of
                    broker.stop_hosting(name, p)  # the leader's files would make their last close free their pages
                for broker in self.brokers.values():
                    broker.drop(name, p)  # a broker that is down removes the directory as a stray later

    def list_topics(self) -> list[str]:
        """The topics clients may use (the internal ones are not listed)."""
        self._check_open()
        return sorted(name for name in list(self.catalogue.topics)
                      if name not in INTERNAL_TOPICS and name not in self.creating)

    def topic_shapes(self, names: list[str] | None) -> dict[str, tuple[str, int]]:
        """{name: (topic id, partitions)} of those of `names` (None: of all) that are topics clients may use (a
        consumer group's view of the topics it subscribes to)."""
        found = {}
        for name in list(self.catalogue.topics) if names is None else names:
            rec = self.catalogue.topics.get(name)
            if rec is not None and name not in INTERNAL_TOPICS and name not in self.creating:
                found[name] = (rec.topic_id, rec.partitions)
        return found

    def topic(self, name: str) -> TopicRecord:
        rec = self.catalogue.topics.get(name) if name not in INTERNAL_TOPICS and name not in self.creating else None
        if rec is None:
            check_external(name)
            raise UnknownTopicOrPartitionError(f"unknown topic {name!r}", file=self.path)
        return rec

    def internal_topic_id(self, name: str) -> str | None:
        """The catalogue's id of internal topic `name` (None while it has none)."""
        rec = self.catalogue.topics.get(name) if name in INTERNAL_TOPICS else None
        return rec.topic_id if rec is not None else None

    def internal_topics(self) -> dict[str, int]:
        """The internal topics this directory has, with their partition counts."""
        return {name: rec.partitions for name, rec in list(self.catalogue.topics.items())
                if name in INTERNAL_TOPICS and name not in self.creating}

    def adoptable(self, name: str) -> bool:
        """Whether the directory holds a broker's partitions of internal topic `name` that kafkalog has not adopted yet
        (a Kafka broker's directory opened here: its groups and transactions are in them)."""
        return name not in self.catalogue.topics and any(topic == name for topic, _ in self.logs.slots())

    def ensure_internal_topic(self, name: str) -> bool:
        """Create internal topic `name` (50 partitions; replicated up to 3 times) unless it exists; a broker's
        own partitions of it are adopted as they are. True if it was created now."""
        # every group and transaction record asks: one that exists is answered without the admin lock
        if name in self.catalogue.topics and name not in self.creating:
            self._check_open()
            return False
        with self._lock:
            self._check_open()
            if name in self.catalogue.topics:
                return False
            found = {p: slot for (topic, p), slot in sorted(self.logs.slots().items()) if topic == name}
            topic_id = None
            for slot in found.values():
                try:
                    topic_id = topic_id or partition_metadata.read(self.fs, slot.dir)
                except KafkaStorageError:
                    continue
            rf = min(3, self.catalogue.brokers)
            self.check_capacity(INTERNAL_PARTITIONS * rf - len(found), f"internal topic {name!r}")
            config = {"cleanup.policy": "compact", "retention.ms": -1, "segment.bytes": INTERNAL_SEGMENT_BYTES,
                      "min.insync.replicas": min(2, rf)}
            self.creating.add(name)
            self.catalogue.topics[name] = TopicRecord(topic_id or partition_metadata.new_topic_id(),
                                                       INTERNAL_PARTITIONS, config, rf)
            try:
                self.add_partitions(name, 0, INTERNAL_PARTITIONS)
                self.save()
            except BaseException:
                del self.catalogue.topics[name]
                for p in range(INTERNAL_PARTITIONS):
                    if p in found:  # a broker's partition that was there before: stop hosting it, keep its data
                        self.leaders.pop((name, p), None)
                        self.brokers[0].partitions.pop((name, p), None)
                    else:
                        self.drop_partitions(name, p, p + 1)
                self.save_after_rollback()
                raise
            finally:
                self.creating.discard(name)
            return True

    def describe_topic(self, name: str, fresh: range = range(0)) -> TopicDescription:
        """Partitions (log start, LEO, high watermark, bytes, segments; leader, epoch, replicas, ISR and each
        live replica's LEO and HW) and the effective config. The partitions in `fresh` were created by the caller
        just now: those not loaded since are described as the empty logs they are, without loading them."""
        with self._lock:
            self._check_open()
            rec = self.topic(name)
            parts = []
            for p in range(rec.partitions):
                state = rec.states.get(p)
                part = self.leaders.get((name, p))
                hosted = {b: broker.partitions[(name, p)] for b, broker in self.brokers.items()
                          if (name, p) in broker.partitions}
                replicas = state.replicas if state else [0]
                roles = (part.broker_id if part else -1, state.leader_epoch if state else 0, list(replicas),
                         sorted(part.isr, key=replicas.index) if part else list(state.isr if state else []))
                if p in fresh and all(r.loaded_log is None for r in hosted.values()):
                    # (just created and not loaded since: the empty logs they are, one empty segment each)
                    parts.append(PartitionDescription(
                        p, 0, 0, 0 if part else -1, 0, 1, *roles, {b: ReplicaDescription(0, 0) for b in sorted(hosted)},
                        0.0 if self.log_config(name).compact else None))
                    continue
                hosted = {b: self.replicas.made(r) for b, r in hosted.items()}  # (made now: their logs described)
                part = part and self.replicas.made(part)
                shown = part or hosted.get(0) or next(iter(hosted.values()), None)
                for replica in hosted.values():
                    replica.take_linked()  # (a linked follower's LEO as its link wrote it)
                if part:  # (a single replica's epoch is its log's latest: read as the log loads)
                    roles = (roles[0], part.leader_epoch, *roles[2:])
                parts.append(PartitionDescription(
                    p, shown.log_start_offset if shown else -1, shown.log_end_offset if shown else -1,
                    part.high_watermark if part else -1, shown.log.size_in_bytes() if shown else 0,
                    len(shown.log.segments) if shown else 0, *roles,
                    {b: ReplicaDescription(r.log_end_offset, r.log.high_watermark) for b, r in sorted(hosted.items())},
                    log_to_clean((name, p), shown.log, self.clock.time_ms()).ratio
                    if shown and shown.log.config.compact else None))
            strays: dict[int, list[str]] = {}  # (after the loads above, which may set a directory aside)
            for broker in self.brokers.values():
                for stray in broker.logs.strays():
                    if stray.topic == name:
                        strays.setdefault(stray.partition, []).append(stray.path)
            parts = [d._replace(set_aside=tuple(strays[d.partition])) if d.partition in strays else d for d in parts]
            return TopicDescription(name, rec.topic_id, parts, self.log_config(name).to_dict(), dict(rec.config))

    def restore_stray(self, path: str) -> tuple[str, int]:
        """Put a partition directory set aside as `-stray` back in place of its partition's empty, unused log (see
        LogManager.restore_stray), with the catalogue's topic id; its (topic, partition)."""
        with self._lock:
            self._check_open()
            where, name = os.path.split(os.path.abspath(path))
            broker = next((b for b in self.brokers.values() if b.logs.dir == where), None)
            aside = names.parse_set_aside(name)
            if broker is None or aside is None:
                raise InvalidRequestError(f"not a partition directory set aside as -stray here ({self.path})",
                                          file=path)
            rec = self.catalogue.topics.get(aside[0])
            if rec is None:
                raise UnknownTopicOrPartitionError(f"no topic {aside[0]}: create it first", file=path)
            return broker.logs.restore_stray(path, rec.topic_id)

    def create_partitions(self, name: str, count: int) -> TopicDescription:
        """Grow `name` to `count` partitions (Kafka's CreatePartitions); producers and subscribed consumers
        pick the new ones up. Keyed records may map to other partitions from now on, as in Kafka."""
        with self._lock:
            self._check_open()
            rec = self.topic(name)
            if type(count) is not int or count <= rec.partitions:
                raise InvalidPartitionsError(f"topic {name!r} has {rec.partitions} partitions: the new count must "
                                             f"be larger, got {count!r}")
            old = rec.partitions
            self.check_capacity((count - old) * rec.replication_factor, f"growing topic {name!r} to {count}")
            try:
                self.add_partitions(name, old, count)
                rec.partitions = count
                self.save()
            except BaseException:
                rec.partitions = old
                self.drop_partitions(name, old, count)
                self.save_after_rollback()
                raise
            for client in self._registered():
                client.on_topic_changed(name)
            return self.describe_topic(name, range(old, count))

    def alter_topic_config(self, name: str, config: dict) -> dict:
        """Set config overrides (a None value removes one); returns the effective config."""
        with self._lock:
            self._check_open()
            rec = self.topic(name)
            merged = {**rec.config, **config}
            merged = {k: v for k, v in merged.items() if v is not None}
            new = LogConfig.from_dict(merged, base=self.defaults)
            warn_deprecated({k: v for k, v in config.items() if v is not None})
            if new.min_insync_replicas > rec.replication_factor:
                raise InvalidConfigurationError(f"min.insync.replicas={new.min_insync_replicas} is larger than "
                                                f"the topic's replication factor {rec.replication_factor}")
            rec.config = merged
            self.save()
            for broker in self.brokers.values():
                for (topic, _), part in list(broker.partitions.items()):
                    log = part.loaded_log if topic == name else None
                    if log is not None:  # (a log not loaded takes its topic's config as it loads)
                        log.config = new
            return new.to_dict()

    def compact(self, topic: str, partition: int | None = None,
                progress: Callable[[int, int], None] | None = None) -> dict[int, CleanerStats | None]:
        """Compact a topic's partitions (or one) now, whatever their dirty ratio: every replica's log, up to its
        first uncleanable offset (the LSO, the HW, the active segment). Returns each partition's leader-side
        stats (None where nothing was cleanable); `progress(bytes done, bytes total)` follows each log."""
        with self._lock:
            self._check_open()
            rec = self.catalogue.topics.get(topic) if topic in COMPACTED_INTERNAL_TOPICS else self.topic(topic)
            if rec is None:
                raise UnknownTopicOrPartitionError(f"{topic!r} does not exist in this directory yet", file=self.path)
            config = self.log_config(topic)
            if not config.compact:
                raise InvalidConfigurationError(f"topic {topic!r} has cleanup.policy={config.cleanup_policy!r}: only "
                                                f"a topic whose policy holds 'compact' is compacted")
            wanted = range(rec.partitions) if partition is None else [partition]
            if partition is not None and (type(partition) is not int or not 0 <= partition < rec.partitions):
                raise bf.bad_partition(topic, partition, rec.partitions)
        out: dict[int, CleanerStats | None] = {}
        for p in wanted:
            leader = self.leaders.get((topic, p))
            for b, broker in self.brokers.items():
                if (topic, p) in broker.partitions:
                    stats = broker.logs.compact(topic, p, progress)
                    if leader is None or leader.broker_id == b:
                        out.setdefault(p, stats)
        return out

    def note_loaded_logs(self, producer_ids: ProducerIdManager) -> None:
        """Before the logs close: the catalogue notes what the logs loaded in this open hold that the next open
        must know without loading every log: the partitions with an open transaction (with those noted before whose
        log was not loaded), and a producer-id block past every producer id in them (`producer_ids.cover`)."""
        with self._lock:
            noted, highest = set(), -1
            for broker in self.brokers.values():  # (a follower's log holds its leader's transactions too)
                for tp, lg in broker.logs.loaded_items() if broker.alive else ():
                    if lg.producer_state.ongoing():
                        noted.add(tp)
                    highest = max(highest, lg.producer_state.max_producer_id())
            leaders = self.leaders
            noted |= {tp for tp in self.catalogue.open_transactions
                      if tp in leaders and leaders[tp].loaded_log is None}
            if producer_ids.cover(highest) | (noted != self.catalogue.open_transactions):
                self.catalogue.open_transactions = noted
                self.save()

    def group_configs(self, group_id: str) -> dict[str, str]:
        """A group's dynamic configs (GROUP resources' configs), as set."""
        return dict(self.catalogue.group_configs.get(group_id, {}))

    def set_group_configs(self, group_id: str, configs: dict[str, str]) -> None:
        """Replace a group's dynamic configs (validated by the caller) and write the catalogue."""
        with self._lock:
            self._check_open()
            if configs:
                self.catalogue.group_configs[group_id] = dict(configs)
            else:
                self.catalogue.group_configs.pop(group_id, None)
            self.save()

    def save(self) -> None:
        with self.replicas.controller_lock:
            metadata.write(self.fs, self.path, self.catalogue)

    def save_after_rollback(self) -> None:
        """Rewrite the catalogue after a topic change failed and was undone: another thread may have written it
        meanwhile (an ISR change, a producer-id block) with the change half made. The change's own error is the one
        raised; a failure here is logged."""
        try:
            self.save()
        except KafkaError as exc:
            log.warning("could not rewrite %s after undoing a failed topic change: %s", self.path, exc)



def check_external(topic) -> None:
    """InvalidTopicError for a name no client may use: malformed, or one of the engine's internal topics."""
    names.validate_topic(topic)
    if topic in INTERNAL_TOPICS:
        raise InvalidTopicError(f"{topic!r} is an internal topic reserved for the engine")
