"""Opening a partition directory: leftovers resolved, segments loaded, damage recovered (Kafka's LogLoader).

Reads the `<topic>-<partition>/` directory of segments (segments.segment) and the in-flight files of
deletion and cleaning (`.deleted`, `.cleaned`, `.swap`, and our own `.truncating` / `.tmp`).
Crash policy, in order:
- `.deleted`, `.cleaned`, `.truncating` and `.tmp` files are removed; a `.swap` at or above the
  lowest `.cleaned` base is removed (its clean never finished); every other `.swap` replaces the
  segments it covers and is renamed into place (its clean finished but the swap did not);
- index files without a `.log` are removed; a segment whose `.index` is missing, or whose index
  files are not a whole number of entries, or whose `.txnindex` fails its sanity check, is rebuilt;
- after an unclean shutdown every segment from the one holding the recovery point is re-validated;
  a corrupt or torn tail is truncated at the last valid batch and every later segment dropped;
- segments wholly below the log start offset are dropped (the log restarts empty at it).
What was done is returned in `LoadedLog.report` and logged.
Thread-safety: runs before anyone else can see the log.
"""
from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Sequence

from engine.common.clock import Clock
from engine.common.errors import KafkaError
from engine.segments import names
from engine.segments.fs import FileSystem
from engine.segments.log_config import LogConfig
from engine.segments.log_segments import LogSegments
from engine.segments.segment import LogSegment

log = logging.getLogger("kafkalog.log")


class _Entries:
    """One of a RecoveryReport's lists, kept in the slot of the same name with a leading underscore and made by its
    first entry (`RecoveryReport._add`); read, it is that list, or a new empty one before any entry."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.slot = "_" + name

    def __get__(self, report, owner: type | None = None):
        return self if report is None else getattr(report, self.slot) or []


class RecoveryReport:
    """What opening the log had to repair. Its lists are made by their first entry (a log that loads clean, as most
    do, holds none: fewer objects for the garbage collector per partition); add to them with the methods below."""

    __slots__ = ("clean_shutdown", "bytes_truncated", "_segments_recovered", "_segments_dropped", "_files_removed",
                 "_repairs")
    segments_recovered = _Entries()  # the bases of the segments re-validated, in order
    segments_dropped = _Entries()  # the bases of the segments dropped after a damaged one
    files_removed = _Entries()  # the leftover files removed
    repairs = _Entries()  # what else was found wrong and repaired, in words

    def __init__(self, clean_shutdown: bool) -> None:
        self.clean_shutdown = clean_shutdown
        self.bytes_truncated = 0
        self._segments_recovered = self._segments_dropped = self._files_removed = self._repairs = None

    def _add(self, name: str, entry) -> None:
        entries = getattr(self, "_" + name)
        if entries is None:
            setattr(self, "_" + name, [entry])
        else:
            entries.append(entry)

    def removed(self, name: str) -> None:
        """A leftover file `name` was removed."""
        self._add("files_removed", name)

    def dropped(self, base: int) -> None:
        """The segment at `base` was dropped."""
        self._add("segments_dropped", base)

    def __repr__(self) -> str:
        return (f"RecoveryReport(clean_shutdown={self.clean_shutdown}, segments_recovered={self.segments_recovered}, "
                f"bytes_truncated={self.bytes_truncated}, segments_dropped={self.segments_dropped}, "
                f"files_removed={self.files_removed}, repairs={self.repairs})")

    def note(self, what: str) -> None:
        """Record a repair (segments call this when an index had to be rebuilt, even long after open)."""
        self._add("repairs", what)
        log.warning("%s", what)

    def describe(self) -> list[str]:
        """Everything repaired, in words (empty when nothing was)."""
        out = []
        if self.segments_recovered:
            out.append(f"re-validated segments {self.segments_recovered}, cutting {self.bytes_truncated} bytes")
        if self.segments_dropped:
            out.append(f"dropped segments {self.segments_dropped} after a damaged one")
        if self.files_removed:
            out.append(f"removed leftover files {self.files_removed}")
        return out + self.repairs

    def recover(self, seg: LogSegment, upper: int | None = None) -> int:
        """Re-validate `seg` (its offsets ending below `upper`), truncating a damaged tail; returns the bytes cut."""
        truncated = seg.recover(upper)
        self._add("segments_recovered", seg.base_offset)
        self.bytes_truncated += truncated
        return truncated


@dataclass
class LoadedLog:
    """The loaded segments and the offsets they give."""

    segments: LogSegments
    next_offset: int
    log_start_offset: int
    recovery_point: int
    report: RecoveryReport
    files: Sequence[str]  # the directory as listed (the files of its other owners: they need not list it again)


def load(fs: FileSystem, directory: str, config: LogConfig, clock: Clock, *, recovery_point: int,
         log_start_offset: int, clean_shutdown: bool, listing: Sequence[str] | None = None) -> LoadedLog:
    """Open `directory` (created if missing) as the module docstring says; `listing`: its files, where the caller knows
    them (a directory it made and nothing else wrote in), else it is listed."""
    if listing is not None:
        files = listing
    else:
        try:
            files = fs.listdir(directory)
        except FileNotFoundError:
            fs.makedirs(directory)
            files = []
    report = RecoveryReport(clean_shutdown=clean_shutdown)
    files = _remove_leftovers(fs, directory, config, clock, report, files)
    segments = LogSegments()
    logs = {names.offset_from_file_name(f) for f in files if f.endswith(names.LOG)}
    for f in files:
        if f.endswith((names.INDEX, names.TIME_INDEX, names.TXN_INDEX)) and names.offset_from_file_name(f) not in logs:
            fs.remove(os.path.join(directory, f))
            report.removed(f)
    now = clock.time_ms()
    bases = sorted(logs)
    for i, base in enumerate(bases):
        seg = LogSegment(fs, directory, base, config.segment, now)
        seg.on_repair = report.note
        segments.add(seg)
        if not _indexes_usable(seg):
            report.recover(seg, bases[i + 1] if i + 1 < len(bases) else None)
    # (read once, as it scans the last batches; a log not closed cleanly is read after its recovery)
    end = segments.last.read_next_offset() if clean_shutdown and len(segments) else None
    closed_at = None
    if clean_shutdown and end is not None and recovery_point != end:
        closed_at = recovery_point
        report.note(f"the log ends at {end} but was closed at {recovery_point}: recovering from there")
        clean_shutdown = report.clean_shutdown = False
    if not clean_shutdown:
        for seg in segments.from_offset(recovery_point):
            if seg.base_offset not in segments or seg.base_offset in report.segments_recovered:
                continue  # dropped after an earlier truncation, or just rebuilt for a missing index
            upper = segments.next_base(seg.base_offset)
            if upper is None and closed_at is not None and closed_at > seg.base_offset:
                upper = closed_at  # a clean close said where the log ends: nothing may end past it
            if report.recover(seg, upper):
                _drop(segments, segments.after(seg.base_offset), report)
        end = segments.last.read_next_offset() if len(segments) else None  # (as recovered)
    if end is not None and end < log_start_offset:
        _drop(segments, segments.all(), report)
    if not len(segments):
        segments.add(LogSegment(fs, directory, log_start_offset, config.segment, now,
                                new=not any(f.endswith(names.SEGMENT_SUFFIXES) for f in files)))
        end = segments.last.read_next_offset()
    next_offset = end
    segments.last.resize_indexes(config.segment_index_bytes)
    if report.bytes_truncated or report.files_removed or report.segments_dropped or report.repairs:
        log.warning("recovered %s: %s", directory, "; ".join(report.describe()))
    elif report.segments_recovered:  # an unclean shutdown's re-validation that found nothing wrong
        log.info("recovered %s: %s", directory, "; ".join(report.describe()))
    return LoadedLog(segments, next_offset, max(log_start_offset, segments.first.base_offset),
                     next_offset if clean_shutdown else min(recovery_point, next_offset), report, files)


_IN_FLIGHT = (names.DELETED, names.CLEANED, names.SWAP, ".truncating", ".tmp")


def _indexes_usable(seg: LogSegment) -> bool:
    if not seg.index_files_exist() or not seg.index_sizes_valid():
        return False
    try:
        seg.txn_index.sanity_check()
    except KafkaError:
        return False
    return True


def _drop(segments: LogSegments, doomed: list[LogSegment], report: RecoveryReport) -> None:
    for seg in doomed:
        segments.remove(seg)
        seg.delete_files()
        report.dropped(seg.base_offset)


def _remove_leftovers(fs: FileSystem, directory: str, config: LogConfig, clock: Clock, report: RecoveryReport,
                      files: Sequence[str]) -> Sequence[str]:
    """Resolve the in-flight files among `files` (the directory's listing); the listing after it."""
    if not any(f.endswith(_IN_FLIGHT) for f in files):
        return files
    for f in files:
        if f.endswith((names.DELETED, names.CLEANED, ".truncating", ".tmp")):
            fs.remove(os.path.join(directory, f))
            report.removed(f)
    cleaned = [names.offset_from_file_name(f) for f in files if f.endswith(names.CLEANED)]
    swaps = sorted(f for f in files if f.endswith(names.SWAP))
    for f in swaps:
        if cleaned and names.offset_from_file_name(f) >= min(cleaned):
            fs.remove(os.path.join(directory, f))
            report.removed(f)
    for f in [f for f in swaps if f.endswith(names.LOG + names.SWAP) and fs.exists(os.path.join(directory, f))]:
        base = names.offset_from_file_name(f)
        swap = LogSegment(fs, directory, base, config.segment, clock.time_ms(), suffix=names.SWAP)
        end = swap.read_next_offset()
        swap.close()
        for g in fs.listdir(directory):
            if g.endswith(names.SEGMENT_SUFFIXES) and base <= names.offset_from_file_name(g) < end:
                fs.remove(os.path.join(directory, g))
                report.removed(g)
    for f in fs.listdir(directory):
        if f.endswith(names.SWAP):
            fs.rename(os.path.join(directory, f), os.path.join(directory, f[:-len(names.SWAP)]))
    return fs.listdir(directory)
