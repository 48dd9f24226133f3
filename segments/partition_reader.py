"""A read-only view of one partition directory (for readers outside the engine, such as Spark).

It takes no lock, runs no recovery and never writes: it can read a directory that a kafkalog engine
or a Kafka broker has open. Segments are the `<base>.log` files (deletion and cleaning leftovers are
ignored); the log start offset comes from the directory's `log-start-offset-checkpoint` when it is
above the first segment, and the high watermark from `replication-offset-checkpoint`, capped by the
log end (without that file, the log end). Offsets and timestamps are found through the `.index` and
`.timeindex` files; a missing or untrimmed index only makes the search start earlier.
Crash policy: a partial batch at the tail (a write in progress, or a crash) is not read. Corruption is never
read as data: each batch served must continue its predecessor (offsets above the previous batch's, below the next
segment's base) or CorruptRecordError names the file and position; an index entry that does not match its batch
makes the reader scan the segment instead. Leader epochs are not checked here: Spark's rows do not carry them.
Thread-safety: a reader may be shared by threads. Nothing is mapped: the writer (an engine or a broker in another
process) may truncate a file under the reader, and a mapped page past a file's end is SIGBUS; segments and indexes
are read with pread (segments.segment, segments.index), so a shrunk file reads short instead.
"""
from __future__ import annotations

import functools
import os
from typing import Iterator, NamedTuple

from engine.common.clock import SystemClock
from engine.common.errors import CorruptIndexError
from engine.record import batch_format as bf
from engine.record import codec
from engine.segments import names, offset_checkpoint
from engine.segments.fs import FileSystem
from engine.segments.log_segments import LogSegments
from engine.segments.segment import LogSegment, SegmentConfig


class Chunk(NamedTuple):
    """Whole batches of one segment: the file position they start at, a zero-copy view of them, and the segment."""

    position: int
    data: memoryview
    file: str


def read_checkpoints(fs: FileSystem, log_dir: str) -> tuple[dict, dict]:
    """(log start offsets, high watermarks) by (topic, partition) from a log directory's checkpoint files."""
    found = []
    for name in (offset_checkpoint.LOG_START, offset_checkpoint.HIGH_WATERMARK):
        path = os.path.join(log_dir, name)
        found.append(offset_checkpoint.read(fs, path) if fs.exists(path) else {})
    return found[0], found[1]


class PartitionReader:
    def __init__(self, directory: str, *, log_start_offset: int | None = None,
                 high_watermark: int | None = None, fs: FileSystem | None = None) -> None:
        self.dir = directory
        self.fs = fs or FileSystem()
        now = SystemClock().time_ms()
        bases = sorted(names.offset_from_file_name(f) for f in self.fs.listdir(directory) if f.endswith(names.LOG))
        self.log_segments = LogSegments()
        for b in bases:
            self.log_segments.add(LogSegment(self.fs, directory, b, SegmentConfig(), now, writable=False))
        self.segments = self.log_segments.all()
        first = bases[0] if bases else 0
        self.log_start_offset = max(first, log_start_offset or 0)
        self._hw_checkpoint = high_watermark

    @functools.cached_property
    def log_end_offset(self) -> int:
        """Found by scanning the last segment from its last index entry: only planning needs it, not reads."""
        return self.segments[-1].read_next_offset() if self.segments else self.log_start_offset

    @functools.cached_property
    def high_watermark(self) -> int:
        hw = self.log_end_offset if self._hw_checkpoint is None else self._hw_checkpoint
        return max(self.log_start_offset, min(hw, self.log_end_offset))

    def chunks(self, start: int, end: int, max_bytes: int = 8 << 20) -> Iterator[Chunk]:
        """Whole batches covering offsets [start, end), at most ~max_bytes a chunk (one batch at least);
        the first chunk may begin with records below `start`, the last may run past `end`."""
        if start >= end or not self.segments:
            return
        offset = start
        for seg in self.log_segments.from_offset(start):
            if seg.base_offset >= end:
                return
            upper = self.log_segments.next_base(seg.base_offset)
            try:
                found = seg.locate(offset, upper)
            except CorruptIndexError:  # a read-only reader cannot rebuild the index: it scans instead
                found = seg.locate(offset, upper, use_index=False)
            if found is None:
                continue  # nothing at or after `offset` here (a gap): the next segment
            position, prev_last = found[0].position, found[1]
            while position < seg.size:
                data, prev_last = self._whole_batches(seg, position, max_bytes, prev_last, upper)
                if not data:
                    break  # a partial batch at the tail
                yield Chunk(position, data, seg.log_path)
                if prev_last + 1 >= end:
                    return
                position += len(data)

    @staticmethod
    def _whole_batches(seg: LogSegment, position: int, max_bytes: int, prev_last: int,
                       upper: int | None) -> tuple[memoryview, int]:
        """(bytes, last offset) of the whole batches from `position` within max_bytes (one batch at least), read
        once (one pread) and each checked to follow `prev_last` and to end below `upper` (CorruptRecordError
        otherwise); empty at a partial tail."""
        limit = min(seg.size, position + max_bytes)
        for _ in range(2):
            data = seg.window(position, limit)
            size, last = 0, prev_last
            for batch in codec.iter_batches(data, position=position, source=seg.log_path):
                seg.check_follows(batch, last, upper)
                size += batch.size_in_bytes
                last = batch.last_offset
            if size or len(data) < bf.LOG_OVERHEAD:
                return data[:size], last
            limit = min(seg.size, position + bf.entry_size(data))
        return memoryview(b""), prev_last

    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """(timestamp, offset) of the first record whose timestamp is >= `timestamp`, None if there is none
        (replication.partition.PartitionView bounds it by what a reader may see)."""
        return self.log_segments.offset_for_timestamp(timestamp, self.log_start_offset)

    def bytes_between(self, start: int, end: int) -> list[tuple[int, int, int]]:
        """(first offset, end offset, bytes) of each segment's share of [start, end), from the indexes."""
        out = []
        for i, seg in enumerate(self.segments):
            nxt = self.segments[i + 1].base_offset if i + 1 < len(self.segments) else self.log_end_offset
            lo, hi = max(start, seg.base_offset), min(end, nxt)
            if lo >= hi:
                continue
            first = seg.offset_index.lookup(lo)[1]
            last = seg.offset_index.lookup(hi)[1] if hi < nxt else seg.size
            out.append((lo, hi, max(last - first, 1)))
        return out

    def close(self) -> None:
        for seg in self.segments:
            seg.close()
