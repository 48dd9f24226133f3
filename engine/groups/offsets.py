"""Committed offsets in `__consumer_offsets` (Kafka's GroupMetadataManager, its offset half).

Byte layout (engine.record.schema encodings): key = `int16 version | group string | topic string | partition
int32` (versions 0 and 1 are offset commits; kafkalog writes 1); value = `int16 version | offset int64 |
leaderEpoch int32 (v3+) | metadata string | commitTimestamp int64 | expireTimestamp int64 (v1 only)`, version 4
flexible; kafkalog writes 3. Key version 2 is a group's metadata and 3+ are newer group records: the offset
view skips them. A null value is a tombstone. Partition = abs(javaHashCode(group)) % 50.
Transactional commits (TxnOffsetCommit) are written as transactional batches under the producer's id and epoch
and held pending per producer until its marker: COMMIT applies them, ABORT drops them.
Crash policy: the log is the truth; `load` replays it up to the high watermark.
Thread-safety: the store's lock guards its maps; writers append through the engine.
"""
from __future__ import annotations

import threading
from typing import Iterable

from engine.common.errors import CorruptRecordError, InvalidConfigurationError
from engine.common.structs import OffsetAndMetadata, TopicPartition
from engine.record import batch_format as bf
from engine.record.schema import Reader, Writer, partition_for

TOPIC = "__consumer_offsets"
PARTITIONS = 50  # offsets.topic.num.partitions
KEY_VERSION, VALUE_VERSION = 1, 3


def committed_map(offsets, exists) -> dict[TopicPartition, OffsetAndMetadata]:
    """`offsets` ({TopicPartition: OffsetAndMetadata or int}) checked as a commit takes them; `exists(topic,
    partition)` raises the typed error for a partition that does not exist."""
    if not isinstance(offsets, dict):
        raise InvalidConfigurationError("offsets must be a dict of TopicPartition to OffsetAndMetadata or int")
    out = {}
    for tp, om in offsets.items():
        om = OffsetAndMetadata(om) if type(om) is int else om
        if not isinstance(om, OffsetAndMetadata) or type(om.offset) is not int or om.offset < 0:
            raise InvalidConfigurationError(f"offset for {tp} must be an int >= 0 or an OffsetAndMetadata, got {om!r}")
        tp = TopicPartition(*tp)
        exists(tp.topic, tp.partition)
        out[tp] = om
    return out


def partition(group_id: str) -> int:
    return partition_for(group_id, PARTITIONS)


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


def encode_value(value: OffsetAndMetadata, commit_timestamp: int) -> bytes:
    return (Writer().int(16, VALUE_VERSION).int(64, value.offset).int(32, value.leader_epoch)
            .string(value.metadata).int(64, commit_timestamp).done())


def decode_value(data) -> OffsetAndMetadata:
    r = Reader(data, "offset commit value")
    version = r.int(16, "value version")
    if not 0 <= version <= 4:
        raise CorruptRecordError(f"offset commit value version {version} is not in [0, 4]")
    flexible = version >= 4
    offset = r.int(64, "offset")
    epoch = r.int(32, "leaderEpoch") if version >= 3 else -1
    metadata = r.string("metadata", flexible)
    r.int(64, "commitTimestamp")
    if version == 1:
        r.int(64, "expireTimestamp")
    if flexible:
        r.tagged()
    r.end()
    return OffsetAndMetadata(offset, metadata, epoch)


class OffsetStore:
    """Committed offsets by group, with transactional commits pending per (partition, producer id)."""

    def __init__(self) -> None:
        self._committed: dict[str, dict[TopicPartition, OffsetAndMetadata]] = {}
        self._pending: dict[tuple[int, int], dict[tuple[str, TopicPartition], OffsetAndMetadata | None]] = {}
        self._lock = threading.Lock()

    def _apply(self, entries: Iterable[tuple[tuple[str, TopicPartition], OffsetAndMetadata | None]]) -> None:
        for (group, tp), value in entries:
            offsets = self._committed.setdefault(group, {})
            if value is None:
                offsets.pop(tp, None)
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
                found = decode_key(rec.key) if rec.key is not None else None
                if found is not None:
                    entries.append((found, None if rec.value is None else decode_value(rec.value)))
            if batch.is_transactional:
                self._pending.setdefault((log_partition, batch.producer_id), {}).update(entries)
            else:
                self._apply(entries)

    def _complete(self, log_partition: int, producer_id: int, commit: bool) -> None:
        pending = self._pending.pop((log_partition, producer_id), {})
        if commit:
            self._apply(pending.items())

    def complete(self, log_partition: int, producer_id: int, commit: bool) -> None:
        """A marker for `producer_id` was written to `__consumer_offsets`-`log_partition`."""
        with self._lock:
            self._complete(log_partition, producer_id, commit)

    def committed(self, group_id: str, tp: TopicPartition) -> OffsetAndMetadata | None:
        with self._lock:
            return self._committed.get(group_id, {}).get(tp)
