"""`.timeindex`: the sparse time index of one segment (Kafka's TimeIndex).

Byte layout: 12-byte big-endian entries `timestamp int64 | relativeOffset int32`. Entry (T, O)
says the largest timestamp up to and including offset O is T, with O the last offset of the batch
holding T. Appended only when T grows strictly; the last slot is reserved (`is_full` at
max_entries - 1) for the final entry written on roll and close. See segments.index for file
handling, crash policy and thread-safety.
"""
from __future__ import annotations

import struct

from engine.common.errors import CorruptIndexError, InvalidOffsetError
from engine.segments.index import MmapIndex


class TimeIndex(MmapIndex):
    ENTRY = struct.Struct(">qi")

    def entry(self, slot: int) -> tuple[int, int]:
        """(timestamp, absolute offset) of entry `slot`."""
        ts, rel = self._raw(slot)
        return ts, self.base_offset + rel

    def last_entry(self) -> tuple[int, int]:
        """The last entry, or (-1, base offset) when empty."""
        last = self._last_raw()
        return (last[0], self.base_offset + last[1]) if last else (-1, self.base_offset)

    @classmethod
    def sole_entry(cls, timestamp: int, offset: int, base_offset: int) -> bytes:
        """The entries of a new time index after `maybe_append(timestamp, offset)`: that one entry, or none without a
        timestamp (a new segment closed before any entry was written: LogSegment.close)."""
        return cls.ENTRY.pack(timestamp, offset - base_offset) if timestamp > -1 else b""

    def is_full(self) -> bool:
        return self.entries >= self.max_entries - 1

    def maybe_append(self, timestamp: int, offset: int, skip_full_check: bool = False) -> None:
        """Append (timestamp, offset) if the timestamp grew; refuse going back in offset or time."""
        last_ts, last_off = self.last_entry()
        if self.entries and offset < last_off:
            raise InvalidOffsetError(f"time index offset {offset} is below the last entry's {last_off}",
                                     file=self.path, offset=offset)
        if self.entries and timestamp < last_ts:
            raise InvalidOffsetError(f"time index timestamp {timestamp} is below the last entry's {last_ts}",
                                     file=self.path, offset=offset)
        if timestamp > last_ts:
            if not skip_full_check and self.is_full():
                raise InvalidOffsetError("attempt to append to a full time index", file=self.path)
            with self.lock:
                if self.entries >= self.max_entries:
                    raise InvalidOffsetError("the time index has no room left", file=self.path)
                self._write_entry(timestamp, self.relative(offset))

    def lookup(self, timestamp: int) -> tuple[int, int]:
        """(timestamp, offset) of the largest entry with timestamp <= `timestamp`, or (-1, base)."""
        found = self._floor(timestamp)
        return (-1, self.base_offset) if found is None else (found[0], self.base_offset + found[1])

    def truncate_to(self, offset: int) -> None:
        """Drop entries with offset >= `offset`."""
        n = self.entries
        while n and self.entry(n - 1)[1] >= offset:
            n -= 1
        self.truncate_to_entries(n)

    @staticmethod
    def check_entries(entries, log_size: int) -> str | None:
        prev_ts, prev_rel = -1, 0
        for i, (ts, rel) in enumerate(entries):
            if ts < prev_ts or rel < prev_rel:
                return f"entry {i} ({ts}, {rel}) goes back from ({prev_ts}, {prev_rel})"
            prev_ts, prev_rel = ts, rel
        return None

    def sanity_check(self) -> None:
        super().sanity_check()
        if self.entries:
            first_ts, _ = self.entry(0)
            last_ts, last_off = self.last_entry()
            if last_ts < first_ts or last_off < self.base_offset:
                raise CorruptIndexError("time index entries are out of order", file=self.path)
