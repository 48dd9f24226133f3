"""One clean of one compacted log (Kafka's LogCleaner.Cleaner): the offset map, then the rewritten segments.

A clean reads the dirty section [first dirty, first uncleanable) into the offset map (key -> last offset,
segments.offset_map), skipping aborted transactional batches; if the map fills, the section ends earlier and a
later pass goes on. It then recopies every segment from the log's start up to the map's end, in groups that fit
`segment.bytes` and `segment.index.bytes` (and an int32 offset span), one new segment per group, keeping:
- a record past the map's end; a keyed record at or after its key's mapped offset (a key the map has not seen
  is kept), unless it is a tombstone whose batch's delete horizon has passed;
- control batches until their transaction's data is gone and their horizon has passed (an ABORT marker goes
  back into the new segment's `.txnindex` while its data remains); aborted transactional data never;
- as an empty batch (header only): the last batch of each active producer and the last batch of the round.
A batch that keeps every record and needs no new horizon is copied byte for byte; otherwise it is rebuilt with
the same offsets, producer fields and epoch (engine.record.codec.rebuild_batch). The first time a batch holding
tombstones (or an empty transaction's marker) is kept, its base timestamp becomes the delete horizon
(now + `delete.retention.ms`, attribute bit 6).
Byte layout: the new segment is an ordinary segment (segments.segment) written as `<base>.*.cleaned`.
Crash policy: the group's new segment is complete and fsynced as `.cleaned` before anything is renamed (its writeback
is started after each piece written, so that fsync has little left to wait for); then
`.cleaned` -> `.swap`, the old segments -> `.deleted`, `.swap` -> final names, each step made durable
(segments.local_log.replace_segments); segments.log_loader resolves a crash at any step to the state before or
after that group's swap. The caller checkpoints the new first dirty offset only after every group is swapped.
Thread-safety: one clean per log at a time; it reads inactive segments without the log's lock and takes it
(through `replace`) only to swap, which fails cleanly (CleaningAbortedError) if the log changed under it.
"""
from __future__ import annotations

import heapq
import logging
import os
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Callable

from engine.common.errors import CleaningAbortedError, InvalidConfigurationError, KafkaError
from engine.record import batch_format as bf
from engine.record import codec
from engine.segments import names
from engine.segments.log_config import LogConfig
from engine.segments.segment import INT32_MAX, LogSegment
from engine.segments.txn_index import AbortedTxn

log = logging.getLogger("kafkalog.cleaner")
NO_HORIZON = 2**63 - 1  # earliest_delete_horizon when no batch has one
WRITE_BYTES = 1 << 20  # kept batches are written out in pieces of about this size (Kafka's I/O buffer is 512 KiB)


@dataclass
class CleanerStats:
    """What a clean did, for its summary line (Kafka's CleanerStats)."""

    bytes_read: int = 0
    bytes_written: int = 0
    records_read: int = 0
    records_written: int = 0
    keys: int = 0
    map_slots: int = 0
    dirty: tuple[int, int] = (0, 0)
    segments_before: int = 0
    segments_after: int = 0
    start: float = field(default_factory=time.monotonic)
    map_done: float = 0.0
    end: float = 0.0

    @property
    def seconds(self) -> float:
        return max(self.end - self.start, 1e-9)

    def describe(self, name: str) -> str:
        """One summary in the spirit of Kafka's cleaner log line."""
        mb = 1 << 20
        reduction = 100.0 * (1 - self.bytes_written / self.bytes_read) if self.bytes_read else 0.0
        return (f"cleaned {name} (dirty section [{self.dirty[0]}, {self.dirty[1]})): {self.bytes_read / mb:.1f} MB "
                f"({self.records_read} records, {self.segments_before} segments) -> {self.bytes_written / mb:.1f} MB "
                f"({self.records_written} records, {self.segments_after} segments), {reduction:.1f}% smaller; "
                f"{self.keys} distinct keys mapped ({100.0 * self.keys / max(1, self.map_slots):.1f}% of the offset "
                f"map); {self.seconds:.2f} s ({self.bytes_read / mb / self.seconds:.1f} MB/s, "
                f"{100.0 * (self.map_done - self.start) / self.seconds:.0f}% building the map)")


@dataclass(frozen=True)
class ActiveProducer:
    """What a clean must keep of a producer the log still tracks (Kafka's LastRecord)."""

    last_data_offset: int | None
    producer_epoch: int


class _TxnTracker:
    """Kafka's CleanedTransactionMetadata: which transactional batches and markers a pass may drop."""

    def __init__(self) -> None:
        self._aborted: list[tuple[int, int, AbortedTxn]] = []  # heap by first offset
        self._ongoing_committed: set[int] = set()
        self._ongoing_aborted: dict[int, list] = {}  # producer -> [AbortedTxn, last batch offset seen or None]
        self._seen: set[AbortedTxn] = set()
        self.cleaned_index = None

    def add_aborted(self, txns: list[AbortedTxn]) -> None:
        for txn in txns:
            if txn not in self._seen:  # a later segment's range may report a transaction again
                self._seen.add(txn)
                heapq.heappush(self._aborted, (txn.first_offset, txn.last_offset, txn))

    def _consume_up_to(self, offset: int) -> None:
        while self._aborted and self._aborted[0][0] <= offset:
            txn = heapq.heappop(self._aborted)[2]
            self._ongoing_aborted.setdefault(txn.producer_id, [txn, None])

    def on_control_batch(self, batch) -> bool:
        """True when the marker may go: its transaction's data is gone from this pass."""
        self._consume_up_to(batch.last_offset)
        records = batch.records()
        if not records:
            return True  # an empty control batch was already cleaned
        ctype = records[0].control_type
        if ctype == bf.ABORT:
            ongoing = self._ongoing_aborted.pop(batch.producer_id, None)
            if ongoing is not None and ongoing[1] is not None:
                if self.cleaned_index is not None:
                    self.cleaned_index.append(ongoing[0])
                return False
            return True
        if ctype == bf.COMMIT:
            saw_data = batch.producer_id in self._ongoing_committed
            self._ongoing_committed.discard(batch.producer_id)
            return not saw_data
        return False

    def on_data_batch(self, batch) -> bool:
        """True when the batch belongs to an aborted transaction. (Only a transactional batch or a marker reads what
        _consume_up_to moves, and each consumes up to itself first, so a non-transactional batch need not.)"""
        if not batch.is_transactional:
            return False
        self._consume_up_to(batch.last_offset)
        ongoing = self._ongoing_aborted.get(batch.producer_id)
        if ongoing is not None:
            ongoing[1] = batch.last_offset
            return True
        self._ongoing_committed.add(batch.producer_id)
        return False


def earliest_delete_horizon(segments: list[LogSegment]) -> int:
    """The earliest delete horizon set on a batch of `segments` (a cleaned batch holding tombstones or a transaction
    marker), from batch headers; a huge number when there is none."""
    return min((h for seg in segments for b in seg.batches() if (h := b.delete_horizon_ms) is not None),
               default=NO_HORIZON)


def group_segments_by_size(segments: list[LogSegment], max_size: int, max_index_size: int,
                           first_uncleanable: int) -> list[list[LogSegment]]:
    """Kafka's groupSegmentsBySize: runs of consecutive segments whose `.log`, `.index` and `.timeindex` sizes
    each stay within their limits and whose offsets fit an int32 relative to the group's base."""
    groups: list[list[LogSegment]] = []
    i = 0
    while i < len(segments):
        group = [segments[i]]
        log_size = segments[i].size
        index_size = segments[i].offset_index.size_in_bytes()
        time_size = segments[i].time_index.size_in_bytes()
        i += 1
        while i < len(segments):
            seg = segments[i]
            last = segments[i + 1].base_offset - 1 if i + 1 < len(segments) else first_uncleanable - 1
            if not (log_size + seg.size <= max_size
                    and index_size + seg.offset_index.size_in_bytes() <= max_index_size
                    and time_size + seg.time_index.size_in_bytes() <= max_index_size
                    and (seg.size == 0 or last - group[0].base_offset <= INT32_MAX)):
                break
            group.append(seg)
            log_size += seg.size
            index_size += seg.offset_index.size_in_bytes()
            time_size += seg.time_index.size_in_bytes()
            i += 1
        groups.append(group)
    return groups


@dataclass
class CleanableLog:
    """What a clean needs from the log it cleans (the layers above own producers, the LSO and the lock)."""

    name: str
    segments: Callable[[], list[LogSegment]]              # every segment, by base offset (the active one last)
    next_offset_of: Callable[[LogSegment], int]            # where a segment ends: the next base, or the LEO
    collect_aborted: Callable[[int, int], list[AbortedTxn]]
    active_producers: Callable[[], dict[int, ActiveProducer]]
    replace: Callable[[list[LogSegment], list[LogSegment]], None]  # swap new segments for old, or abort


class Cleaner:
    """Cleans logs with one offset map (Kafka's Cleaner); `progress(bytes done, bytes total)` is told as it goes."""

    def __init__(self, offset_map, clock, progress: Callable[[int, int], None] | None = None,
                 should_stop: Callable[[], bool] = lambda: False) -> None:
        self.map, self.clock = offset_map, clock
        self.progress = progress or (lambda done, total: None)
        self.should_stop = should_stop

    def _check_done(self, name: str) -> None:
        if self.should_stop():
            raise CleaningAbortedError(f"the clean of {name} was stopped")

    @contextmanager
    def _reading(self, target: CleanableLog, seg: LogSegment):
        """A segment that left the log while it was read (a truncation, retention) abandons the clean."""
        try:
            yield
        except (OSError, KafkaError) as exc:
            if isinstance(exc, CleaningAbortedError) or seg in target.segments():
                raise
            raise CleaningAbortedError(f"{seg.log_path} left {target.name} while it was cleaned") from exc

    def clean(self, target: CleanableLog, config: LogConfig, first_dirty: int, first_uncleanable: int,
              horizon_passed: bool = False) -> tuple[int, CleanerStats]:
        """Clean `target` from `first_dirty` up to (at most) `first_uncleanable`, a segment base; returns the new
        first dirty offset (the map's end) and the stats. With nothing dirty, the clean section is cleaned only when
        the caller found a delete horizon in it passed (`horizon_passed`, see `earliest_delete_horizon`)."""
        now = self.clock.time_ms()
        stats = CleanerStats(map_slots=self.map.slots)
        segments = [s for s in target.segments()[:-1] if s.base_offset < first_uncleanable]
        dirty = [s for s in segments if target.next_offset_of(s) > first_dirty]
        if not dirty:
            if horizon_passed:
                self._clean_expired(target, config, segments, now, first_uncleanable, stats)
            stats.end = time.monotonic()
            return first_dirty, stats
        total = sum(s.size for s in dirty) + sum(s.size for s in segments)
        self._build_offset_map(target, dirty, first_dirty, first_uncleanable, total)
        end = self.map.latest_offset + 1
        if end <= first_dirty:
            raise InvalidConfigurationError(
                f"the offset map ({self.map.slots} slots) cannot hold the keys of the batch at offset {first_dirty} "
                f"of {target.name}: raise log.cleaner.dedupe.buffer.size")
        stats.dirty, stats.keys, stats.map_done = (first_dirty, end), self.map.size, time.monotonic()
        done = sum(s.size for s in dirty)
        txns = _TxnTracker()
        for group in group_segments_by_size([s for s in segments if s.base_offset < end], config.segment_bytes,
                                            config.segment_index_bytes, first_uncleanable):
            self._clean_group(target, config, group, txns, now, first_uncleanable, stats)
            done += sum(s.size for s in group)
            self.progress(done, total)
        stats.end = time.monotonic()
        log.info("%s", stats.describe(target.name))
        return end, stats

    def _clean_expired(self, target: CleanableLog, config: LogConfig, segments: list[LogSegment], now: int,
                       round_end: int, stats: CleanerStats) -> None:
        """Nothing is dirty, but tombstones (or transaction markers) in the clean section are past their delete
        horizon: clean it with an empty offset map, which supersedes nothing, so only they go. Kafka waits for new
        writes before it cleans again, and a topic that gets none keeps its tombstones forever."""
        self.map.clear()
        self.map.update_latest_offset(target.next_offset_of(segments[-1]) - 1)  # every record has been seen
        txns = _TxnTracker()
        for group in group_segments_by_size(segments, config.segment_bytes, config.segment_index_bytes, round_end):
            self._clean_group(target, config, group, txns, now, round_end, stats)
        log.info("%s: removed tombstones past their delete horizon", target.name)

    # --- the offset map -----------------------------------------------------------------------------
    def _build_offset_map(self, target: CleanableLog, dirty: list[LogSegment], start: int, end: int,
                          total: int) -> None:
        self.map.clear()
        txns = _TxnTracker()
        txns.add_aborted(target.collect_aborted(start, end))
        done = 0
        for i, seg in enumerate(dirty):
            self._check_done(target.name)
            next_start = dirty[i + 1].base_offset if i + 1 < len(dirty) else end
            with self._reading(target, seg):
                for batch in seg.batches(seg.offset_index.lookup(start)[1]):
                    if batch.is_control:
                        txns.on_control_batch(batch)
                    elif not txns.on_data_batch(batch) and self.map.add_batch(batch, start):
                        return  # full: the records from here on wait for the next pass
                    if batch.last_offset >= start:
                        self.map.update_latest_offset(batch.last_offset)
            self.map.update_latest_offset(next_start - 1)  # across a gap left by an earlier clean
            done += seg.size
            self.progress(done, total)

    # --- rewriting ----------------------------------------------------------------------------------
    def _clean_group(self, target: CleanableLog, config: LogConfig, group: list[LogSegment], txns: _TxnTracker,
                     now: int, round_end: int, stats: CleanerStats) -> None:
        first = group[0]
        for suffix in names.SEGMENT_SUFFIXES:  # a clean that died before its swap left these
            stale = os.path.join(first.dir, names.file_name(first.base_offset, suffix) + names.CLEANED)
            if first.fs.exists(stale):
                first.fs.remove(stale)
        cleaned = LogSegment(first.fs, first.dir, first.base_offset, config.segment, now, suffix=names.CLEANED)
        cleaned.resize_indexes(config.segment_index_bytes)
        txns.cleaned_index = cleaned.txn_index
        try:
            producers = target.active_producers()
            for seg in group:
                self._check_done(target.name)
                with self._reading(target, seg):
                    txns.add_aborted(target.collect_aborted(seg.base_offset, target.next_offset_of(seg)))
                    self._clean_into(seg, cleaned, txns, producers, config, now, round_end, stats)
            cleaned.on_become_inactive()
            cleaned.flush()
            first.fs.set_mtime_ms(cleaned.log_path, first.fs.mtime_ms(group[-1].log_path))
            target.replace([cleaned], group)
        except BaseException:
            if cleaned.suffix == names.CLEANED:  # the swap had not begun; once it has, the loader finishes it
                cleaned.delete_files()
            raise
        stats.segments_before += len(group)
        stats.segments_after += 1

    def _clean_into(self, source: LogSegment, dest: LogSegment, txns: _TxnTracker,
                    producers: dict[int, ActiveProducer], config: LogConfig, now: int, round_end: int,
                    stats: CleanerStats) -> None:
        pieces: list = []
        extents: list[tuple[int, int]] = []
        size = 0
        max_ts, offset_of_max = -1, source.base_offset
        read = records_read = records_written = 0
        for batch in source.batches():
            read += batch.size_in_bytes
            records_read += batch.records_count
            out = self._filter(batch, txns, producers, config, now, round_end)
            if out is None:
                continue
            data, kept = out
            records_written += kept
            written_max_ts = bf.MAX_TIMESTAMP.unpack_from(data, bf.MAX_TIMESTAMP_OFFSET)[0]
            if written_max_ts > max_ts:
                max_ts, offset_of_max = written_max_ts, batch.last_offset
            pieces.append(data)
            extents.append((batch.last_offset, len(data)))
            size += len(data)
            if len(pieces) >= 1024 or size >= WRITE_BYTES:
                dest.append(extents[-1][0], max_ts, offset_of_max, pieces, size, extents)
                dest.start_flush()  # the device writes as the clean goes on; the flush before the swap waits less
                stats.bytes_written += size
                pieces, extents, size = [], [], 0
        if pieces:
            dest.append(extents[-1][0], max_ts, offset_of_max, pieces, size, extents)
        stats.bytes_read += read
        stats.bytes_written += size
        stats.records_read += records_read
        stats.records_written += records_written

    def _filter(self, batch, txns: _TxnTracker, producers: dict[int, ActiveProducer], config: LogConfig, now: int,
                round_end: int):
        """(bytes, records kept) of what a batch becomes (Kafka's checkBatchRetention, then filterTo), or None."""
        if batch.is_control:
            can_discard = txns.on_control_batch(batch)
            horizon = batch.delete_horizon_ms
            discard = can_discard and horizon is not None and horizon <= now
        else:
            can_discard = discard = txns.on_data_batch(batch)
        last = producers.get(batch.producer_id) if batch.producer_id >= 0 else None
        is_producers_last = last is not None and (
            batch.last_offset == last.last_data_offset if last.last_data_offset is not None
            else batch.is_control and batch.producer_epoch == last.producer_epoch)
        retain_empty = is_producers_last or batch.next_offset == round_end
        if discard and not retain_empty:
            return None
        kept, all_kept, tombstones = self.map.filter_batch(batch, discard, now)
        if kept:
            needs_horizon = (tombstones or (can_discard and batch.is_control)) and not batch.has_delete_horizon
            if all_kept and not needs_horizon:
                return batch.buffer, len(kept)
            horizon = now + config.delete_retention_ms if needs_horizon else batch.delete_horizon_ms
            return codec.rebuild_batch(batch, kept, horizon), len(kept)
        if retain_empty:
            return codec.rebuild_batch(batch, []), 0
        return None
