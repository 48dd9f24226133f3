# cython: language_level=3
"""What the other native modules take from _records.pyx: the decoded Record, the RecordBatch view with the checks
each decoding pass makes (CRC, record count, framing, the end of the section), and the batch-header walks a read
makes before it decodes anything (framing, the first record at or after a timestamp, a follower's check)."""
from libc.stdint cimport int16_t, int32_t, int64_t, uint8_t, uint32_t


cdef object _byte_view(object data)


cdef class Record:
    cdef readonly object offset
    cdef readonly object timestamp
    cdef readonly object key
    cdef readonly object value
    cdef object headers
    cdef readonly object control_type
    cdef readonly object coordinator_epoch


cdef class ConsumerRecord:
    cdef readonly object topic
    cdef readonly object partition
    cdef readonly object leader_epoch
    cdef readonly object offset
    cdef readonly object timestamp
    cdef readonly int timestamp_type
    cdef readonly object key
    cdef readonly object value
    cdef object headers
    cdef readonly int32_t serialized_key_size
    cdef readonly int32_t serialized_value_size
    cdef readonly int32_t serialized_header_size


cdef class RecordBatch:
    cdef readonly int64_t base_offset
    cdef readonly int32_t batch_length
    cdef readonly int32_t partition_leader_epoch
    cdef readonly int magic
    cdef readonly uint32_t crc
    cdef readonly int16_t attributes
    cdef readonly int32_t last_offset_delta
    cdef readonly int64_t base_timestamp
    cdef readonly int64_t max_timestamp
    cdef readonly int64_t producer_id
    cdef readonly int16_t producer_epoch
    cdef readonly int32_t base_sequence
    cdef readonly int32_t records_count
    cdef readonly object buffer
    cdef readonly Py_ssize_t position
    cdef readonly object source
    cdef const uint8_t *_p
    cdef Py_ssize_t _n

    cdef void _set(self, object view, const uint8_t *p, Py_ssize_t n, Py_ssize_t position, object source)
    cdef bint _valid(self)
    cdef int _ensure_valid(self) except -1
    cdef object _error(self, cls, str message)
    cdef object _section(self, Py_ssize_t limit)
    cdef int _check_count(self, Py_ssize_t available) except -1
    cdef int _framing_error(self, int rc) except -1
    cdef int _check_end(self, const uint8_t *p, const uint8_t *end) except -1
    cdef object _open(self, bint verify_crc, Py_ssize_t limit, const uint8_t **p, const uint8_t **end)
    cdef object _first(self, bint keyless, int64_t timestamp, int64_t start_offset)


cdef Py_ssize_t _frame_end(const uint8_t *base, Py_ssize_t n, Py_ssize_t pos, Py_ssize_t position,
                           object source) except -2
cdef Py_ssize_t replica_batch(const uint8_t *p, Py_ssize_t n) noexcept nogil
cdef Py_ssize_t passed_by(const uint8_t *p, Py_ssize_t n, Py_ssize_t position, int64_t timestamp,
                          int64_t start_offset, object source) except -1
cdef object first_in(object mv, const uint8_t *p, Py_ssize_t pos, Py_ssize_t n, Py_ssize_t position,
                     int64_t timestamp, int64_t start_offset, object source)
