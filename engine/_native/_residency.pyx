# cython: language_level=3
"""The native twin of segments.residency.TouchedWindows (that module states the residency rule, which is kept there
only): the FAULT_WINDOW windows of a segment's mapping that reads touched, known by the mapping's address, so it
flags and tests exactly the windows a span falls in (the twin, which knows no address, flags none, and its lookups
by time always pread).
On disk: nothing. Thread-safety: called with the segment's lock held, or (`touch`, from the native reader) with the GIL
only: a flag set while another thread clears it makes one lookup read through the mapping or pread, both correct.
"""
cimport cython
from cpython.bytearray cimport PyByteArray_AS_STRING, PyByteArray_GET_SIZE
from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from libc.stdint cimport int64_t, uint8_t, uintptr_t
from libc.string cimport memset

FAULT_AROUND = FAULT_WINDOW  # for the test that it is the segment layer's


cdef bint _span(bytearray flags, const uint8_t *base, int64_t start, int64_t end, Py_ssize_t *lo, Py_ssize_t *hi):
    """The flags [lo, hi) of the windows of the addresses that a mapping's bytes [start, end) fall in."""
    cdef uintptr_t shift = <uintptr_t>base % FAULT_WINDOW
    if end <= start or start < 0:
        return False
    lo[0] = <Py_ssize_t>((shift + <uintptr_t>start) // FAULT_WINDOW)
    hi[0] = min(<Py_ssize_t>((shift + <uintptr_t>end - 1) // FAULT_WINDOW) + 1, PyByteArray_GET_SIZE(flags))
    return lo[0] < hi[0]


@cython.final
cdef class TouchedWindows:
    """segments.residency.TouchedWindows with the mapping's address known."""

    def __init__(self):
        self._mapping = self._flags = None

    def mapped(self, mapping):
        """A new mapping of the whole `.log`: no window of it touched yet."""
        self._mapping = mapping
        self._flags = bytearray(len(mapping) // FAULT_WINDOW + 2)

    def unmapped(self):
        self._mapping = self._flags = None

    cpdef clear(self, object mapping, int64_t start, int64_t end):
        """Forget that reads touched the windows the mapping's bytes [start, end) fall in (they were released)."""
        cdef Py_buffer buf
        cdef Py_ssize_t lo, hi
        if mapping is None or mapping is not self._mapping:
            return
        PyObject_GetBuffer(mapping, &buf, PyBUF_SIMPLE)
        try:
            if _span(self._flags, <const uint8_t *>buf.buf, start, end, &lo, &hi):
                memset(PyByteArray_AS_STRING(self._flags) + lo, 0, hi - lo)
        finally:
            PyBuffer_Release(&buf)

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
