"""One partition's log as the layers above see it (Kafka's UnifiedLog): a LocalLog of segments, the
producer state and the leader-epoch cache, kept in step under one lock.

It owns the offsets a LocalLog does not: the log start offset (first readable; `delete_records` and
retention raise it) and the high watermark (set by the partition above, clamped to [log start, LEO];
retention and `delete_records` never pass it).
Appends: a client's batches are checked against the producer state before anything is written: a
batch that repeats one of its producer's last 5 batches is not appended and the original offsets are
returned (`AppendInfo.duplicate`); an old epoch or a sequence gap raises. Batches from an idempotent
producer must come one per append, as Kafka requires. Leader appends get offsets from the LEO and the
leader epoch; follower appends keep theirs.
Transactions: a marker (`append_marker`, the coordinator's) closes its producer's open transaction; an ABORT
puts `(producer, first offset, marker offset, LSO)` into the active segment's `.txnindex`, on leaders and
followers alike. `last_stable_offset` is the first unstable offset (engine.log.producer_state) capped by the HW, and
`collect_aborted` answers a read_committed fetch with the aborted transactions it overlaps (kafka-format.md §10).
Each change to a fetch bound (the HW, the LSO, the log start, a truncation) bumps `engine.common.changes.LOGS`
once made: a consumer that found nothing new skips its next look until the count moved. An internal topic's log
(named by its directory) leaves the count alone: no consumer reads one, and a group's every commit and rebalance
moves the HW of `__consumer_offsets`, which would send every idle consumer of the process looking again.
On-disk: the segments (segments.local_log), `<offset>.snapshot` files (engine.log.producer_state: written
at every roll, up to the new segment's base, and on close, up to the log end; deleted with their
segment) and `leader-epoch-checkpoint` (segments.leader_epoch_checkpoint).
Crash policy: on open the LocalLog is recovered (segments.log_loader); leader epochs at or past the log
end, or before its start, are dropped; then the producer state and the leader epochs are rebuilt from the batches
as engine.log.log_rebuild says (the newest usable snapshot plus a replay of the log after it; epochs checked against the
batch headers).
An instance is always a loaded log: a directory of many partitions defers loading each one to its first use through
the log manager's slots (engine.log.log_slot), which make the instance then.
Thread-safety: appends, roll, flush, truncation and retention hold the log's lock; reads take none
(the segment set hands out a consistent list).
"""
from __future__ import annotations

import os
from contextlib import contextmanager
from typing import NamedTuple, Sequence

from engine.common.changes import LOGS
from engine.common.clock import Clock
from engine.common.errors import (
    CleaningAbortedError,
    CorruptRecordError,
    InvalidOffsetError,
    InvalidRecordError,
    KafkaStorageError,
    OffsetOutOfRangeError,
    RecordBatchTooLargeError,
    RecordTooLargeError,
)
from engine.record import batch_format as bf
from engine.record import codec, twins
from engine.segments import segment_appender
from engine.segments.cleaner import ActiveProducer
from engine.segments.fs import FileSystem, new_lock
from engine.segments.leader_epoch_checkpoint import LeaderEpochCache
from engine.segments.local_log import FetchData, LocalLog
from engine.segments.log_config import LogConfig
from engine.segments.log_segments import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, MAX_TIMESTAMP
from engine.segments.names import INTERNAL_TOPICS, parse_partition_dir
from engine.segments.segment import INT32_MAX, LogSegment
from engine.segments.segment_reads import WINDOW_BYTES
from engine.segments.txn_index import AbortedTxn
from engine.log import follower_append, leader_append, log_read, log_rebuild
from engine.log.producer_state import CompletedTxn, ProducerStateManager
from engine.log.read_committed import marker_of

DEFAULT_EXPIRATION_MS = 86_400_000
REPLAY_CHUNK = 8 << 20
CLIENT, COORDINATOR = "client", "coordinator"  # Kafka's AppendOrigin of a leader append


class AppendInfo(NamedTuple):
    """What an append did: offsets assigned and the max timestamp (with the last offset of its batch)."""

    first_offset: int
    last_offset: int
    max_timestamp: int
    offset_of_max_timestamp: int
    log_append_time: int
    batches: int
    size: int
    duplicate: bool = False  # a producer's resend of a batch already in the log: nothing was appended
    leader_epoch: int = -1   # the epoch the leader appended in (a wait for replication holds only within it)


def _batch_extents(pieces: list) -> list[tuple[int, int]]:
    """(last offset, size) of each batch of a prepared leader append (pieces alternate a header and a body)."""
    out = []
    for i in range(0, len(pieces), 2):
        fields = bf.HEADER.unpack_from(pieces[i])
        out.append((fields[0] + fields[6], bf.HEADER_SIZE + memoryview(pieces[i + 1]).nbytes))
    return out


def _producer_batch(pieces: list, count: int, source: str) -> bf.BatchHeader | None:
    """The header of the one batch of an idempotent producer's append (None when no batch has a producer id);
    such an append must hold exactly one batch, as Kafka requires. `pieces` alternate patched headers and batch
    bodies (engine.record.codec.prepare_leader_append)."""
    headers = [bf.BatchHeader(pieces[i]) for i in range(0, 2 * count, 2)]
    owned = [h for h in headers if h.producer_id >= 0]
    if owned and count > 1:
        raise InvalidRecordError("an idempotent producer's append must hold exactly one batch", file=source)
    return owned[0] if owned else None


class UnifiedLog:
    """One partition's log (see the module docstring). Its operations are Kafka's UnifiedLog's (appends as leader and
    follower, reads and lookups, truncation, retention and log start, the cleaner's hooks, flush and close), all over
    one lock and one state, which is why it stays one class of about 530 lines."""

    def __init__(self, fs: FileSystem, directory: str, config: LogConfig, clock: Clock, *,
                 recovery_point: int = 0, log_start_offset: int = 0, high_watermark: int = 0,
                 clean_shutdown: bool = False, producer_id_expiration_ms: int = DEFAULT_EXPIRATION_MS,
                 cleaner_checkpoint: int | None = None, listing: Sequence[str] | None = None) -> None:
        """Load the log in `directory` now (`listing`: its files, where the caller knows them: see LocalLog)."""
        self.fs, self.dir, self.clock = fs, directory, clock
        named = parse_partition_dir(os.path.basename(os.path.normpath(directory)))
        self._changes = None if named is not None and named[0] in INTERNAL_TOPICS else LOGS  # (see above)
        self.cleaner_checkpoint = cleaner_checkpoint  # the first dirty offset the last clean left (None: never)
        self.lock = new_lock()  # appends, rolls and truncations; the appenders and the native reader take it too
        self.local = LocalLog(fs, directory, config, clock, recovery_point=recovery_point,
                              log_start_offset=log_start_offset, clean_shutdown=clean_shutdown, listing=listing)
        self.recovery = self.local.recovery
        self.log_start_offset = self.local.loaded_log_start_offset
        self.high_watermark = min(max(high_watermark, self.log_start_offset), self.log_end_offset)
        listed = self.local.take_listing()
        self.leader_epochs = LeaderEpochCache(fs, directory, listed=listed)
        if self.leader_epochs.load_error is not None:
            self.recovery.note(f"ignored an unreadable leader-epoch checkpoint: {self.leader_epochs.load_error}")
        self.leader_epochs.truncate_from_end(self.log_end_offset)
        self.leader_epochs.truncate_from_start(self.log_start_offset)
        self.producer_state = ProducerStateManager(fs, directory, clock, producer_id_expiration_ms, listed=listed)
        self.producer_state.on_repair = self.recovery.note
        # the segments recovered have their .txnindex written again by the replay
        log_rebuild.rebuild_producer_state(self, self.recovery.clean_shutdown,
                                           frozenset(self.recovery.segments_recovered))
        # (after the replay, whose entries it checks too; only a log not closed cleanly can hold unaccounted batches)
        log_rebuild.check_leader_epochs(self, may_lag=not self.recovery.clean_shutdown)
        appends = twins.impl_of("segment_appender", segment_appender.selected)  # (they drive its segments)
        self._leader_append = twins.load("leader_append", appends)(self, AppendInfo)
        self._follower_append = twins.load("follower_append", appends)(self, AppendInfo)
        self._reader = twins.selected("log_read")(self, FetchData, WINDOW_BYTES)

    # --- what the segments say ----------------------------------------------------------------
    @property
    def config(self) -> LogConfig:
        return self.local.config

    @config.setter
    def config(self, value: LogConfig) -> None:
        self.local.config = value

    @property
    def segments(self) -> list[LogSegment]:
        return self.local.segments.all()

    @property
    def active_segment(self) -> LogSegment:
        return self.local.active_segment

    def segments_from(self, offset: int):
        return self.local.segments.from_offset(offset)

    @property
    def log_end_offset(self) -> int:
        return self.local.log_end_offset

    @property
    def recovery_point(self) -> int:
        return self.local.recovery_point

    def size_in_bytes(self) -> int:
        return self.local.size_in_bytes()

    # --- producer state (engine.log.log_rebuild rebuilds it on load and after a truncation) ----------
    def batches(self, offset: int, end: int):
        """(segment base, batch) of every batch below `end` from the one holding `offset`, read a chunk at a time
        (for replays and for loading the internal topics)."""
        while offset < end:
            data = self.local.read(offset, REPLAY_CHUNK, end, True)
            last = offset
            for batch in data.batches(self.dir):
                yield data.segment_base, batch
                last = batch.next_offset
            if last == offset:
                break  # nothing readable past this point (cannot happen after recovery)
            offset = last

    def update_producer(self, batch, first_offset: int, timestamp: int, index: bool = True,
                        marker: tuple[int, int | None] | None = None) -> None:
        """Producer state after `batch` (at `first_offset`; a control batch's `marker` read from it unless given);
        an aborted transaction it closes goes to the `.txnindex` of the segment holding its marker (when `index`:
        the replay of an intact segment skips it)."""
        if batch.is_control and marker is None:
            marker = marker_of(batch)
        completed = self.producer_state.update(batch, first_offset, timestamp, marker)
        if completed is not None and completed.is_aborted and index:
            self._index_aborted(completed)

    def _index_aborted(self, txn: CompletedTxn) -> None:
        seg = next(iter(self.local.segments.from_offset(txn.last_offset)), self.active_segment)
        lso = self.producer_state.last_stable_offset_for(txn)
        seg.txn_index.append(AbortedTxn(txn.producer_id, txn.first_offset, txn.last_offset, lso))

    # --- appends ------------------------------------------------------------------------------
    def append_as_leader(self, data, *, leader_epoch: int = 0, allow_control: bool = False,
                         origin: str = CLIENT) -> AppendInfo:
        """Append a client's batches: producer-state checks, then offsets from the LEO and the leader epoch
        stamped on each (and LogAppendTime, when the topic uses it). A coordinator's batches (`origin`
        COORDINATOR: transactional offset commits) skip the duplicate and sequence checks, as in Kafka."""
        if not allow_control:  # a lone batch its producer state lets through as is: one call
            info = self._leader_append.append(data, leader_epoch, origin == CLIENT)
            if info is not None:
                return info
        size = len(data) if type(data) is bytes else memoryview(data).nbytes
        config = self.local.config
        if size > config.segment_bytes:
            raise RecordBatchTooLargeError(f"append of {size} bytes exceeds segment.bytes={config.segment_bytes}",
                                           file=self.dir)
        with self.lock:
            append_time = self.clock.time_ms() if config.message_timestamp_type == "LogAppendTime" else -1
            first = self.local.log_end_offset
            ps = self.producer_state
            checks = self._leader_checks(config)
            pieces, end, max_ts, offset_of_max, count = codec.prepare_leader_append(
                data, first, leader_epoch, append_time, config.max_message_bytes, allow_control, self.dir, checks)
            if checks is not None:  # a batch may have been re-encoded
                size = sum(memoryview(piece).nbytes for piece in pieces)
            unowned = count == 1 and pieces[0][bf.PRODUCER_ID_OFFSET] & 0x80  # a negative producer id: no state
            producer_batch = None if unowned else _producer_batch(pieces, count, self.dir)
            if config.compact:
                self._check_keys(data)
            marker = None
            if producer_batch is not None:
                if producer_batch.is_control:
                    marker = marker_of(next(codec.iter_batches(bytes(pieces[0]) + bytes(pieces[1]))))
                    ps.validate_marker(producer_batch.producer_id, producer_batch.producer_epoch,
                                       marker[1] if marker[1] is not None else -1, self.dir)
                else:
                    dup = ps.find_duplicate(producer_batch) if origin == CLIENT else None
                    if dup is not None:
                        return AppendInfo(dup.first_offset, dup.last_offset, -1, dup.last_offset, -1, 0, 0,
                                          duplicate=True, leader_epoch=leader_epoch)
                    ps.validate(producer_batch, self.dir, check_sequence=origin == CLIENT)
            self._append(pieces, size, first, end - 1, max_ts, offset_of_max,
                         _batch_extents(pieces) if count > 1 else None)
            self.leader_epochs.assign(leader_epoch, first)
            if producer_batch is not None:
                self.update_producer(producer_batch, first,
                                     append_time if append_time >= 0 else producer_batch.max_timestamp, marker=marker)
            ps.map_end_offset = end
            return AppendInfo(first, end - 1, max_ts, offset_of_max, append_time, count, size, False, leader_epoch)

    def _leader_checks(self, config: LogConfig) -> tuple | None:
        """What a leader's append reads the records for (Kafka's LogValidator), as prepare_leader_append takes it:
        (the topic's codec, its level, the CreateTime bounds from the log's clock now); None when neither applies."""
        if not config.leader_checks:
            return None
        bounds = config.timestamp_bounds
        if bounds is not None:
            now = self.clock.time_ms()
            bounds = (now - bounds[0], min(now + bounds[1], bf.INT64_MAX))
        return (*config.target_compression, bounds)

    def _check_keys(self, data) -> None:
        """A compacted topic refuses records without a key (Kafka's LogValidator), naming the first (by its offset
        in the client's batch: the checks before this one passed, so the batches are whole and CRC-valid) and, in
        `record_errors`, each keyless record by its index in its batch, as Kafka's RecordValidationException."""
        for batch in codec.iter_batches(data, source=self.dir):
            if not batch.is_control:
                offset = batch.first_keyless_offset()
                if offset is not None:
                    why = f"Compacted topic cannot accept message without key in topic partition " \
                          f"{os.path.basename(self.dir)}."
                    refused = tuple((i, why) for i, r in enumerate(batch.records(verify_crc=False)) if r.key is None)
                    exc = InvalidRecordError(f"{len(refused)} records of the batch refused: a compacted topic cannot "
                                             f"accept a record without a key", file=self.dir, offset=offset)
                    exc.record_errors = refused
                    raise exc

    def append_marker(self, commit: bool, producer_id: int, producer_epoch: int, coordinator_epoch: int, *,
                      leader_epoch: int = 0) -> AppendInfo:
        """Append a COMMIT or ABORT marker for `producer_id` (WriteTxnMarkers), timestamped now."""
        data = codec.encode_control_batch("commit" if commit else "abort", base_offset=0, producer_id=producer_id,
                                            producer_epoch=producer_epoch, coordinator_epoch=coordinator_epoch,
                                            timestamp_ms=self.clock.time_ms())
        return self.append_as_leader(data, leader_epoch=leader_epoch, allow_control=True)

    def append_as_follower(self, data) -> AppendInfo:
        """Append a replica's batches with their offsets and epochs as they are, keeping producer state in step."""
        info = self._follower_append.append(data)  # the one-call append
        if info is not None:
            return info
        batches = self._validate(data)
        with self.lock:
            leo = self.log_end_offset
            if batches[0].base_offset < leo:
                raise InvalidOffsetError(f"follower append at {batches[0].base_offset} is below the LEO {leo}",
                                         file=self.dir, offset=batches[0].base_offset)
            max_ts, offset_of_max, prev = -1, batches[0].base_offset, leo - 1
            for b in batches:
                if b.base_offset <= prev:
                    raise InvalidOffsetError("follower batches must have increasing offsets", file=self.dir,
                                             offset=b.base_offset)
                prev = b.last_offset
                if b.max_timestamp > max_ts:
                    max_ts, offset_of_max = b.max_timestamp, b.last_offset
            self._append(data, len(data), batches[0].base_offset, prev, max_ts, offset_of_max,
                         [(b.last_offset, b.size_in_bytes) for b in batches])
            for b in batches:
                self.leader_epochs.assign(b.partition_leader_epoch, b.base_offset)
                if b.producer_id >= 0:
                    self.update_producer(b, b.base_offset, b.max_timestamp)
            self.producer_state.map_end_offset = self.log_end_offset
            return AppendInfo(batches[0].base_offset, prev, max_ts, offset_of_max, -1, len(batches), len(data))

    def account_linked(self, take) -> int:
        """Batches a native replica fetcher's link wrote at the active segment's end (their headers from `take()`,
        called with the log's lock held): what append_as_follower does for them, but the write; the bytes."""
        with self._storage("account a linked fetch"):
            return self._follower_append.account(take)

    def _validate(self, data) -> list:
        view = memoryview(data)
        batches = list(codec.iter_batches(view, source=self.dir))
        if sum(b.size_in_bytes for b in batches) != len(view) or not batches:
            raise CorruptRecordError("the appended bytes are not a sequence of whole record batches", file=self.dir)
        for b in batches:
            if b.size_in_bytes > self.config.max_message_bytes:
                raise RecordTooLargeError(
                    f"batch of {b.size_in_bytes} bytes exceeds max.message.bytes={self.config.max_message_bytes}",
                    file=self.dir, offset=b.base_offset)
            b.ensure_valid()
        if len(view) > self.config.segment_bytes:
            raise RecordBatchTooLargeError(
                f"append of {len(view)} bytes exceeds segment.bytes={self.config.segment_bytes}", file=self.dir)
        return batches

    def _append(self, data, size: int, first: int, last: int, max_ts: int, offset_of_max: int,
                batches: list[tuple[int, int]] | None = None) -> None:
        try:
            if not self.local.try_append(last, max_ts, offset_of_max, data, size, batches):
                self._roll(first)
                self.local.append(last, max_ts, offset_of_max, data, size, batches)
        except OSError as exc:
            raise self.storage_error("append", exc) from exc

    def storage_error(self, what: str, exc: OSError) -> KafkaStorageError:
        """The KafkaStorageError `exc` makes of `what` on this log (the appenders, native or not, raise it)."""
        return KafkaStorageError(f"{what} failed: {exc}", file=getattr(exc, "filename", None) or self.dir)

    @contextmanager
    def _storage(self, what: str):
        """An OSError from below becomes KafkaStorageError naming this log (typed errors pass as they are)."""
        try:
            yield
        except OSError as exc:
            raise self.storage_error(what, exc) from exc

    def roll(self, expected_next_offset: int | None = None) -> LogSegment:
        """Start a new active segment at max(expected_next_offset, LEO); the old one is flushed."""
        with self.lock, self._storage("roll"):
            return self._roll(expected_next_offset)

    def _roll(self, expected_next_offset: int | None) -> LogSegment:
        old = self.active_segment
        seg = self.local.roll(expected_next_offset)
        if seg is not old:
            self.producer_state.map_end_offset = seg.base_offset
            self.producer_state.take_snapshot()
        return seg

    # --- flushing -------------------------------------------------------------------------------
    def flush(self, offset: int | None = None) -> None:
        """fsync every segment holding offsets in [recovery point, offset); advance the recovery point."""
        with self.lock, self._storage("flush"):
            self.local.flush(offset)
            self.leader_epochs.sync()

    def maybe_flush_on_time(self) -> bool:
        """Flush if `flush.ms` passed since the last flush (the background flusher calls this)."""
        with self.lock, self._storage("flush"):
            if self.local.flush_due():
                self.local.flush()
                self.leader_epochs.sync()
                return True
            return False

    # --- reading ------------------------------------------------------------------------------
    def read(self, start_offset: int, max_bytes: int = 1 << 20, upper_bound: int | None = None,
             min_one_message: bool = True) -> FetchData:
        """Whole batches from the one holding `start_offset`, up to `max_bytes` (at least one batch when
        `min_one_message`), never a batch whose last offset reaches `upper_bound` (default: the LEO)."""
        max_bytes = min(max_bytes, INT32_MAX)  # a read never crosses a segment, whose size is an int32
        fetched = self._reader.read(start_offset, max_bytes, upper_bound, min_one_message)  # the one-call read
        if fetched is not None:
            return fetched
        leo, base, size = self.tail()  # the active segment's end with the LEO: appends racing this read stay unseen
        start = self.log_start_offset
        if start_offset < start or start_offset > leo:
            raise OffsetOutOfRangeError(f"offset {start_offset} is outside [{start}, {leo}]", file=self.dir,
                                        offset=start_offset)
        bound = leo if upper_bound is None else min(upper_bound, leo)
        return self.local.read(start_offset, max_bytes, bound, min_one_message, epochs=self.leader_epochs.entries,
                               active_end=(base, size))

    def tail(self) -> tuple[int, int, int]:
        """(LEO, active segment base, its size): taken together, so the bytes before that size are exactly the
        batches below that LEO (an append moves both under the log's lock)."""
        with self.lock:
            seg = self.local.active_segment
            return self.log_end_offset, seg.base_offset, seg.size

    def read_tail(self, mark: tuple[int, int, int], max_bytes: int) -> tuple[FetchData, tuple[int, int, int]] | None:
        """What was appended since `mark` (an earlier `tail()`), when it is all still in the active segment and
        fits `max_bytes`: the batches read back without an index lookup or a scan (they are whole: written
        under the lock held here). None when that does not hold; `read` then serves the fetch."""
        offset, base, position = mark
        with self.lock:
            seg = self.local.active_segment
            leo, size = self.log_end_offset, seg.size
            if seg.base_offset != base or size < position or leo < offset or size - position > max_bytes:
                return None
            try:
                data = seg.read_bytes(position, size)
            except OSError as exc:
                raise KafkaStorageError(f"read failed: {exc}", file=seg.log_path, position=position) from exc
        return FetchData(offset, base, position, memoryview(data)), (leo, base, size)

    @property
    def last_stable_offset(self) -> int:
        """The offset below which every transaction is decided and replicated (never above the HW)."""
        hw = self.high_watermark
        unstable = self.producer_state.first_unstable_offset()
        return hw if unstable is None else max(self.log_start_offset, min(unstable, hw))

    def segment_end(self, base_offset: int) -> int:
        """Where the segment at `base_offset` ends: the next segment's base, or the LEO (a fetch's data never
        crosses it, so it bounds the aborted transactions that fetch needs, as Kafka's fetch does)."""
        nxt = self.local.segments.next_base(base_offset)
        return self.log_end_offset if nxt is None else nxt

    def collect_aborted(self, start_offset: int, upper_bound: int) -> list[AbortedTxn]:
        """Aborted transactions overlapping [start_offset, upper_bound) (segments.local_log.collect_aborted)."""
        return self.local.collect_aborted(start_offset, upper_bound)

    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """(timestamp, offset) of the first record with timestamp >= `timestamp` (ListOffsets);
        -2 gives the log start offset, -1 the log end offset, -3 the first record with the largest timestamp; None
        when no record is that late."""
        if timestamp == EARLIEST_TIMESTAMP:
            return -1, self.log_start_offset
        if timestamp == LATEST_TIMESTAMP:
            return -1, self.log_end_offset
        if timestamp == MAX_TIMESTAMP:  # (before the native lookup, which knows no special timestamps)
            return self.local.segments.max_timestamp_offset()
        found = self._reader.offset_for_timestamp(timestamp)  # the one-call lookup
        return self.local.segments.offset_for_timestamp(timestamp, self.log_start_offset) if found is False else found

    # --- truncation (replication needs both) -------------------------------------------------
    def truncate_to(self, offset: int) -> bool:
        """Remove everything at and after `offset`; False if there was nothing to remove."""
        if offset < 0:
            raise InvalidOffsetError(f"cannot truncate to a negative offset {offset}", file=self.dir)
        with self.lock:
            if offset >= self.log_end_offset:
                return False
            if offset < self.segments[0].base_offset:
                self.truncate_fully_and_start_at(offset)
                return True
            self.local.truncate_to(offset)
            self._clamp_cleaner_checkpoint()
            self.high_watermark = min(self.high_watermark, offset)
            self.log_start_offset = min(self.log_start_offset, offset)
            self._after_truncation()
            return True

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Drop every segment and start empty at `offset`."""
        with self.lock:
            self.local.truncate_fully_and_start_at(offset)
            self._clamp_cleaner_checkpoint()
            self.log_start_offset = self.high_watermark = offset
            self.leader_epochs.clear()
            self._after_truncation()

    def _clamp_cleaner_checkpoint(self) -> None:
        """Offsets a truncation removed are written again, dirty (Kafka's maybeTruncateCheckpoint)."""
        if self.cleaner_checkpoint is not None and self.cleaner_checkpoint > self.log_end_offset:
            self.cleaner_checkpoint = self.log_end_offset

    def _after_truncation(self) -> None:
        self.leader_epochs.truncate_from_end(self.log_end_offset)
        log_rebuild.rebuild_producer_state(self, False)
        self._bound_moved()

    def _bound_moved(self) -> None:
        if self._changes is not None:
            self._changes.bump()

    # --- log start and retention --------------------------------------------------------------
    def update_high_watermark(self, offset: int) -> int:
        """Set the high watermark (clamped to [log start, LEO]); the partition above owns its meaning."""
        with self.lock:
            self.high_watermark = min(max(offset, self.log_start_offset), self.log_end_offset)
            self.producer_state.on_high_watermark(self.high_watermark)
            self._bound_moved()
            return self.high_watermark

    def delete_records(self, offset: int) -> int:
        """Raise the log start offset to `offset` (-1: the high watermark); never past the HW."""
        with self.lock:
            offset = self.high_watermark if offset == -1 else offset
            if offset > self.high_watermark or offset < 0:
                raise OffsetOutOfRangeError(
                    f"cannot delete records before {offset}: the high watermark is {self.high_watermark}",
                    file=self.dir, offset=offset)
            self._raise_log_start(offset)
            return self.log_start_offset

    def _raise_log_start(self, offset: int) -> None:
        if offset > self.log_start_offset:
            self.log_start_offset = offset
            self.leader_epochs.truncate_from_start(offset)
            self._bound_moved()

    def delete_old_segments(self) -> int:
        """Apply log-start, retention.bytes and retention.ms (in that order); return segments removed."""
        config = self.config
        now = self.clock.time_ms()
        removed = self._delete_while(lambda seg, nxt: nxt is not None and nxt.base_offset <= self.log_start_offset)
        if not config.delete:
            return removed  # a compact-only log keeps its segments (only the log start offset removes them)
        if config.retention_bytes >= 0:
            excess = [self.size_in_bytes() - config.retention_bytes]

            def over(seg, nxt):
                if excess[0] - seg.size >= 0:
                    excess[0] -= seg.size
                    return True
                return False
            removed += self._delete_while(over)
        if config.retention_ms >= 0:
            removed += self._delete_while(lambda seg, nxt: now - seg.largest_timestamp() > config.retention_ms)
        return removed

    def _delete_while(self, predicate) -> int:
        """Remove the oldest segments while `predicate(segment, next segment)` holds and the segment lies
        wholly below the high watermark (an empty active segment is never removed)."""
        with self.lock:
            segs = self.segments
            doomed = []
            for i, seg in enumerate(segs):
                nxt = segs[i + 1] if i + 1 < len(segs) else None
                upper = nxt.base_offset if nxt is not None else self.log_end_offset
                last_and_empty = nxt is None and seg.size == 0
                if not (predicate(seg, nxt) and upper <= self.high_watermark and not last_and_empty):
                    break
                doomed.append(seg)
            if not doomed:
                return 0
            if len(doomed) == len(segs):
                self._roll(None)
            self.local.remove_segments(doomed)
            self._raise_log_start(self.segments[0].base_offset)
            self.local.recovery_point = max(self.local.recovery_point, self.log_start_offset)
            for seg in doomed:
                self.producer_state.delete_snapshot(seg.base_offset)
            return len(doomed)

    # --- compaction (segments.cleaner cleans; these are what it needs of the log) ---------------------
    def active_producers(self) -> dict[int, ActiveProducer]:
        """Each tracked producer's last data offset (or, after a marker, its epoch): a clean keeps that batch
        (Kafka's lastRecordsOfActiveProducers)."""
        with self.lock:
            return {pid: ActiveProducer(e.batches[-1].last_offset if e.batches else None, e.epoch)
                    for pid, e in self.producer_state.producers.items()}

    def cleanable_range(self, now_ms: int) -> tuple[int, int]:
        """(first dirty offset, first uncleanable offset) of a clean now (Kafka's cleanableOffsets and
        calculateCleanableBytes): a clean stops at the LSO (at most the HW), the active segment, and the first
        segment holding a record newer than `min.compaction.lag.ms`, rounded down to the base of the segment that
        holds it, as only whole segments are cleaned."""
        with self.lock:
            dirty = self.first_dirty_offset()
            bound = min(self.last_stable_offset, self.active_segment.base_offset)
            lag = self.config.min_compaction_lag_ms
            if lag > 0:
                for seg in self.segments[:-1]:
                    if self.segment_end(seg.base_offset) > dirty and seg.largest_timestamp() > now_ms - lag:
                        bound = min(bound, seg.base_offset)
                        break
            return dirty, next(iter(self.local.segments.from_offset(max(dirty, bound)))).base_offset

    def first_dirty_offset(self) -> int:
        """Where the next clean starts: the checkpoint, or the log start when it is missing or out of range."""
        checkpoint = self.cleaner_checkpoint
        if checkpoint is None or not self.log_start_offset <= checkpoint <= self.log_end_offset:
            return self.log_start_offset
        return checkpoint

    def replace_segments(self, new: list[LogSegment], old: list[LogSegment]) -> None:
        """Swap a clean's segments in for `old` (segments.local_log.replace_segments), unless the log changed
        under the clean (a truncation, retention, or a roll into them): CleaningAbortedError then."""
        with self.lock, self._storage("swap"):
            live = {seg.base_offset: seg for seg in self.segments}
            if any(live.get(seg.base_offset) is not seg or seg is self.active_segment for seg in old):
                raise CleaningAbortedError(f"{self.dir} changed while it was cleaned", file=self.dir)
            self.local.replace_segments(new, old)

    def delete_pending_files(self) -> int:
        """Remove `.deleted` segments whose `file.delete.delay.ms` has passed."""
        with self.lock:
            return self.local.delete_pending_files()

    def remove_expired_producers(self) -> int:
        with self.lock:
            return self.producer_state.remove_expired(self.clock.time_ms())

    # --- lifecycle ----------------------------------------------------------------------------
    def close(self, flush: bool = True) -> None:
        """Snapshot the producer state at the log end, then flush and close (a clean shutdown of this log);
        with flush=False only close, as a process that dies leaves it (the next open recovers it)."""
        with self.lock:
            if flush:
                self.producer_state.map_end_offset = self.log_end_offset
                self.producer_state.take_snapshot()
                self.leader_epochs.sync()
            self.local.close(flush)

    def __repr__(self) -> str:
        return (f"UnifiedLog({self.dir}, start={self.log_start_offset}, end={self.log_end_offset}, "
                f"segments={len(self.local.segments)}, recovery_point={self.recovery_point})")
