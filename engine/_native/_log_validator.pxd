# cython: language_level=3
"""The leader's checks of one produced batch, and the shortcut for a lone batch of a producer's next sequence, for
_segment_appender.pyx (see _log_validator.pyx)."""
from libc.stdint cimport int32_t, int64_t, uint8_t


cdef int64_t leader_batch(const uint8_t *p, Py_ssize_t size, Py_ssize_t pos, int64_t offset, int32_t leader_epoch,
                          int64_t log_append_time, Py_ssize_t max_batch_bytes, bint allow_control, object source,
                          uint8_t *h) except -2
cdef Py_ssize_t lone_batch_size(const uint8_t *p, Py_ssize_t n, int64_t producer_id, int32_t producer_epoch,
                                int32_t base_sequence, bint transactional) noexcept
