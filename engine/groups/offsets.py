"""Committed offsets in `__consumer_offsets` (Kafka's GroupMetadataManager, its offset half).

Byte layout (engine.record.schema encodings): key = `int16 version | group string | topic string | partition
int32` (versions 0 and 1 are offset commits; kafkalog writes 1); value = `int16 version | offset int64 |
leaderEpoch int32 (v3+) | metadata string | commitTimestamp int64 | expireTimestamp int64 (v1 only)`, version 4
flexible; kafkalog writes 3. Key version 2 is a group's metadata and 3+ are newer group records: the offset
view skips them. A null value is a tombstone. Partition = abs(javaHashCode(group)) % 50.
Transactional commits (TxnOffsetCommit) are written as transactional batches under the producer's id and epoch
and held pending per producer until its marker: COMMIT applies them, ABORT drops them. The other records (a
classic group's metadata, key version 2, and the consumer group protocol's, 3 to 8) are handed, key and value, to the
store's `on_group` callback.
Crash policy: the log is the truth; `load` replays it up to the high watermark.
Thread-safety: the store's lock guards its maps; writers append through the engine.
"""
from __future__ import annotations

import functools
import struct
import threading
from typing import Callable, Iterable, NamedTuple

from engine.common.errors import CorruptRecordError, InvalidConfigurationError, OffsetMetadataTooLargeError
from engine.common.structs import OffsetAndMetadata, TopicPartition
from engine.record import batch_format as bf
from engine.record.schema import Reader, Writer, partition_for

TOPIC = "__consumer_offsets"
PARTITIONS = 50  # offsets.topic.num.partitions
METADATA_MAX_BYTES = 4096  # offset.metadata.max.bytes
KEY_VERSION, VALUE_VERSION = 1, 3


class CommitRecord(NamedTuple):
    """A committed offset with the commit's time (offsets expire offsets.retention.minutes after it)."""

    value: OffsetAndMetadata
    commit_timestamp: int
    expire_timestamp: int = -1


def committed_map(offsets, exists) -> dict[TopicPartition, OffsetAndMetadata]:
    """`offsets` ({TopicPartition: OffsetAndMetadata or int}) checked as a commit takes them; `exists(topic,
    partition)` raises the typed error for a partition that does not exist."""
    if not isinstance(offsets, dict):
        raise InvalidConfigurationError("offsets must be a dict of TopicPartition to OffsetAndMetadata or int")
    out = {}
    for tp, om in offsets.items():
        om = OffsetAndMetadata(om) if type(om) is int else om
        if not isinstance(om, OffsetAndMetadata) or type(om.offset) is not int or om.offset < 0 \
                or not isinstance(om.metadata, str) or type(om.leader_epoch) is not int:
            raise InvalidConfigurationError(f"offset for {tp} must be an int >= 0 or an OffsetAndMetadata, got {om!r}")
        if len(om.metadata.encode()) > METADATA_MAX_BYTES:
            raise OffsetMetadataTooLargeError(f"metadata for {tp} is over offset.metadata.max.bytes="
                                              f"{METADATA_MAX_BYTES}")
        tp = TopicPartition(*tp)
        exists(tp.topic, tp.partition)
        out[tp] = om
    return out


@functools.lru_cache(maxsize=4096)
def partition(group_id: str) -> int:
    return partition_for(group_id, PARTITIONS)


@functools.lru_cache(maxsize=65536)  # a group commits the same keys again and again
def encode_key(group_id: str, tp: TopicPartition) -> bytes:
    return Writer().int(16, KEY_VERSION).string(group_id).string(tp.topic).int(32, tp.partition).done()


def decode_key(data) -> tuple[str, TopicPartition] | None:
    """(group, partition) of an offset-commit key; None for the other record kinds of the topic."""
    r = Reader(data, "offset commit key")
    version = r.int(16, "key version")
    if version not in (0, 1):
        if version < 0:
            raise CorruptRecordError(f"__consumer_offsets key version {version}")
        return None
    group, topic, p = r.string("group"), r.string("topic"), r.int(32, "partition")
    r.end()
    return group, TopicPartition(topic, p)


_VALUE_HEAD, _VALUE_TAIL = struct.Struct(">hqih"), struct.Struct(">q")


def encode_value(value: OffsetAndMetadata, commit_timestamp: int) -> bytes:
    metadata = value.metadata.encode()
    return (_VALUE_HEAD.pack(VALUE_VERSION, value.offset, value.leader_epoch, len(metadata)) + metadata
            + _VALUE_TAIL.pack(commit_timestamp))


def decode_value(data) -> OffsetAndMetadata:
    return decode_commit(data).value


def decode_commit(data) -> CommitRecord:
    r = Reader(data, "offset commit value")
    version = r.version(4, "value version")
    flexible = version >= 4
    offset = r.int(64, "offset")
    epoch = r.int(32, "leaderEpoch") if version >= 3 else -1
    metadata = r.string("metadata", flexible)
    commit_timestamp = r.int(64, "commitTimestamp")
    expire_timestamp = r.int(64, "expireTimestamp") if version == 1 else -1
    if flexible:
        r.tagged()
    r.end()
    return CommitRecord(OffsetAndMetadata(offset, metadata, epoch), commit_timestamp, expire_timestamp)


class OffsetStore:
    """Committed offsets by group, with transactional commits pending per (partition, producer id)."""

    def __init__(self, on_group: Callable[[bytes, bytes | None], None] | None = None) -> None:
        self._committed: dict[str, dict[TopicPartition, CommitRecord]] = {}
        self._pending: dict[tuple[int, int], dict[tuple[str, TopicPartition], CommitRecord | None]] = {}
        self._lock = threading.Lock()
        self._on_group = on_group

    def _apply(self, entries: Iterable[tuple[tuple[str, TopicPartition], CommitRecord | None]]) -> None:
        for (group, tp), value in entries:
            offsets = self._committed.setdefault(group, {})
            if value is None:
                offsets.pop(tp, None)
                if not offsets:
                    del self._committed[group]
            else:
                offsets[tp] = value

    def apply_batch(self, log_partition: int, batch, records) -> None:
        """Take one batch of `__consumer_offsets`-`log_partition` (its decoded `records`), in log order."""
        with self._lock:
            if batch.is_control:
                if records and records[0].control_type in (bf.ABORT, bf.COMMIT):
                    self._complete(log_partition, batch.producer_id, records[0].control_type == bf.COMMIT)
                return
            entries = []
            for rec in records:
                if rec.key is None:
                    continue
                found = decode_key(rec.key)
                if found is not None:
                    entries.append((found, None if rec.value is None else decode_commit(rec.value)))
                elif self._on_group is not None and not batch.is_transactional:
                    self._on_group(rec.key, None if rec.value is None else bytes(rec.value))
            if batch.is_transactional:
                self._pending.setdefault((log_partition, batch.producer_id), {}).update(entries)
            else:
                self._apply(entries)

    def put(self, group_id: str, entries: dict[TopicPartition, CommitRecord | None],
              pending_in: tuple[int, int] | None = None) -> None:
        """Take commits (None: a tombstone) just appended to the log; with `pending_in` (the log partition and the
        producer id of a transactional batch) they wait for that transaction's marker."""
        with self._lock:
            items = [((group_id, tp), c) for tp, c in entries.items()]
            if pending_in is None:
                self._apply(items)
            else:
                self._pending.setdefault(pending_in, {}).update(items)

    def _complete(self, log_partition: int, producer_id: int, commit: bool) -> None:
        pending = self._pending.pop((log_partition, producer_id), {})
        if commit:
            self._apply(pending.items())

    def complete(self, log_partition: int, producer_id: int, commit: bool) -> None:
        """A marker for `producer_id` was written to `__consumer_offsets`-`log_partition`."""
        with self._lock:
            self._complete(log_partition, producer_id, commit)

    def committed(self, group_id: str, tps: list[TopicPartition]) -> dict[TopicPartition, OffsetAndMetadata]:
        """The committed offsets of `tps` that the group has (one lock for all)."""
        with self._lock:
            mine = self._committed.get(group_id)
            if not mine:
                return {}
            return {tp: found.value for tp in tps if (found := mine.get(tp)) is not None}

    def offsets(self, group_id: str) -> dict[TopicPartition, CommitRecord]:
        """Every committed offset of the group."""
        with self._lock:
            return dict(self._committed.get(group_id, {}))

    def groups(self) -> list[str]:
        """Groups with committed offsets."""
        with self._lock:
            return sorted(self._committed)

    def has_pending(self, group_id: str) -> bool:
        """Whether an open transaction holds offsets for the group (they must not expire under it)."""
        with self._lock:
            return any(g == group_id for pending in self._pending.values() for g, _ in pending)
