"""One log segment: `<base>.log` with its `.index`, `.timeindex` and `.txnindex` (Kafka's LogSegment).

Byte layout: the `.log` is concatenated RecordBatch v2 batches, no header (kafka-format.md §3.2);
the indexes are described in their modules. Appends follow Kafka exactly: an offset-index entry
(last offset of the batch, its start position) and a time-index entry are written when more than
`index.interval.bytes` accumulated since the previous entry, checked before this append counts;
the time index gets a final entry on roll and close. The segment's `appender` (segments.segment_appender,
native or its Python twin) keeps the append counters and does the roll check, the write and that cadence;
the segment owns the files, the lock and the indexes. Reads are zero-copy memoryviews over an mmap of the
`.log`; a read-only segment (a reader beside a writer it does not control: another engine, a Kafka broker, Spark's
executors) reads with pread() instead, since a writer in another process may truncate a mapped file (follower
truncation, a failed append cut), and touching a mapped page past the end of its file is SIGBUS.
Resident pages: readers report what they read through the shared mapping (`note_read`); a reader moving on through
a segment has the pages it passed released every RELEASE_BYTES (madvise MADV_DONTNEED: the page table entries go, the
page cache keeps the bytes), so a consumer scanning a large segment keeps about that much of it resident, not the whole
segment; a view of released pages reads them again from the page cache. Random reads release nothing (a release costs
more than such a read). A lookup by time reads its batches with pread where no read is known to have touched the
mapping (a first touch costs page faults, which cost more than the copy): the native reader, which knows the mapping's
address, flags the FAULT_AROUND windows of it that its reads touched (`_touched`, cleared again by a release and
made anew with each mapping).
Lifetime of mappings: a mapping is closed only when no view of it is alive (Python's mmap refuses to close with
exported buffers, and every view is taken under the segment's lock before anything else may look for mappings to
drop), so a reader always finishes on the bytes it started on, whatever rolls, truncates, deletes or cleans.
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
import mmap
import os
import random
from collections import deque
from dataclasses import dataclass
from typing import NamedTuple

from engine.common.errors import (
    CorruptIndexError,
    CorruptRecordError,
    KafkaError,
    KafkaStorageError,
    RecordBatchTooLargeError,
)
from engine.record import batch_format as bf
from engine.record import codec
from engine.record.records import first_in_batches
from engine.segments import names, segment_appender
from engine.segments.fs import FileSystem, new_lock
from engine.segments.offset_index import OffsetIndex
from engine.segments.time_index import TimeIndex
from engine.segments.txn_index import TxnIndex

INT32_MAX = 2**31 - 1
WINDOW_BYTES = 1 << 20
RELEASE_BYTES = 8 << 20
READERS = 8  # ranges remembered: as many sequential readers of one segment as are followed at once
FAULT_AROUND = 64 << 10  # a read fault maps up to this much of the page cache around it (Linux's fault_around_bytes)
LOOKUP_READ_BYTES = 256 << 10  # the most a lookup by time reads with pread before it reads through the mapping
_PAGE = mmap.PAGESIZE
log = logging.getLogger("kafkalog.segment")


@dataclass(frozen=True)
class SegmentConfig:
    """The per-segment knobs (Kafka's topic configs of the same names)."""

    index_interval_bytes: int = 4096
    max_index_size: int = 10 * 1024 * 1024
    segment_jitter_ms: int = 0
    segment_ms: int = 7 * 24 * 3600 * 1000


class OffsetPosition(NamedTuple):
    """The batch that holds (or follows) an offset: its base offset, position and size."""

    offset: int
    position: int
    size: int


class LogSegment:
    def __init__(self, fs: FileSystem, directory: str, base_offset: int, config: SegmentConfig, now_ms: int,
                 *, suffix: str = "", writable: bool = True) -> None:
        self.fs, self.dir, self.base_offset, self.config, self.suffix = fs, directory, base_offset, config, suffix
        self.writable = writable
        self.created_ms = now_ms
        self.log_path = self._path(names.LOG)
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
        self.on_repair = lambda what: log.warning("%s", what)  # the owner's recovery report takes these
        self.txn_index = TxnIndex(fs, self._path(names.TXN_INDEX), base_offset)
        self._maps: list = []           # every mmap of the .log that may still have live views
        self._map = None                # the newest one
        self._touched = None            # (mapping, flags): the FAULT_AROUND windows of its addresses reads touched
        self._read_ranges: deque[tuple[int, int]] = deque()  # the latest [start, end) read on through the mapping
        self._lock = new_lock()  # never replaced: the appender keeps it
        self.appender = segment_appender.selected(self, size, now_ms, config.segment_ms - self.roll_jitter_ms)

    def _path(self, kind: str) -> str:
        return os.path.join(self.dir, names.file_name(self.base_offset, kind) + self.suffix)

    def __repr__(self) -> str:
        return f"LogSegment({self.log_path}, size={self.appender.size})"

    # --- indexes (opened lazily: a directory of many segments opens fast) ----------------------
    @property
    def offset_index(self) -> OffsetIndex:
        if self._offset_index is None:
            self._open_index(names.INDEX)
        return self._offset_index

    @property
    def time_index(self) -> TimeIndex:
        if self._time_index is None:
            self._open_index(names.TIME_INDEX)
        return self._time_index

    def _open_index(self, kind: str, check: bool = True) -> None:
        """Open one index; with `check`, an existing one whose entries are wrong makes both be rebuilt."""
        with self._lock:
            attr, cls = ("_offset_index", OffsetIndex) if kind == names.INDEX else ("_time_index", TimeIndex)
            if getattr(self, attr) is not None:
                return
            size = self.appender.size if check and self.writable else None
            try:
                setattr(self, attr, cls(self.fs, self._path(kind), self.base_offset, self.config.max_index_size,
                                        self.writable, log_size=size))
            except CorruptIndexError as exc:
                self.on_repair(f"rebuilt the indexes of {self.log_path}: {exc.message}")
                self.rebuild_indexes()

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
        with self._lock:
            end = self.appender.size if end is None else min(end, self.appender.size)
            if end <= start:
                return memoryview(b"")
            if not self.writable:
                return memoryview(self._pread(start, end))
            if self._map is None or len(self._map) < end:
                whole = self._remap()
            else:
                whole = memoryview(self._map)  # taken before the pool may look for mappings to drop
                self.fs.track_map(self)
            return whole[start:end]

    def note_read(self, position: int, nbytes: int) -> None:
        """Count `nbytes` read at `position` through the shared mapping (by a reader that has let go of the segment's
        lock). A read that continues one of the last READERS ranges read extends it, and once a range was read on for
        RELEASE_BYTES its pages are released; any other read starts a range (see Resident pages above)."""
        end = position + nbytes + FAULT_AROUND
        with self._lock:
            ranges = self._read_ranges
            lo, hi = position, end
            for i, (start, stop) in enumerate(ranges):
                if start <= position <= stop:
                    del ranges[i]
                    lo, hi = start, max(stop, end)
                    break
            else:
                if len(ranges) == READERS:
                    ranges.popleft()
            if hi - lo >= RELEASE_BYTES and self._map is not None:
                top = min(hi, len(self._map))
                top -= top % _PAGE
                if top > lo - lo % _PAGE:
                    self._map.madvise(mmap.MADV_DONTNEED, lo - lo % _PAGE, top - (lo - lo % _PAGE))
                    self._untouch(lo - lo % _PAGE, top)
                lo = position
            ranges.append((lo, hi))

    def _untouch(self, start: int, end: int) -> None:
        """Forget that reads touched the mapping's pages of [start, end) (lock held): every window they may fall in,
        whatever the mapping's address."""
        touched = self._touched
        if touched is not None and touched[0] is self._map:
            flags = touched[1]
            lo, hi = start // FAULT_AROUND, min(len(flags), (end - 1) // FAULT_AROUND + 2)
            if hi > lo:
                flags[lo:hi] = bytes(hi - lo)

    def read_bytes(self, start: int, end: int) -> bytes:
        """A copy of the `.log` bytes [start, end), read with pread (through the append handle while there is one):
        for the bytes just appended to the active segment, which a mapping would have to be remade to reach, and for
        a lookup's batches where the mapping is cold."""
        with self._lock:
            end = min(end, self.appender.size)
            if end <= start:
                return b""
            data = self._read_with(lambda f: self.fs.pread(f, end - start, start), start, borrow=True)
        if len(data) != end - start:
            raise KafkaStorageError(f"short read of [{start}, {end})", file=self.log_path, position=start)
        return data

    def read_into(self, buffer, start: int, end: int) -> int:
        """read_bytes into the start of `buffer` (room for end - start bytes): how many, 0 with none at `start`."""
        with self._lock:
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
        """A zero-copy view for a reader to keep: a view of WINDOW_BYTES or more maps only its own
        (page-aligned) window, unmapped once the reader drops it, so scanning a large log does not keep
        every page it read mapped in this process; smaller ones use the shared mapping."""
        with self._lock:
            end = min(end, self.appender.size)
            if end - start < WINDOW_BYTES or not self.writable:
                return self.view(start, end)
            self._release_maps()
            aligned = start - start % mmap.ALLOCATIONGRANULARITY
            with self.fs.open(self.log_path, "rb") as f:
                mapping = self.fs.mmap(f, end - aligned, writable=False, offset=aligned)
            self._maps.append(mapping)
            whole = memoryview(mapping)
            self.fs.track_map(self)
            return whole[start - aligned:end - aligned]

    def _pread(self, start: int, end: int) -> bytes:
        """The `.log` bytes [start, end) read with pread on a file opened for it (fewer when it is shorter now)."""
        return self._read_with(lambda f: self.fs.pread(f, end - start, start), start, borrow=False)

    def _positional_batches(self, start: int, end: int | None):
        """The batches of [start, end) of a read-only segment, read with pread a window at a time."""
        limit = self.appender.size if end is None else min(end, self.appender.size)
        position, want = start, 64 << 10
        while position < limit:
            data = self._pread(position, min(limit, position + want))
            done = position
            for batch in codec.iter_batches(data, position=position, source=self.log_path):
                done = batch.position + batch.size_in_bytes
                yield batch
            if done == position:  # no whole batch in the window
                if len(data) < bf.LOG_OVERHEAD or position + len(data) >= limit:
                    return  # a partial tail
                want = bf.entry_size(data)
            else:
                position, want = done, 64 << 10

    def _remap(self) -> memoryview:
        """Map the whole `.log` again (lock held); a view of the new mapping, taken before the pool may look for
        mappings to drop."""
        self._release_maps()
        with self.fs.open(self.log_path, "rb") as f:  # the mapping outlives this descriptor
            self._map = self.fs.mmap(f, self.appender.size, writable=False)
        self._maps.append(self._map)
        self._touched = (self._map, bytearray(self.appender.size // FAULT_AROUND + 2))  # untouched at any address
        whole = memoryview(self._map)
        self.fs.track_map(self)
        return whole

    def unmap(self) -> bool:
        """Drop the mappings no reader holds, for the descriptor pool (False, kept, while busy or still viewed)."""
        if not self._lock.acquire(blocking=False):
            return False
        try:
            return self._release_maps()
        finally:
            self._lock.release()

    def append_handle(self):
        """The append handle, pinned (for a `with` block): the last one taken while the pool keeps it, else a new
        one from the file system's descriptor pool."""
        handle = self.appender.handle
        if handle is None or not handle.repin():
            handle = self.appender.handle = self.fs.handle(self.log_path, "ab+")
        return handle

    def release_handle(self) -> None:
        """Close the write handles (an inactive segment needs none; reads use mappings)."""
        with self._lock:
            self.fs.release(self.log_path)
            for index in (self._offset_index, self._time_index):
                if index is not None:
                    index.release_handle()
            self.txn_index.release_handle()

    def _release_maps(self) -> bool:
        """Close every mapping without live views; True if none is left."""
        alive = []
        for m in self._maps:
            try:
                m.close()
            except BufferError:
                alive.append(m)
        self._maps = alive
        if self._map is not None and self._map not in alive:
            self._map = None
        return not alive

    def batches(self, start_position: int = 0, end_position: int | None = None):
        """The batches of the segment from `start_position` (Kafka's file iterator semantics)."""
        if not self.writable:
            return self._positional_batches(start_position, end_position)
        return codec.iter_batches(self.view(start_position, end_position), position=start_position,
                                  source=self.log_path)

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
            with self._lock:
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
        if self.writable:  # the headers scanned and the batches returned (read through a window or not: the reader
            self.note_read(scanned_from, start.position + end - scanned_from)  # moves on from there either way)
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
        prev_last = self.base_offset - 1
        if self.writable:
            view = self.view(position)
            found = codec.scan_to_offset(view, position, offset, entry_offset, prev_last, upper)  # headers only
            if found is not None:
                base, at, size, before = found
                return OffsetPosition(base, at, size), before, view, position
        else:  # read a window at a time: nothing to keep for the read
            view = memoryview(b"")
        # the walk stays off the frame's locals: an error's traceback keeps the frame, which must not keep an
        # export of the view alive
        for batch in (codec.iter_batches(view, position=position, source=self.log_path) if self.writable
                      else self.batches(position)):
            if batch.position == position and position > 0:
                if batch.last_offset != entry_offset:
                    raise CorruptIndexError(f"the entry for offset {entry_offset} points at a batch ending at "
                                            f"{batch.last_offset}", file=self.offset_index.path, position=position)
            else:
                self.check_follows(batch, prev_last, upper)
            if batch.last_offset >= offset:
                return OffsetPosition(batch.base_offset, batch.position, batch.size_in_bytes), prev_last, view, position
            prev_last = batch.last_offset
        return None

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
        if not self.writable:
            return first_in_batches(self.batches(position), timestamp, starting_offset)
        data = self.lookup_read(position, following)
        if data is not None:
            found = codec.first_at_or_after(data, timestamp, starting_offset, position=position, source=self.log_path)
            if found is not None:
                return found
        return codec.first_at_or_after(self.view(position), timestamp, starting_offset, position=position,
                                       source=self.log_path)

    def lookup_read(self, position: int, following: int | None) -> bytes | None:
        """For a lookup by time: the batches from the indexed `position` to `following` (OffsetIndex.lookup_span's;
        else the segment's end) read with pread, unless the mapping is known to be touched there or they are more than
        LOOKUP_READ_BYTES (None: read them through the mapping). Known here means every window the span may fall
        in, at whatever address (the native reader checks the windows it does fall in)."""
        with self._lock:
            size = self.appender.size
            end = following if following is not None and position < following <= size else size
            if not position < end <= position + LOOKUP_READ_BYTES:
                return None
            touched = self._touched
            if (touched is not None and touched[0] is self._map and len(self._map) >= size
                    and all(touched[1][position // FAULT_AROUND:(end - 1) // FAULT_AROUND + 2])):
                return None
            return self.read_bytes(position, end)

    # --- timestamps ---------------------------------------------------------------------------
    def max_timestamp_and_offset(self) -> tuple[int, int]:
        """(max timestamp so far, last offset of its batch), read from the indexes and the last batches once."""
        if self.appender.max_ts is not None:
            return self.appender.max_ts
        with self._lock:
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
        if self._release_maps():
            with self.append_handle() as f:
                self.fs.truncate(f, size)
        else:  # live views map the old bytes: give them the old inode, continue in a new file
            tmp = self.log_path + ".truncating"
            with self.fs.open(tmp, "wb+") as out:
                self.fs.write(out, self.view(0, size))
                self.fs.fsync(out)
            self.release_handle()
            self._maps, self._map = [], None
            self.fs.rename(tmp, self.log_path)
        self.appender.size = size

    def truncate_to(self, offset: int) -> int:
        """Remove every batch whose last offset >= `offset`; return the bytes removed."""
        with self._lock:
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
        with self._lock:
            valid = self._index_valid_prefix(upper, recovering=True)
            truncated = self.appender.size - valid
            if truncated:
                self.truncate_log(valid)
            return truncated

    def rebuild_indexes(self, upper: int | None = None) -> None:
        """Rebuild both indexes from the batches (up to the first that fails the checks of `recover`)."""
        with self._lock:
            self._index_valid_prefix(upper, recovering=False)

    def _index_valid_prefix(self, upper: int | None, recovering: bool) -> int:
        """Re-index the valid prefix of the `.log`; return its length."""
        for kind in (names.INDEX, names.TIME_INDEX):
            self._open_index(kind, check=False)
        self.offset_index.reset(self.config.max_index_size)
        self.time_index.reset(self.config.max_index_size)
        if recovering:
            self.txn_index.reset()
        valid = last_index_entry = 0
        max_ts = (-1, self.base_offset)
        offsets, times, last_indexed_ts = bytearray(), bytearray(), -1  # entries, written in one go
        base, interval, prev_last = self.base_offset, self.config.index_interval_bytes, self.base_offset - 1
        try:
            for batch in self.batches():
                batch.ensure_valid()  # size and CRC, as Kafka's recovery checks them
                self.check_follows(batch, prev_last, upper)
                if batch.last_offset - base > INT32_MAX:
                    raise CorruptRecordError("batch offset out of the segment's int32 range",
                                             file=self.log_path, position=batch.position)
                prev_last = batch.last_offset
                if batch.max_timestamp > max_ts[0]:
                    max_ts = (batch.max_timestamp, batch.last_offset)
                if valid - last_index_entry > interval:  # Kafka's cadence, as in append()
                    offsets += OffsetIndex.ENTRY.pack(batch.last_offset - base, valid)
                    if max_ts[0] > last_indexed_ts:
                        times += TimeIndex.ENTRY.pack(max_ts[0], max_ts[1] - base)
                        last_indexed_ts = max_ts[0]
                    last_index_entry = valid
                valid += batch.size_in_bytes
        except KafkaError as exc:  # the first invalid batch ends the valid prefix
            log.warning("%s %s: stopped at position %d: %s", "recovering" if recovering else "indexing",
                        self.log_path, valid, exc)
        self.appender.max_ts = max_ts
        # a segment written under a larger segment.index.bytes (or brought back by a power cut) may need more
        # room than the config gives now: the rebuilt index holds every entry, as the one it replaces did
        for index, needed in ((self.offset_index, len(offsets)), (self.time_index, len(times) + TimeIndex.ENTRY.size)):
            index.resize(max(index.max_entries * index.entry_size, needed))
        self.offset_index.load_entries(offsets)
        self.time_index.load_entries(times)
        self.offset_index.trim_to_valid_size()
        self.time_index.maybe_append(*max_ts, skip_full_check=True)
        self.time_index.trim_to_valid_size()
        self.appender.bytes_since_last_index_entry = 0
        self.appender.rolling_ts_loaded = False
        return valid

    def read_next_offset(self) -> int:
        """One past the last offset of the last batch, or the base offset when empty."""
        position = self.offset_index.lookup(2**63 - 1)[1] if self.offset_index.entries else 0
        nxt = self.base_offset
        for batch in self.batches(position):
            nxt = batch.next_offset
        return nxt

    # --- lifecycle ----------------------------------------------------------------------------
    def on_become_inactive(self) -> None:
        """On roll: final time-index entry, indexes trimmed to their entries."""
        with self._lock:
            self.time_index.maybe_append(*self.max_timestamp_and_offset(), skip_full_check=True)
            self.offset_index.trim_to_valid_size()
            self.time_index.trim_to_valid_size()

    def resize_indexes(self, size: int) -> None:
        self.offset_index.resize(size)
        self.time_index.resize(size)

    def start_flush(self) -> None:
        """Begin writing the `.log`'s appended bytes to the device without waiting for them (a writer of a whole new
        segment, such as the cleaner, calls it as it goes, so the `flush` it ends with has little left to wait for)."""
        with self._lock:
            try:
                with self.append_handle() as f:
                    self.fs.start_writeback(f)
            except OSError as exc:
                raise KafkaStorageError(f"flush failed: {exc}", file=self.log_path) from exc

    def flush(self) -> None:
        with self._lock:
            try:
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
        with self._lock:
            if self.writable and (self.appender.max_ts is not None or self._time_index is not None):
                self.time_index.maybe_append(*self.max_timestamp_and_offset(), skip_full_check=True)
            for index in (self._offset_index, self._time_index):
                if index is not None:
                    index.close(durable)
            self.txn_index.close()
            self._release_maps()
            self._maps, self._map, self._touched = [], None, None
            self.fs.untrack_map(self)
            self.release_handle()

    def files(self) -> list[str]:
        return [self._path(kind) for kind in names.SEGMENT_SUFFIXES]

    def change_suffix(self, suffix: str) -> None:
        """Rename every file of the segment (e.g. to `.deleted`), keeping them open."""
        with self._lock:
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
