"""The ordered set of one log's segments, keyed by base offset (Kafka's LogSegments).

No file of its own: it maps base offsets to the `LogSegment`s of a partition directory and answers
the questions every reader asks of that map (the segment holding an offset, the ones after it, the
first offset at or after a timestamp).
Crash policy: none (memory only); the owner decides which segments exist.
Thread-safety: every method is safe from many threads; iteration works on a few bases at a time, so
a segment added or removed meanwhile is seen or skipped, never half-seen.
"""
from __future__ import annotations

import bisect
from typing import Iterator

from engine.segments.fs import new_lock
from engine.segments.segment import LogSegment


# ListOffsets' special timestamps (Kafka's ListOffsetsRequest): the log end, the log start, the first record with the
# largest timestamp, the local log's start (every segment is local here) and the last offset in tiered storage (none)
LATEST_TIMESTAMP, EARLIEST_TIMESTAMP, MAX_TIMESTAMP = -1, -2, -3
EARLIEST_LOCAL_TIMESTAMP, LATEST_TIERED_TIMESTAMP = -4, -5


class LogSegments:
    def __init__(self) -> None:
        # the native reader's seam: it reads `bases` and `by_base` under `lock`, as the methods below do
        self.lock = new_lock(reentrant=False)  # native with the core loaded: a reader takes it from C
        self.by_base: dict[int, LogSegment] = {}
        self.bases: list[int] = []

    def add(self, seg: LogSegment) -> None:
        with self.lock:
            if seg.base_offset not in self.by_base:
                bisect.insort(self.bases, seg.base_offset)
            self.by_base[seg.base_offset] = seg

    def remove(self, seg: LogSegment) -> None:
        with self.lock:
            del self.by_base[seg.base_offset]
            self.bases.remove(seg.base_offset)

    def __len__(self) -> int:
        return len(self.bases)

    def __contains__(self, base_offset: int) -> bool:
        return base_offset in self.by_base

    def all(self) -> list[LogSegment]:
        """Every segment, by base offset."""
        with self.lock:
            return [self.by_base[b] for b in self.bases]

    @property
    def first(self) -> LogSegment:
        with self.lock:
            return self.by_base[self.bases[0]]

    @property
    def last(self) -> LogSegment:
        with self.lock:
            return self.by_base[self.bases[-1]]

    def after(self, base_offset: int) -> list[LogSegment]:
        """The segments whose base offset is above `base_offset`."""
        with self.lock:
            return [self.by_base[b] for b in self.bases[bisect.bisect_right(self.bases, base_offset):]]

    def next_base(self, base_offset: int) -> int | None:
        """The base offset of the segment after the one at `base_offset`, None for the last."""
        with self.lock:
            i = bisect.bisect_right(self.bases, base_offset)
            return self.bases[i] if i < len(self.bases) else None

    def holding(self, offset: int) -> tuple[LogSegment | None, int | None]:
        """The segment holding `offset` (the greatest base <= offset, else the first) with the next segment's base
        (None for the last); (None, None) when there are no segments."""
        with self.lock:
            return self._at(max(0, bisect.bisect_right(self.bases, offset) - 1))

    def following(self, base_offset: int) -> tuple[LogSegment | None, int | None]:
        """The first segment above `base_offset` with the base of the one after it ((None, None) past the last)."""
        with self.lock:
            return self._at(bisect.bisect_right(self.bases, base_offset))

    def _at(self, i: int) -> tuple[LogSegment | None, int | None]:
        if i >= len(self.bases):
            return None, None
        return self.by_base[self.bases[i]], self.bases[i + 1] if i + 1 < len(self.bases) else None

    def from_offset(self, offset: int) -> Iterator[LogSegment]:
        """The segment holding `offset` (the greatest base <= offset, else the first), then every later one,
        lazily: a read usually needs only the first, and a log may have thousands."""
        last = None
        while True:
            with self.lock:  # a few bases at a time, resuming after the last base seen (not an index)
                i = (bisect.bisect_right(self.bases, last) if last is not None
                     else max(0, bisect.bisect_right(self.bases, offset) - 1))
                chunk = [self.by_base[b] for b in self.bases[i:i + 8]]
            if not chunk:
                return
            yield from chunk
            last = chunk[-1].base_offset

    def max_timestamp_offset(self) -> tuple[int, int] | None:
        """(timestamp, offset) of the first record carrying the log's largest timestamp, found as Kafka's
        ListOffsets MAX_TIMESTAMP finds it: in the first segment with the largest max timestamp; None for an empty
        log."""
        best = None
        for seg in self.all():
            if seg.size and (best is None or seg.max_timestamp_so_far > best.max_timestamp_so_far):
                best = seg
        return None if best is None else best.find_offset_by_timestamp(best.max_timestamp_so_far, 0)

    def offset_for_timestamp(self, timestamp: int, log_start_offset: int) -> tuple[int, int] | None:
        """(timestamp, offset) of the first record at or after `log_start_offset` whose timestamp is
        >= `timestamp`, found through the time and offset indexes; None when no record is that late. MAX_TIMESTAMP
        asks for max_timestamp_offset()."""
        if timestamp == MAX_TIMESTAMP:
            return self.max_timestamp_offset()
        for seg in self.all():
            if seg.size and seg.max_timestamp_so_far >= timestamp:
                found = seg.find_offset_by_timestamp(timestamp, log_start_offset)
                if found is not None:
                    return found
        return None
