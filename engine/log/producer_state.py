"""Producer state of one partition (Kafka's ProducerStateManager, ProducerStateEntry, BatchMetadata).

Per producer id: its epoch, its last 5 batches' (lastSeq, lastOffset, offsetDelta, timestamp), the last
timestamp, the coordinator epoch and the first offset of its open transaction. A client append is
checked against it (kafka-format.md §10.1): a duplicate of any retained batch is reported (and not
appended), an older epoch is InvalidProducerEpochError, a sequence gap is OutOfOrderSequenceError; a
transaction marker with an older producer epoch is InvalidProducerEpochError, with an older coordinator
epoch TransactionCoordinatorFencedError.
Transactions (§10.2): the first transactional batch of a producer opens its transaction; a marker closes it
as a `CompletedTxn`, which stays "unreplicated" until the high watermark passes its marker. The first
unstable offset is the smallest first offset of an open or unreplicated transaction; the last stable offset
(the log's) is that, capped by the HW.
The state covers offsets below `map_end_offset`; `<N>.snapshot` files (engine.log.producer_snapshot) record it
at segment rolls and on close, and it is rebuilt by loading the newest usable snapshot and replaying
the log after it.
Crash policy: a snapshot is written in place and fsynced, as Kafka writes it (no tmp file and rename): a crash
while writing can leave it torn, which its CRC shows; a corrupt one is deleted and the next older one is used; with
none, state is rebuilt from the log (or, after a clean shutdown, assumed empty, as Kafka). A clean shutdown's
marker is written only after the close's snapshots are durable, so a torn one is never read as a clean close's.
Thread-safety: none of its own; the owning log calls it under its lock.
"""
from __future__ import annotations

import logging
import os
import struct
from collections import deque
from typing import NamedTuple, Sequence

from engine.common.clock import Clock
from engine.common.errors import (
    InvalidProducerEpochError,
    InvalidTxnStateError,
    OutOfOrderSequenceError,
    TransactionCoordinatorFencedError,
)
from engine.record import batch_format as bf
from engine.segments import names
from engine.segments.fs import FileSystem
from engine.log import producer_snapshot
from engine.log.producer_snapshot import CorruptSnapshotError, ProducerSnapshotEntry

log = logging.getLogger("kafkalog.producer_state")


def _log_repair(what: str) -> None:
    """A repair of the producer state, where no log's recovery report takes them."""
    log.warning("%s", what)


NUM_BATCHES_TO_RETAIN = 5
NO_EPOCH = -1
SNAPSHOT = ".snapshot"
_PRODUCER_ID = struct.Struct(">q")


class CompletedTxn(NamedTuple):
    """A transaction closed by its marker: [first_offset, last_offset], the marker at last_offset."""

    producer_id: int
    first_offset: int
    last_offset: int
    is_aborted: bool


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
    def __init__(self, fs: FileSystem, directory: str, clock: Clock, expiration_ms: int,
                 listed: Sequence[str] | None = None) -> None:
        """The state of the log in `directory` (empty until `load`); `listed`: the directory's files, as just
        listed (its snapshots are taken from there)."""
        self.fs, self.dir, self.clock, self.expiration_ms = fs, directory, clock, expiration_ms
        self.producers: dict[int, ProducerStateEntry] = {}
        self.map_end_offset = 0
        self.last_snapshot_offset = -1
        self.unreplicated: list[CompletedTxn] = []  # closed, their marker not yet below the HW
        self.on_repair = _log_repair  # the owning log's recovery report takes these
        self._snapshots: tuple[int, ...] | None = None  # the snapshot files' offsets as last listed (None: list again)
        if listed is not None:
            self._snapshots = self._snapshot_offsets(listed)

    # --- checks and updates ---------------------------------------------------------------------
    def find_duplicate(self, batch) -> BatchMetadata | None:
        """The retained batch that `batch` (a RecordBatch header) repeats, if any."""
        entry = self.producers.get(batch.producer_id)
        if entry is None:
            return None
        return entry.find_duplicate(batch.producer_epoch, batch.base_sequence, batch.last_sequence)

    def next_batch(self, data) -> tuple[int, int, int, bool] | None:
        """What the one batch in `data` must carry to pass every check of a client append unchanged: (its producer
        id, that producer's epoch, the sequence after its last batch, whether its transaction is open). None when
        `data` has no producer id or its producer's next batch needs the full checks (an unknown producer, one
        without retained batches)."""
        try:
            producer_id = _PRODUCER_ID.unpack_from(data, bf.PRODUCER_ID_OFFSET)[0]
        except (struct.error, TypeError):
            return None
        entry = self.producers.get(producer_id) if producer_id >= 0 else None
        if entry is None or entry.epoch == NO_EPOCH or not entry.batches:
            return None
        return producer_id, entry.epoch, bf.increment_sequence(entry.last_seq, 1), entry.txn_first_offset >= 0

    def append_next(self, expected: tuple[int, int, int, bool], first_offset: int, last_offset: int,
                    timestamp: int) -> None:
        """`update` for a batch appended at [first_offset, last_offset] that carried what `next_batch` expected."""
        producer_id, _, base_sequence, _ = expected
        entry = self.producers[producer_id]
        delta = last_offset - first_offset
        entry.batches.append(BatchMetadata(bf.increment_sequence(base_sequence, delta), last_offset, delta, timestamp))
        entry.last_timestamp = timestamp

    def validate(self, batch, source: str | None = None, check_sequence: bool = True) -> None:
        """Kafka's checks for an append: producer epoch, sequence (a client's; a coordinator's batches carry
        none that count), transaction state."""
        entry = self.producers.get(batch.producer_id)
        if entry is None:
            return  # an unknown producer may start at any sequence (its state may have expired)
        where = {"file": source, "offset": batch.base_offset}
        if batch.producer_epoch < entry.epoch:
            raise InvalidProducerEpochError(
                f"producer {batch.producer_id} epoch {batch.producer_epoch} is older than {entry.epoch}", **where)
        first = batch.base_sequence
        if check_sequence and batch.producer_epoch != entry.epoch:
            if first != 0 and entry.epoch != NO_EPOCH:
                raise OutOfOrderSequenceError(
                    f"producer {batch.producer_id}: new epoch {batch.producer_epoch} must start at sequence 0, "
                    f"got {first}", **where)
        elif check_sequence and entry.epoch != NO_EPOCH and entry.batches and not _in_sequence(entry.last_seq,
                                                                                                first):
            raise OutOfOrderSequenceError(
                f"producer {batch.producer_id}: out of order sequence {first}, expected {entry.last_seq + 1}",
                **where)
        if not batch.is_transactional and entry.txn_first_offset >= 0:
            raise InvalidTxnStateError(
                f"producer {batch.producer_id} sent a non-transactional batch while its transaction is open", **where)

    def validate_marker(self, producer_id: int, producer_epoch: int, coordinator_epoch: int,
                        source: str | None = None) -> None:
        """A coordinator's marker: never from an older producer epoch or an older coordinator."""
        entry = self.producers.get(producer_id)
        if entry is None:
            return
        if producer_epoch < entry.epoch:
            raise InvalidProducerEpochError(f"marker for producer {producer_id} has epoch {producer_epoch}, older "
                                            f"than {entry.epoch}", file=source)
        if coordinator_epoch < entry.coordinator_epoch:
            raise TransactionCoordinatorFencedError(
                f"marker for producer {producer_id} from coordinator epoch {coordinator_epoch}, older than "
                f"{entry.coordinator_epoch}", file=source)

    def update(self, batch, first_offset: int, timestamp: int,
               marker: tuple[int, int | None] | None = None) -> CompletedTxn | None:
        """Record a batch appended at [first_offset, first_offset + lastOffsetDelta]; a control batch's
        `marker` is its (control type, coordinator epoch). Returns the transaction a marker closed."""
        if not batch.is_control:
            self.update_data(batch.producer_id, batch.producer_epoch, batch.base_sequence, first_offset,
                             batch.last_offset_delta, timestamp, batch.is_transactional)
            return None
        entry = self._entry(batch.producer_id, batch.producer_epoch)
        completed = None
        ctype, coordinator_epoch = marker if marker is not None else (-1, None)
        if ctype in (bf.ABORT, bf.COMMIT):
            if coordinator_epoch is not None:
                entry.coordinator_epoch = coordinator_epoch
            if entry.txn_first_offset >= 0:
                completed = CompletedTxn(batch.producer_id, entry.txn_first_offset, first_offset, ctype == bf.ABORT)
                self.unreplicated.append(completed)
            entry.txn_first_offset = -1
        entry.last_timestamp = timestamp
        return completed

    def update_data(self, producer_id: int, producer_epoch: int, base_sequence: int, first_offset: int, delta: int,
                    timestamp: int, transactional: bool) -> None:
        """`update` for a data batch (not a control batch) of these header fields (a follower's native append
        calls this)."""
        entry = self._entry(producer_id, producer_epoch)
        entry.batches.append(BatchMetadata(bf.increment_sequence(base_sequence, delta), first_offset + delta, delta,
                                           timestamp))
        if transactional and entry.txn_first_offset < 0:
            entry.txn_first_offset = first_offset
        entry.last_timestamp = timestamp

    def _entry(self, producer_id: int, producer_epoch: int) -> ProducerStateEntry:
        """The producer's entry (made when new), its retained batches dropped when `producer_epoch` is a new one."""
        entry = self.producers.get(producer_id)
        if entry is None:
            entry = self.producers[producer_id] = ProducerStateEntry(producer_id)
        if producer_epoch != entry.epoch:
            entry.batches.clear()
            entry.epoch = producer_epoch
        return entry

    # --- stability ----------------------------------------------------------------------------------
    def first_unstable_offset(self) -> int | None:
        """The smallest first offset of an open transaction or of a closed one not yet replicated."""
        found = [e.txn_first_offset for e in list(self.producers.values()) if e.txn_first_offset >= 0]
        found += [t.first_offset for t in list(self.unreplicated)]
        return min(found) if found else None

    def on_high_watermark(self, high_watermark: int) -> None:
        """Closed transactions whose marker is below the HW are stable."""
        if self.unreplicated and self.unreplicated[0].last_offset < high_watermark:
            self.unreplicated = [t for t in self.unreplicated if t.last_offset >= high_watermark]

    def last_stable_offset_for(self, completed: CompletedTxn) -> int:
        """The LSO a `.txnindex` entry records for an aborted transaction: the first offset of the earliest
        other open transaction, or one past its marker (Kafka's lastStableOffset(completedTxn))."""
        others = [e.txn_first_offset for pid, e in self.producers.items()
                  if e.txn_first_offset >= 0 and pid != completed.producer_id]
        return min(others) if others else completed.last_offset + 1

    def ongoing(self) -> dict[int, ProducerStateEntry]:
        """Producers with an open transaction, by producer id."""
        return {pid: e for pid, e in self.producers.items() if e.txn_first_offset >= 0}

    def remove_expired(self, now_ms: int) -> int:
        """Forget producers idle for producer.id.expiration.ms without an open transaction."""
        expired = [pid for pid, e in self.producers.items()
                   if e.txn_first_offset < 0 and now_ms - e.last_timestamp >= self.expiration_ms]
        for pid in expired:
            del self.producers[pid]
        return len(expired)

    # --- snapshots --------------------------------------------------------------------------------
    def snapshot_offsets(self) -> list[int]:
        """The offsets of the snapshot files, ascending (the directory is listed once, and again after this manager
        writes or deletes a snapshot: a load asks several times and changes nothing in between)."""
        if self._snapshots is None:
            self._snapshots = self._snapshot_offsets(self.fs.listdir(self.dir))
        return list(self._snapshots)

    @staticmethod
    def _snapshot_offsets(files: Sequence[str]) -> tuple[int, ...]:
        return tuple(sorted(names.offset_from_file_name(f) for f in files if f.endswith(SNAPSHOT)))

    def _path(self, offset: int) -> str:
        return os.path.join(self.dir, names.file_name(offset, SNAPSHOT))

    def take_snapshot(self) -> bool:
        """Write `<map_end_offset>.snapshot` unless one at that offset exists already."""
        if self.map_end_offset <= self.last_snapshot_offset:
            return False
        data = producer_snapshot.encode([e.snapshot_entry() for e in self.producers.values()])
        self._snapshots = None  # (listed again after a write, whether it failed or not)
        self.fs.write_checked(self._path(self.map_end_offset), data)  # (a torn one fails its CRC: see above)
        self.last_snapshot_offset = self.map_end_offset
        return True

    def delete_snapshot(self, offset: int) -> None:
        path = self._path(offset)
        self._snapshots = None
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
        self.unreplicated = []
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
        # Kafka's: without a snapshot the state starts at the log start, which needs none (a new log writes none)
        self.map_end_offset = self.last_snapshot_offset = log_start
        return None

    def max_producer_id(self) -> int:
        return max(self.producers, default=-1)
