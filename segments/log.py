"""One partition's log: its segments, offsets, roll, flush, retention, truncation and recovery
(Kafka's UnifiedLog + LocalLog + LogLoader, without producer state or leader epochs, which live
in txn/ and replication/).

Offsets it names: log start (first readable), log end (LEO, next to assign), recovery point
(everything below it is fsynced), high watermark (set by the layer above; retention and
delete_records never pass it).
On-disk layout: a `<topic>-<partition>/` directory of segments (segments.segment).
Crash policy: on open, leftovers of deletion/cleaning (`.deleted`, `.cleaned`, `.swap`) are
resolved as Kafka does; after an unclean shutdown every segment from the one holding the
recovery point is re-validated, a corrupt or torn tail is truncated at the last valid batch and
every later segment is dropped; a segment whose `.index` is missing, or whose index file is not a
whole number of entries, is rebuilt. What was done
is returned in `recovery` (a RecoveryReport) and logged.
Thread-safety: appends, roll, truncation and retention hold the log's lock; reads take it only
to snapshot the segment list.
"""
from __future__ import annotations

import bisect
import logging
import os
import threading
from dataclasses import dataclass, field
from typing import NamedTuple

from engine import codec
from engine.clock import Clock
from engine.errors import (
    CorruptRecordError,
    InvalidOffsetError,
    KafkaError,
    OffsetOutOfRangeError,
    RecordBatchTooLargeError,
    RecordTooLargeError,
)
from segments import names
from segments.fs import FileSystem
from segments.log_config import LogConfig
from segments.segment import LogSegment

log = logging.getLogger("kafkalog.log")

EARLIEST_TIMESTAMP, LATEST_TIMESTAMP = -2, -1


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


@dataclass
class RecoveryReport:
    """What opening the log had to repair."""

    clean_shutdown: bool
    segments_recovered: list[int] = field(default_factory=list)
    bytes_truncated: int = 0
    segments_dropped: list[int] = field(default_factory=list)
    files_removed: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class FetchData:
    """Whole batches read from one segment: a zero-copy view (decode it with engine.iter_batches)."""

    start_offset: int
    segment_base: int
    position: int
    records: memoryview


class Log:
    def __init__(self, fs: FileSystem, directory: str, config: LogConfig, clock: Clock, *,
                 recovery_point: int = 0, log_start_offset: int = 0, high_watermark: int = 0,
                 clean_shutdown: bool = False) -> None:
        self.fs, self.dir, self.config, self.clock = fs, directory, config, clock
        self._lock = threading.RLock()
        self._segments: dict[int, LogSegment] = {}
        self._bases: list[int] = []
        self._pending_deletes: list[tuple[int, LogSegment]] = []
        self.last_flush_ms = clock.time_ms()
        fs.makedirs(directory)
        self.recovery = self._load(recovery_point, log_start_offset, clean_shutdown)
        self.high_watermark = min(max(high_watermark, self.log_start_offset), self.log_end_offset)

    # --- loading (Kafka's LogLoader) ----------------------------------------------------------
    def _load(self, recovery_point: int, log_start_offset: int, clean: bool) -> RecoveryReport:
        report = RecoveryReport(clean_shutdown=clean)
        self._remove_leftovers(report)
        files = self.fs.listdir(self.dir)
        logs = {names.offset_from_file_name(f) for f in files if f.endswith(names.LOG)}
        for f in files:  # orphan indexes (no .log) are deleted
            if f.endswith((names.INDEX, names.TIME_INDEX, names.TXN_INDEX)) and \
                    names.offset_from_file_name(f) not in logs:
                self.fs.remove(os.path.join(self.dir, f))
                report.files_removed.append(f)
        now = self.clock.time_ms()
        for base in sorted(logs):
            seg = LogSegment(self.fs, self.dir, base, self.config.segment, now)
            self._add(seg)
            if not seg.index_files_exist() or not seg.index_sizes_valid():
                self._recover_segment(seg, report)
            else:
                try:
                    seg.txn_index.sanity_check()
                except KafkaError:
                    self._recover_segment(seg, report)
        if not clean:
            for seg in self.segments_from(recovery_point):
                if seg.base_offset not in self._segments or seg.base_offset in report.segments_recovered:
                    continue  # dropped after an earlier truncation, or just rebuilt for a missing index
                if self._recover_segment(seg, report):
                    for later in [s for s in self.segments if s.base_offset > seg.base_offset]:
                        self._remove_segment(later)
                        later.delete_files()
                        report.segments_dropped.append(later.base_offset)
        if self._segments and self.active_segment.read_next_offset() < log_start_offset:
            for seg in self.segments:
                self._remove_segment(seg)
                seg.delete_files()
                report.segments_dropped.append(seg.base_offset)
        if not self._segments:
            self._add(LogSegment(self.fs, self.dir, log_start_offset, self.config.segment, now))
        self._leo = self.active_segment.read_next_offset()
        self.log_start_offset = max(log_start_offset, self._bases[0])
        self.recovery_point = self._leo if clean else min(recovery_point, self._leo)
        self.active_segment.resize_indexes(self.config.segment_index_bytes)
        if report.segments_recovered or report.files_removed or report.segments_dropped:
            log.warning("recovered %s: %s", self.dir, report)
        return report

    def _remove_leftovers(self, report: RecoveryReport) -> None:
        files = self.fs.listdir(self.dir)
        for f in files:
            if f.endswith((names.DELETED, names.CLEANED, ".truncating", ".tmp")):
                self.fs.remove(os.path.join(self.dir, f))
                report.files_removed.append(f)
        cleaned = [names.offset_from_file_name(f) for f in files if f.endswith(names.CLEANED)]
        swaps = sorted(f for f in files if f.endswith(names.SWAP))
        for f in swaps:
            if cleaned and names.offset_from_file_name(f) >= min(cleaned):
                self.fs.remove(os.path.join(self.dir, f))
                report.files_removed.append(f)
        for f in [f for f in swaps if f.endswith(names.LOG + names.SWAP) and os.path.exists(os.path.join(self.dir, f))]:
            base = names.offset_from_file_name(f)
            swap = LogSegment(self.fs, self.dir, base, self.config.segment, self.clock.time_ms(), suffix=names.SWAP)
            end = swap.read_next_offset()
            swap.close()
            for g in self.fs.listdir(self.dir):
                if g.endswith(names.SEGMENT_SUFFIXES) and base <= names.offset_from_file_name(g) < end:
                    self.fs.remove(os.path.join(self.dir, g))
                    report.files_removed.append(g)
        for f in self.fs.listdir(self.dir):
            if f.endswith(names.SWAP):
                self.fs.rename(os.path.join(self.dir, f), os.path.join(self.dir, f[:-len(names.SWAP)]))

    def _recover_segment(self, seg: LogSegment, report: RecoveryReport) -> int:
        truncated = seg.recover()
        report.segments_recovered.append(seg.base_offset)
        report.bytes_truncated += truncated
        return truncated

    # --- segments -------------------------------------------------------------------------------
    def _add(self, seg: LogSegment) -> None:
        self._segments[seg.base_offset] = seg
        bisect.insort(self._bases, seg.base_offset)

    def _remove_segment(self, seg: LogSegment) -> None:
        del self._segments[seg.base_offset]
        self._bases.remove(seg.base_offset)

    @property
    def segments(self) -> list[LogSegment]:
        with self._lock:
            return [self._segments[b] for b in self._bases]

    @property
    def active_segment(self) -> LogSegment:
        return self._segments[self._bases[-1]]

    def segments_from(self, offset: int):
        """The segment holding `offset` (the greatest base <= offset), then every later one, lazily
        (a read usually needs only the first; a log may have thousands)."""
        last = None
        while True:
            with self._lock:  # a few bases at a time, resuming after the last base seen (not an index)
                i = (bisect.bisect_right(self._bases, last) if last is not None
                     else max(0, bisect.bisect_right(self._bases, offset) - 1))
                chunk = self._bases[i:i + 8]
            if not chunk:
                return
            for base in chunk:
                seg = self._segments.get(base)
                if seg is not None:  # skip one removed meanwhile (retention, truncation)
                    yield seg
            last = chunk[-1]

    @property
    def log_end_offset(self) -> int:
        return self._leo

    def size_in_bytes(self) -> int:
        return sum(s.size for s in self.segments)

    # --- appending ----------------------------------------------------------------------------
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

    def append_as_leader(self, data, *, leader_epoch: int = 0, allow_control: bool = False) -> AppendInfo:
        """Append batches built by a producer, assigning offsets from the LEO and stamping the leader epoch."""
        size = memoryview(data).nbytes
        if size > self.config.segment_bytes:
            raise RecordBatchTooLargeError(f"append of {size} bytes exceeds segment.bytes={self.config.segment_bytes}",
                                           file=self.dir)
        with self._lock:
            append_time = self.clock.time_ms() if self.config.message_timestamp_type == "LogAppendTime" else -1
            first = self._leo
            pieces, end, max_ts, offset_of_max, count = codec.prepare_leader_append(
                data, first, leader_epoch, append_time, self.config.max_message_bytes, allow_control, self.dir)
            return self._append(pieces, size, first, end - 1, max_ts, offset_of_max, append_time, count)

    def append_as_follower(self, data) -> AppendInfo:
        """Append batches with their offsets as they are (a replica copying its leader)."""
        batches = self._validate(data)
        with self._lock:
            if batches[0].base_offset < self._leo:
                raise InvalidOffsetError(f"follower append at {batches[0].base_offset} is below the LEO {self._leo}",
                                         file=self.dir, offset=batches[0].base_offset)
            max_ts, offset_of_max, prev = -1, batches[0].base_offset, self._leo - 1
            for b in batches:
                if b.base_offset <= prev:
                    raise InvalidOffsetError("follower batches must have increasing offsets", file=self.dir,
                                             offset=b.base_offset)
                prev = b.last_offset
                if b.max_timestamp > max_ts:
                    max_ts, offset_of_max = b.max_timestamp, b.last_offset
            return self._append(data, len(data), batches[0].base_offset, prev, max_ts, offset_of_max, -1, len(batches))

    def _append(self, data, size: int, first: int, last: int, max_ts: int, offset_of_max: int, append_time: int,
                count: int) -> AppendInfo:
        seg = self._maybe_roll(size, first, last, max_ts)
        seg.append(last, max_ts, offset_of_max, data, size)
        self._leo = last + 1
        if self._leo - self.recovery_point >= self.config.flush_messages:
            self.flush()
        return AppendInfo(first, last, max_ts, offset_of_max, append_time, count, size)

    def _maybe_roll(self, size: int, first: int, last: int, max_ts: int) -> LogSegment:
        seg = self.active_segment
        if seg.should_roll(incoming_bytes=size, incoming_max_ts=max_ts, incoming_last_offset=last,
                           now_ms=self.clock.time_ms(), segment_bytes=self.config.segment_bytes):
            return self.roll(first)
        return seg

    def roll(self, expected_next_offset: int | None = None) -> LogSegment:
        """Start a new active segment at max(expected_next_offset, LEO); the old one is flushed."""
        with self._lock:
            base = max(expected_next_offset or 0, self._leo)
            old = self.active_segment
            if old.base_offset == base and old.size == 0:
                return old
            old.on_become_inactive()
            for suffix in names.SEGMENT_SUFFIXES:
                stale = os.path.join(self.dir, names.file_name(base, suffix))
                if self.fs.exists(stale):
                    self.fs.remove(stale)
            seg = LogSegment(self.fs, self.dir, base, self.config.segment, self.clock.time_ms())
            seg.resize_indexes(self.config.segment_index_bytes)
            self._add(seg)
            self._after_roll(base)
            self.flush(base)
            old.release_handle()
            return seg

    # --- hooks for the layers above (producer state keeps its snapshots in step) -----------------
    def _after_roll(self, new_base: int) -> None:
        """Called under the lock once a new active segment starting at `new_base` exists."""

    def _after_segments_deleted(self, bases: list[int]) -> None:
        """Called under the lock after retention removed the segments with these base offsets."""

    def _after_truncation(self) -> None:
        """Called under the lock after the log was truncated (its end offset went down)."""

    # --- flushing -------------------------------------------------------------------------------
    def flush(self, offset: int | None = None) -> None:
        """fsync every segment holding offsets in [recovery point, offset); advance the recovery point."""
        with self._lock:
            offset = self._leo if offset is None else offset
            if offset <= self.recovery_point and offset != self._leo:
                return
            new_files = False
            for seg in self.segments_from(self.recovery_point):
                if seg.base_offset >= offset and seg is not self.active_segment:
                    break
                seg.flush()
                if seg is not self.active_segment:
                    seg.release_handle()
                new_files |= seg.base_offset >= self.recovery_point
            if new_files:
                self.fs.fsync_dir(self.dir)
            self.recovery_point = max(self.recovery_point, offset)
            self.last_flush_ms = self.clock.time_ms()

    def maybe_flush_on_time(self) -> bool:
        """Flush if `flush.ms` passed since the last flush (the background flusher calls this)."""
        if self.clock.time_ms() - self.last_flush_ms >= self.config.flush_ms and self._leo > self.recovery_point:
            self.flush()
            return True
        return False

    # --- reading ------------------------------------------------------------------------------
    def read(self, start_offset: int, max_bytes: int = 1 << 20, upper_bound: int | None = None,
             min_one_message: bool = True) -> FetchData:
        """Whole batches from the one holding `start_offset`, up to `max_bytes` (at least one batch when
        `min_one_message`), never a batch whose last offset reaches `upper_bound` (default: the LEO)."""
        leo, start = self._leo, self.log_start_offset
        if start_offset < start or start_offset > leo:
            raise OffsetOutOfRangeError(f"offset {start_offset} is outside [{start}, {leo}]", file=self.dir,
                                        offset=start_offset)
        bound = leo if upper_bound is None else min(upper_bound, leo)
        for seg in self.segments_from(start_offset):
            if start_offset >= bound:
                break
            limit = None if bound >= leo else seg.translate_offset(bound, seg.offset_index.lookup(bound)[1])
            got = seg.read(start_offset, max_bytes, None if limit is None else limit.position, min_one_message)
            if got is None:
                continue  # nothing at or after start_offset in this segment (a gap): try the next
            return FetchData(start_offset, seg.base_offset, got[0], got[1])
        return FetchData(start_offset, self.active_segment.base_offset, self.active_segment.size, memoryview(b""))

    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """(timestamp, offset) of the first record with timestamp >= `timestamp` (ListOffsets);
        -2 gives the log start offset, -1 the log end offset; None when no record is that late."""
        if timestamp == EARLIEST_TIMESTAMP:
            return -1, self.log_start_offset
        if timestamp == LATEST_TIMESTAMP:
            return -1, self._leo
        for seg in self.segments:
            if seg.size and seg.max_timestamp_so_far >= timestamp:
                found = seg.find_offset_by_timestamp(timestamp, self.log_start_offset)
                if found is not None:
                    return found
        return None

    # --- truncation (replication needs both) -------------------------------------------------
    def truncate_to(self, offset: int) -> bool:
        """Remove everything at and after `offset`; False if there was nothing to remove."""
        if offset < 0:
            raise InvalidOffsetError(f"cannot truncate to a negative offset {offset}", file=self.dir)
        with self._lock:
            if offset >= self._leo:
                return False
            if offset < self._bases[0]:
                self.truncate_fully_and_start_at(offset)
                return True
            for seg in [s for s in self.segments if s.base_offset > offset]:
                self._remove_segment(seg)
                seg.delete_files()
            self.active_segment.truncate_to(offset)
            self.active_segment.resize_indexes(self.config.segment_index_bytes)
            self._leo = offset
            self.recovery_point = min(self.recovery_point, offset)
            self.high_watermark = min(self.high_watermark, offset)
            self.log_start_offset = min(self.log_start_offset, offset)
            self._after_truncation()
            return True

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Drop every segment and start empty at `offset`."""
        with self._lock:
            for seg in self.segments:
                self._remove_segment(seg)
                seg.delete_files()
            self._add(LogSegment(self.fs, self.dir, offset, self.config.segment, self.clock.time_ms()))
            self.active_segment.resize_indexes(self.config.segment_index_bytes)
            self._leo = self.log_start_offset = self.recovery_point = self.high_watermark = offset
            self._after_truncation()

    # --- retention ----------------------------------------------------------------------------
    def update_high_watermark(self, offset: int) -> int:
        """Set the high watermark (clamped to [log start, LEO]); the layer above owns its meaning."""
        with self._lock:
            self.high_watermark = min(max(offset, self.log_start_offset), self._leo)
            return self.high_watermark

    def delete_records(self, offset: int) -> int:
        """Raise the log start offset to `offset` (-1: the high watermark); never past the HW."""
        with self._lock:
            offset = self.high_watermark if offset == -1 else offset
            if offset > self.high_watermark or offset < 0:
                raise OffsetOutOfRangeError(
                    f"cannot delete records before {offset}: the high watermark is {self.high_watermark}",
                    file=self.dir, offset=offset)
            self.log_start_offset = max(self.log_start_offset, offset)
            return self.log_start_offset

    def delete_old_segments(self) -> int:
        """Apply log-start, retention.bytes and retention.ms (in that order); return segments removed."""
        now = self.clock.time_ms()
        removed = self._delete_while(lambda seg, nxt: nxt is not None and nxt.base_offset <= self.log_start_offset)
        if self.config.retention_bytes >= 0:
            excess = [self.size_in_bytes() - self.config.retention_bytes]

            def over(seg, nxt):
                if excess[0] - seg.size >= 0:
                    excess[0] -= seg.size
                    return True
                return False
            removed += self._delete_while(over)
        if self.config.retention_ms >= 0:
            removed += self._delete_while(lambda seg, nxt: now - seg.largest_timestamp() > self.config.retention_ms)
        return removed

    def _delete_while(self, predicate) -> int:
        with self._lock:
            segs = self.segments
            doomed = []
            for i, seg in enumerate(segs):
                nxt = segs[i + 1] if i + 1 < len(segs) else None
                upper = nxt.base_offset if nxt is not None else self._leo
                last_and_empty = nxt is None and seg.size == 0
                if not (predicate(seg, nxt) and upper <= self.high_watermark and not last_and_empty):
                    break
                doomed.append(seg)
            if not doomed:
                return 0
            if len(doomed) == len(segs):
                self.roll()
            due = self.clock.time_ms() + self.config.file_delete_delay_ms
            for seg in doomed:
                self._remove_segment(seg)
                seg.change_suffix(names.DELETED)
                self._pending_deletes.append((due, seg))
            self.log_start_offset = max(self.log_start_offset, self._bases[0])
            self.recovery_point = max(self.recovery_point, self.log_start_offset)
            self._after_segments_deleted([seg.base_offset for seg in doomed])
            return len(doomed)

    def delete_pending_files(self) -> int:
        """Remove `.deleted` segments whose `file.delete.delay.ms` has passed."""
        now = self.clock.time_ms()
        with self._lock:
            ready = [seg for due, seg in self._pending_deletes if due <= now]
            self._pending_deletes = [(due, seg) for due, seg in self._pending_deletes if due > now]
        for seg in ready:
            seg.delete_files()
        return len(ready)

    # --- lifecycle ----------------------------------------------------------------------------
    def close(self) -> None:
        """Flush and close every segment (a clean shutdown of this log)."""
        with self._lock:
            self.flush()
            for seg in self.segments:
                seg.close()
            for _, seg in self._pending_deletes:
                seg.delete_files()
            self._pending_deletes = []

    def __repr__(self) -> str:
        return (f"Log({self.dir}, start={self.log_start_offset}, end={self._leo}, "
                f"segments={len(self._bases)}, recovery_point={self.recovery_point})")
