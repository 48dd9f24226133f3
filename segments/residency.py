"""Which pages of one segment's shared mapping are resident because readers read them, and releasing the ones a reader
moved past (the segment's owner only; readers beside another process's writer read with pread and map nothing).

The rule, here only: a reader moving on through a segment reports what it read (`Residency.note_read`). A read that
continues one of the last READERS ranges extends it; once a range was read on for RELEASE_BYTES, its pages are released
(madvise MADV_DONTNEED: the page table entries go, the page cache keeps the bytes). So a consumer scanning a large
segment keeps about that much of it resident, not the whole segment, and a view of released pages reads them again
from the page cache. Random reads release nothing (a release costs more than such a read).
A lookup by time reads its batches with pread where no read is known to have touched the mapping (a first touch costs
page faults, which cost more than the copy). Knowing that takes the mapping's address: `TouchedWindows` flags the
FAULT_AROUND windows of the addresses reads fell in, a release clears them, a new mapping starts with none. Only its
native twin (engine._native._residency, the twin "touched_windows" of engine.record.twins) knows the address: the
native log reader flags the windows it read through its cdef seam (`_residency.pxd`), and `all_touched` tests them.
This module's twin flags nothing, so with it a lookup by time always preads.
On disk: nothing. Thread-safety: every method is called with the segment's lock held (the native reader's flagging
holds the GIL only: a flag raced makes one lookup choose the slower of two correct reads).
"""
from __future__ import annotations

import mmap
from collections import deque

from engine.record import twins

RELEASE_BYTES = 8 << 20
READERS = 8  # ranges remembered: as many sequential readers of one segment as are followed at once
FAULT_AROUND = 64 << 10  # a read fault maps up to this much of the page cache around it (Linux's fault_around_bytes)
_PAGE = mmap.PAGESIZE


class TouchedWindows:
    """Which windows of the mapping reads touched: the Python twin, which knows no mapping's address, so flags none."""

    def mapped(self, mapping: mmap.mmap) -> None:
        """A new mapping of the whole `.log`."""

    def unmapped(self) -> None:
        """The mapping is gone."""

    def clear(self, mapping: mmap.mmap | None, start: int, end: int) -> None:
        """The mapping's bytes [start, end) were released."""

    def all_touched(self, mapping: mmap.mmap | None, start: int, end: int) -> bool:
        """Whether reads are known to have touched every window the mapping's bytes [start, end) fall in: never."""
        return False


def _native() -> type:
    from engine._native import _residency
    return _residency.TouchedWindows


twins.register("touched_windows", python=lambda: TouchedWindows, native=_native)


class Residency:
    """The ranges readers are moving through, the pages released behind them (the rule: see the module docstring),
    and the `windows` of the mapping reads touched."""

    def __init__(self) -> None:
        self.ranges: deque[tuple[int, int]] | None = None  # the latest [start, end) read on (made by the first read)
        self.windows = twins.selected("touched_windows")()

    def mapped(self, mapping: mmap.mmap) -> None:
        """A new mapping of the whole `.log`: no window of it touched yet."""
        self.windows.mapped(mapping)

    def unmapped(self) -> None:
        self.windows.unmapped()

    def note_read(self, mapping: mmap.mmap | None, position: int, nbytes: int) -> None:
        """`nbytes` were read at `position` through `mapping` (the newest one; None: none is left)."""
        end = position + nbytes + FAULT_AROUND
        ranges = self.ranges
        if ranges is None:
            ranges = self.ranges = deque()
        lo, hi = position, end
        for i, (start, stop) in enumerate(ranges):
            if start <= position <= stop:
                del ranges[i]
                lo, hi = start, max(stop, end)
                break
        else:
            if len(ranges) == READERS:
                ranges.popleft()
        if hi - lo >= RELEASE_BYTES and mapping is not None:
            bottom, top = lo - lo % _PAGE, min(hi, len(mapping))
            top -= top % _PAGE
            if top > bottom:
                mapping.madvise(mmap.MADV_DONTNEED, bottom, top - bottom)
                self.windows.clear(mapping, bottom, top)
            lo = position
        ranges.append((lo, hi))

    def all_touched(self, mapping: mmap.mmap | None, start: int, end: int) -> bool:
        """Whether reads touched every window the mapping's bytes [start, end) fall in."""
        return self.windows.all_touched(mapping, start, end)
