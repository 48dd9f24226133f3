# cython: language_level=3
"""A read's index search and batch-header walks on raw bytes, for _log_read.pyx (see _log_scan.pyx: index_search,
scan_to_offset, take_span), and pread of a span."""
from libc.stdint cimport int64_t, uint8_t


cdef Py_ssize_t index_floor(const uint8_t *p, Py_ssize_t entries, int entry_size, int64_t target) noexcept nogil
cdef bint scan_headers(const uint8_t *p, Py_ssize_t n, int64_t position, int64_t offset, int64_t entry_offset,
                       int64_t prev_last, int64_t up, int64_t found[4]) noexcept nogil
cdef int check_epochs(object epochs) except -1
cdef bint as_int64(object value, int64_t *out) noexcept
cdef Py_ssize_t span_of(const uint8_t *p, Py_ssize_t n, Py_ssize_t max_size, bint min_one_message, int64_t prev_last,
                        int64_t up, object epochs) except -2
cdef Py_ssize_t read_all(int fd, uint8_t *buf, size_t n, int64_t at) noexcept nogil
