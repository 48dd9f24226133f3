# cython: language_level=3
"""What other native modules take from the core: the MemoryRecordsBuilder a producer's batches are encoded into."""
cimport cython
from libc.stdint cimport int64_t


cdef enum:
    HEADER_SIZE = 61  # a RecordBatch v2 header (engine.record.batch_format.HEADER_SIZE)


cdef object _byte_view(object data)


cdef struct Grow:
    char *data
    Py_ssize_t len
    Py_ssize_t cap


@cython.final
cdef class RecordsBuilder:
    cdef Grow body
    cdef Grow infos
    cdef Py_ssize_t count
    cdef int64_t base_ts, max_ts
    cdef Py_ssize_t add(self, key, value, list headers, int64_t ts) except -1


cdef RecordsBuilder new_builder(Py_ssize_t capacity)
