"""Which pages of one segment's shared mapping are resident because readers read them, and releasing the ones a reader
moved past (the segment's owner only; readers beside another process's writer read with pread and map nothing).

A reader moving on through a segment reports what it read (`note_read`). A read that continues one of the last READERS
ranges extends it; once a range was read on for RELEASE_BYTES, its pages are released (madvise MADV_DONTNEED: the
page table entries go, the page cache keeps the bytes). So a consumer scanning a large segment keeps about that much of
it resident, not the whole segment, and a view of released pages reads them again from the page cache. Random reads
release nothing (a release costs more than such a read).
A lookup by time reads its batches with pread where no read is known to have touched the mapping (a first touch
costs page faults, which cost more than the copy). So the reads that touched the mapping flag the FAULT_AROUND windows
of its addresses they fell in (`touched`: the mapping and one flag per window); a release clears them, and a new
mapping starts with none. The native reader (engine._native._log_read), which knows the mapping's address, flags and
tests exactly the windows a read falls in; Python code, which does not, tests every window a span may fall in.
On disk: nothing. Thread-safety: every method is called with the segment's lock held.
"""
from __future__ import annotations

import mmap
from collections import deque

RELEASE_BYTES = 8 << 20
READERS = 8  # ranges remembered: as many sequential readers of one segment as are followed at once
FAULT_AROUND = 64 << 10  # a read fault maps up to this much of the page cache around it (Linux's fault_around_bytes)
_PAGE = mmap.PAGESIZE


class Residency:
    """The ranges readers are moving through, and the windows of the mapping that reads touched."""

    def __init__(self) -> None:
        self.ranges: deque[tuple[int, int]] = deque()  # the latest [start, end) read on through the mapping
        self.touched: tuple[mmap.mmap, bytearray] | None = None  # (mapping, one flag per FAULT_AROUND window)

    def mapped(self, mapping: mmap.mmap) -> None:
        """A new mapping of the whole `.log`: no window of it touched yet, at any address."""
        self.touched = (mapping, bytearray(len(mapping) // FAULT_AROUND + 2))

    def unmapped(self) -> None:
        self.touched = None

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
                self._untouch(mapping, lo - lo % _PAGE, top)
            lo = position
        ranges.append((lo, hi))

    def _untouch(self, mapping: mmap.mmap, start: int, end: int) -> None:
        """Forget that reads touched the mapping's pages of [start, end): every window they may fall in, whatever
        the mapping's address."""
        touched = self.touched
        if touched is not None and touched[0] is mapping:
            flags = touched[1]
            lo, hi = start // FAULT_AROUND, min(len(flags), (end - 1) // FAULT_AROUND + 2)
            if hi > lo:
                flags[lo:hi] = bytes(hi - lo)

    def all_touched(self, mapping: mmap.mmap | None, start: int, end: int) -> bool:
        """Whether reads touched every window the mapping's bytes [start, end) may fall in, at any address."""
        touched = self.touched
        return (touched is not None and mapping is not None and touched[0] is mapping
                and all(touched[1][start // FAULT_AROUND:(end - 1) // FAULT_AROUND + 2]))
