"""`leader-epoch-checkpoint`: the partition's leader epochs and the offsets they start at
(Kafka's LeaderEpochCheckpointFile), and the cache a log keeps of them (LeaderEpochFileCache).

Byte layout: segments.checkpoint_file's, version 0, then ascending `<epoch> <startOffset>` lines (an int32 and an
int64).
Crash policy: rewritten whole on every change, tmp + rename; a truncation's change is fsynced (file and
directory) at once, an append's new epoch (`assign`) only by the log's next flush (`sync`), so a partition's
first append costs no fsync (Kafka fsyncs it at once). An unreadable file, or entries that cannot be a cache
(negative, not ascending), is logged and read as empty, and entries at or past the log end are dropped on load, as
Kafka does. The log's load then checks the entries against its batch headers and rebuilds them from the headers
when they disagree (engine.log.unified_log): after an unclean shutdown a checkpoint may lag the batches, whether an entry
was not synced or a batch was unaccounted.
Thread-safety: `render`/`parse` are pure; a cache is changed only under its log's lock.
"""
from __future__ import annotations

import bisect
import logging
import os
from typing import Sequence

from engine.common.errors import KafkaStorageError
from engine.segments import checkpoint_file
from engine.segments.fs import FileSystem

FILE = "leader-epoch-checkpoint"
VERSION = 0
log = logging.getLogger("kafkalog.leader_epoch")


def render(entries: list[tuple[int, int]]) -> bytes:
    return checkpoint_file.render(VERSION, [f"{e} {o}" for e, o in entries])


def _entry(line: str) -> tuple[int, int]:
    epoch, start = checkpoint_file.fields(line, 2)
    return checkpoint_file.number(epoch), checkpoint_file.number(start, checkpoint_file.INT64)


def parse(data: bytes, path: str | None = None) -> list[tuple[int, int]]:
    """The file's (epoch, start offset) entries in file order, as Kafka's LeaderEpochCheckpointFile reads them;
    KafkaStorageError when Kafka refuses the file."""
    return checkpoint_file.parse(data, VERSION, _entry, path)


def checked(entries: list[tuple[int, int]], path: str | None = None) -> list[tuple[int, int]]:
    """`entries` when they can be a cache (non-negative, ascending in both); KafkaStorageError otherwise (Kafka's
    cache refuses a negative entry and drops the entries a later one contradicts)."""
    if any(e < 0 or o < 0 for e, o in entries) or any(
            a[0] >= b[0] or a[1] >= b[1] for a, b in zip(entries, entries[1:])):
        raise KafkaStorageError("malformed leader-epoch-checkpoint: epochs and start offsets must be non-negative and "
                                "ascending", file=path)
    return entries


class LeaderEpochCache:
    """(epoch, start offset) entries of one partition, ascending in both, persisted on every change."""

    def __init__(self, fs: FileSystem, directory: str, listed: Sequence[str] | None = None) -> None:
        """The entries of `directory`'s checkpoint file; `listed`: the directory's files, as just listed."""
        self.fs, self.path = fs, os.path.join(directory, FILE)
        self.entries: list[tuple[int, int]] = []
        self.load_error: KafkaStorageError | None = None  # why the file on disk was ignored, if it was
        self.unsynced = False  # written by `assign` and not fsynced since
        if (FILE in listed) if listed is not None else fs.exists(self.path):
            try:
                self.entries = checked(parse(fs.read_bytes(self.path), self.path), self.path)
            except KafkaStorageError as exc:
                log.warning("ignoring %s", exc)
                self.load_error = exc

    @property
    def latest_epoch(self) -> int | None:
        return self.entries[-1][0] if self.entries else None

    def assign(self, epoch: int, start_offset: int) -> None:
        """Record that `epoch` starts at `start_offset` (a no-op for the latest epoch at or after its start);
        entries it contradicts (a higher or equal epoch, or a start at or after it) are dropped."""
        if epoch < 0:
            return
        if self.entries and self.entries[-1][0] == epoch and self.entries[-1][1] <= start_offset:
            return
        self.entries = [(e, o) for e, o in self.entries if e < epoch and o < start_offset] + [(epoch, start_offset)]
        self._save(sync=False)

    def end_offset_for(self, epoch: int, log_end_offset: int) -> tuple[int, int]:
        """OffsetsForLeaderEpoch: (the largest known epoch <= `epoch`, the offset where it ended): the log end
        for the latest epoch, the next epoch's start otherwise; (epoch, first start) for an epoch below every
        known one; (-1, -1) for -1 or an epoch above every known one."""
        if epoch < 0 or not self.entries:
            return -1, -1
        if epoch == self.entries[-1][0]:
            return epoch, log_end_offset
        i = bisect.bisect_right(self.entries, epoch, key=lambda entry: entry[0])
        if i == len(self.entries):
            return -1, -1
        return (self.entries[i - 1][0] if i else epoch), self.entries[i][1]

    def assign_if_newer(self, epoch: int, start_offset: int) -> None:
        """`assign` for an epoch above every known one, else nothing: rebuilding the cache from batches
        read back from the log, where earlier epochs are already recorded."""
        if epoch > (self.entries[-1][0] if self.entries else -1):
            self.assign(epoch, start_offset)

    def truncate_from_end(self, end_offset: int) -> None:
        """Drop the entries starting at or after `end_offset` (the log was truncated there)."""
        kept = [(e, o) for e, o in self.entries if o < end_offset]
        if kept != self.entries:
            self.entries = kept
            self._save()

    def clear(self) -> None:
        """Forget every epoch (the log was emptied)."""
        if self.entries:
            self.entries = []
            self._save()

    def truncate_from_start(self, start_offset: int) -> None:
        """The log now starts at `start_offset`: the last epoch starting at or before it starts there."""
        before = [(e, o) for e, o in self.entries if o <= start_offset]
        if not before or before[-1][1] == start_offset and len(before) == 1:
            return
        self.entries = [(before[-1][0], start_offset)] + self.entries[len(before):]
        self._save()

    def _save(self, sync: bool = True) -> None:
        (self.fs.atomic_write if sync else self.fs.replace_unsynced)(self.path, render(self.entries))
        self.unsynced = not sync

    def sync(self) -> None:
        """fsync what `assign` wrote (the log's flush calls this)."""
        if self.unsynced:
            if not self.fs.owes_sync(self.path):  # (a sync owed needs no descriptor)
                with self.fs.open(self.path, "rb") as f:  # (not a pooled handle: the file is replaced whole)
                    self.fs.fsync(f)
            self.fs.fsync_dir(os.path.dirname(self.path))
            self.unsynced = False
