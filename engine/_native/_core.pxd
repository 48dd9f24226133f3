# cython: language_level=3
"""What other native modules take from the core: the MemoryRecordsBuilder a producer's batches are encoded into,
and the checks that turn a record's key, value and headers into pointers (see _core.pyx, "encode")."""
cimport cython
from libc.stdint cimport int32_t, int64_t, uint8_t


cdef enum:
    HEADER_SIZE = 61  # a RecordBatch v2 header (engine.record.batch_format.HEADER_SIZE)


cdef object _byte_view(object data)


cdef struct Grow:
    char *data
    Py_ssize_t len
    Py_ssize_t cap


cdef struct Field:
    const unsigned char *p
    Py_ssize_t n          # -1 for null


cdef struct HeaderRef:
    Field key
    Field value


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


# the leader's checks of one produced batch (see _core.pyx, "leader append"), and a follower's of a replicated one
cdef int64_t leader_batch(const uint8_t *p, Py_ssize_t size, Py_ssize_t pos, int64_t offset, int32_t leader_epoch,
                          int64_t log_append_time, Py_ssize_t max_batch_bytes, bint allow_control, object source,
                          uint8_t *h) except -2
cdef Py_ssize_t replica_batch(const uint8_t *p, Py_ssize_t n) noexcept nogil
cdef Py_ssize_t lone_batch_size(const uint8_t *p, Py_ssize_t n, int64_t producer_id, int32_t producer_epoch,
                                int32_t base_sequence, bint transactional) noexcept


# a read's index search and batch-header walks on raw bytes (see _core.pyx, "index search", first_at_or_after,
# scan_to_offset, take_span)
cdef Py_ssize_t index_floor(const uint8_t *p, Py_ssize_t entries, int entry_size, int64_t target) noexcept nogil
cdef bint scan_headers(const uint8_t *p, Py_ssize_t n, int64_t position, int64_t offset, int64_t entry_offset,
                       int64_t prev_last, int64_t up, int64_t found[4]) noexcept nogil
cdef int check_epochs(object epochs) except -1
cdef bint as_int64(object value, int64_t *out) noexcept
cdef Py_ssize_t passed_by(const uint8_t *p, Py_ssize_t n, Py_ssize_t position, int64_t timestamp,
                          int64_t start_offset, object source) except -1
cdef Py_ssize_t read_all(int fd, uint8_t *buf, size_t n, int64_t at) noexcept nogil
cdef object first_in(object mv, const uint8_t *p, Py_ssize_t pos, Py_ssize_t n, Py_ssize_t position,
                     int64_t timestamp, int64_t start_offset, object source)
cdef Py_ssize_t span_of(const uint8_t *p, Py_ssize_t n, Py_ssize_t max_size, bint min_one_message, int64_t prev_last,
                        int64_t up, object epochs) except -2


# the log cleaner's passes over a batch's records (see _core.pyx, "the log cleaner's record passes"): the framing of
# every record is checked first; `prepare` is then told all of them at once (so their keys can be hashed side by side
# and their map slots fetched ahead), and `check` each in turn by its index, returning 1 to stop the visit, or to
# keep the record; retain_records given `dropped` steps over the records it names by offset instead (see there)
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
