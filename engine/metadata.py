"""`kafkalog.metadata`: the engine's catalogue at the root of a log directory (what a KRaft
controller's metadata log holds for a broker): every topic's id, partition count and config
overrides (Kafka's dotted names), and the end of the last producer-id block handed out.

Byte layout: UTF-8 JSON `{"version": 1, "topics": {name: {"id", "partitions", "config",
"replication_factor", "states": {partition: {"replicas", "leader", "leader_epoch", "isr"}}}},
"producer_id_block_end": N, "brokers": N, "controller_epoch": N, "open_transactions": [[topic, partition]],
"group_configs": {group: {name: value}}}` (open_transactions: the partitions whose log held an open transaction at the
last clean close; group_configs: the groups' dynamic configs, as a KRaft controller keeps GROUP resources' config
records; each absent when empty. "brokers",
"controller_epoch" and each topic's last two are absent from files written before replication, which read as one
broker and RF 1). Kafka ignores the file; topic ids match each `partition.metadata`.
Crash policy: rewritten whole (tmp + fsync + rename + dir fsync), so a crash leaves the old or the
new catalogue, never a mix. A directory without it (a Kafka broker's, or an old one) is adopted from
its partition directories. Thread-safety: the Engine serialises writes.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field

from engine.common.errors import InvalidTopicError, KafkaStorageError
from engine.replication.controller import PartitionState
from engine.segments import names
from engine.segments.fs import FileSystem
from engine.segments.log_config import LogConfig

FILE = "kafkalog.metadata"
VERSION = 1
INTERNAL_TOPICS = names.INTERNAL_TOPICS
COMPACTED_INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state", "__share_group_state"})  # compacted
PRODUCER_ID_BLOCK = 1000


@dataclass
class TopicRecord:
    topic_id: str
    partitions: int
    config: dict = field(default_factory=dict)
    replication_factor: int = 1
    states: dict[int, PartitionState] = field(default_factory=dict)  # by partition; empty for RF 1


@dataclass
class Catalogue:
    topics: dict[str, TopicRecord] = field(default_factory=dict)
    producer_id_block_end: int = 0
    brokers: int = 1
    controller_epoch: int = 0
    # partitions whose log held an open transaction at the last clean close (the only ones a clean open looks at
    # for transactions its coordinator already ended)
    open_transactions: set[tuple[str, int]] = field(default_factory=set)
    group_configs: dict[str, dict[str, str]] = field(default_factory=dict)  # a group's dynamic configs

    def log_config(self, topic: str, defaults: LogConfig) -> LogConfig:
        """A topic's effective config: its overrides over `defaults` (an internal topic Kafka compacts is compacted
        whatever the defaults, also in directories older than compaction)."""
        rec = self.topics.get(topic)
        if topic in COMPACTED_INTERNAL_TOPICS:
            defaults = LogConfig.from_dict({"cleanup.policy": "compact"}, base=defaults)
        return LogConfig.from_dict(rec.config if rec else None, base=defaults)


def read(fs: FileSystem, directory: str) -> Catalogue | None:
    """The catalogue, or None when the directory has none."""
    path = os.path.join(directory, FILE)
    if not fs.exists(path):
        return None
    return parse(fs.read_bytes(path), path)


def parse(data: bytes, path: str | None = None) -> Catalogue:
    """The catalogue in a `kafkalog.metadata` file's bytes; KafkaStorageError when malformed."""
    try:
        doc = json.loads(data.decode())
        if doc.get("version") != VERSION:
            raise ValueError(f"version {doc.get('version')!r}")
        topics = {names.validate_topic(name): TopicRecord(
            t["id"], int(t["partitions"]), dict(t["config"]), int(t.get("replication_factor", 1)),
            {int(p): PartitionState.from_dict(st) for p, st in t.get("states", {}).items()})
            for name, t in doc["topics"].items()}
        return Catalogue(topics, int(doc["producer_id_block_end"]), int(doc.get("brokers", 1)),
                         int(doc.get("controller_epoch", 0)),
                         {(names.validate_topic(t), int(p)) for t, p in doc.get("open_transactions", [])},
                         {str(g): {str(k): str(v) for k, v in c.items()}
                          for g, c in doc.get("group_configs", {}).items()})
    except (ValueError, KeyError, TypeError, AttributeError, RecursionError, InvalidTopicError) as exc:
        raise KafkaStorageError(
            f"unreadable engine metadata ({exc}); it holds the topics' configs, so the engine will not guess "
            f"them: restore the file, or move it aside to adopt the partition directories with default configs",
            file=path) from None


def render(cat: Catalogue) -> bytes:
    doc = {"version": VERSION,
           "topics": {name: {"id": t.topic_id, "partitions": t.partitions, "config": t.config,
                             "replication_factor": t.replication_factor,
                             "states": {str(p): st.to_dict() for p, st in sorted(t.states.items())}}
                      for name, t in sorted(cat.topics.items())},
           "producer_id_block_end": cat.producer_id_block_end, "brokers": cat.brokers,
           "controller_epoch": cat.controller_epoch}
    if cat.open_transactions:
        doc["open_transactions"] = sorted(cat.open_transactions)
    if cat.group_configs:
        doc["group_configs"] = {g: dict(c) for g, c in cat.group_configs.items() if c}
    return json.dumps(doc, indent=1, sort_keys=True).encode()


def write(fs: FileSystem, directory: str, cat: Catalogue) -> None:
    fs.atomic_write(os.path.join(directory, FILE), render(cat))


def validate_new_topic(name: str, existing) -> None:
    """Kafka's rules for a topic a user creates: a legal name, not internal, no '.'/'_' collision."""
    names.validate_topic(name)
    if name in INTERNAL_TOPICS:
        raise InvalidTopicError(f"{name!r} is an internal topic reserved for the engine")
    folded = name.replace(".", "_")
    for other in existing:
        if other != name and other.replace(".", "_") == folded:
            raise InvalidTopicError(f"topic {name!r} collides with existing topic {other!r} ('.' and '_' collide)")
