# The native twin of segments.residency.Residency: the ranges readers move through a segment's shared mapping, the
# pages released behind them, and which windows of the mapping's addresses reads touched. The native log reader
# (engine._native._log_read) flags and tests those windows through the two cdef methods; everything else uses the
# Python-visible methods, which both twins share.
from libc.stdint cimport int64_t, uint8_t

cdef enum:
    FAULT_WINDOW = 64 << 10  # segments.residency.FAULT_AROUND: a read fault maps up to this much around it

cdef class Residency:
    cdef readonly object ranges     # a deque of the latest [start, end) read on through the mapping
    cdef object _mapping            # the mapping `_flags` are for (None: no mapping)
    cdef bytearray _flags           # one per FAULT_WINDOW window of the mapping's addresses, from its address rounded down

    cpdef bint all_touched(self, object mapping, int64_t start, int64_t end) except -1
    cdef int _untouch(self, object mapping, int64_t start, int64_t end) except -1
    cdef int touch(self, object mapping, const uint8_t *base, int64_t start, int64_t end) except -1
    cdef bint touched_at(self, object mapping, const uint8_t *base, int64_t start, int64_t end) except -1
