"""The share groups' state records in `__share_group_state` (KIP-932's share coordinator records, as Kafka 4.1+
writes them): the delivery state of each share-partition (engine.groups.share_partition).

Byte layout: a key is `int16 type | GroupId string | TopicId uuid | Partition int32` (not flexible), type 0 for
ShareSnapshot (the whole state) and 1 for ShareUpdate (a change to it); a value is `int16 version (0) | fields`
(flexible: compact strings and arrays, tagged fields): ShareSnapshotValue is SnapshotEpoch int32, StateEpoch int32,
LeaderEpoch int32, StartOffset int64, CreateTimestamp int64, WriteTimestamp int64, StateBatches [FirstOffset int64,
LastOffset int64, DeliveryState int8 (0 available, 2 acknowledged, 4 archived), DeliveryCount int16];
ShareUpdateValue is SnapshotEpoch int32, LeaderEpoch int32, StartOffset int64 (-1 leaves it as it was),
StateBatches. A null value (tombstone) deletes the share-partition's state. Kafka 4.0's early-access share groups
wrote other bytes under the same version 0 (SnapshotEpoch uint16, no timestamps), which Kafka 4.1+ cannot read: a
value that does not parse as 4.1's is read as 4.0's (so directories written then, by Kafka 4.0 or an earlier
kafkalog, keep their state); kafkalog writes 4.1's alone.
kafkalog writes a snapshot for every change (so a reader needs no update to know a state) and reads both kinds. The
record of a share-partition lives in partition abs(hash("group:topicId:partition")) % 50 of the topic (Java's
String.hashCode over the share coordinator's key).
ShareStateStore reads and writes them through an engine's internal topics (created on first write): one batch per
`__share_group_state` partition a write touches, appended with acks='all'; each snapshot of a share-partition carries
the next snapshot epoch and the time its state was first written.
Crash policy: a record is the unit of change; on load every partition is replayed in log order (the last snapshot of a
key, then its later updates, win).
Thread-safety: the functions are stateless; a ShareStateStore is its coordinator's, called under its lock.
"""
from __future__ import annotations

from typing import NamedTuple

from engine.common.errors import CorruptRecordError
from engine.groups.group_coordinator import InternalLog  # (what a coordinator's storage uses of an engine)
from engine.groups.share_partition import StateBatch
from engine.protocol.schema import parse_fields, read_struct, write_struct
from engine.log.unified_log import COORDINATOR
from engine.protocol.types import MalformedRequestError, Reader, Writer
from engine.record import codec
from engine.record.schema import partition_for
from engine.segments.partition_metadata import topic_id_text, topic_uuid

TOPIC = "__share_group_state"
PARTITIONS = 50  # share.coordinator.state.topic.num.partitions
SNAPSHOT, UPDATE = 0, 1

_BATCHES = """
  state_batches [] 0+
    first_offset int64 0+
    last_offset int64 0+
    delivery_state int8 0+
    delivery_count int16 0+
"""


def _values(epoch: str, timestamps: bool) -> dict[int, list]:
    """Both kinds' value fields, given SnapshotEpoch's type and whether a snapshot carries its timestamps."""
    start = "\n  leader_epoch int32 0+\n  start_offset int64 0+"
    times = "\n  create_timestamp int64 0+\n  write_timestamp int64 0+" if timestamps else ""
    return {SNAPSHOT: parse_fields(f"\n  snapshot_epoch {epoch} 0+\n  state_epoch int32 0+{start}{times}{_BATCHES}"),
            UPDATE: parse_fields(f"\n  snapshot_epoch {epoch} 0+{start}{_BATCHES}")}


_VALUES = _values("int32", True)  # Kafka 4.1+'s values (what kafkalog writes)
_EARLY_ACCESS_VALUES = _values("uint16", False)  # Kafka 4.0's (read only)


class ShareState(NamedTuple):
    """One record: its kind (SNAPSHOT or UPDATE), the share-partition it is of (topic id as partition.metadata's
    text), and its value (None for a tombstone)."""

    kind: int
    group_id: str
    topic_id: str
    partition: int
    snapshot_epoch: int = 0
    state_epoch: int = 0
    start_offset: int = -1
    batches: tuple[StateBatch, ...] = ()
    tombstone: bool = False
    create_timestamp: int = -1  # (a snapshot's: when its state was first written, ms; -1 unknown)
    write_timestamp: int = -1


def partition(group_id: str, topic_id: str, partition_index: int) -> int:
    """The `__share_group_state` partition holding this share-partition's records."""
    return partition_for(f"{group_id}:{topic_id}:{partition_index}", PARTITIONS)


def encode(s: ShareState) -> tuple[bytes, bytes | None]:
    """The record's key and value bytes."""
    w = Writer()
    w.int16(s.kind)
    w.string(s.group_id, False)
    w.uuid(topic_uuid(s.topic_id))
    w.int32(s.partition)
    key = w.getvalue()
    if s.tombstone:
        return key, None
    w = Writer()
    w.int16(0)
    value = {"snapshot_epoch": s.snapshot_epoch, "state_epoch": s.state_epoch, "leader_epoch": 0,
             "start_offset": s.start_offset, "create_timestamp": s.create_timestamp,
             "write_timestamp": s.write_timestamp,
             "state_batches": [{"first_offset": b.first_offset, "last_offset": b.last_offset,
                                "delivery_state": b.state, "delivery_count": b.delivery_count} for b in s.batches]}
    write_struct(w, _VALUES[s.kind], value, 0, True)
    return key, w.getvalue()


def decode(key, value) -> ShareState:
    """A record from its key and value bytes (CorruptRecordError when they do not parse)."""
    try:
        r = Reader(bytes(key))
        kind = r.int16()
        if kind not in _VALUES:
            raise MalformedRequestError(f"key version {kind}")
        group_id, topic, index = r.string(False), topic_id_text(r.uuid()), r.int32()
        if group_id is None:
            raise MalformedRequestError("a null group id")
        if value is None:
            return ShareState(kind, group_id, topic, index, tombstone=True)
        v = _value(bytes(value), kind)
        return ShareState(kind, group_id, topic, index, v["snapshot_epoch"], v.get("state_epoch", 0),
                          v["start_offset"], tuple(StateBatch(b["first_offset"], b["last_offset"],
                                                              b["delivery_state"], b["delivery_count"])
                                                   for b in v["state_batches"]),
                          create_timestamp=v.get("create_timestamp", -1), write_timestamp=v.get("write_timestamp", -1))
    except (MalformedRequestError, ValueError, IndexError) as exc:
        raise CorruptRecordError(f"{TOPIC}: a share state record that does not parse: {exc}") from None


def _value(data: bytes, kind: int) -> dict:
    """A value's fields: Kafka 4.1+'s layout, else Kafka 4.0's (each must parse to the last byte)."""
    why = None
    for layouts in (_VALUES, _EARLY_ACCESS_VALUES):
        r = Reader(data)
        try:
            version = r.int16()
            if version != 0:
                raise MalformedRequestError(f"value version {version}")
            v = read_struct(r, layouts[kind], 0, True)
            if r.remaining():
                raise MalformedRequestError(f"{r.remaining()} bytes after the value")
            return v
        except (MalformedRequestError, ValueError, IndexError) as exc:
            why = why or exc
    raise MalformedRequestError(str(why))


class ShareStateStore:
    """`__share_group_state` of one engine (see the module docstring)."""

    def __init__(self, internal: InternalLog) -> None:
        self._internal = internal
        self._epochs: dict[tuple[str, str, int], int] = {}  # each share-partition's last snapshot epoch
        self._created: dict[tuple[str, str, int], int] = {}  # when its state was first written

    def load(self) -> dict[tuple[str, str, int], ShareState]:
        """Each share-partition's last state, by (group, topic id, partition)."""
        states: dict[tuple[str, str, int], ShareState] = {}
        for p in range(self._internal.internal_topics().get(TOPIC, 0)):
            lg = self._internal.internal_partition(TOPIC, p).log
            for _, batch in lg.batches(lg.log_start_offset, lg.high_watermark):
                if batch.is_control:
                    continue
                for rec in batch.records():
                    if rec.key is None:
                        continue
                    s = decode(rec.key, rec.value)
                    key = (s.group_id, s.topic_id, s.partition)
                    if s.tombstone:
                        states.pop(key, None)
                    elif s.kind == SNAPSHOT or key not in states:
                        states[key] = s
                    else:
                        states[key] = updated(states[key], s)
        self._epochs = {k: s.snapshot_epoch for k, s in states.items()}
        self._created = {k: s.create_timestamp for k, s in states.items() if s.create_timestamp >= 0}
        return states

    def write(self, states: list[tuple[str, str, int, int, list[StateBatch]]], now: int) -> None:
        """Snapshots of share-partitions: (group, topic id, partition, start offset, state batches) each."""
        rows: dict[int, list] = {}
        for group_id, topic_id, index, start, batches in states:
            key = (group_id, topic_id, index)
            epoch = self._epochs[key] = (self._epochs.get(key, -1) + 1) & 0x7FFFFFFF
            created = self._created.setdefault(key, now)
            s = ShareState(SNAPSHOT, group_id, topic_id, index, epoch, 0, start, tuple(batches),
                           create_timestamp=created, write_timestamp=now)
            rows.setdefault(partition(group_id, topic_id, index), []).append(encode(s))
        self._append(rows, now)

    def delete(self, keys: list[tuple[str, str, int]], now: int) -> None:
        """Tombstones for the state of share-partitions (group, topic id, partition)."""
        rows: dict[int, list] = {}
        for group_id, topic_id, index in keys:
            self._epochs.pop((group_id, topic_id, index), None)
            self._created.pop((group_id, topic_id, index), None)
            tomb = ShareState(SNAPSHOT, group_id, topic_id, index, tombstone=True)
            rows.setdefault(partition(group_id, topic_id, index), []).append(encode(tomb))
        self._append(rows, now)

    def _append(self, rows: dict[int, list], now: int) -> None:
        if rows:
            self._internal.ensure_internal_topic(TOPIC)
        for p, kvs in sorted(rows.items()):
            self._internal.append_internal(TOPIC, p, codec.encode_batch([(k, v, None, now) for k, v in kvs]),
                                           origin=COORDINATOR)


def updated(snapshot: ShareState, update: ShareState) -> ShareState:
    """A snapshot with a ShareUpdate applied: its batches replace the offsets they name."""
    pieces = list(snapshot.batches)
    for u in update.batches:
        kept = []
        for b in pieces:
            if u.last_offset < b.first_offset or u.first_offset > b.last_offset:
                kept.append(b)
                continue
            if b.first_offset < u.first_offset:
                kept.append(b._replace(last_offset=u.first_offset - 1))
            if b.last_offset > u.last_offset:
                kept.append(b._replace(first_offset=u.last_offset + 1))
        pieces = kept + [u]
    start = update.start_offset if update.start_offset >= 0 else snapshot.start_offset
    return snapshot._replace(start_offset=start, snapshot_epoch=update.snapshot_epoch,
                             batches=tuple(sorted(b for b in pieces if b.last_offset >= start)))
