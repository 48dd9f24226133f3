# cython: language_level=3
"""The native twin of segments.residency (its module docstring states the rule): a segment's sequential readers'
ranges, the pages released RELEASE_BYTES behind them, and the FAULT_WINDOW windows of the mapping's addresses that
reads touched. Knowing the mapping's address, it flags and tests exactly the windows a span falls in (the twin, which
does not, flags none, so its lookups by time always pread).
On disk: nothing. Thread-safety: called with the segment's lock held, or (`touch`, from the native reader) with the GIL
only: a flag set while another thread clears it makes one lookup read through the mapping or pread, both correct.
"""
cimport cython
from cpython.bytearray cimport PyByteArray_AS_STRING, PyByteArray_GET_SIZE
from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from libc.stdint cimport int64_t, uint8_t, uintptr_t
from libc.string cimport memset

import mmap
from collections import deque

RELEASE_BYTES = 8 << 20  # as segments.residency
READERS = 8
FAULT_AROUND = FAULT_WINDOW  # for the test that the twins agree
cdef int64_t _PAGE = mmap.PAGESIZE
cdef int64_t _RELEASE = RELEASE_BYTES
cdef Py_ssize_t _READERS = READERS


cdef bint _span(bytearray flags, const uint8_t *base, int64_t start, int64_t end, Py_ssize_t *lo, Py_ssize_t *hi):
    """The flags [lo, hi) of the windows of the addresses that a mapping's bytes [start, end) fall in."""
    cdef uintptr_t shift = <uintptr_t>base % FAULT_WINDOW
    if end <= start or start < 0:
        return False
    lo[0] = <Py_ssize_t>((shift + <uintptr_t>start) // FAULT_WINDOW)
    hi[0] = min(<Py_ssize_t>((shift + <uintptr_t>end - 1) // FAULT_WINDOW) + 1, PyByteArray_GET_SIZE(flags))
    return lo[0] < hi[0]


@cython.final
cdef class Residency:
    """segments.residency.Residency with the windows of the mapping's addresses known."""

    def __init__(self):
        self.ranges = deque()
        self._mapping = None
        self._flags = None

    def mapped(self, mapping):
        """A new mapping of the whole `.log`: no window of it touched yet."""
        self._mapping = mapping
        self._flags = bytearray(len(mapping) // FAULT_WINDOW + 2)

    def unmapped(self):
        self._mapping = self._flags = None

    def note_read(self, mapping, int64_t position, int64_t nbytes):
        """`nbytes` were read at `position` through `mapping` (the newest one; None: none is left)."""
        cdef int64_t end = position + nbytes + FAULT_WINDOW, lo = position, hi = end, top, bottom
        cdef Py_ssize_t i
        cdef object ranges = self.ranges
        for i, (start, stop) in enumerate(ranges):
            if start <= position <= stop:
                del ranges[i]
                lo, hi = start, max(stop, end)
                break
        else:
            if len(ranges) == _READERS:
                ranges.popleft()
        if hi - lo >= _RELEASE and mapping is not None:
            top = min(hi, <int64_t>len(mapping))
            top -= top % _PAGE
            bottom = lo - lo % _PAGE
            if top > bottom:
                mapping.madvise(mmap.MADV_DONTNEED, bottom, top - bottom)
                self._untouch(mapping, bottom, top)
            lo = position
        ranges.append((lo, hi))

    cdef int _untouch(self, object mapping, int64_t start, int64_t end) except -1:
        """Forget that reads touched the windows the mapping's bytes [start, end) fall in."""
        cdef Py_buffer buf
        cdef Py_ssize_t lo, hi
        if mapping is not self._mapping or self._flags is None:
            return 0
        PyObject_GetBuffer(mapping, &buf, PyBUF_SIMPLE)
        try:
            if _span(self._flags, <const uint8_t *>buf.buf, start, end, &lo, &hi):
                memset(PyByteArray_AS_STRING(self._flags) + lo, 0, hi - lo)
        finally:
            PyBuffer_Release(&buf)
        return 0

    cpdef bint all_touched(self, object mapping, int64_t start, int64_t end) except -1:
        """Whether reads touched every window the mapping's bytes [start, end) fall in."""
        cdef Py_buffer buf
        if mapping is None or mapping is not self._mapping:
            return False
        PyObject_GetBuffer(mapping, &buf, PyBUF_SIMPLE)
        try:
            return self.touched_at(mapping, <const uint8_t *>buf.buf, start, end)
        finally:
            PyBuffer_Release(&buf)

    cdef int touch(self, object mapping, const uint8_t *base, int64_t start, int64_t end) except -1:
        """Flag the windows that a read of the mapping's bytes [start, end) touched (`base` its address)."""
        cdef Py_ssize_t lo, hi
        if mapping is self._mapping and self._flags is not None and _span(self._flags, base, start, end, &lo, &hi):
            memset(PyByteArray_AS_STRING(self._flags) + lo, 1, hi - lo)
        return 0

    cdef bint touched_at(self, object mapping, const uint8_t *base, int64_t start, int64_t end) except -1:
        """Whether reads touched every window the mapping's bytes [start, end) fall in (`base` its address)."""
        cdef Py_ssize_t lo, hi, i
        cdef const char *flags
        if mapping is not self._mapping or self._flags is None or not _span(self._flags, base, start, end, &lo, &hi):
            return False
        flags = PyByteArray_AS_STRING(self._flags)
        for i in range(lo, hi):
            if not flags[i]:
                return False
        return True
