# cython: language_level=3
"""The log cleaner's passes over a batch's records, for _offset_map.pyx (see _cleaner_records.pyx): the framing of
every record is checked first; `prepare` is then told all of them at once (so their keys can be hashed side by side
and their map slots fetched ahead), and `check` each in turn by its index, returning 1 to stop the visit, or to keep
the record; retain_records given `dropped` steps over the records it names by offset instead."""
from libc.stdint cimport int32_t, int64_t, uint8_t


cdef struct KeyRef:
    int64_t offset
    const uint8_t *key
    int32_t klen          # -1 for a null key
    bint tombstone
ctypedef int (*records_prepare)(void *ctx, const KeyRef *refs, int32_t n) except -1
ctypedef int (*record_check)(void *ctx, int32_t i, const KeyRef *ref) except -1
ctypedef bint (*record_dropped)(void *ctx, int64_t offset) noexcept  # a record that goes, known by its offset alone
cdef int visit_records(object batch, records_prepare prepare, record_check visit, void *ctx) except -1
cdef object retain_records(object batch, records_prepare prepare, record_check keep, void *ctx, bint verify_crc,
                           record_dropped dropped)
