"""Which pages of one segment's shared mapping are resident because readers read them, and releasing the ones a reader
moved past (the segment's owner only; readers beside another process's writer read with pread and map nothing).

A reader moving on through a segment reports what it read (`note_read`). A read that continues one of the last READERS
ranges extends it; once a range was read on for RELEASE_BYTES, its pages are released (madvise MADV_DONTNEED: the
page table entries go, the page cache keeps the bytes). So a consumer scanning a large segment keeps about that much of
it resident, not the whole segment, and a view of released pages reads them again from the page cache. Random reads
release nothing (a release costs more than such a read).
A lookup by time reads its batches with pread where no read is known to have touched the mapping (a first touch
costs page faults, which cost more than the copy). Knowing that takes the mapping's address: the FAULT_AROUND windows
of the addresses reads fell in are flagged, a release clears them, a new mapping starts with none. Only the native
twin (engine._native._residency, chosen by engine.record.twins as "residency") knows the address: the native log reader
flags the windows it read through its cdef seam (`_residency.pxd`), and `all_touched` tests them. This twin flags
nothing, so with it a lookup by time always preads.
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


class Residency:
    """The ranges readers are moving through; the Python twin, which knows no mapping's address."""

    def __init__(self) -> None:
        self.ranges: deque[tuple[int, int]] = deque()  # the latest [start, end) read on through the mapping

    def mapped(self, mapping: mmap.mmap) -> None:
        """A new mapping of the whole `.log` (no window of it is flagged here)."""

    def unmapped(self) -> None:
        """The mapping is gone."""

    def note_read(self, mapping: mmap.mmap | None, position: int, nbytes: int) -> None:
        """`nbytes` were read at `position` through `mapping` (the newest one; None: none is left)."""
        end = position + nbytes + FAULT_AROUND
        ranges = self.ranges
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
            top = min(hi, len(mapping))
            top -= top % _PAGE
            if top > lo - lo % _PAGE:
                mapping.madvise(mmap.MADV_DONTNEED, lo - lo % _PAGE, top - (lo - lo % _PAGE))
            lo = position
        ranges.append((lo, hi))

    def all_touched(self, mapping: mmap.mmap | None, start: int, end: int) -> bool:
        """Whether reads are known to have touched every window the mapping's bytes [start, end) fall in: never here."""
        return False


def _native() -> type:
    from engine._native import _residency
    return _residency.Residency


twins.register("residency", python=lambda: Residency, native=_native)
selected = twins.selected("residency")  # the Residency class
