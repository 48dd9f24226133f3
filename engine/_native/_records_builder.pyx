# cython: language_level=3
"""The native encoder: encode_batch and encode_control_batch write a RecordBatch v2 (kafka-format.md §1-2) from input
records in one pass, and RecordsBuilder (Kafka's MemoryRecordsBuilder) encodes a producer's records as they are
sent. The C-level steps (field checks, sizes, writing records and the header, the CRC following the writing) are
declared in _records_builder.pxd for the modules that write batches too: columnar, the cleaner, the log validator.
Twin: engine.record.records_builder.

Every accepted input shape is read in one pass: keys, values and header values as bytes or any C-contiguous buffer
(held through a memoryview, so it cannot be resized while it is copied), headers as None or an exact list or tuple of
exact (str, value) tuples. A record this pass does not take (a bad type, or an unusual shape such as a tuple
subclass) sends the whole batch through the shared validator engine.record.batch_format, which raises the twin's
exact error or returns the normalized fields. No module state; functions are thread-safe; a RecordsBuilder is filled
by one thread at a time.
"""
from cpython.buffer cimport PyBuffer_IsContiguous, PyObject_CheckBuffer
from cpython.bytes cimport (
    PyBytes_AS_STRING,
    PyBytes_Check,
    PyBytes_CheckExact,
    PyBytes_FromStringAndSize,
    PyBytes_GET_SIZE,
)
from cpython.exc cimport PyErr_Clear
from cpython.list cimport PyList_CheckExact, PyList_GET_ITEM, PyList_GET_SIZE
from cpython.long cimport PyLong_AsLongLongAndOverflow, PyLong_CheckExact
from cpython.memoryview cimport PyMemoryView_FromObject, PyMemoryView_GET_BUFFER
from cpython.tuple cimport PyTuple_CheckExact, PyTuple_GET_ITEM, PyTuple_GET_SIZE
from cpython.unicode cimport PyUnicode_CheckExact
from libc.stdint cimport INT32_MAX, INT64_MAX, int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t
from libc.stdlib cimport free, malloc
from libc.string cimport memcpy

from engine._native._codec cimport (
    ATTRS_OFFSET,
    CRC_STEP,
    HEADER_SIZE,
    LOG_OVERHEAD,
    Field,
    Grow,
    HeaderRef,
    Params,
    RecInfo,
    grow_put,
    grow_reserve,
    kl_add_overflow,
    kl_crc32c,
    kl_crc32c_init,
    kl_empty,
    kl_put16,
    kl_put32,
    kl_put64,
    kl_varint_size,
    kl_varlong_size,
    kl_write_varint,
    kl_write_varlong,
)
from engine._native._records cimport Record

from engine.record import batch_format as bf
from engine.record import compression as comp
from engine.common.errors import InvalidRecordError

cdef object _NO_HEADERS = bf.NO_HEADERS

kl_crc32c_init()

cdef extern from *:
    """
    /* The encoder's pass over its input records reads objects the caller made one by one, in no order the hardware
       prefetcher follows: the record tuple KL_AHEAD places ahead is fetched, and the fields of the one half as far
       ahead (its tuple fetched by then). A macro: GCC drops a call to a function whose only effect is a prefetch. */
    #define KL_AHEAD 16
    #define KL_FETCH_RECORDS(items, i) do {                                                \
        Py_ssize_t n_ = PyList_GET_SIZE(items);  /* (now: a field's buffer may run code) */ \
        if ((i) + KL_AHEAD < n_)                                                            \
            __builtin_prefetch(PyList_GET_ITEM((items), (i) + KL_AHEAD), 0, 3);             \
        if ((i) + KL_AHEAD / 2 < n_) {                                                      \
            PyObject *t_ = PyList_GET_ITEM((items), (i) + KL_AHEAD / 2);                    \
            if (PyTuple_CheckExact(t_) && PyTuple_GET_SIZE(t_) == 4) {                      \
                __builtin_prefetch(PyTuple_GET_ITEM(t_, 0), 0, 3);                          \
                __builtin_prefetch(PyTuple_GET_ITEM(t_, 1), 0, 3);                          \
                __builtin_prefetch(PyTuple_GET_ITEM(t_, 2), 0, 3);                          \
                __builtin_prefetch(PyTuple_GET_ITEM(t_, 3), 0, 3);                          \
            }                                                                               \
        }                                                                                   \
    } while (0)
    """
    void KL_FETCH_RECORDS(list items, Py_ssize_t i) noexcept


# --- encode ------------------------------------------------------------------------------------
cdef extern from "Python.h":
    const char *PyUnicode_AsUTF8AndSize(object unicode, Py_ssize_t *size)
    object PyUnicode_AsEncodedString(object unicode, const char *encoding, const char *errors)


cdef int bytes_field(object obj, Field *f, list keep) except -1:
    """Point f at a key, value or header value: 0, or 1 when it is not one this pass takes."""
    cdef Py_buffer *view
    if obj is None:
        f.p = kl_empty
        f.n = -1
        return 0
    if PyBytes_Check(obj):
        f.p = <const uint8_t *>PyBytes_AS_STRING(obj)
        f.n = PyBytes_GET_SIZE(obj)
        return 0
    if not PyObject_CheckBuffer(obj):
        return 1
    mv = PyMemoryView_FromObject(obj)
    view = PyMemoryView_GET_BUFFER(mv)
    if not PyBuffer_IsContiguous(view, c'C'):
        return 1
    keep.append(mv)
    f.p = <const uint8_t *>view.buf if view.len else kl_empty
    f.n = view.len
    return 0


cdef int _header_key(object key, Field *f, list keep) except -1:
    """A header key's UTF-8 bytes (lone surrogates from undecodable bytes map back to them)."""
    cdef Py_ssize_t n
    cdef const char *p
    if not PyUnicode_CheckExact(key):
        return 1
    p = PyUnicode_AsUTF8AndSize(key, &n)
    if p == NULL:
        PyErr_Clear()
        try:
            encoded = PyUnicode_AsEncodedString(key, "utf-8", "surrogateescape")
        except UnicodeError:
            return 1
        keep.append(encoded)
        p = PyBytes_AS_STRING(encoded)
        n = PyBytes_GET_SIZE(encoded)
    f.p = <const uint8_t *>p
    f.n = n
    return 0


cdef int header_refs(object headers, Grow *out, list keep) except -1:
    """Append a HeaderRef per header to out: 0, or 1 when the headers are not a shape this pass takes."""
    cdef Py_ssize_t i, n
    cdef HeaderRef ref
    cdef object h
    if headers is None or headers is _NO_HEADERS:
        return 0
    if PyList_CheckExact(headers):
        n = PyList_GET_SIZE(headers)
    elif PyTuple_CheckExact(headers):
        n = PyTuple_GET_SIZE(headers)
    else:
        return 1
    for i in range(n):
        h = <object>(PyList_GET_ITEM(headers, i) if PyList_CheckExact(headers) else PyTuple_GET_ITEM(headers, i))
        if not PyTuple_CheckExact(h) or PyTuple_GET_SIZE(h) != 2:
            return 1
        if _header_key(<object>PyTuple_GET_ITEM(h, 0), &ref.key, keep):
            return 1
        if bytes_field(<object>PyTuple_GET_ITEM(h, 1), &ref.value, keep):
            return 1
        grow_put(out, &ref, sizeof(HeaderRef))
    return 0


cdef int pair_refs(object pairs, Grow *out) except -1:
    """HeaderRefs of normalized (bytes, bytes|None) pairs, checked as exact bytes."""
    cdef HeaderRef ref
    for hk, hv in pairs:
        _field_ptr(_exact_bytes(hk, "header key"), &ref.key.p, &ref.key.n)
        _field_ptr(None if hv is None else _exact_bytes(hv, "header value"), &ref.value.p, &ref.value.n)
        grow_put(out, &ref, sizeof(HeaderRef))
    return 0


cdef inline int64_t _headers_size(const HeaderRef *h, Py_ssize_t count) noexcept:
    """The encoded size of `count` headers."""
    cdef int64_t size = 0
    cdef Py_ssize_t i
    for i in range(count):
        size += kl_varint_size(<int32_t>h[i].key.n) + h[i].key.n
        size += 1 if h[i].value.n < 0 else kl_varint_size(<int32_t>h[i].value.n) + h[i].value.n
    return size


cdef inline int64_t _headers_bytes(const HeaderRef *h, Py_ssize_t count) noexcept:
    """Key plus value bytes of `count` headers (kafka-python's serialized_header_size)."""
    cdef int64_t size = 0
    cdef Py_ssize_t i
    for i in range(count):
        size += h[i].key.n + (h[i].value.n if h[i].value.n > 0 else 0)
    return size


cdef uint8_t *_put_headers(uint8_t *p, const HeaderRef *h, Py_ssize_t count) noexcept:
    cdef Py_ssize_t i
    p = kl_write_varint(p, <int32_t>count)
    for i in range(count):
        p = _put_field(p, h[i].key.p, h[i].key.n)
        p = _put_field(p, h[i].value.p, h[i].value.n)
    return p


cdef inline int64_t _body_size(int64_t ts_delta, int32_t off_delta, const Field *key, const Field *value,
                                const HeaderRef *headers, Py_ssize_t hcount) noexcept:
    """A record's body size (after its length varint)."""
    return (1 + kl_varlong_size(ts_delta) + kl_varint_size(off_delta) + kl_varint_size(<int32_t>hcount)
            + _headers_size(headers, hcount)
            + (1 if key.n < 0 else kl_varint_size(<int32_t>key.n) + key.n)
            + (1 if value.n < 0 else kl_varint_size(<int32_t>value.n) + value.n))


cdef uint8_t *_put_record(uint8_t *p, int32_t body, int64_t ts_delta, int32_t off_delta, const Field *key,
                          const Field *value, const HeaderRef *headers, Py_ssize_t hcount) noexcept:
    """Write one record (its length varint first); returns the end."""
    p = kl_write_varint(p, body)
    p[0] = 0
    p = kl_write_varlong(p + 1, ts_delta)
    p = kl_write_varint(p, off_delta)
    p = _put_field(p, key.p, key.n)
    p = _put_field(p, value.p, value.n)
    return _put_headers(p, headers, hcount)


cdef inline int _field_ptr(object obj, const uint8_t **p, Py_ssize_t *n) except -1:
    if obj is None:
        n[0] = -1
    else:
        p[0] = <const uint8_t *>PyBytes_AS_STRING(obj)
        n[0] = len(<bytes>obj)
    return 0


cdef inline int _timestamp(object ts, int64_t *out) except -1:
    """A record timestamp: 0, or 1 when it is not an exact int in [-1, 2**63) or None."""
    cdef int overflow = 0
    if ts is None:
        out[0] = -1
        return 0
    if not PyLong_CheckExact(ts):
        return 1
    out[0] = PyLong_AsLongLongAndOverflow(ts, &overflow)
    return 1 if overflow or out[0] < -1 else 0


cdef int _fill_record(RecInfo *r, object item, int32_t prev, int64_t base_offset, Grow *hrefs,
                      list keep) except -1:
    """Fill r from an input record in the native pass: 0, or 1 when the record needs the shared validator."""
    cdef Record rec
    cdef int64_t delta
    cdef object key, value, headers
    if PyTuple_CheckExact(item):
        if PyTuple_GET_SIZE(item) != 4 or prev == INT32_MAX:
            return 1
        key = <object>PyTuple_GET_ITEM(item, 0)
        value = <object>PyTuple_GET_ITEM(item, 1)
        headers = <object>PyTuple_GET_ITEM(item, 2)
        if _timestamp(<object>PyTuple_GET_ITEM(item, 3), &r.ts):
            return 1
        r.off_delta = prev + 1
    elif type(item) is Record:
        rec = <Record>item
        if kl_add_overflow(rec.offset, -base_offset, &delta) or delta <= prev or delta > INT32_MAX:
            return 1
        if rec.timestamp < -1:
            return 1
        r.off_delta = <int32_t>delta
        r.ts = rec.timestamp
        key, value, headers = rec.key, rec.value, rec.headers
    else:
        return 1
    if bytes_field(key, &r.key, keep) or bytes_field(value, &r.value, keep):
        return 1
    r.hfirst = hrefs.len // sizeof(HeaderRef)
    if header_refs(headers, hrefs, keep):
        return 1
    r.hcount = <int32_t>(hrefs.len // sizeof(HeaderRef) - r.hfirst)
    return 0


cdef int _fill_validated(RecInfo *r, tuple fields, Grow *hrefs) except -1:
    """Fill r from the shared validator's (offset_delta, key, value, headers, timestamp)."""
    delta, key, value, headers, ts = fields
    r.off_delta = delta
    r.ts = ts
    _field_ptr(key, &r.key.p, &r.key.n)
    _field_ptr(value, &r.value.p, &r.value.n)
    r.hfirst = hrefs.len // sizeof(HeaderRef)
    pair_refs(headers, hrefs)
    r.hcount = <int32_t>len(headers)
    return 0


cdef int64_t _sizes(RecInfo *infos, Py_ssize_t n, const HeaderRef *hrefs, int64_t base_ts) except -1:
    """Compute each record's body size (checking limits); return the records section size."""
    cdef Py_ssize_t i
    cdef int64_t body, total = 0
    cdef RecInfo *r
    for i in range(n):
        r = &infos[i]
        if base_ts < 0 and r.ts > INT64_MAX + base_ts:
            bf.timestamp_delta(r.ts, base_ts)
        body = _body_size(r.ts - base_ts, r.off_delta, &r.key, &r.value, hrefs + r.hfirst, r.hcount)
        if body > INT32_MAX:
            raise InvalidRecordError("a record body exceeds 2 GiB")
        r.body = <int32_t>body
        total += kl_varint_size(r.body) + body
        if total > INT32_MAX - HEADER_SIZE:
            raise InvalidRecordError("a batch exceeds 2 GiB")
    return total


cdef uint8_t *_put_field(uint8_t *p, const uint8_t *src, Py_ssize_t n) noexcept:
    if n < 0:
        return kl_write_varint(p, -1)
    p = kl_write_varint(p, <int32_t>n)
    memcpy(p, src, n)
    return p + n


cdef uint32_t _write_records(uint8_t *p, RecInfo *infos, Py_ssize_t n, const HeaderRef *hrefs, int64_t base_ts,
                             uint32_t crc) noexcept:
    """Write the records at p; returns `crc` (CRC-32C) extended over the bytes written."""
    cdef Py_ssize_t i
    cdef RecInfo *r
    cdef uint8_t *done = p
    for i in range(n):
        r = &infos[i]
        p = _put_record(p, r.body, r.ts - base_ts, r.off_delta, &r.key, &r.value, hrefs + r.hfirst, r.hcount)
        if p - done >= CRC_STEP:
            crc = kl_crc32c(crc, done, p - done)
            done = p
    return kl_crc32c(crc, done, p - done)


cdef bytes _finish(RecInfo *infos, Py_ssize_t n, const HeaderRef *hrefs, Params *pr, object level,
                   object last_offset_delta, object base_timestamp=None):
    """Write header + records (compressing if asked) and the CRC; return the batch. The base timestamp is the
    first record's unless `base_timestamp` gives it (a delete horizon)."""
    cdef int64_t base_ts = infos[0].ts if base_timestamp is None else base_timestamp, max_ts = -1, section
    cdef Py_ssize_t i
    cdef int32_t last
    cdef bytes out
    cdef uint8_t *h
    cdef uint8_t *tmp
    for i in range(n):
        if infos[i].ts > max_ts:
            max_ts = infos[i].ts
    if pr.max_ts != -2:
        max_ts = pr.max_ts
    last = infos[n - 1].off_delta if last_offset_delta is None else bf.last_offset_delta(infos[n - 1].off_delta,
                                                                                         last_offset_delta)
    section = _sizes(infos, n, hrefs, base_ts)
    if pr.codec == 0:  # the header first, then the records, the CRC following them
        out = PyBytes_FromStringAndSize(NULL, HEADER_SIZE + section)
        h = <uint8_t *>PyBytes_AS_STRING(out)
        _put_header_fields(h, len(out), pr, last, base_ts, max_ts, <int32_t>n)
        kl_put32(h + 17, _write_records(h + HEADER_SIZE, infos, n, hrefs, base_ts,
                                        kl_crc32c(0, h + ATTRS_OFFSET, HEADER_SIZE - ATTRS_OFFSET)))
        return out
    else:
        tmp = <uint8_t *>malloc(section if section else 1)
        if tmp == NULL:
            raise MemoryError()
        try:
            _write_records(tmp, infos, n, hrefs, base_ts, 0)
            payload = comp.compress(pr.codec, (<char *>tmp)[:section], level)
        finally:
            free(tmp)
        if len(payload) > INT32_MAX - HEADER_SIZE:
            raise InvalidRecordError("a batch exceeds 2 GiB")
        out = PyBytes_FromStringAndSize(NULL, HEADER_SIZE + len(payload))
        h = <uint8_t *>PyBytes_AS_STRING(out)
        memcpy(h + HEADER_SIZE, PyBytes_AS_STRING(payload), len(payload))
    _put_header(h, len(out), pr, last, base_ts, max_ts, <int32_t>n)
    return out


cdef void _put_header(uint8_t *h, Py_ssize_t size, Params *pr, int32_t last, int64_t base_ts, int64_t max_ts,
                      int32_t count) noexcept:
    """Fill the 61-byte header of the `size`-byte batch at h (records already in place), CRC last."""
    _put_header_fields(h, size, pr, last, base_ts, max_ts, count)
    kl_put32(h + 17, kl_crc32c(0, h + ATTRS_OFFSET, size - ATTRS_OFFSET))


cdef void _put_header_fields(uint8_t *h, Py_ssize_t size, Params *pr, int32_t last, int64_t base_ts,
                             int64_t max_ts, int32_t count) noexcept:
    """Every field of the 61-byte header of the `size`-byte batch at h but its CRC."""
    kl_put64(h, <uint64_t>pr.base_offset)
    kl_put32(h + 8, <uint32_t>(size - LOG_OVERHEAD))
    kl_put32(h + 12, <uint32_t>pr.ple)
    h[16] = 2
    kl_put16(h + 21, <uint16_t>pr.attributes)
    kl_put32(h + 23, <uint32_t>last)
    kl_put64(h + 27, <uint64_t>base_ts)
    kl_put64(h + 35, <uint64_t>max_ts)
    kl_put64(h + 43, <uint64_t>pr.pid)
    kl_put16(h + 51, <uint16_t>pr.epoch)
    kl_put32(h + 53, <uint32_t>pr.seq)
    kl_put32(h + 57, <uint32_t>count)


cdef RecInfo *_alloc_infos(Py_ssize_t n) except NULL:
    """Room to describe n records (1 <= n <= 2**31-1); the caller frees it."""
    cdef RecInfo *infos
    if n <= 0:
        raise InvalidRecordError("a batch needs at least one record")
    if n > INT32_MAX:
        raise InvalidRecordError("a batch holds at most 2**31-1 records")
    infos = <RecInfo *>malloc(n * sizeof(RecInfo))
    if infos == NULL:
        raise MemoryError()
    return infos


cdef bytes _encode_items(list items, Params *pr, object level, object last_offset_delta,
                         object base_timestamp=None):
    """Encode input records: all in the native pass, or (if one needs it) all through the shared validator, which
    raises the error the twin raises. No Python code runs between taking a pointer and copying its bytes."""
    cdef Py_ssize_t n = len(items), i
    cdef RecInfo *infos
    cdef int32_t prev = -1
    cdef list keep = []
    cdef Grow hrefs
    hrefs.data, hrefs.len, hrefs.cap = NULL, 0, 0
    infos = _alloc_infos(n)
    try:
        for i in range(n):
            KL_FETCH_RECORDS(items, i)
            if _fill_record(&infos[i], items[i], prev, pr.base_offset, &hrefs, keep):
                break
            prev = infos[i].off_delta
        else:
            return _finish(infos, n, <HeaderRef *>hrefs.data, pr, level, last_offset_delta, base_timestamp)
        hrefs.len, prev, keep = 0, -1, []
        for i in range(n):
            fields = bf.unpack_record(i, items[i], prev, pr.base_offset)
            keep.append(fields)
            _fill_validated(&infos[i], fields, &hrefs)
            prev = infos[i].off_delta
        return _finish(infos, n, <HeaderRef *>hrefs.data, pr, level, last_offset_delta, base_timestamp)
    finally:
        free(infos)
        free(hrefs.data)


cdef inline int _small_int(object v, int64_t lo, int64_t hi) except -1:
    """1 if v is an exact int in [lo, hi], else 0."""
    cdef int overflow = 0
    cdef int64_t x
    if not PyLong_CheckExact(v):
        return 0
    x = PyLong_AsLongLongAndOverflow(v, &overflow)
    return not overflow and lo <= x <= hi


cdef int _params(Params *pr, base_offset, compression, timestamp_type, log_append_time_ms, producer_id,
                 producer_epoch, base_sequence, transactional, partition_leader_epoch) except -1:
    if (compression == "none" and timestamp_type == "create" and log_append_time_ms is None
            and (transactional is False or transactional is True) and _small_int(base_offset, 0, 2**62)
            and _small_int(partition_leader_epoch, -1, INT32_MAX)):
        # a plain batch, or an idempotent or transactional producer's: the shared checks below accept them as is
        if (transactional is False and _small_int(producer_id, -1, -1) and _small_int(producer_epoch, -1, -1)
                and _small_int(base_sequence, -1, -1)):
            pr.base_offset, pr.ple, pr.codec, pr.attributes, pr.max_ts = base_offset, partition_leader_epoch, 0, 0, -2
            pr.pid, pr.epoch, pr.seq = -1, -1, -1
            return 0
        if (_small_int(producer_id, 0, INT64_MAX) and _small_int(producer_epoch, 0, 32767)
                and _small_int(base_sequence, 0, INT32_MAX)):
            pr.base_offset, pr.ple, pr.codec, pr.max_ts = base_offset, partition_leader_epoch, 0, -2
            pr.attributes = 0x10 if transactional else 0  # the transactional bit
            pr.pid, pr.epoch, pr.seq = producer_id, producer_epoch, base_sequence
            return 0
    codec, attributes, max_ts = bf.batch_attributes(
        base_offset=base_offset, compression=compression, timestamp_type=timestamp_type,
        log_append_time_ms=log_append_time_ms, producer_id=producer_id, producer_epoch=producer_epoch,
        base_sequence=base_sequence, transactional=transactional, partition_leader_epoch=partition_leader_epoch)
    pr.base_offset = base_offset
    pr.ple = partition_leader_epoch
    pr.codec = codec
    pr.attributes = attributes
    pr.max_ts = max_ts
    pr.pid = producer_id
    pr.epoch = producer_epoch
    pr.seq = base_sequence
    return 0


def encode_batch(records, *, base_offset=0, compression="none", compression_level=None,
                 timestamp_type="create", log_append_time_ms=None, producer_id=-1, producer_epoch=-1,
                 base_sequence=-1, transactional=False, partition_leader_epoch=-1, last_offset_delta=None):
    """Encode one RecordBatch v2 from (key, value, headers, timestamp_ms) tuples or Records.

    Tuples take consecutive offsets; a Record keeps its own offset (relative to base_offset),
    so decoded records re-encode to the same offsets. `last_offset_delta` may extend the batch's
    offset range past its last record, as the log cleaner does.
    """
    cdef Params pr
    _params(&pr, base_offset, compression, timestamp_type, log_append_time_ms, producer_id, producer_epoch,
            base_sequence, transactional, partition_leader_epoch)
    items = records if type(records) is list else list(records)
    return _encode_items(items, &pr, compression_level, last_offset_delta)


def encode_control_batch(kind, *, base_offset, producer_id, producer_epoch, coordinator_epoch=0, timestamp_ms,
                         partition_leader_epoch=-1):
    """Encode a COMMIT or ABORT transaction marker batch (78 bytes)."""
    cdef Params pr
    key, value, ts = bf.control_batch_params(kind, base_offset=base_offset, producer_id=producer_id,
                                             producer_epoch=producer_epoch, coordinator_epoch=coordinator_epoch,
                                             timestamp_ms=timestamp_ms, partition_leader_epoch=partition_leader_epoch)
    pr.base_offset = base_offset
    pr.ple = partition_leader_epoch
    pr.codec = 0
    pr.attributes = 0x30
    pr.max_ts = -2
    pr.pid = producer_id
    pr.epoch = producer_epoch
    pr.seq = -1
    return _encode_items([(key, value, None, ts)], &pr, None, None)


# --- MemoryRecordsBuilder (the producer's batches are encoded here as records are sent) ---------

cdef struct BuiltInfo:
    int64_t ts
    int32_t klen
    int32_t vlen
    int32_t hsize


cdef RecordsBuilder new_builder(Py_ssize_t capacity):
    """A builder with room for a batch of about `capacity` bytes (no regrowth while it fills)."""
    cdef RecordsBuilder b = RecordsBuilder.__new__(RecordsBuilder)
    grow_reserve(&b.body, min(capacity, <Py_ssize_t>(1 << 20)))
    grow_reserve(&b.infos, min(capacity // 4, <Py_ssize_t>(1 << 18)))
    return b


cdef inline object _exact_bytes(object obj, str name):
    if not PyBytes_CheckExact(obj):
        raise InvalidRecordError(f"{name} must be bytes, got {type(obj).__name__}")
    return obj


cdef class RecordsBuilder:
    """Kafka's MemoryRecordsBuilder: records are encoded as they are appended (offset delta = their index,
    timestamps relative to the first), and build() frames them into one batch."""

    def __dealloc__(self):
        free(self.body.data)
        free(self.infos.data)

    cdef Py_ssize_t add(self, const Field *key, const Field *value, const HeaderRef *headers, Py_ssize_t hcount,
                        int64_t ts) except -1:
        """Encode one record whose fields are already checked; returns its index."""
        cdef int64_t body, delta
        cdef uint8_t *p
        cdef BuiltInfo info
        if self.count == 0:
            self.base_ts = self.max_ts = ts
        if self.count >= INT32_MAX:
            raise InvalidRecordError("a batch holds at most 2**31-1 records")
        if kl_add_overflow(ts, -self.base_ts, &delta):
            bf.timestamp_delta(ts, self.base_ts)
        body = _body_size(delta, <int32_t>self.count, key, value, headers, hcount)
        if body > INT32_MAX or self.body.len + body + 5 > INT32_MAX - HEADER_SIZE:
            raise InvalidRecordError("a batch exceeds 2 GiB")
        grow_reserve(&self.body, body + 5)
        p = _put_record(<uint8_t *>self.body.data + self.body.len, <int32_t>body, delta, <int32_t>self.count, key,
                        value, headers, hcount)
        self.body.len = <char *>p - self.body.data
        info.ts = ts
        info.klen = <int32_t>key.n
        info.vlen = <int32_t>value.n
        info.hsize = <int32_t>_headers_bytes(headers, hcount) if hcount else -1
        grow_put(&self.infos, &info, sizeof(BuiltInfo))
        if ts > self.max_ts:
            self.max_ts = ts
        self.count += 1
        return self.count - 1

    def append(self, key, value, headers, int64_t timestamp):
        """Add a record (key/value bytes or None, headers as (bytes, bytes|None) pairs); returns its index."""
        cdef Field kf, vf
        cdef Grow refs
        refs.data, refs.len, refs.cap = NULL, 0, 0
        _field_ptr(None if key is None else _exact_bytes(key, "key"), &kf.p, &kf.n)
        _field_ptr(None if value is None else _exact_bytes(value, "value"), &vf.p, &vf.n)
        try:
            if headers:
                pair_refs(headers, &refs)
            return self.add(&kf, &vf, <HeaderRef *>refs.data, refs.len // sizeof(HeaderRef), timestamp)
        finally:
            free(refs.data)

    def __len__(self):
        return self.count

    def info(self, Py_ssize_t index):
        """(timestamp, key size, value size, header size) of record `index` (-1 sizes for null / none)."""
        cdef BuiltInfo *i
        if not 0 <= index < self.count:
            raise IndexError(index)
        i = <BuiltInfo *>self.infos.data + index
        return i.ts, i.klen, i.vlen, i.hsize

    def build(self, *, compression="none", producer_id=-1, producer_epoch=-1, base_sequence=-1, transactional=False,
              compression_level=None):
        """The batch (base offset 0: the log assigns offsets), compressed at `compression_level` (None: the codec's
        default)."""
        cdef Params pr
        cdef bytes out, payload
        cdef uint8_t *h
        cdef Py_ssize_t size
        _params(&pr, 0, compression, "create", None, producer_id, producer_epoch, base_sequence, transactional, -1)
        if self.count == 0:
            raise InvalidRecordError("a batch needs at least one record")
        if pr.codec == 0:
            out = PyBytes_FromStringAndSize(NULL, HEADER_SIZE + self.body.len)
            h = <uint8_t *>PyBytes_AS_STRING(out)
            memcpy(h + HEADER_SIZE, self.body.data, self.body.len)
        else:
            payload = comp.compress(pr.codec, self.body.data[:self.body.len], compression_level)
            out = PyBytes_FromStringAndSize(NULL, HEADER_SIZE + len(payload))
            h = <uint8_t *>PyBytes_AS_STRING(out)
            memcpy(h + HEADER_SIZE, PyBytes_AS_STRING(payload), len(payload))
        size = len(out)
        _put_header(h, size, &pr, <int32_t>(self.count - 1), self.base_ts, self.max_ts, <int32_t>self.count)
        return out
