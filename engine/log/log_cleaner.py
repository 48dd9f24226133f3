"""The log cleaner of one log directory: which compacted log to clean next, its progress, its thread (Kafka's
LogCleaner and LogCleanerManager).

On-disk: `cleaner-offset-checkpoint` at the directory's root (segments.offset_checkpoint): each compacted
partition's first dirty offset, the end of its last clean. An absent or out-of-range entry makes the whole log
dirty again (the log start offset); a truncation below it pulls it back (engine.log.unified_log).
Choosing: a log is cleanable when `cleanup.policy` holds compact and its dirty ratio (bytes in whole segments
from the first dirty offset up to the first uncleanable one, over those plus the clean bytes before them)
exceeds `min.cleanable.dirty.ratio`, or `max.compaction.lag.ms` has passed for its oldest dirty segment; the
dirtiest goes first. A clean (segments.cleaner) never passes the LSO, the HW or the active segment.
Crash policy: each clean swaps its segments in crash-safely; the checkpoint is written after the swaps, so a
crash repeats at most one clean's work.
Threads: one cleaner thread (when `log_cleaner_enable`), sleeping `log_cleaner_backoff_ms` on the injected clock
when nothing is cleanable; `close()` stops it, aborting a clean in progress. One clean runs at a time.
"""
from __future__ import annotations

import logging
import os
import threading
from contextlib import contextmanager
from typing import Callable, NamedTuple

from engine.common.clock import Clock
from engine.common.errors import CleaningAbortedError, InvalidConfigurationError
from engine.common.health import Health
from engine.common.structs import settings_of
from engine.segments import offset_checkpoint, offset_map
from engine.segments.cleaner import CleanableLog, Cleaner, CleanerStats, earliest_delete_horizon
from engine.segments.fs import FileSystem
from engine.log.unified_log import UnifiedLog

log = logging.getLogger("kafkalog.log_cleaner")


class CleanerConfig(NamedTuple):
    """The broker's cleaner settings (Kafka's names, with underscores)."""

    log_cleaner_enable: bool = True
    log_cleaner_dedupe_buffer_size: int = 128 * 1024 * 1024
    log_cleaner_io_buffer_load_factor: float = 0.9
    log_cleaner_backoff_ms: int = 15_000

    @classmethod
    def of(cls, settings: dict | None) -> "CleanerConfig":
        out = settings_of(cls, settings, "cleaner")
        if type(out.log_cleaner_enable) is not bool:
            raise InvalidConfigurationError(f"log_cleaner_enable={out.log_cleaner_enable!r} must be a bool")
        if type(out.log_cleaner_backoff_ms) is not int or out.log_cleaner_backoff_ms < 0:
            raise InvalidConfigurationError(f"log_cleaner_backoff_ms={out.log_cleaner_backoff_ms!r} must be an int "
                                            f">= 0")
        offset_map.check_budget(out.log_cleaner_dedupe_buffer_size, out.log_cleaner_io_buffer_load_factor)
        return out


class LogToClean(NamedTuple):
    """A compacted log's cleanable section and its dirty ratio (Kafka's LogToClean)."""

    topic_partition: tuple[str, int]
    log: UnifiedLog
    first_dirty: int
    first_uncleanable: int
    clean_bytes: int
    cleanable_bytes: int
    needs_compaction_now: bool

    @property
    def ratio(self) -> float:
        total = self.clean_bytes + self.cleanable_bytes
        return self.cleanable_bytes / total if total else 0.0


def log_to_clean(tp: tuple[str, int], lg: UnifiedLog, now_ms: int) -> LogToClean:
    """The cleanable section of `lg` now (Kafka's cleanableOffsets and calculateCleanableBytes)."""
    first_dirty, uncleanable = lg.cleanable_range(now_ms)
    segments = lg.segments
    clean = sum(s.size for s in segments if s.base_offset < first_dirty)
    start = min(first_dirty, uncleanable)
    cleanable = sum(s.size for s in segments[:-1]
                    if s.base_offset < uncleanable and lg.segment_end(s.base_offset) > start)
    return LogToClean(tp, lg, first_dirty, uncleanable, clean, cleanable, _max_lag_passed(lg, first_dirty, now_ms))


def _max_lag_passed(lg: UnifiedLog, first_dirty: int, now_ms: int) -> bool:
    """Whether the oldest dirty inactive segment's first batch is older than `max.compaction.lag.ms`."""
    limit = now_ms - lg.config.max_compaction_lag_ms
    for seg in lg.segments[:-1]:
        if lg.segment_end(seg.base_offset) > first_dirty:
            first = next(iter(seg.batches()), None)
            if first is not None and 0 < first.max_timestamp < limit:
                return True
    return False


class LogCleaner:
    def __init__(self, directory: str, fs: FileSystem, clock: Clock, slots: Callable[[], dict],
                 config: CleanerConfig, background: bool, loaded: Callable[[], dict]) -> None:
        """Clean the compacted logs among `loaded()` (the logs loaded so far, by (topic, partition)), and keep the
        checkpoint of all of `slots()` (the logs loaded or not: engine.log.log_slot); with `background` and
        `log_cleaner_enable`, on a thread of its own."""
        self.dir, self.fs, self.clock, self._slots, self.config = directory, fs, clock, slots, config
        self._loaded = loaded
        self._clean_lock = threading.Lock()  # one clean at a time
        self._stop = threading.Event()
        self._paused: set[tuple[str, int]] = set()  # logs being closed or deleted: a clean of one stops
        self.last_stats: CleanerStats | None = None
        self._horizons: dict[tuple[str, int], tuple[tuple, int]] = {}  # the clean section's earliest delete horizon
        self.health = Health(f"{directory} (log cleaner)", log)
        self._thread = None
        if background and config.log_cleaner_enable:
            self._thread = threading.Thread(target=self._run, name=f"kafkalog-log-cleaner:{directory}", daemon=True)
            self._thread.start()

    # --- checkpoint ---------------------------------------------------------------------------------
    def write_checkpoint(self) -> None:
        offset_checkpoint.write(self.fs, os.path.join(self.dir, offset_checkpoint.CLEANER),
                                {tp: slot.cleaner_checkpoint for tp, slot in self._slots().items()
                                 if slot.cleaner_checkpoint is not None and (not slot.loaded or slot.config.compact)})

    # --- choosing -------------------------------------------------------------------------------------
    def cleanable_logs(self) -> list[LogToClean]:
        """Every loaded compacted log that is due for a clean, dirtiest first (an unloaded one is looked at once it
        is used: nothing was appended to it since the open)."""
        now = self.clock.time_ms()
        due = []
        for tp, lg in sorted(self._loaded().items()):
            if lg.config.compact:
                found = log_to_clean(tp, lg, now)
                if (found.needs_compaction_now and found.cleanable_bytes > 0) or \
                        found.ratio > lg.config.min_cleanable_dirty_ratio or self._horizon_passed(tp, lg, found, now):
                    due.append(found)
        return sorted(due, key=lambda c: c.ratio, reverse=True)

    def _horizon_passed(self, tp: tuple[str, int], lg: UnifiedLog, found: LogToClean, now: int) -> bool:
        """Whether a tombstone (or marker) in the clean section of `lg` is past its delete horizon, so a clean would
        remove it even with nothing dirty. The headers are read again only when that section changed."""
        segments = [s for s in lg.segments[:-1] if s.base_offset < found.first_uncleanable]
        key = tuple((s.base_offset, s.size) for s in segments)
        cached = self._horizons.get(tp)
        if cached is None or cached[0] != key:
            cached = self._horizons[tp] = (key, earliest_delete_horizon(segments))
        return cached[1] <= now

    @contextmanager
    def paused(self, tp: tuple[str, int]):
        """While the caller closes or moves a log: a clean of it in progress is abandoned (and waited for), and none
        starts (Kafka's abortAndPauseCleaning). Take it before the log manager's lock."""
        self._paused.add(tp)
        try:
            with self._clean_lock:
                yield
        finally:
            self._paused.discard(tp)

    # --- cleaning -------------------------------------------------------------------------------------
    def clean(self, tp: tuple[str, int], lg: UnifiedLog, *, until_done: bool = False,
              progress: Callable[[int, int], None] | None = None) -> CleanerStats | None:
        """Clean `lg` now, whatever its dirty ratio: one pass, or with `until_done` as many as its offset map
        needs to reach the first uncleanable offset. None when nothing was cleanable."""
        total: CleanerStats | None = None
        with self._clean_lock:
            while not self._stop.is_set() and tp not in self._paused:
                now = self.clock.time_ms()
                target = log_to_clean(tp, lg, now)
                dirty = target.cleanable_bytes > 0  # a clean of a dirty section needs no delete horizon
                expired = not dirty and self._horizon_passed(tp, lg, target, now)
                if not dirty and not expired:
                    break
                end, stats = self._clean_once(target, progress, expired)
                total = stats if total is None else _merge(total, stats)
                if not until_done or end >= target.first_uncleanable:
                    break
        return total

    def _clean_once(self, target: LogToClean, progress, horizon_passed: bool) -> tuple[int, CleanerStats]:
        lg = target.log
        cleaner = Cleaner(offset_map.selected(self.config.log_cleaner_dedupe_buffer_size,
                                              self.config.log_cleaner_io_buffer_load_factor),
                          self.clock, progress,
                          should_stop=lambda: self._stop.is_set() or target.topic_partition in self._paused)
        name = f"{target.topic_partition[0]}-{target.topic_partition[1]}"
        end, stats = cleaner.clean(
            CleanableLog(name, lambda: lg.segments, lambda seg: lg.segment_end(seg.base_offset), lg.collect_aborted,
                         lg.active_producers, lg.replace_segments),
            lg.config, target.first_dirty, target.first_uncleanable, horizon_passed)
        lg.cleaner_checkpoint = end
        self.write_checkpoint()
        self.last_stats = stats
        return end, stats

    def clean_filthiest(self) -> bool:
        """Clean the dirtiest due log (one pass); False when none is due."""
        for target in self.cleanable_logs()[:1]:
            self.clean(target.topic_partition, target.log)
            return True
        return False

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                cleaned = self.clean_filthiest()
            except CleaningAbortedError:
                cleaned = True  # the log changed under the clean: look again at once
            except Exception as exc:  # noqa: BLE001 - the thread must survive and say so
                if self._stop.is_set():
                    return
                self.clock.wait(self._stop, self.health.failed("cleaner", exc, self.clock.time_ms(),
                                                               self.config.log_cleaner_backoff_ms))
                continue
            self.health.succeeded("cleaner", self.clock.time_ms())
            if not cleaned:
                self.clock.wait(self._stop, self.config.log_cleaner_backoff_ms)

    def close(self) -> None:
        """Stop the thread (a clean in progress is abandoned; its `.cleaned` files are removed)."""
        self._stop.set()
        if hasattr(self.clock, "wake"):
            self.clock.wake()
        if self._thread is not None:
            self._thread.join()


def _merge(a: CleanerStats, b: CleanerStats) -> CleanerStats:
    """Two passes' stats as one clean's (the first pass's start, the last one's end)."""
    return CleanerStats(a.bytes_read + b.bytes_read, a.bytes_written + b.bytes_written,
                        a.records_read + b.records_read, a.records_written + b.records_written,
                        a.keys + b.keys, a.map_slots, (a.dirty[0], b.dirty[1]), a.segments_before,
                        b.segments_after, a.start, a.map_done, b.end)
