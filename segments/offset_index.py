"""`.index`: the sparse offset index of one segment (Kafka's OffsetIndex).

Byte layout: 8-byte big-endian entries `relativeOffset int32 | position int32`, where
relativeOffset = offset - segment base and position is a byte position in the `.log`. An entry
maps the **last offset of a batch** to the position where that batch starts. Offsets strictly
increase. See segments.index for file handling, crash policy and thread-safety.
"""
from __future__ import annotations

import struct

from engine.common.errors import CorruptIndexError, InvalidOffsetError
from engine.segments.index import INT32_MAX, MmapIndex


class OffsetIndex(MmapIndex):
    ENTRY = struct.Struct(">ii")

    def entry(self, slot: int) -> tuple[int, int]:
        """(absolute offset, position) of entry `slot`."""
        rel, pos = self._raw(slot)
        return self.base_offset + rel, pos

    @property
    def last_offset(self) -> int:
        last = self._last_raw()
        return self.base_offset + last[0] if last else self.base_offset

    def append(self, offset: int, position: int) -> None:
        last = self.last_offset
        if self.entries and offset <= last:
            raise InvalidOffsetError(f"index entry for offset {offset} does not follow {last}",
                                     file=self.path, offset=offset)
        self._put(self.relative(offset), position)

    def lookup(self, offset: int) -> tuple[int, int]:
        """(offset, position) of the largest entry with offset <= `offset`, or (base, 0) if none."""
        rel = min(offset - self.base_offset, INT32_MAX)
        found = self._floor(rel) if rel >= 0 else None
        return (self.base_offset, 0) if found is None else (self.base_offset + found[0], found[1])

    def lookup_span(self, offset: int) -> tuple[int, int, int | None]:
        """lookup(offset), and the position of the second entry past the position found (None if none): the batch
        found and the next one indexed lie before it, where a lookup by time finds its answer (the time index names
        the last offset of a batch whose timestamps are at or below the one sought) unless timestamps go back."""
        with self.lock:
            slot, found = self._floor_slot(max(min(offset - self.base_offset, INT32_MAX), -1))
            after = 1 if slot < 0 and self.entries and self._raw(0)[1] == 0 else slot + 1  # past the position found
            following = self._raw(after + 1)[1] if after + 1 < self.entries else None
        base, position = (self.base_offset, 0) if found is None else (self.base_offset + found[0], found[1])
        return base, position, following

    def truncate_to(self, offset: int) -> None:
        """Drop entries with offset >= `offset`."""
        rel = offset - self.base_offset
        slot = self._search(min(rel, INT32_MAX)) if rel >= 0 else -1
        if slot >= 0 and self._raw(slot)[0] == rel:
            slot -= 1
        self.truncate_to_entries(slot + 1)

    @staticmethod
    def check_entries(entries, log_size: int) -> str | None:
        prev_rel, prev_pos = -1, -1
        for i, (rel, pos) in enumerate(entries):
            if rel <= prev_rel or pos <= prev_pos or pos >= log_size:
                return (f"entry {i} ({rel}, {pos}) does not follow ({prev_rel}, {prev_pos}) within a log of "
                        f"{log_size} bytes")
            prev_rel, prev_pos = rel, pos
        return None

    def sanity_check(self) -> None:
        super().sanity_check()
        if self.entries and self.last_offset < self.base_offset:
            raise CorruptIndexError(f"last offset {self.last_offset} is below the base {self.base_offset}",
                                    file=self.path)
