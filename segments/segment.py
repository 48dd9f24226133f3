"""One log segment: `<base>.log` with its `.index`, `.timeindex` and `.txnindex` (Kafka's LogSegment).

Byte layout: the `.log` is concatenated RecordBatch v2 batches, no header (kafka-format.md §3.2);
the indexes are described in their modules. Appends follow Kafka exactly: an offset-index entry
(last offset of the batch, its start position) and a time-index entry are written when more than
`index.interval.bytes` accumulated since the previous entry, checked before this append counts;
the time index gets a final entry on roll and close. The segment's `appender` (segments.segment_appender,
native or its Python twin) keeps the append counters and does the roll check, the write and that cadence;
the segment owns the files, the lock and the indexes. How the `.log` is read is chosen once, when the segment is
opened (segments.segment_reads): the owner reads zero-copy views of a shared mapping, whose resident pages are tracked
and released behind readers that move on (segments.residency); a read-only segment (a reader beside a writer it does
not control) reads with pread and maps nothing.
Crash policy: appends are write()s (in the page cache at once, on disk after `flush()`);
`recover()` re-validates every batch (size, magic, CRC, records), truncates a torn or corrupt tail
at the last valid batch and rebuilds the indexes. A truncation never pulls pages from under a
live view: if views of the old bytes are alive, the kept prefix is written to a new file that
replaces the old one, and the views keep the old inode.
Thread-safety: one writer at a time (the owning Log serialises appends, truncation, roll);
reads may run concurrently with an append and see a consistent prefix.
"""
from __future__ import annotations

import logging
import os
import random
from dataclasses import dataclass

from engine.common.errors import (
    CorruptIndexError,
    CorruptRecordError,
    KafkaError,
    KafkaStorageError,
    RecordBatchTooLargeError,
)
from engine.record import batch_format as bf
from engine.record import codec
from engine.segments import names, segment_appender, segment_recovery
from engine.segments.fs import FileSystem, new_lock
from engine.segments.offset_index import OffsetIndex
from engine.segments.segment_reads import WINDOW_BYTES, MappedReads, OffsetPosition, PositionalReads
from engine.segments.time_index import TimeIndex
from engine.segments.txn_index import TxnIndex

INT32_MAX = bf.INT32_MAX
__all__ = ["INT32_MAX", "WINDOW_BYTES", "LogSegment", "OffsetPosition", "SegmentConfig"]
log = logging.getLogger("kafkalog.segment")


def _log_repair(what: str) -> None:
    """A segment's repair, where no owner takes them."""
    log.warning("%s", what)


@dataclass(frozen=True)
class SegmentConfig:
    """The per-segment knobs (Kafka's topic configs of the same names)."""

    index_interval_bytes: int = 4096
    max_index_size: int = 10 * 1024 * 1024
    segment_jitter_ms: int = 0
    segment_ms: int = 7 * 24 * 3600 * 1000


class LogSegment:
    """One segment's files and what is done to them: appends (through its `appender`), reads (through `reads`, chosen
    once), lookups, index upkeep, truncation, flush, renames and closing; recovery is segments.segment_recovery's.
    Its methods are Kafka's LogSegment's, one for one, which is why it stays one class of about 490 lines."""

    def __init__(self, fs: FileSystem, directory: str, base_offset: int, config: SegmentConfig, now_ms: int,
                 *, suffix: str = "", writable: bool = True, new: bool = False) -> None:
        """Open (a writable one: create) the segment's files; `new`: the caller knows none of them exists."""
        self.fs, self.dir, self.base_offset, self.config, self.suffix = fs, directory, base_offset, config, suffix
        self.writable = writable
        self.created_ms = now_ms
        self.log_path = self._path(names.LOG)
        # the indexes known to have no file yet, until each is first opened (then they need not look for one)
        self._new = (names.INDEX, names.TIME_INDEX) if new and writable else ()
        size = 0
        if not self._new:
            try:
                if writable and not fs.exists(self.log_path):
                    fs.open(self.log_path, "ab").close()
                size = fs.size(self.log_path)
            except OSError as exc:
                raise KafkaStorageError(f"cannot open segment: {exc}", file=self.log_path) from exc
        jitter = min(config.segment_jitter_ms, config.segment_ms)
        self.roll_jitter_ms = random.randrange(jitter) if jitter > 0 else 0
        self._offset_index: OffsetIndex | None = None
        self._time_index: TimeIndex | None = None
        self.on_repair = _log_repair  # the owner's recovery report takes these
        self.txn_index = TxnIndex(fs, self._path(names.TXN_INDEX), base_offset)
        self.reads = MappedReads(self) if writable else PositionalReads(self)  # how the `.log` is read
        self.lock = new_lock()  # never replaced: the appenders and the native reader keep it
        self.appender = segment_appender.selected(self, size, now_ms, config.segment_ms - self.roll_jitter_ms)
        if self._new:  # an empty segment: no timestamp to read from its files (time_index.last_entry()'s empty answer)
            self.appender.max_ts = (-1, base_offset)
            self.appender.rolling_ts, self.appender.rolling_ts_loaded = None, True
            try:  # its `.log` made last (nothing above touches it), through the descriptor its first append uses
                created = fs.open(self.log_path, "ab+")
            except OSError as exc:
                raise KafkaStorageError(f"cannot open segment: {exc}", file=self.log_path) from exc
            self.appender.handle = fs.adopt(self.log_path, "ab+", created)

    def _path(self, kind: str) -> str:
        prefix = self.__dict__.get("_prefix")
        if prefix is None:
            prefix = self._prefix = os.path.join(self.dir, names.file_name(self.base_offset, ""))
        return prefix + kind + self.suffix

    def __repr__(self) -> str:
        return f"LogSegment({self.log_path}, size={self.appender.size})"

    # --- indexes (opened lazily: a directory of many segments opens fast) ----------------------
    @property
    def offset_index(self) -> OffsetIndex:
        if self._offset_index is None:
            self.open_index(names.INDEX)
        return self._offset_index

    @property
    def time_index(self) -> TimeIndex:
        if self._time_index is None:
            self.open_index(names.TIME_INDEX)
        return self._time_index

    def opened_indexes(self) -> tuple[OffsetIndex, TimeIndex] | None:
        """Both indexes once both are open (a segment never replaces one), None before: what an appender may keep
        without opening either."""
        oi, ti = self._offset_index, self._time_index
        return None if oi is None or ti is None else (oi, ti)

    def open_index(self, kind: str, check: bool = True) -> None:
        """Open one index; with `check`, an existing one whose entries are wrong makes both be rebuilt."""
        with self.lock:
            attr, cls = ("_offset_index", OffsetIndex) if kind == names.INDEX else ("_time_index", TimeIndex)
            if getattr(self, attr) is not None:
                return
            size = self.appender.size if check and self.writable else None
            new = kind in self._new or None
            if new:
                self._new = tuple(k for k in self._new if k != kind)
            try:
                setattr(self, attr, cls(self.fs, self._path(kind), self.base_offset, self.config.max_index_size,
                                        self.writable, log_size=size, new=new))
            except CorruptIndexError as exc:
                self.on_repair(f"rebuilt the indexes of {self.log_path}: {exc.message}")
                self.rebuild_indexes()

    def indexes_full(self) -> bool:
        """Whether either index is full (a reason to roll, Kafka's LogSegment.shouldRoll); while neither is made (a new
        segment's first appends) it is told from their size, without opening them: empty, the time index is full when
        it has room for one entry only (TimeIndex.is_full), the offset index when it has none."""
        if len(self._new) == 2:
            return self.config.max_index_size < 2 * TimeIndex.ENTRY.size
        return self.offset_index.is_full() or self.time_index.is_full()

    def index_files_exist(self) -> bool:
        return self.fs.exists(self._path(names.INDEX))

    def index_sizes_valid(self) -> bool:
        """A cheap load-time check (file sizes only, indexes stay unopened): whole entries in each index."""
        for kind, size in ((names.INDEX, OffsetIndex.ENTRY.size), (names.TIME_INDEX, TimeIndex.ENTRY.size)):
            path = self._path(kind)
            if self.fs.exists(path) and self.fs.size(path) % size:
                return False
        return True

    # --- reading ------------------------------------------------------------------------------
    @property
    def size(self) -> int:
        return self.appender.size

    def view(self, start: int = 0, end: int | None = None) -> memoryview:
        """A zero-copy view of the `.log` bytes [start, end) through the segment's shared mapping (a read-only
        segment: a copy read with pread)."""
        with self.lock:
            end = self.appender.size if end is None else min(end, self.appender.size)
            if end <= start:
                return memoryview(b"")
            return self.reads.view(start, end)

    def note_read(self, position: int, nbytes: int) -> None:
        """Count `nbytes` read at `position` through the shared mapping, by a reader that has let go of the segment's
        lock (segments.residency)."""
        self.reads.note_read(position, nbytes)

    def read_bytes(self, start: int, end: int) -> bytes:
        """A copy of the `.log` bytes [start, end), read with pread (through the append handle while there is one):
        for the bytes just appended to the active segment, which a mapping would have to be remade to reach, and for
        a lookup's batches where the mapping is cold."""
        with self.lock:
            end = min(end, self.appender.size)
            if end <= start:
                return b""
            data = self._read_with(lambda f: self.fs.pread(f, end - start, start), start, borrow=True)
        if len(data) != end - start:
            raise KafkaStorageError(f"short read of [{start}, {end})", file=self.log_path, position=start)
        return data

    def read_into(self, buffer, start: int, end: int) -> int:
        """read_bytes into the start of `buffer` (room for end - start bytes): how many, 0 with none at `start`."""
        with self.lock:
            end = min(end, self.appender.size)
            if end <= start:
                return 0
            done = self._read_with(lambda f: self.fs.pread_into(f, memoryview(buffer)[:end - start], start), start,
                                   borrow=True)
        if done != end - start:
            raise KafkaStorageError(f"short read of [{start}, {end})", file=self.log_path, position=start)
        return done

    def _read_with(self, read, start: int, borrow: bool):
        """`read(file)` on the `.log`: through the append handle while there is one to `borrow` (lock held), else on a
        file opened for it; an OSError as a KafkaStorageError at `start`."""
        handle = self.appender.handle if borrow else None
        try:
            if handle is not None and handle.repin():
                with handle as f:
                    return read(f)
            with self.fs.open(self.log_path, "rb") as f:
                return read(f)
        except OSError as exc:
            raise KafkaStorageError(f"cannot read: {exc}", file=self.log_path, position=start) from exc

    def window(self, start: int, end: int) -> memoryview:
        """A zero-copy view for a reader to keep (segments.segment_reads: a large one maps only its own window)."""
        with self.lock:
            end = min(end, self.appender.size)
            if end <= start:
                return memoryview(b"")
            return self.reads.window(start, end)

    def pread(self, start: int, end: int) -> bytes:
        """The `.log` bytes [start, end) read with pread on a file opened for it (fewer when it is shorter now)."""
        return self._read_with(lambda f: self.fs.pread(f, end - start, start), start, borrow=False)

    def unmap(self) -> bool:
        """Drop the mappings no reader holds, for the descriptor pool (False, kept, while busy or still viewed)."""
        if not self.lock.acquire(blocking=False):
            return False
        try:
            return self.reads.release()
        finally:
            self.lock.release()

    def append_handle(self):
        """The append handle, pinned (for a `with` block): the last one taken while the pool keeps it, else a new
        one from the file system's descriptor pool."""
        handle = self.appender.handle
        if handle is None or not handle.repin():
            handle = self.appender.handle = self.fs.handle(self.log_path, "ab+")
        return handle

    def release_handle(self) -> None:
        """Close the write handles (an inactive segment needs none; reads use mappings)."""
        with self.lock:
            self.fs.release(self.log_path)
            for index in (self._offset_index, self._time_index):
                if index is not None:
                    index.release_handle()
            self.txn_index.release_handle()

    def batches(self, start_position: int = 0, end_position: int | None = None):
        """The batches of the segment from `start_position` (Kafka's file iterator semantics)."""
        return self.reads.batches(start_position, end_position)

    def translate_offset(self, offset: int, start_position: int = 0) -> OffsetPosition | None:
        """The first batch at or after `start_position` whose last offset >= `offset`."""
        for batch in self.batches(start_position):
            if batch.last_offset >= offset:
                return OffsetPosition(batch.base_offset, batch.position, batch.size_in_bytes)
        return None

    def read(self, start_offset: int, max_size: int, max_position: int | None = None,
             min_one_message: bool = True, upper: int | None = None,
             epochs: list[tuple[int, int]] | None = None) -> tuple[int, memoryview] | None:
        """(position, view) of whole batches from the one holding `start_offset`, at most `max_size`
        bytes (or one batch with min_one_message) and never past `max_position`; None past the end.
        Every batch from the indexed one to the last returned is checked to continue its predecessor and
        to end below `upper` (the next segment's base, or the log end), and each one returned to carry the leader
        epoch `epochs` (the leader-epoch cache's (epoch, start offset) entries) gives its offset (a batch's epoch
        is outside its CRC: a flipped one would reach consumers as a wrong record): CorruptRecordError otherwise."""
        try:
            found = self._locate(start_offset, upper)
        except CorruptIndexError as exc:  # the index steered to a batch that does not match it: rebuild
            with self.lock:
                self.on_repair(f"rebuilt the indexes of {self.log_path}: {exc.message}")
                self.rebuild_indexes()
            found = self._locate(start_offset, upper)
        if found is None:
            return None
        start, prev_last, scanned, scanned_from = found
        limit = self.appender.size if max_position is None else min(max_position, self.appender.size)
        if start.position >= limit:
            return start.position, memoryview(b"")
        want = max(max_size, start.size) if min_one_message else max_size
        stop = min(limit, start.position + want)
        if stop - start.position < WINDOW_BYTES and stop - scanned_from <= len(scanned):  # the scan's view holds it
            data = scanned[start.position - scanned_from:stop - scanned_from]
        else:
            data = self.window(start.position, stop)
        end = codec.take_span(data, max_size, min_one_message, prev_last, upper, epochs)  # headers only
        if end is None:  # a check fails: the batch-by-batch walk names it
            end = 0
            for batch in codec.iter_batches(data, position=start.position, source=self.log_path):
                if end + batch.size_in_bytes > max_size and not (min_one_message and end == 0):
                    break
                if end:
                    self.check_follows(batch, prev_last, upper)
                if epochs:
                    self.check_epoch(batch, epochs)
                prev_last = batch.last_offset
                end += batch.size_in_bytes
        # the headers scanned and the batches returned (read through a window or not: the reader moves on from there)
        self.reads.note_read(scanned_from, start.position + end - scanned_from)
        return start.position, data[:end]

    def locate(self, offset: int, upper: int | None, use_index: bool = True) -> tuple[OffsetPosition, int] | None:
        """The first batch whose last offset >= `offset`, with the last offset of the batch before it,
        scanned from the offset index's entry (or the segment's start) and checked batch by batch on the way;
        CorruptIndexError if the entry does not match the batch it points at."""
        found = self._locate(offset, upper, use_index)
        return None if found is None else found[:2]

    def _locate(self, offset: int, upper: int | None,
                use_index: bool = True) -> tuple[OffsetPosition, int, memoryview, int] | None:
        """`locate`, with the view it scanned and the position that view starts at."""
        entry_offset, position = self.offset_index.lookup(offset) if use_index else (self.base_offset, 0)
        return self.reads.locate(offset, upper, entry_offset, position, self.base_offset - 1)

    def check_follows(self, batch, prev_last: int, upper: int | None) -> None:
        """A batch's offsets must lie above its predecessor's and below `upper` (corruption otherwise)."""
        if batch.base_offset <= prev_last or batch.last_offset < batch.base_offset or (
                upper is not None and batch.last_offset >= upper):
            raise CorruptRecordError(
                f"batch offsets [{batch.base_offset}, {batch.last_offset}] do not follow offset {prev_last}"
                + ("" if upper is None else f" and end below {upper}"),
                file=self.log_path, position=batch.position, offset=batch.base_offset)

    def check_epoch(self, batch, epochs: list[tuple[int, int]]) -> None:
        """A batch must carry the leader epoch that the leader-epoch entries give its base offset (the last entry
        starting at or below it; none below the first entry's start): CorruptRecordError otherwise."""
        leading = bf.leading_epoch(epochs, batch.base_offset)
        if leading is None:
            return
        epoch, start = leading
        if batch.partition_leader_epoch != epoch:
            raise CorruptRecordError(
                f"batch at offset {batch.base_offset} carries leader epoch {batch.partition_leader_epoch}, "
                f"but epoch {epoch} leads from offset {start}",
                file=self.log_path, position=batch.position, offset=batch.base_offset)

    def find_offset_by_timestamp(self, timestamp: int, starting_offset: int) -> tuple[int, int] | None:
        """(timestamp, offset) of the first record with timestamp >= `timestamp` and offset >= starting_offset."""
        _, index_offset = self.time_index.lookup(timestamp)
        _, position, following = self.offset_index.lookup_span(max(index_offset, starting_offset))
        # markers count, as in Kafka; not reported to note_read: a lookup is a random read, releasing nothing, and a
        # reported one would push a moving reader's range out
        return self.reads.find_by_timestamp(timestamp, starting_offset, position, following)

    # --- timestamps ---------------------------------------------------------------------------
    def max_timestamp_and_offset(self) -> tuple[int, int]:
        """(max timestamp so far, last offset of its batch), read from the indexes and the last batches once."""
        if self.appender.max_ts is not None:
            return self.appender.max_ts
        with self.lock:
            if self.appender.max_ts is None:
                self.appender.max_ts = self.time_index.last_entry()
                last_indexed = self.offset_index.lookup(2**63 - 1)[1] if self.offset_index.entries else 0
                for batch in self.batches(last_indexed):
                    if batch.max_timestamp > self.appender.max_ts[0]:
                        self.appender.max_ts = (batch.max_timestamp, batch.last_offset)
            return self.appender.max_ts

    @property
    def max_timestamp_so_far(self) -> int:
        return self.max_timestamp_and_offset()[0]

    def largest_timestamp(self) -> int:
        """The segment's max timestamp, or the `.log` mtime when it has none (Kafka's retention rule)."""
        ts = self.max_timestamp_so_far
        return ts if ts >= 0 else self.fs.mtime_ms(self.log_path)

    def rolling_timestamp(self) -> int | None:
        """The first batch's max timestamp (None for an empty segment): segment.ms counts from it."""
        if not self.appender.rolling_ts_loaded:
            first = next(iter(self.batches()), None)
            self.appender.rolling_ts = first.max_timestamp if first is not None else None
            self.appender.rolling_ts_loaded = True
        return self.appender.rolling_ts

    # --- writing ------------------------------------------------------------------------------
    def append(self, largest_offset: int, largest_timestamp: int, offset_of_max_timestamp: int, data,
               size: int | None = None, batches: list[tuple[int, int]] | None = None) -> None:
        """Append whole batches (a buffer, or a list of buffers written in order with `size` bytes in all), indexed
        as Kafka's LogSegment.append does (segments.segment_appender)."""
        self.appender.append(largest_offset, largest_timestamp, offset_of_max_timestamp, data, size, batches)

    def add_index_entries(self, last_offset: int, position: int) -> None:
        """An offset-index entry for the batch at `position` ending at `last_offset`, and a time-index entry for
        the max timestamp so far; a failure only makes the index sparser (logged)."""
        try:
            self.offset_index.append(last_offset, position)
            self.time_index.maybe_append(*self.appender.max_ts)
        except (OSError, KafkaStorageError) as exc:
            log.error("no index entry for offset %d in %s: %s", last_offset, self.log_path, exc)

    def cut_failed_append(self) -> None:
        """Cut the bytes an earlier failed write left (the appender's `cut_pending`) before the next append."""
        cut = self.appender.cut_pending
        try:
            self.truncate_log(cut)
        except OSError as exc:
            raise KafkaStorageError(f"cannot cut a failed append: {exc}", file=self.log_path, position=cut) from exc
        self.appender.cut_pending = None

    def check_append_fits(self, largest_offset: int, position: int, size: int) -> None:
        """RecordBatchTooLargeError unless `size` bytes at `position` ending at `largest_offset` fit the segment (an
        offset within an int32 of the base, at most 2 GiB)."""
        if not 0 <= largest_offset - self.base_offset <= INT32_MAX:
            raise RecordBatchTooLargeError(
                f"offset {largest_offset} does not fit an int32 relative to base {self.base_offset}",
                file=self.log_path, offset=largest_offset)
        if position + size > INT32_MAX:
            raise RecordBatchTooLargeError("a segment cannot exceed 2 GiB", file=self.log_path)

    def restore_after_failed_write(self, position: int) -> None:
        """A failed (maybe torn) write must not leave partial bytes that a later append would follow."""
        try:
            self.truncate_log(position)
        except (OSError, KafkaError) as exc:  # cut before the next append (or by recovery on the next open)
            self.appender.cut_pending = position
            log.error("could not cut a failed append back to %d in %s: %s", position, self.log_path, exc)

    def truncate_log(self, size: int) -> None:
        if self.reads.release():
            with self.append_handle() as f:
                self.fs.truncate(f, size)
        else:  # live views map the old bytes: give them the old inode, continue in a new file
            tmp = self.log_path + ".truncating"
            with self.fs.open(tmp, "wb+") as out:
                self.fs.write(out, self.view(0, size))
                self.fs.fsync(out)
            self.release_handle()
            self.reads.forget()
            self.fs.rename(tmp, self.log_path)
        self.appender.size = size

    def truncate_to(self, offset: int) -> int:
        """Remove every batch whose last offset >= `offset`; return the bytes removed."""
        with self.lock:
            mapping = self.translate_offset(offset, self.offset_index.lookup(offset)[1])
            self.offset_index.truncate_to(offset)
            self.time_index.truncate_to(offset)
            self.txn_index.truncate_to(offset)
            self.offset_index.resize(self.config.max_index_size)
            self.time_index.resize(self.config.max_index_size)
            if mapping is None:
                return 0
            removed = self.appender.size - mapping.position
            self.truncate_log(mapping.position)
            if self.appender.size == 0:
                self.appender.rolling_ts, self.appender.rolling_ts_loaded = None, True
            self.appender.bytes_since_last_index_entry = 0
            self.appender.max_ts = None
            return removed

    def recover(self, upper: int | None = None) -> int:
        """Validate every batch (size, CRC, offsets continuing and below `upper`), truncate at the first
        invalid one and rebuild the indexes; return the bytes removed."""
        with self.lock:
            valid = segment_recovery.index_valid_prefix(self, upper, recovering=True)
            truncated = self.appender.size - valid
            if truncated:
                self.truncate_log(valid)
            return truncated

    def rebuild_indexes(self, upper: int | None = None) -> None:
        """Rebuild both indexes from the batches (up to the first that fails the checks of `recover`)."""
        with self.lock:
            segment_recovery.index_valid_prefix(self, upper, recovering=False)

    def read_next_offset(self) -> int:
        """One past the last offset of the last batch, or the base offset when empty."""
        if not self.appender.size:
            return self.base_offset
        position = self.offset_index.lookup(2**63 - 1)[1] if self.offset_index.entries else 0
        nxt = self.base_offset
        for batch in self.batches(position):
            nxt = batch.next_offset
        return nxt

    # --- lifecycle ----------------------------------------------------------------------------
    def on_become_inactive(self) -> None:
        """On roll: final time-index entry, indexes trimmed to their entries."""
        with self.lock:
            self.time_index.maybe_append(*self.max_timestamp_and_offset(), skip_full_check=True)
            self.offset_index.trim_to_valid_size()
            self.time_index.trim_to_valid_size()

    def resize_indexes(self, size: int) -> None:
        if len(self._new) == 2 and size == self.config.max_index_size:
            return  # neither index is made yet, and each will be made at that size (a new partition's first load)
        self.offset_index.resize(size)
        self.time_index.resize(size)

    def start_flush(self) -> None:
        """Begin writing the `.log`'s appended bytes to the device without waiting for them (a writer of a whole new
        segment, such as the cleaner, calls it as it goes, so the `flush` it ends with has little left to wait for)."""
        with self.lock:
            try:
                with self.append_handle() as f:
                    self.fs.start_writeback(f)
            except OSError as exc:
                raise KafkaStorageError(f"flush failed: {exc}", file=self.log_path) from exc

    def flush(self) -> None:
        with self.lock:
            try:
                if not self.fs.owes_sync(self.log_path):  # (a sync owed needs no descriptor: closing many logs)
                    with self.append_handle() as f:
                        self.fs.fsync(f)
                if self._offset_index is not None:
                    self._offset_index.flush()
                if self._time_index is not None:
                    self._time_index.flush()
                self.txn_index.flush()
            except OSError as exc:
                raise KafkaStorageError(f"flush failed: {exc}", file=self.log_path) from exc

    def close(self, durable: bool = True) -> None:
        """Close the files; `durable`: the indexes it trims are fsynced (a clean shutdown's, not a deletion's)."""
        with self.lock:
            if len(self._new) == 2:  # no index opened (a new segment's few appends): each file written as it ends
                OffsetIndex.write_whole(self.fs, self._path(names.INDEX), b"", durable)
                TimeIndex.write_whole(self.fs, self._path(names.TIME_INDEX),
                                      TimeIndex.sole_entry(*self.max_timestamp_and_offset(), self.base_offset), durable)
                self._new = ()
            else:
                for kind in self._new:  # the other one opened: this one is made now (a segment closed has both files)
                    self.open_index(kind)
                if self.writable and (self.appender.max_ts is not None or self._time_index is not None):
                    self.time_index.maybe_append(*self.max_timestamp_and_offset(), skip_full_check=True)
                for index in (self._offset_index, self._time_index):
                    if index is not None:
                        index.close(durable)
            self.txn_index.close()
            self.reads.release()
            self.reads.forget()
            self.fs.untrack_map(self)
            self.release_handle()

    def files(self) -> list[str]:
        return [self._path(kind) for kind in names.SEGMENT_SUFFIXES]

    def change_suffix(self, suffix: str) -> None:
        """Rename every file of the segment (e.g. to `.deleted`), keeping them open."""
        with self.lock:
            for kind in names.SEGMENT_SUFFIXES:
                old = self._path(kind)
                if self.fs.exists(old):
                    self.fs.rename(old, os.path.join(self.dir, names.file_name(self.base_offset, kind) + suffix))
            self.suffix = suffix
            self.log_path = self._path(names.LOG)
            for index, kind in ((self._offset_index, names.INDEX), (self._time_index, names.TIME_INDEX)):
                if index is not None:
                    index.path = self._path(kind)
            self.txn_index.path = self._path(names.TXN_INDEX)

    def delete_files(self) -> None:
        """Close and remove every file of the segment."""
        self.close()
        for path in self.files():
            if self.fs.exists(path):
                self.fs.remove(path)
