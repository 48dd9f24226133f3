# cython: language_level=3
"""What other native modules take from _records_builder.pyx: the MemoryRecordsBuilder a producer's records are
encoded into (_accumulator.pyx), the checks that turn a record's key, value and headers into pointers, and the steps
that write a batch from described records (the columnar encoder, the cleaner, the log validator)."""
cimport cython
from libc.stdint cimport int32_t, int64_t, uint8_t

from engine._native._codec cimport Field, Grow, HeaderRef, Params, RecInfo


cdef int bytes_field(object obj, Field *f, list keep) except -1
cdef int header_refs(object headers, Grow *out, list keep) except -1
cdef int pair_refs(object pairs, Grow *out) except -1


@cython.final
cdef class RecordsBuilder:
    cdef Grow body
    cdef Grow infos
    cdef Py_ssize_t count
    cdef int64_t base_ts, max_ts
    cdef Py_ssize_t add(self, const Field *key, const Field *value, const HeaderRef *headers, Py_ssize_t hcount,
                        int64_t ts) except -1


cdef RecordsBuilder new_builder(Py_ssize_t capacity)


# writing a batch: its parameters checked, room for its records' descriptions, then the batch (compressed if asked)
cdef int _params(Params *pr, base_offset, compression, timestamp_type, log_append_time_ms, producer_id,
                 producer_epoch, base_sequence, transactional, partition_leader_epoch) except -1
cdef RecInfo *_alloc_infos(Py_ssize_t n) except NULL
cdef bytes _finish(RecInfo *infos, Py_ssize_t n, const HeaderRef *hrefs, Params *pr, object level,
                   object last_offset_delta, object base_timestamp=*)
cdef bytes _encode_items(list items, Params *pr, object level, object last_offset_delta, object base_timestamp=*)
cdef void _put_header(uint8_t *h, Py_ssize_t size, Params *pr, int32_t last, int64_t base_ts, int64_t max_ts,
                      int32_t count) noexcept
