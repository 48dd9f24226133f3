"""The consumer group protocol's records in `__consumer_offsets` (KIP-848; Kafka's ConsumerGroup*Key/Value records,
in the group's partition beside its offset commits).

Byte layout: a key is `int16 type | fields` (not flexible); a value `int16 version (0) | fields` (flexible: compact
strings and arrays, tagged fields), in engine.protocol.schema's encodings. The six kinds, by key type:
- 3 ConsumerGroupMetadata (group): the group epoch and, as tagged field 0 (Kafka 4.1, KIP-1101), the metadata hash of
  the topics its members subscribe to;
- 4 ConsumerGroupPartitionMetadata (group): every subscribed topic's id, name and partition count (Kafka 4.0 wrote it;
  4.1 reads it, writes only its tombstone, and so does kafkalog);
- 5 ConsumerGroupMemberMetadata (group, member): instance id, rack, client id and host, subscribed topic names and
  regex, rebalance timeout, server assignor;
- 6 ConsumerGroupTargetAssignmentMetadata (group): the epoch of the target assignment;
- 7 ConsumerGroupTargetAssignmentMember (group, member): the member's partitions in the target assignment;
- 8 ConsumerGroupCurrentMemberAssignment (group, member): member epoch, previous epoch, state, assigned partitions,
  partitions pending revocation;
- 16 ConsumerGroupRegularExpression (group, expression): the topics a subscribed expression matched (Kafka 4.1), the
  version of the metadata they were matched against (kafkalog has no metadata log: 0, which a Kafka broker takes as
  one to refresh) and when.
A null value (tombstone) removes what the key names. Topic ids are UUIDs on disk and 22-character URL-safe base64
text in memory (as partition.metadata writes them).
The metadata hash is Kafka 4.1's (group-coordinator Utils.computeTopicHash and computeGroupHash): per topic, XXH3-64
(seed 0) of the stream hash4j writes for `putByte(0) putLong(id's most significant bits) putLong(least) putString(name)
putInt(partitions)` then `putInt(p)` per partition (and its replicas' sorted racks: a log directory has none), where
putLong/putInt are little-endian and putString is the UTF-16LE code units then putInt(their count); the group's is
XXH3-64 of the topics' hashes (putLong each, ordered by topic name), 0 without topics, and a topic that does not exist
counts as none. Hashes are Java longs (signed).
Crash policy: a record is the unit of change; the coordinator appends the records of one heartbeat in one batch, so
a crash keeps all of them or none. On load the coordinator replays them in log order, the last record per key wins.
Thread-safety: stateless functions.
"""
from __future__ import annotations

import functools
import struct
from typing import NamedTuple

import xxhash

from engine.common.errors import CorruptRecordError
from engine.protocol.schema import parse_fields, read_struct, write_struct
from engine.protocol.types import MalformedRequestError, Reader, Writer
from engine.segments.partition_metadata import topic_id_text, topic_uuid

GROUP_EPOCH, PARTITION_METADATA, MEMBER_METADATA, TARGET_EPOCH, TARGET_MEMBER, CURRENT_ASSIGNMENT = 3, 4, 5, 6, 7, 8
REGULAR_EXPRESSION = 16
KINDS = (GROUP_EPOCH, PARTITION_METADATA, MEMBER_METADATA, TARGET_EPOCH, TARGET_MEMBER, CURRENT_ASSIGNMENT,
         REGULAR_EXPRESSION)
_TWO_STRING_KEYS = (MEMBER_METADATA, TARGET_MEMBER, CURRENT_ASSIGNMENT, REGULAR_EXPRESSION)

_TOPIC_PARTITIONS = """
    topic_id uuid 0+
    partitions []int32 0+
"""
_VALUES = {
    GROUP_EPOCH: parse_fields("""
  epoch int32 0+
  metadata_hash int64 0+ tag=0 default=0
"""),
    PARTITION_METADATA: parse_fields("""
  topics [] 0+
    topic_id uuid 0+
    topic_name string 0+
    num_partitions int32 0+
    partition_metadata [] 0+
      partition int32 0+
      racks []string 0+
"""),
    MEMBER_METADATA: parse_fields("""
  instance_id string 0+ null=0+
  rack_id string 0+ null=0+
  client_id string 0+
  client_host string 0+
  subscribed_topic_names []string 0+
  subscribed_topic_regex string 0+ null=0+
  rebalance_timeout_ms int32 0+ default=-1
  server_assignor string 0+ null=0+
  classic_member_metadata {} 0+ null=0+ tag=0 default=null
    session_timeout_ms int32 0+
    supported_protocols [] 0+
      name string 0+
      metadata bytes 0+
"""),
    TARGET_EPOCH: parse_fields("""
  assignment_epoch int32 0+
"""),
    TARGET_MEMBER: parse_fields("""
  topic_partitions [] 0+""" + _TOPIC_PARTITIONS),
    REGULAR_EXPRESSION: parse_fields("""
  topics []string 0+
  version int64 0+
  timestamp int64 0+
"""),
    CURRENT_ASSIGNMENT: parse_fields("""
  member_epoch int32 0+
  previous_member_epoch int32 0+
  state int8 0+
  assigned_partitions [] 0+""" + _TOPIC_PARTITIONS + """  partitions_pending_revocation [] 0+""" +
                                     _TOPIC_PARTITIONS),
}


class Record(NamedTuple):
    """One consumer group record: its kind (the key type), group, member ("" for the group-wide kinds; for
    REGULAR_EXPRESSION, the expression) and value (a dict of the value's fields; None for a tombstone)."""

    kind: int
    group_id: str
    member_id: str
    value: dict | None


def partitions_out(parts: dict[str, frozenset[int]]) -> list[dict]:
    """A {topic id: partitions} map as the records' (and the heartbeat's) TopicPartitions list."""
    return [{"topic_id": topic_uuid(t), "partitions": sorted(ps)} for t, ps in sorted(parts.items()) if ps]


def partitions_in(rows: list[dict]) -> dict[str, frozenset[int]]:
    out: dict[str, frozenset[int]] = {}
    for row in rows:
        t = topic_id_text(row["topic_id"])
        out[t] = out.get(t, frozenset()) | frozenset(row["partitions"])
    return out


def _signed(h: int) -> int:
    return h - (1 << 64) if h >= 1 << 63 else h


TOPIC_HASH_MAGIC = b"\x00"


@functools.lru_cache(maxsize=4096)
def topic_hash(topic_id: str, name: str, partitions: int) -> int:
    """Kafka 4.1's hash of one topic (its id as partition.metadata's text, name, partition count; no racks),
    remembered as Kafka's topicHashCache does (a heartbeat computes the group's hash every time here)."""
    chars = name.encode("utf-16-le")
    uid = topic_uuid(topic_id).int
    data = TOPIC_HASH_MAGIC + struct.pack("<QQ", uid >> 64, uid & ((1 << 64) - 1)) + chars + \
        struct.pack(f"<ii{partitions}i", len(chars) // 2, partitions, *range(partitions))
    return _signed(xxhash.xxh3_64_intdigest(data))


def metadata_hash(metadata: dict[str, tuple[str, int]]) -> int:
    """Kafka 4.1's group metadata hash of the subscribed topics that exist ({name: (topic id, partitions)})."""
    if not metadata:
        return 0
    hashes = [topic_hash(tid, name, n) for name, (tid, n) in sorted(metadata.items())]
    return _signed(xxhash.xxh3_64_intdigest(struct.pack(f"<{len(hashes)}q", *hashes)))


def encode(record: Record) -> tuple[bytes, bytes | None]:
    """The record's key and value bytes."""
    w = Writer()
    w.int16(record.kind)
    w.string(record.group_id, False)
    if record.kind in _TWO_STRING_KEYS:
        w.string(record.member_id, False)
    key = w.getvalue()
    if record.value is None:
        return key, None
    w = Writer()
    w.int16(0)
    write_struct(w, _VALUES[record.kind], record.value, 0, True)
    return key, w.getvalue()


def is_consumer_group_key(data) -> bool:
    return len(data) >= 2 and int.from_bytes(bytes(data[:2]), "big") in KINDS


def decode(key, value) -> Record:
    """A record from its key and value bytes (CorruptRecordError when they do not parse)."""
    try:
        r = Reader(key)
        kind = r.int16()
        group_id = r.string(False)
        member_id = r.string(False) if kind in _TWO_STRING_KEYS else ""
        if kind not in KINDS or group_id is None or member_id is None:
            raise MalformedRequestError(f"key type {kind}")
        if value is None:
            return Record(kind, group_id, member_id, None)
        r = Reader(value)
        version = r.int16()
        if version != 0:
            raise MalformedRequestError(f"value version {version}")
        return Record(kind, group_id, member_id, read_struct(r, _VALUES[kind], 0, True))
    except (MalformedRequestError, ValueError, IndexError) as exc:
        raise CorruptRecordError(f"__consumer_offsets: a consumer group record that does not parse: {exc}") from None
