"""The "consumer" protocol's bytes: what a member tells the coordinator it wants (Subscription) and what the
leader hands back (Assignment), carried opaquely by JoinGroup/SyncGroup and stored in the group's metadata
record in `__consumer_offsets` (Kafka's ConsumerProtocol).

Byte layout (non-flexible message schema, engine.record.schema): `int16 version` then
- Subscription v0-v3: `topics [string] | userData nullable bytes | ownedPartitions [topic string, partitions
  [int32]] (v1+) | generationId int32 (v2+, -1) | rackId nullable string (v3+)`;
- Assignment v0-v3: `assignedPartitions [topic string, partitions [int32]] | userData nullable bytes`.
kafkalog writes version 3 of both. A newer version is read as v3 with its trailing fields ignored, as Kafka does.
Pure functions over bytes; thread-safe.
"""
from __future__ import annotations

from typing import Iterable, NamedTuple

from engine.common.structs import PARTITION_OF, TOPIC_OF, TopicPartition, topic_partitions
from engine.record.schema import Reader, Writer

PROTOCOL_TYPE = "consumer"
VERSION = 3


class Subscription(NamedTuple):
    """A member's topics, its assignor's user data, the partitions it owns now and the generation it owns them in."""

    topics: list[str]
    user_data: bytes | None = None
    owned_partitions: list[TopicPartition] = []
    generation_id: int = -1
    rack_id: str | None = None
    group_instance_id: str | None = None  # not on the wire: the coordinator tells the leader


class Assignment(NamedTuple):
    partitions: list[TopicPartition]
    user_data: bytes | None = None


def write_partitions(w: Writer, partitions: Iterable[TopicPartition]) -> None:
    """`[topic string, partitions [int32]]`, grouped by topic in first-seen order (also StickyAssignor's layout)."""
    partitions = list(partitions)
    topics = dict.fromkeys(map(TOPIC_OF, partitions))
    if len(topics) == 1:  # (the common case, grouped at C speed)
        by_topic = {topic: list(map(PARTITION_OF, partitions)) for topic in topics}
    else:
        by_topic = {}
        for topic, p in partitions:
            by_topic.setdefault(topic, []).append(p)
    w.count(len(by_topic))
    for topic, ps in by_topic.items():
        w.string(topic).int32s(ps)


def read_partitions(r: Reader, what: str) -> list[TopicPartition]:
    out = []
    for _ in range(r.count(what) or 0):
        topic = r.string("topic")
        out += topic_partitions(topic, r.int32s("partitions") or ())
    return out


def encode_subscription(s: Subscription) -> bytes:
    w = Writer().int(16, VERSION).count(len(s.topics))
    for t in s.topics:
        w.string(t)
    w.bytes(s.user_data)
    write_partitions(w, s.owned_partitions)
    return w.int(32, s.generation_id).string(s.rack_id).done()


def decode_subscription(data) -> Subscription:
    r = Reader(data, "consumer protocol subscription")
    version = r.version(None)
    topics = [r.string("topic") for _ in range(r.count("topics") or 0)]
    user_data = r.bytes("userData", nullable=True)
    owned = read_partitions(r, "ownedPartitions") if version >= 1 else []
    generation = r.int(32, "generationId") if version >= 2 else -1
    rack = r.string("rackId", nullable=True) if version >= 3 else None
    if version <= VERSION:
        r.end()
    return Subscription(topics, user_data, owned, generation, rack)


def encode_assignment(a: Assignment) -> bytes:
    w = Writer().int(16, VERSION)
    write_partitions(w, a.partitions)
    return w.bytes(a.user_data).done()


def decode_assignment(data) -> Assignment:
    r = Reader(data, "consumer protocol assignment")
    version = r.version(None)
    partitions = read_partitions(r, "assignedPartitions")
    user_data = r.bytes("userData", nullable=True)
    if version <= VERSION:
        r.end()
    return Assignment(partitions, user_data)
