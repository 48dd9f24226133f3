# cython: language_level=3
"""What every native codec module shares, compiled into each one that cimports it (there is no _codec.pyx): the
C helpers of crc32c_impl.h (CRC-32C, big-endian fields, varints), the RecordBatch v2 layout constants, the plain
structs records are described by, and the per-record steps kept inline in every module's loops (growing a buffer,
parsing one record's framing, walking its headers). Nothing here holds state; nothing here takes the GIL."""
from libc.stdint cimport int16_t, int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t
from libc.stdlib cimport realloc
from libc.string cimport memcpy


cdef extern from "crc32c_impl.h":
    void kl_crc32c_init()  # each module linking crc32c_impl.c calls it once, at import
    uint32_t kl_crc32c(uint32_t crc, const void *buf, size_t len) nogil
    uint32_t kl_crc32c_software(uint32_t crc, const void *buf, size_t len) nogil
    int kl_crc32c_hardware_available()
    uint64_t kl_be64(const uint8_t *p) nogil
    uint32_t kl_be32(const uint8_t *p) nogil
    uint16_t kl_be16(const uint8_t *p) nogil
    void kl_put64(uint8_t *p, uint64_t v) nogil
    void kl_put32(uint8_t *p, uint32_t v) nogil
    void kl_put16(uint8_t *p, uint16_t v) nogil
    int kl_read_varint(const uint8_t **pp, const uint8_t *end, int32_t *out) nogil
    int kl_read_varlong(const uint8_t **pp, const uint8_t *end, int64_t *out) nogil
    int kl_add_overflow(int64_t a, int64_t b, int64_t *out) nogil
    int kl_varint_size(int32_t n) nogil
    int kl_varlong_size(int64_t n) nogil
    uint8_t *kl_write_varint(uint8_t *p, int32_t n) nogil
    uint8_t *kl_write_varlong(uint8_t *p, int64_t n) nogil


cdef extern from *:
    """
    /* Where an empty buffer's pointer must still point somewhere (never read). */
    static CYTHON_UNUSED uint8_t kl_empty[1];
    """
    uint8_t kl_empty[1]


cdef enum:
    HEADER_SIZE = 61  # a RecordBatch v2 header (engine.record.batch_format.HEADER_SIZE)
    LOG_OVERHEAD = 12
    UP_TO_MAGIC = 17
    MIN_ENTRY_SIZE = 14
    ATTRS_OFFSET = 21
    MIN_RECORD_SIZE = 7
    NOGIL_CRC_BYTES = 65536
    CRC_STEP = 16384  # an encoder's CRC follows its writing this far behind, reading bytes still in the cache


# --- growable native buffers ---------------------------------------------------------------------
cdef struct Grow:
    char *data
    Py_ssize_t len
    Py_ssize_t cap


cdef inline int grow_reserve(Grow *g, Py_ssize_t extra) except -1:
    cdef Py_ssize_t cap
    cdef char *p
    if g.len + extra <= g.cap:
        return 0
    cap = max(g.cap * 2, g.len + extra, <Py_ssize_t>256)
    p = <char *>realloc(g.data, cap)
    if p == NULL:
        raise MemoryError()
    g.data = p
    g.cap = cap
    return 0


cdef inline int grow_put(Grow *g, const void *v, Py_ssize_t n) except -1:
    if g.len + n > g.cap:
        grow_reserve(g, n)
    memcpy(g.data + g.len, v, n)
    g.len += n
    return 0


# --- a record's fields, as pointers into bytes someone else holds --------------------------------
cdef struct Field:
    const unsigned char *p
    Py_ssize_t n          # -1 for null


cdef struct HeaderRef:
    Field key
    Field value


cdef struct RecInfo:      # one record an encoder writes
    Field key
    Field value
    int64_t ts
    int32_t off_delta
    Py_ssize_t hfirst      # index of its first HeaderRef
    int32_t hcount
    int32_t body


cdef struct Params:       # the header fields of a batch an encoder writes
    int64_t base_offset
    int32_t ple
    int codec
    int16_t attributes
    int64_t max_ts        # LogAppendTime to store, or -2 for the records' max
    int64_t pid
    int16_t epoch
    int32_t seq


# --- one record's framing (kafka-format.md §2) ----------------------------------------------------
cdef struct RecView:
    const uint8_t *key
    int32_t klen
    const uint8_t *value
    int32_t vlen
    int64_t ts_delta
    int32_t off_delta
    const uint8_t *headers
    int32_t hcount
    const uint8_t *end
    int64_t ts


# The framing steps return 0 or a code that indexes _FRAMING in _records.pyx (InvalidRecordError, as Kafka).
cdef inline int _varint_rc(int rc) noexcept nogil:
    return 1 if rc == -1 else 2


cdef inline int _skip_field(const uint8_t **pp, const uint8_t *end, const uint8_t **out, int32_t *n) noexcept nogil:
    cdef int rc = kl_read_varint(pp, end, n)
    if rc:
        return _varint_rc(rc)
    out[0] = pp[0]
    if n[0] >= 0:
        if n[0] > end - pp[0]:
            return 4
        pp[0] += n[0]
    return 0


cdef inline int _record_head(const uint8_t **pp, const uint8_t *end, RecView *r, int32_t last_delta) noexcept nogil:
    """Parse the record at *pp up to its offset delta (advancing *pp past it), and point r.end at the record's end;
    0 or a framing error code."""
    cdef int32_t size
    cdef const uint8_t *rend
    cdef int rc = kl_read_varint(pp, end, &size)
    if rc:
        return _varint_rc(rc)
    if size < 0 or size > end - pp[0]:
        return 3
    rend = r.end = pp[0] + size
    if size < 1:
        return 7
    pp[0] += 1  # record attributes: unused
    rc = kl_read_varlong(pp, rend, &r.ts_delta)
    if rc:
        return _varint_rc(rc)
    rc = kl_read_varint(pp, rend, &r.off_delta)
    if rc:
        return _varint_rc(rc)
    if r.off_delta < 0 or r.off_delta > last_delta:
        return 8
    return 0


cdef inline int _parse_record(const uint8_t **pp, const uint8_t *end, RecView *r, int32_t last_delta,
                              int64_t base_ts) noexcept nogil:
    """Parse one record at *pp (advancing it) and compute its stored timestamp; 0 or a framing error code."""
    cdef int32_t i, hk, hv
    cdef const uint8_t *ignored
    cdef const uint8_t *rend
    cdef int rc = _record_head(pp, end, r, last_delta)
    if rc:
        return rc
    rend = r.end
    if kl_add_overflow(base_ts, r.ts_delta, &r.ts):
        return 9
    rc = _skip_field(pp, rend, &r.key, &r.klen)
    if rc:
        return rc
    rc = _skip_field(pp, rend, &r.value, &r.vlen)
    if rc:
        return rc
    rc = kl_read_varint(pp, rend, &r.hcount)
    if rc:
        return _varint_rc(rc)
    if r.hcount < 0:
        return 5
    r.headers = pp[0]
    for i in range(r.hcount):
        rc = _skip_field(pp, rend, &ignored, &hk)
        if rc:
            return rc
        if hk < 0:
            return 6
        rc = _skip_field(pp, rend, &ignored, &hv)
        if rc:
            return rc
    if pp[0] != rend:
        return 7
    return 0


cdef inline void _next_header(const uint8_t **p, const uint8_t *end, HeaderRef *h) noexcept nogil:
    """Point h at the header at *p of a record that _parse_record already validated, and move past it."""
    cdef int32_t n = 0
    kl_read_varint(p, end, &n)
    h.key.p, h.key.n = p[0], n
    p[0] += n
    kl_read_varint(p, end, &n)
    h.value.p, h.value.n = p[0], n
    if n > 0:
        p[0] += n
