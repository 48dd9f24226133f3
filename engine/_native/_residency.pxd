# The native twin of segments.residency.TouchedWindows: which windows of a segment's shared mapping reads touched,
# known by the mapping's address. The native log reader (engine._native._log_read) flags the windows it read
# (`touch`) and tests them (`all_touched`); segments.residency.Residency, which holds the residency rule, tells it of
# new mappings and of the ranges it released.
from libc.stdint cimport int64_t, uint8_t

cdef enum:
    FAULT_WINDOW = 64 << 10  # segments.residency.FAULT_AROUND: a read fault maps up to this much around it

cdef class TouchedWindows:
    cdef object _mapping            # the mapping `_flags` are for (None: no mapping)
    cdef bytearray _flags           # one per FAULT_WINDOW window of the mapping's addresses, from its address rounded down

    cpdef bint all_touched(self, object mapping, int64_t start, int64_t end) except -1
    cpdef clear(self, object mapping, int64_t start, int64_t end)
    cdef int touch(self, object mapping, const uint8_t *base, int64_t start, int64_t end) except -1
    cdef bint touched_at(self, object mapping, const uint8_t *base, int64_t start, int64_t end) except -1
