"""Producer state of one partition (Kafka's ProducerStateManager, ProducerStateEntry, BatchMetadata).

Per producer id: its epoch, its last 5 batches' (lastSeq, lastOffset, offsetDelta, timestamp), the last
timestamp, the coordinator epoch and the first offset of its open transaction. A client append is
checked against it (kafka-format.md §10.1): a duplicate of any retained batch is reported (and not
appended), an older epoch is InvalidProducerEpochError, a sequence gap is OutOfOrderSequenceError.
The state covers offsets below `map_end_offset`; `<N>.snapshot` files (txn.producer_snapshot) record it
at segment rolls and on close, and it is rebuilt by loading the newest usable snapshot and replaying
the log after it.
Crash policy: snapshots are written atomically; a corrupt one is deleted and the next older one is
used; with none, state is rebuilt from the log (or, after a clean shutdown, assumed empty, as Kafka).
Thread-safety: none of its own; the owning log calls it under its lock.
"""
from __future__ import annotations

import logging
import os
from collections import deque
from typing import NamedTuple

from engine.common.clock import Clock
from engine.common.errors import InvalidProducerEpochError, InvalidTxnStateError, OutOfOrderSequenceError
from engine.record import batch_format as bf
from segments import names
from segments.fs import FileSystem
from txn import producer_snapshot
from txn.producer_snapshot import CorruptSnapshotError, ProducerSnapshotEntry

log = logging.getLogger("kafkalog.producer_state")

NUM_BATCHES_TO_RETAIN = 5
NO_EPOCH = -1
SNAPSHOT = ".snapshot"


class BatchMetadata(NamedTuple):
    last_seq: int
    last_offset: int
    offset_delta: int
    timestamp: int

    @property
    def first_seq(self) -> int:
        return decrement_sequence(self.last_seq, self.offset_delta)

    @property
    def first_offset(self) -> int:
        return self.last_offset - self.offset_delta


def decrement_sequence(sequence: int, delta: int) -> int:
    """Kafka's DefaultRecordBatch.decrementSequence: sequences wrap below 0 to 2**31-1."""
    return sequence - delta if sequence >= delta else bf.INT32_MAX - (delta - sequence) + 1


class ProducerStateEntry:
    __slots__ = ("producer_id", "epoch", "batches", "coordinator_epoch", "last_timestamp", "txn_first_offset")

    def __init__(self, producer_id: int, epoch: int = NO_EPOCH, coordinator_epoch: int = -1,
                 last_timestamp: int = -1, txn_first_offset: int = -1) -> None:
        self.producer_id, self.epoch, self.coordinator_epoch = producer_id, epoch, coordinator_epoch
        self.last_timestamp, self.txn_first_offset = last_timestamp, txn_first_offset
        self.batches: deque[BatchMetadata] = deque(maxlen=NUM_BATCHES_TO_RETAIN)

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else -1

    def find_duplicate(self, epoch: int, first_seq: int, last_seq: int) -> BatchMetadata | None:
        if epoch != self.epoch:
            return None
        for b in self.batches:
            if b.first_seq == first_seq and b.last_seq == last_seq:
                return b
        return None

    def snapshot_entry(self) -> ProducerSnapshotEntry:
        last = self.batches[-1] if self.batches else BatchMetadata(-1, -1, 0, self.last_timestamp)
        return ProducerSnapshotEntry(self.producer_id, self.epoch, last.last_seq, last.last_offset, last.offset_delta,
                                     self.last_timestamp, self.coordinator_epoch, self.txn_first_offset)


def _in_sequence(last_seq: int, next_seq: int) -> bool:
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == bf.INT32_MAX)


class ProducerStateManager:
    def __init__(self, fs: FileSystem, directory: str, clock: Clock, expiration_ms: int) -> None:
        self.fs, self.dir, self.clock, self.expiration_ms = fs, directory, clock, expiration_ms
        self.producers: dict[int, ProducerStateEntry] = {}
        self.map_end_offset = 0
        self.last_snapshot_offset = -1
        self.on_repair = lambda what: log.warning("%s", what)  # the owning log's recovery report takes these

    # --- checks and updates ---------------------------------------------------------------------
    def find_duplicate(self, batch) -> BatchMetadata | None:
        """The retained batch that `batch` (a RecordBatch header) repeats, if any."""
        entry = self.producers.get(batch.producer_id)
        if entry is None:
            return None
        return entry.find_duplicate(batch.producer_epoch, batch.base_sequence, batch.last_sequence)

    def validate(self, batch, source: str | None = None) -> None:
        """Kafka's checks for a client append: producer epoch, sequence, transaction state."""
        entry = self.producers.get(batch.producer_id)
        if entry is None:
            return  # an unknown producer may start at any sequence (its state may have expired)
        where = {"file": source, "offset": batch.base_offset}
        if batch.producer_epoch < entry.epoch:
            raise InvalidProducerEpochError(
                f"producer {batch.producer_id} epoch {batch.producer_epoch} is older than {entry.epoch}", **where)
        first = batch.base_sequence
        if batch.producer_epoch != entry.epoch:
            if first != 0 and entry.epoch != NO_EPOCH:
                raise OutOfOrderSequenceError(
                    f"producer {batch.producer_id}: new epoch {batch.producer_epoch} must start at sequence 0, "
                    f"got {first}", **where)
        elif entry.epoch != NO_EPOCH and entry.batches and not _in_sequence(entry.last_seq, first):
            raise OutOfOrderSequenceError(
                f"producer {batch.producer_id}: out of order sequence {first}, expected {entry.last_seq + 1}",
                **where)
        if not batch.is_transactional and entry.txn_first_offset >= 0:
            raise InvalidTxnStateError(
                f"producer {batch.producer_id} sent a non-transactional batch while its transaction is open", **where)

    def update(self, batch, first_offset: int, timestamp: int) -> None:
        """Record a data batch appended at [first_offset, first_offset + lastOffsetDelta]."""
        entry = self.producers.get(batch.producer_id)
        if entry is None:
            entry = self.producers[batch.producer_id] = ProducerStateEntry(batch.producer_id)
        if batch.producer_epoch != entry.epoch:
            entry.batches.clear()
            entry.epoch = batch.producer_epoch
        delta = batch.last_offset_delta
        if batch.is_control:
            entry.txn_first_offset = -1
        else:
            entry.batches.append(BatchMetadata(batch.last_sequence, first_offset + delta, delta, timestamp))
            if batch.is_transactional and entry.txn_first_offset < 0:
                entry.txn_first_offset = first_offset
        entry.last_timestamp = timestamp

    def remove_expired(self, now_ms: int) -> int:
        """Forget producers idle for producer.id.expiration.ms without an open transaction."""
        expired = [pid for pid, e in self.producers.items()
                   if e.txn_first_offset < 0 and now_ms - e.last_timestamp >= self.expiration_ms]
        for pid in expired:
            del self.producers[pid]
        return len(expired)

    # --- snapshots --------------------------------------------------------------------------------
    def snapshot_offsets(self) -> list[int]:
        return sorted(names.offset_from_file_name(f) for f in self.fs.listdir(self.dir) if f.endswith(SNAPSHOT))

    def _path(self, offset: int) -> str:
        return os.path.join(self.dir, names.file_name(offset, SNAPSHOT))

    def take_snapshot(self) -> bool:
        """Write `<map_end_offset>.snapshot` unless one at that offset exists already."""
        if self.map_end_offset <= self.last_snapshot_offset:
            return False
        data = producer_snapshot.encode([e.snapshot_entry() for e in self.producers.values()])
        self.fs.atomic_write(self._path(self.map_end_offset), data)
        self.last_snapshot_offset = self.map_end_offset
        return True

    def delete_snapshot(self, offset: int) -> None:
        path = self._path(offset)
        if self.fs.exists(path):
            self.fs.remove(path)

    def remove_stray_snapshots(self, segment_bases: list[int]) -> None:
        """Delete snapshots not at a segment base, except the newest one past the last base (clean close)."""
        offsets = self.snapshot_offsets()
        keep = set(segment_bases)
        if offsets and offsets[-1] > max(segment_bases):
            keep.add(offsets[-1])
        for off in offsets:
            if off not in keep:
                self.delete_snapshot(off)

    def load(self, log_start: int, log_end: int) -> int | None:
        """Reset to the newest usable snapshot in (log_start, log_end]; its offset, or None if there is none.

        Snapshots above `log_end` or at/below `log_start` are deleted, as are corrupt ones."""
        self.producers = {}
        self.last_snapshot_offset = -1
        for off in self.snapshot_offsets():
            if off > log_end or off <= log_start:
                self.delete_snapshot(off)
        for off in reversed(self.snapshot_offsets()):
            path = self._path(off)
            try:
                with self.fs.open(path, "rb") as f:
                    entries = producer_snapshot.decode(f.read(), path)
            except CorruptSnapshotError as exc:
                self.on_repair(f"deleted a corrupt producer snapshot: {exc}")
                self.delete_snapshot(off)
                continue
            now = self.clock.time_ms()
            for e in entries:
                if e.current_txn_first_offset < 0 and now - e.timestamp >= self.expiration_ms:
                    continue
                entry = ProducerStateEntry(e.producer_id, e.producer_epoch, e.coordinator_epoch, e.timestamp,
                                           e.current_txn_first_offset)
                if e.last_sequence >= 0:
                    entry.batches.append(BatchMetadata(e.last_sequence, e.last_offset, e.offset_delta, e.timestamp))
                self.producers[e.producer_id] = entry
            self.map_end_offset = self.last_snapshot_offset = off
            return off
        self.map_end_offset = log_start
        return None

    def max_producer_id(self) -> int:
        return max(self.producers, default=-1)
