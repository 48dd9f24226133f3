"""One partition's segments on local disk: append, roll, flush, read, truncate, remove (Kafka's LocalLog).

On-disk layout: a `<topic>-<partition>/` directory of segments (segments.segment), opened by
segments.log_loader. Offsets it owns: the log end (LEO, the next offset to assign) and the recovery
point (every byte below it is fsynced). It knows nothing of producers, leader epochs, the log start
offset or the high watermark: engine.log.unified_log, which owns a LocalLog, keeps those.
Crash policy: appends reach the page cache at once and the disk on `flush()` (`flush.messages`
counts appends); a roll flushes the segment it closes; removed segments are renamed `.deleted` and
their files unlinked after `file.delete.delay.ms`, so a crash in between leaves only leftovers the
loader removes; cleaned segments replace old ones through `.swap` files (`replace_segments`).
Thread-safety: the owner serialises every mutating call (append, roll, flush, truncation, removal);
reads may run at the same time and see a consistent prefix.
"""
from __future__ import annotations

import os
from typing import NamedTuple, Sequence

from engine.common.clock import Clock
from engine.common.errors import OffsetOutOfRangeError
from engine.record import codec
from engine.segments import log_loader, names
from engine.segments.fs import FileSystem
from engine.segments.log_config import LogConfig
from engine.segments.log_segments import LogSegments
from engine.segments.segment import LogSegment
from engine.segments.txn_index import AbortedTxn


class FetchData(NamedTuple):
    """Whole batches read from one segment: a zero-copy view (decode it with engine.iter_batches)."""

    start_offset: int
    segment_base: int
    position: int
    records: memoryview

    def batches(self, source: str | None = None):
        """The batches holding offsets at or after `start_offset` (the view starts at the batch holding the
        position the offset index gave, so its first batches may end before it)."""
        for batch in codec.iter_batches(self.records, source=source):
            if batch.next_offset > self.start_offset:
                yield batch


class LocalLog:
    def __init__(self, fs: FileSystem, directory: str, config: LogConfig, clock: Clock, *,
                 recovery_point: int = 0, log_start_offset: int = 0, clean_shutdown: bool = False,
                 listing: Sequence[str] | None = None) -> None:
        """Load `directory` (segments.log_loader; `listing`: its files, where the caller knows them); `recovery` says
        what had to be repaired."""
        self.fs, self.dir, self.config, self.clock = fs, directory, config, clock
        loaded = log_loader.load(fs, directory, config, clock, recovery_point=recovery_point,
                                 log_start_offset=log_start_offset, clean_shutdown=clean_shutdown, listing=listing)
        self.segments: LogSegments = loaded.segments
        self.active_segment: LogSegment = self.segments.last  # the last segment, the one appended to
        self.log_end_offset = loaded.next_offset
        self.loaded_log_start_offset = loaded.log_start_offset
        self.recovery_point = loaded.recovery_point
        self.recovery = loaded.report
        self._listed: Sequence[str] | None = loaded.files  # the directory as the loader listed it (see take_listing)
        self.last_flush_ms = clock.time_ms()
        self._pending_deletes: tuple[tuple[int, LogSegment], ...] = ()  # (due, segment), oldest first

    def take_listing(self) -> Sequence[str] | None:
        """The directory's files as the loader listed them, for the log's other owners as it loads; once (stale after
        that, so not kept: None)."""
        listed, self._listed = self._listed, None
        return listed

    def size_in_bytes(self) -> int:
        return sum(s.size for s in self.segments.all())

    def _new_segment(self, base: int) -> LogSegment:
        seg = LogSegment(self.fs, self.dir, base, self.config.segment, self.clock.time_ms())
        seg.on_repair = self.recovery.note
        seg.resize_indexes(self.config.segment_index_bytes)
        self.segments.add(seg)
        self.active_segment = seg
        return seg

    # --- appending ----------------------------------------------------------------------------
    def try_append(self, last_offset: int, max_ts: int, offset_of_max: int, data, size: int,
                   batches: list[tuple[int, int]] | None = None) -> bool:
        """`append`, unless the active segment must roll first (Kafka's shouldRoll: False, nothing written)."""
        if not self.active_segment.appender.try_append(last_offset, max_ts, offset_of_max, data, size, batches,
                                                       self.config.segment_bytes, self.clock):
            return False
        self._appended(last_offset)
        return True

    def append_batch(self, data, first_offset: int, leader_epoch: int, log_append_time: int, max_batch_bytes: int,
                     source: str, producer: tuple[int, int, int, bool] | None = None) -> tuple[int, int, int] | None:
        """A lone batch checked, given offsets and appended by the active segment in one call, when it has no
        producer id or is `producer`'s next batch: (id, epoch, base sequence, transactional)
        (segments.segment_appender.append_batch): (next offset, max timestamp, its offset), or None when the general
        path must do it."""
        done = self.active_segment.appender.append_batch(data, first_offset, leader_epoch, log_append_time,
                                                         max_batch_bytes, source, self.config.segment_bytes,
                                                         self.clock, *(producer or ()))
        if done is not None:
            self._appended(done[0] - 1)
        return done

    def append(self, last_offset: int, max_ts: int, offset_of_max: int, data, size: int,
               batches: list[tuple[int, int]] | None = None) -> None:
        """Write whole batches (bytes, or a list of pieces for writev) ending at `last_offset` to the active
        segment (`batches`: their (last offset, size), to index each); moves the LEO and flushes when
        `flush.messages` appends have accumulated."""
        self.active_segment.append(last_offset, max_ts, offset_of_max, data, size, batches)
        self._appended(last_offset)

    def _appended(self, last_offset: int) -> None:
        self.log_end_offset = last_offset + 1
        if self.log_end_offset - self.recovery_point >= self.config.flush_messages:
            self.flush()

    def roll(self, expected_next_offset: int | None = None) -> LogSegment:
        """Start a new active segment at max(expected_next_offset, LEO); the old one is flushed."""
        base = max(expected_next_offset or 0, self.log_end_offset)
        old = self.active_segment
        if old.base_offset == base and old.size == 0:
            return old
        old.on_become_inactive()
        for suffix in names.SEGMENT_SUFFIXES:
            stale = os.path.join(self.dir, names.file_name(base, suffix))
            if self.fs.exists(stale):
                self.fs.remove(stale)
        seg = self._new_segment(base)
        self.flush(base)
        old.release_handle()
        return seg

    # --- flushing -------------------------------------------------------------------------------
    def flush(self, offset: int | None = None) -> None:
        """fsync every segment holding offsets in [recovery point, offset); advance the recovery point."""
        offset = self.log_end_offset if offset is None else offset
        if offset <= self.recovery_point and offset != self.log_end_offset:
            return
        active, new_files = self.active_segment, False
        for seg in self.segments.from_offset(self.recovery_point):
            if seg.base_offset >= offset and seg is not active:
                break
            seg.flush()
            if seg is not active:
                seg.release_handle()
            new_files |= seg.base_offset >= self.recovery_point
        if new_files:
            self.fs.fsync_dir(self.dir)
        self.recovery_point = max(self.recovery_point, offset)
        self.last_flush_ms = self.clock.time_ms()

    def flush_due(self) -> bool:
        """Whether `flush.ms` passed since the last flush with unflushed appends."""
        return (self.clock.time_ms() - self.last_flush_ms >= self.config.flush_ms
                and self.log_end_offset > self.recovery_point)

    # --- reading ------------------------------------------------------------------------------
    def read(self, start_offset: int, max_bytes: int, upper_bound: int, min_one_message: bool,
             epochs: list[tuple[int, int]] | None = None, active_end: tuple[int, int] | None = None) -> FetchData:
        """Whole batches from the one holding `start_offset`, up to `max_bytes` (at least one batch when
        `min_one_message`), never a batch whose last offset reaches `upper_bound` (<= the LEO); each batch returned
        must carry the leader epoch `epochs` (the leader-epoch cache's entries) gives its offset (LogSegment.read).
        `active_end` (base offset, size) of the active segment taken with the LEO under the caller's lock: bytes
        appended after it are not read."""
        leo = self.log_end_offset
        if start_offset > leo:
            raise OffsetOutOfRangeError(f"offset {start_offset} is past the log end {leo}", file=self.dir,
                                        offset=start_offset)
        seg, nxt = self.segments.holding(start_offset) if start_offset < upper_bound else (None, None)
        while seg is not None:
            limit = None if upper_bound >= leo else seg.translate_offset(upper_bound,
                                                                         seg.offset_index.lookup(upper_bound)[1])
            position = None if limit is None else limit.position
            if position is None and active_end is not None and active_end[0] == seg.base_offset:
                position = active_end[1]
            got = seg.read(start_offset, max_bytes, position, min_one_message, upper=leo if nxt is None else nxt,
                           epochs=epochs)
            if got is not None:
                return FetchData(start_offset, seg.base_offset, got[0], got[1])
            seg, nxt = self.segments.following(seg.base_offset)  # nothing at or after start_offset here (a gap)
        active = self.active_segment
        return FetchData(start_offset, active.base_offset, active.size, memoryview(b""))

    def collect_aborted(self, start_offset: int, upper_bound: int) -> list[AbortedTxn]:
        """Aborted transactions overlapping [start_offset, upper_bound), from the `.txnindex` of the segment
        holding `start_offset` on (Kafka's collectAbortedTransactions: the search stops at the first entry
        whose LSO reaches the bound)."""
        found: list[AbortedTxn] = []
        for seg in self.segments.from_offset(start_offset):  # a later segment may hold the marker
            got, done = seg.txn_index.collect_aborted(start_offset, upper_bound)
            found += got
            if done:
                break
        return found

    # --- truncation and removal ---------------------------------------------------------------
    def truncate_to(self, offset: int) -> None:
        """Remove everything at and after `offset` (which is below the LEO and at or above the first base)."""
        for seg in self.segments.after(offset):
            self.segments.remove(seg)
            seg.delete_files()
        self.active_segment = self.segments.last
        self.active_segment.truncate_to(offset)
        self.active_segment.resize_indexes(self.config.segment_index_bytes)
        self.log_end_offset = offset
        self.recovery_point = min(self.recovery_point, offset)
        self._make_truncation_durable()

    def _make_truncation_durable(self) -> None:
        """fsync the cut segment and the directory: a power loss must not bring removed batches back beside
        the ones appended after the truncation."""
        self.active_segment.flush()
        self.fs.fsync_dir(self.dir)

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Drop every segment and start empty at `offset`."""
        for seg in self.segments.all():
            self.segments.remove(seg)
            seg.delete_files()
        self._new_segment(offset)
        self.log_end_offset = self.recovery_point = offset
        self._make_truncation_durable()

    def remove_segments(self, doomed: list[LogSegment]) -> None:
        """Take these oldest segments (never the active one) out of the log: renamed `.deleted` now, unlinked
        by `delete_pending_files()` once `file.delete.delay.ms` has passed."""
        for seg in doomed:
            self.segments.remove(seg)
            self._retire(seg)
        self.recovery_point = max(self.recovery_point, self.segments.first.base_offset)

    def replace_segments(self, new: list[LogSegment], old: list[LogSegment]) -> None:
        """Swap cleaned segments (written as `.cleaned`, flushed) in for `old`, as Kafka's replaceSegments does:
        `.cleaned` -> `.swap` (highest base first), the old segments -> `.deleted` (unlinked later), `.swap` ->
        final names; the directory is fsynced after each step (segments.log_loader finishes or undoes a swap
        that a crash interrupted)."""
        for seg in old + new:
            seg.release_handle()  # pooled handles are keyed by path, and the new files take the old names
        for seg in sorted(new, key=lambda s: s.base_offset, reverse=True):
            seg.change_suffix(names.SWAP)
        self.fs.fsync_dir(self.dir)
        for seg in new:
            self.segments.add(seg)  # replaces the old segment at the same base
        kept = {seg.base_offset for seg in new}
        for seg in old:
            if seg.base_offset not in kept:
                self.segments.remove(seg)
            self._retire(seg)
        self.fs.fsync_dir(self.dir)
        for seg in new:
            seg.change_suffix("")
        self.fs.fsync_dir(self.dir)

    def _retire(self, seg: LogSegment) -> None:
        """Rename a removed segment's files `.deleted`, to be unlinked after `file.delete.delay.ms`; an older
        segment still pending under the same names (an earlier clean of the same base) goes now."""
        for _, pending in self._pending_deletes:
            if pending.base_offset == seg.base_offset:
                pending.delete_files()
        self._pending_deletes = tuple(p for p in self._pending_deletes if p[1].base_offset != seg.base_offset)
        seg.change_suffix(names.DELETED)
        self._pending_deletes += ((self.clock.time_ms() + self.config.file_delete_delay_ms, seg),)

    def delete_pending_files(self) -> int:
        """Remove `.deleted` segments whose `file.delete.delay.ms` has passed."""
        now = self.clock.time_ms()
        ready = [seg for due, seg in self._pending_deletes if due <= now]
        self._pending_deletes = tuple((due, seg) for due, seg in self._pending_deletes if due > now)
        for seg in ready:
            seg.delete_files()
        return len(ready)

    def close(self, flush: bool = True) -> None:
        """Flush and close every segment; pending deletions happen now. Without `flush`, only close (the
        `.deleted` files stay for the next load to remove)."""
        if flush:
            self.flush()
        for seg in self.segments.all():
            seg.close(durable=flush)
        if flush:
            for _, seg in self._pending_deletes:
                seg.delete_files()
        self._pending_deletes = ()
