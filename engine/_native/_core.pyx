# cython: language_level=3
"""The native codec: RecordBatch v2 encode/decode, columnar decode, CRC-32C, the index binary search,
the leader-append check (offsets and epoch stamped, CRC verified) and the MemoryRecordsBuilder a
producer's records are encoded into (its C-level `add` is declared in _core.pxd for _accumulator.pyx).

Same API, semantics and errors as the pure-Python twin `engine.record.records`; per-batch
rules (parameter checks, codecs, control markers) are shared Python in
engine.record.batch_format / engine.record.compression, per-record work is here.
Memory safety: every read is checked against the end of its batch (or decompressed
section) before it happens, and offset/timestamp arithmetic is checked for overflow; batches hold a
memoryview of their buffer, so the bytes (even an mmap) stay alive and cannot be resized or closed under
them. Corrupt input raises a typed error, never crashes. No module state; functions are thread-safe
(the GIL is held except while computing a large CRC); a RecordsBuilder is filled by one thread at a time.
"""
cimport cython
from cpython.bytearray cimport PyByteArray_AS_STRING, PyByteArray_Check
from cpython.buffer cimport (
    PyBUF_FORMAT,
    PyBUF_SIMPLE,
    PyBUF_WRITABLE,
    PyBuffer_IsContiguous,
    PyBuffer_Release,
    PyObject_CheckBuffer,
    PyObject_GetBuffer,
)
from cpython.bytes cimport (
    PyBytes_AS_STRING,
    PyBytes_Check,
    PyBytes_CheckExact,
    PyBytes_FromStringAndSize,
    PyBytes_GET_SIZE,
)
from cpython.exc cimport PyErr_Clear
from cpython.list cimport PyList_CheckExact, PyList_GET_ITEM, PyList_GET_SIZE, PyList_New, PyList_SET_ITEM
from cpython.long cimport PyLong_AsLongLongAndOverflow, PyLong_CheckExact
from cpython.memoryview cimport PyMemoryView_FromObject, PyMemoryView_GET_BUFFER
from cpython.ref cimport Py_INCREF, Py_XDECREF, PyObject
from cpython.tuple cimport PyTuple_CheckExact, PyTuple_GET_ITEM, PyTuple_GET_SIZE
from cpython.unicode cimport PyUnicode_CheckExact, PyUnicode_DecodeUTF8, PyUnicode_GET_LENGTH
from libc.stdint cimport INT32_MAX, INT64_MAX, int16_t, int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t
from libc.stdlib cimport free, malloc, realloc
from libc.errno cimport EINTR, errno
from libc.string cimport memcmp, memcpy, memset

from engine.record import batch_format as bf
from engine.record import compression as comp
from engine.record.columns import BinaryColumn, Columns, HeadersColumn, column_buffers
from engine.common.structs import consumer_record_fields, consumer_record_repr
from engine.common.errors import (
    CorruptRecordError,
    InvalidRecordError,
    KafkaError,
    RecordTooLargeError,
    UnsupportedMessageFormatError,
)

cdef object _NO_HEADERS = bf.NO_HEADERS

cdef extern from "Python.h":
    void *PyUnicode_DATA(object unicode)
    bint PyUnicode_IS_COMPACT_ASCII(object unicode)
    void PyObject_GC_UnTrack(void *obj)

cdef extern from "<unistd.h>" nogil:
    ssize_t pread(int fd, void *buf, size_t n, long offset)

cdef extern from "crc32c_impl.h":
    void kl_crc32c_init()
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

kl_crc32c_init()

cdef enum:
    LOG_OVERHEAD = 12
    UP_TO_MAGIC = 17
    MIN_ENTRY_SIZE = 14
    ATTRS_OFFSET = 21
    MIN_RECORD_SIZE = 7
    NOGIL_CRC_BYTES = 65536
    CRC_STEP = 16384  # an encoder's CRC follows its writing this far behind, reading bytes still in the cache
    PAIR_VALUE_BYTES = 64  # a header pair is kept for sharing when its value is at most this long
    KEY_SLOTS = 16  # the header key cache's slots (h >> 28 of a 32-bit hash picks one)

cdef uint8_t _EMPTY[1]


# --- CRC-32C -----------------------------------------------------------------------------------
cdef object _byte_view(object data):
    """A 1-D unsigned-byte memoryview of any buffer (`data` itself when it is one)."""
    cdef Py_buffer *view
    if type(data) is memoryview:
        view = PyMemoryView_GET_BUFFER(data)
        if view.ndim == 1 and view.format != NULL and view.format[0] == b"B" and view.format[1] == 0:
            return data
    mv = memoryview(data)
    if mv.format != "B" or mv.ndim != 1:
        mv = mv.cast("B")
    return mv


cdef uint32_t _crc_of(object data, uint32_t crc, bint software) except? 0xFFFFFFFF:
    cdef const uint8_t[::1] view
    cdef const uint8_t *p = _EMPTY
    cdef Py_ssize_t n
    if PyBytes_Check(data):
        p = <const uint8_t *>PyBytes_AS_STRING(data)
        n = len(<bytes>data)
    else:
        view = _byte_view(data)
        n = view.shape[0]
        if n:
            p = &view[0]
    if n >= NOGIL_CRC_BYTES:
        with nogil:
            return kl_crc32c_software(crc, p, n) if software else kl_crc32c(crc, p, n)
    return kl_crc32c_software(crc, p, n) if software else kl_crc32c(crc, p, n)


def crc32c(data, crc=0):
    """CRC-32C (Castagnoli) of `data`, continuing from `crc`; hardware-accelerated when available."""
    return _crc_of(data, crc, False)


def crc32c_software(data, crc=0):
    """CRC-32C through the table-driven path only (tests compare it with the hardware path)."""
    return _crc_of(data, crc, True)


def crc32c_hardware_available():
    """True when the SSE4.2 crc32 instruction is used."""
    return bool(kl_crc32c_hardware_available())


# --- native buffers (Arrow-compatible, zero-copy) ------------------------------------------
cdef int grow_reserve(Grow *g, Py_ssize_t extra) except -1:
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


cdef inline int grow_i64(Grow *g, int64_t v) except -1:
    return grow_put(g, &v, 8)


cdef inline int grow_i32(Grow *g, int32_t v) except -1:
    return grow_put(g, &v, 4)


cdef inline int grow_bytes(Grow *g, const uint8_t *p, Py_ssize_t n) except -1:
    if g.len + n > g.cap:
        grow_reserve(g, n)
    memcpy(g.data + g.len, p, n)
    g.len += n
    if g.len > INT32_MAX:
        raise RecordTooLargeError("columnar decode exceeds 2 GiB in one column; read a smaller range")
    return 0


cdef inline int grow_bit(Grow *g, Py_ssize_t i, bint valid) except -1:
    """Set bit i of an LSB-first bitmap (bytes are zeroed as the bitmap grows)."""
    cdef Py_ssize_t byte = i >> 3
    if byte >= g.len:
        if byte >= g.cap:
            grow_reserve(g, byte + 1 - g.len)
        memset(g.data + g.len, 0, byte + 1 - g.len)
        g.len = byte + 1
    if valid:
        g.data[byte] = g.data[byte] | <char>(1 << (i & 7))
    return 0


cdef class NativeBuffer:
    """A read-only buffer owning malloc'd memory (int64 'q', int32 'i' or bytes 'B' items)."""

    cdef char *data
    cdef Py_ssize_t nbytes
    cdef Py_ssize_t itemsize
    cdef bytes fmt
    cdef Py_ssize_t shape[1]
    cdef Py_ssize_t strides[1]

    def __dealloc__(self):
        free(self.data)

    def __len__(self):
        return self.shape[0]

    def __getbuffer__(self, Py_buffer *view, int flags):
        if flags & PyBUF_WRITABLE:
            raise BufferError("kafkalog native buffers are read-only")
        view.buf = self.data
        view.obj = self
        view.len = self.nbytes
        view.readonly = 1
        view.itemsize = self.itemsize
        view.format = PyBytes_AS_STRING(self.fmt) if flags & PyBUF_FORMAT else NULL
        view.ndim = 1
        view.shape = self.shape
        view.strides = self.strides
        view.suboffsets = NULL
        view.internal = NULL


cdef NativeBuffer take(Grow *g, Py_ssize_t itemsize, bytes fmt):
    """Move a Grow's memory into a NativeBuffer (the Grow is left empty)."""
    cdef NativeBuffer b = NativeBuffer.__new__(NativeBuffer)
    if g.data == NULL:
        g.data = <char *>malloc(1)
        if g.data == NULL:
            raise MemoryError()
    b.data = g.data
    b.nbytes = g.len
    b.itemsize = itemsize
    b.fmt = fmt
    b.shape[0] = g.len // itemsize
    b.strides[0] = itemsize
    g.data = NULL
    g.len = g.cap = 0
    return b


# --- records -----------------------------------------------------------------------------------
@cython.no_gc
@cython.freelist(256)
cdef class ConsumerRecord:
    """A record as a consumer sees it, with kafka-python's fields (timestamp_type 0 CreateTime, 1 LogAppendTime)."""

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

    @property
    def checksum(self):
        return None

    def __eq__(self, other):
        return consumer_record_fields(self) == consumer_record_fields(other)

    __hash__ = None

    def __repr__(self):
        return consumer_record_repr(self)

    def __reduce__(self):
        return (consumer_record, consumer_record_fields(self))


def consumer_record(topic, partition, leader_epoch, offset, timestamp, timestamp_type, key, value, headers,
                    checksum, serialized_key_size, serialized_value_size, serialized_header_size):
    """Build a ConsumerRecord from kafka-python's field order (checksum is always None)."""
    cdef ConsumerRecord r = ConsumerRecord.__new__(ConsumerRecord)
    r.topic, r.partition, r.leader_epoch, r.offset, r.timestamp = topic, partition, leader_epoch, offset, timestamp
    r.timestamp_type, r.key, r.value, r.headers = timestamp_type, key, value, headers or _NO_HEADERS
    r.serialized_key_size, r.serialized_value_size = serialized_key_size, serialized_value_size
    r.serialized_header_size = serialized_header_size
    return r


@cython.no_gc
@cython.freelist(1024)
cdef class Record:
    """One record: offset, timestamp (ms, as Kafka reports it), key, value, headers.

    For a control record `control_type` is its type id (0 ABORT, 1 COMMIT, 2-6 KRaft,
    -1 unknown) and, for COMMIT/ABORT, `coordinator_epoch` is set; both are None otherwise.
    Records hold only bytes, ints and their header list, so they cannot form reference
    cycles and stay out of the cyclic GC (decoding millions would otherwise trigger it
    constantly); a record without headers shares the read-only empty list `NO_HEADERS`. Up to 1,024
    freed records are kept for reuse: a 16 KiB batch of small records is decoded without allocating any.
    """

    cdef readonly object offset
    cdef readonly object timestamp
    cdef readonly object key
    cdef readonly object value
    cdef object headers
    cdef readonly object control_type
    cdef readonly object coordinator_epoch

    def __init__(self, offset, timestamp, key, value, headers=None, control_type=None, coordinator_epoch=None):
        self.offset = <int64_t>offset
        self.timestamp = <int64_t>timestamp
        self.key = key
        self.value = value
        self.headers = headers or _NO_HEADERS
        self.control_type = control_type
        self.coordinator_epoch = coordinator_epoch

    def __eq__(self, other):
        return bf.record_equals(self, other)

    __hash__ = None

    def __repr__(self):
        return ("Record(offset={!r}, timestamp={!r}, key={!r}, value={!r}, headers={!r}, "
                "control_type={!r}, coordinator_epoch={!r})").format(*bf.record_fields(self))

    def __reduce__(self):
        return (Record, bf.record_fields(self))


# Decoded records are read field by field in the consumer's loop. Cython serves a cdef attribute through a getset
# descriptor, a call CPython cannot specialize; a member descriptor over the same object slot is read by the
# interpreter's specialized attribute load, with no call at all. These replace the getset descriptors of the hot
# fields (all are object slots, never NULL: Cython sets them to None on allocation).
cdef extern from "structmember.h":
    ctypedef struct PyMemberDef:
        const char *name
        int type
        Py_ssize_t offset
        int flags
        const char *doc
    enum: T_OBJECT_EX
    enum: READONLY

cdef extern from *:
    """
    #define KL_SLOT(cls, field) offsetof(struct __pyx_obj_6engine_7_native_5_core_##cls, field)
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
    Py_ssize_t RECORD_OFFSET "KL_SLOT(Record, offset)"
    Py_ssize_t RECORD_TIMESTAMP "KL_SLOT(Record, timestamp)"
    Py_ssize_t RECORD_KEY "KL_SLOT(Record, key)"
    Py_ssize_t RECORD_VALUE "KL_SLOT(Record, value)"
    Py_ssize_t RECORD_HEADERS "KL_SLOT(Record, headers)"
    Py_ssize_t CONSUMER_TOPIC "KL_SLOT(ConsumerRecord, topic)"
    Py_ssize_t CONSUMER_PARTITION "KL_SLOT(ConsumerRecord, partition)"
    Py_ssize_t CONSUMER_OFFSET "KL_SLOT(ConsumerRecord, offset)"
    Py_ssize_t CONSUMER_TIMESTAMP "KL_SLOT(ConsumerRecord, timestamp)"
    Py_ssize_t CONSUMER_KEY "KL_SLOT(ConsumerRecord, key)"
    Py_ssize_t CONSUMER_VALUE "KL_SLOT(ConsumerRecord, value)"
    Py_ssize_t CONSUMER_HEADERS "KL_SLOT(ConsumerRecord, headers)"

cdef extern from "Python.h":
    ctypedef struct PyTypeObject:
        PyObject *tp_dict
    object PyDescr_NewMember(PyTypeObject *cls, PyMemberDef *member)
    void PyType_Modified(PyTypeObject *cls)

cdef PyMemberDef _SLOTS[12]
_SLOT_NAMES = (b"offset", b"timestamp", b"key", b"value", b"headers", b"topic", b"partition", b"offset", b"timestamp",
               b"key", b"value", b"headers")


cdef int _serve_slots() except -1:
    cdef Py_ssize_t offsets[12]
    cdef int i
    offsets[:] = [RECORD_OFFSET, RECORD_TIMESTAMP, RECORD_KEY, RECORD_VALUE, RECORD_HEADERS, CONSUMER_TOPIC,
                  CONSUMER_PARTITION, CONSUMER_OFFSET, CONSUMER_TIMESTAMP, CONSUMER_KEY, CONSUMER_VALUE, CONSUMER_HEADERS]
    for i in range(12):
        cls = Record if i < 5 else ConsumerRecord
        _SLOTS[i].name = PyBytes_AS_STRING(_SLOT_NAMES[i])
        _SLOTS[i].type = T_OBJECT_EX
        _SLOTS[i].offset = offsets[i]
        _SLOTS[i].flags = READONLY
        _SLOTS[i].doc = NULL
        (<dict>(<PyTypeObject *>cls).tp_dict)[_SLOT_NAMES[i].decode()] = PyDescr_NewMember(<PyTypeObject *>cls, &_SLOTS[i])
        PyType_Modified(<PyTypeObject *>cls)
    return 0


_serve_slots()


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


# Record framing errors (InvalidRecordError, as Kafka), indexed by _parse_record's return code.
_FRAMING = (
    None,
    "varint is truncated",
    "varint is too long or overflows its width",
    "invalid record size: it overruns the batch",
    "a field overruns the record",
    "invalid number of record headers",
    "invalid negative header key size",
    bf.SIZE_MISMATCH,
    bf.BAD_OFFSET_DELTA,
    bf.TIMESTAMP_OVERFLOW,
)


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
    0 or an index into _FRAMING."""
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


cdef int _parse_record(const uint8_t **pp, const uint8_t *end, RecView *r, int32_t last_delta,
                       int64_t base_ts) noexcept nogil:
    """Parse one record at *pp (advancing it) and compute its stored timestamp; 0 or an index into _FRAMING."""
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


cdef inline object _field(const uint8_t *p, int32_t n):
    return None if n < 0 else PyBytes_FromStringAndSize(<const char *>p, n)


@cython.final
cdef class _HeaderKeys:
    """The header keys one decoding call has made: a key repeated across its records (the usual case) is decoded once
    and shared (str is immutable). KEY_SLOTS slots, chosen by a hash of the length and the first, middle and last bytes
    (keys a record carries together, like traceparent and tracestate, seldom take turns in one slot); ASCII keys only,
    whose bytes are the str's data. Each slot also keeps the last (key, value) pair made with its key when the value is
    None or at most PAIR_VALUE_BYTES long: a header repeated verbatim (a service name, a content type) is shared too."""

    cdef PyObject *keys[KEY_SLOTS]
    cdef PyObject *pairs[KEY_SLOTS]

    def __dealloc__(self):
        cdef int i
        for i in range(KEY_SLOTS):
            Py_XDECREF(self.keys[i])
            Py_XDECREF(self.pairs[i])

    cdef inline int _slot(self, const uint8_t *p, int32_t n) noexcept:
        cdef uint32_t h = <uint32_t>n * 0x9E3779B1u
        if n:
            h ^= (p[0] * 0x85EBCA77u) ^ (p[n >> 1] * 0xC2B2AE3Du) ^ (p[n - 1] * 0x27D4EB2Fu)
            h *= 0x165667B1u
        return <int>(h >> 28)

    cdef inline bint _cached(self, int slot, const uint8_t *p, int32_t n) noexcept:
        cdef PyObject *k = self.keys[slot]
        return (k != NULL and PyUnicode_GET_LENGTH(<object>k) == n
                and memcmp(PyUnicode_DATA(<object>k), p, n) == 0)

    cdef object _decode(self, int slot, const uint8_t *p, int32_t n):
        """The key decoded, kept in `slot` (its pair dropped) when it is short ASCII."""
        s = PyUnicode_DecodeUTF8(<const char *>p, n, "surrogateescape")
        if n <= 64 and PyUnicode_IS_COMPACT_ASCII(s):
            Py_XDECREF(self.keys[slot])
            Py_INCREF(s)
            self.keys[slot] = <PyObject *>s
            Py_XDECREF(self.pairs[slot])
            self.pairs[slot] = NULL
        return s

    cdef tuple pair(self, const uint8_t *kp, int32_t kn, const uint8_t *vp, int32_t vn):
        """The (key, value) tuple of a header, untracked by the cyclic GC (it holds only a str and bytes or None)."""
        cdef int slot = self._slot(kp, kn)
        cdef PyObject *t
        cdef PyObject *v
        if self._cached(slot, kp, kn):
            key = <object>self.keys[slot]
            t = self.pairs[slot]
            if t != NULL:
                v = PyTuple_GET_ITEM(<object>t, 1)
                if (v == <PyObject *>None) if vn < 0 else (v != <PyObject *>None and PyBytes_GET_SIZE(<object>v) == vn
                                                            and memcmp(PyBytes_AS_STRING(<object>v), vp, vn) == 0):
                    return <tuple>t
        else:
            key = self._decode(slot, kp, kn)
        pair = (key, _field(vp, vn))
        PyObject_GC_UnTrack(<PyObject *>pair)
        if vn <= PAIR_VALUE_BYTES and self.keys[slot] == <PyObject *>key:
            Py_XDECREF(self.pairs[slot])
            Py_INCREF(pair)
            self.pairs[slot] = <PyObject *>pair
        return pair


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


cdef list _headers_list(const uint8_t *p, const uint8_t *end, int32_t count, _HeaderKeys keys):
    """Headers of a record that _parse_record already validated. Each (key, value) tuple holds only a str and bytes or
    None, so it can never be part of a reference cycle: it is taken out of the cyclic GC at once (CPython untracks
    such tuples itself, but only when a collection reaches them)."""
    cdef list out = PyList_New(count)
    cdef int32_t i
    cdef HeaderRef h
    for i in range(count):
        _next_header(&p, end, &h)
        pair = keys.pair(h.key.p, <int32_t>h.key.n, h.value.p, <int32_t>h.value.n)
        Py_INCREF(pair)
        PyList_SET_ITEM(out, i, pair)
    return out


cdef int32_t _header_bytes(const uint8_t *p, const uint8_t *end, int32_t count) noexcept nogil:
    """Key plus value bytes of a validated record's headers (kafka-python's serialized_header_size)."""
    cdef int32_t i, total = 0
    cdef HeaderRef h
    for i in range(count):
        _next_header(&p, end, &h)
        total += <int32_t>(h.key.n + (h.value.n if h.value.n > 0 else 0))
    return total


# --- batches -----------------------------------------------------------------------------------
cdef Py_ssize_t _frame_end(const uint8_t *base, Py_ssize_t n, Py_ssize_t pos, Py_ssize_t position,
                           object source) except -2:
    """End of the batch at `pos`, or -1 where Kafka's file iterator stops (a partial tail)."""
    cdef int32_t size, last_delta
    cdef int magic
    cdef int64_t base_offset
    if n - pos < UP_TO_MAGIC:
        return -1
    base_offset = <int64_t>kl_be64(base + pos)
    size = <int32_t>kl_be32(base + pos + 8)
    if size < MIN_ENTRY_SIZE:
        raise CorruptRecordError(f"record size {size} is smaller than the minimum {MIN_ENTRY_SIZE}",
                                 file=source, position=position + pos, offset=base_offset)
    if size > n - pos - LOG_OVERHEAD:
        return -1
    magic = base[pos + 16]
    if magic != 2:
        if magic in (0, 1):
            raise UnsupportedMessageFormatError(f"legacy message format (magic {magic}) is not supported",
                                                file=source, position=position + pos, offset=base_offset)
        raise CorruptRecordError(f"unknown magic (magic {magic}) is not supported",
                                 file=source, position=position + pos, offset=base_offset)
    if size < HEADER_SIZE - LOG_OVERHEAD:
        raise CorruptRecordError(f"batch size {size + LOG_OVERHEAD} is below the 61-byte header",
                                 file=source, position=position + pos, offset=base_offset)
    last_delta = <int32_t>kl_be32(base + pos + 23)
    if base_offset < 0 or last_delta < 0 or base_offset >= INT64_MAX - last_delta:
        raise CorruptRecordError(bf.BAD_BATCH_OFFSETS, file=source, position=position + pos, offset=base_offset)
    return pos + LOG_OVERHEAD + size


cdef Py_ssize_t replica_batch(const uint8_t *p, Py_ssize_t n) noexcept nogil:
    """The size of the batch at `p` (`n` bytes available) when iter_batches walks it whole without an error and its
    CRC matches (what a follower's append checks of a batch, besides its size); -1 otherwise, for the general path
    to raise the precise error."""
    cdef int32_t size, last_delta
    cdef int64_t base_offset
    if n < HEADER_SIZE:
        return -1
    base_offset = <int64_t>kl_be64(p)
    size = <int32_t>kl_be32(p + 8)
    if size < HEADER_SIZE - LOG_OVERHEAD or size > n - LOG_OVERHEAD or p[16] != 2:
        return -1
    last_delta = <int32_t>kl_be32(p + 23)
    if base_offset < 0 or last_delta < 0 or base_offset >= INT64_MAX - last_delta:
        return -1
    if kl_crc32c(0, p + ATTRS_OFFSET, size + LOG_OVERHEAD - ATTRS_OFFSET) != kl_be32(p + 17):
        return -1
    return size + LOG_OVERHEAD


cdef class RecordBatch:
    """A view of one RecordBatch v2 in a buffer; header fields are parsed, records decode on demand."""

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

    def __init__(self, view, position=0, source=None):
        mv = _byte_view(view)
        cdef const uint8_t[::1] v = mv
        if v.shape[0] < HEADER_SIZE:
            raise CorruptRecordError("a record batch needs at least 61 bytes", file=source, position=position)
        self._set(mv, &v[0], v.shape[0], position, source)

    cdef void _set(self, object view, const uint8_t *p, Py_ssize_t n, Py_ssize_t position, object source):
        self.buffer = view
        self._p = p
        self._n = n
        self.position = position
        self.source = source
        self.base_offset = <int64_t>kl_be64(p)
        self.batch_length = <int32_t>kl_be32(p + 8)
        self.partition_leader_epoch = <int32_t>kl_be32(p + 12)
        self.magic = <signed char>p[16]
        self.crc = kl_be32(p + 17)
        self.attributes = <int16_t>kl_be16(p + 21)
        self.last_offset_delta = <int32_t>kl_be32(p + 23)
        self.base_timestamp = <int64_t>kl_be64(p + 27)
        self.max_timestamp = <int64_t>kl_be64(p + 35)
        self.producer_id = <int64_t>kl_be64(p + 43)
        self.producer_epoch = <int16_t>kl_be16(p + 51)
        self.base_sequence = <int32_t>kl_be32(p + 53)
        self.records_count = <int32_t>kl_be32(p + 57)

    @property
    def last_offset(self):
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self):
        return self.base_offset + self.last_offset_delta + 1

    @property
    def size_in_bytes(self):
        return self.batch_length + LOG_OVERHEAD

    @property
    def compression(self):
        cdef int codec = self.attributes & 0x07
        return comp.NAMES[codec] if codec < 5 else "invalid"

    @property
    def timestamp_type(self):
        return bf.TIMESTAMP_TYPES[1 if self.attributes & 0x08 else 0]

    @property
    def is_transactional(self):
        return bool(self.attributes & 0x10)

    @property
    def is_control(self):
        return bool(self.attributes & 0x20)

    @property
    def has_delete_horizon(self):
        return bool(self.attributes & 0x40)

    @property
    def delete_horizon_ms(self):
        return self.base_timestamp if self.attributes & 0x40 else None

    @property
    def last_sequence(self):
        return bf.increment_sequence(self.base_sequence, self.last_offset_delta)

    def __repr__(self):
        return (f"RecordBatch(base_offset={self.base_offset}, last_offset={self.last_offset}, "
                f"count={self.records_count}, size={self.size_in_bytes}, compression={self.compression})")

    def compute_crc(self):
        """CRC-32C of the bytes the stored crc covers."""
        return kl_crc32c(0, self._p + ATTRS_OFFSET, self._n - ATTRS_OFFSET)

    cdef bint _valid(self):
        return self._n >= HEADER_SIZE and kl_crc32c(0, self._p + ATTRS_OFFSET, self._n - ATTRS_OFFSET) == self.crc

    def is_valid(self):
        """Kafka's isValid(): large enough and the stored CRC matches."""
        return self._valid()

    def ensure_valid(self):
        """Raise CorruptRecordError unless is_valid()."""
        if not self._valid():
            raise self._error(CorruptRecordError,
                              f"record batch CRC mismatch (stored {self.crc:#010x}, computed {self.compute_crc():#010x})")

    cdef object _error(self, cls, str message):
        return cls(message, file=self.source, position=self.position, offset=self.base_offset)

    cdef object _section(self, Py_ssize_t limit):
        """The records section: None for uncompressed (read in place), else the decompressed bytes.

        A negative record count is refused first, before any decompression work."""
        cdef int codec = self.attributes & 0x07
        if self.records_count < 0:
            raise self._error(InvalidRecordError, f"invalid record count {self.records_count}")
        if codec == 0:
            return None
        try:
            return comp.decompress(codec, self.buffer[HEADER_SIZE:], limit)
        except KafkaError as exc:
            raise self._error(type(exc), exc.message) from None

    cdef int _check_count(self, Py_ssize_t available) except -1:
        if <int64_t>self.records_count * MIN_RECORD_SIZE > available:
            raise self._error(InvalidRecordError,
                              f"record count {self.records_count} cannot fit in {available} bytes")
        return 0

    cdef int _framing_error(self, int rc) except -1:
        raise self._error(InvalidRecordError, _FRAMING[rc])

    cdef int _check_end(self, const uint8_t *p, const uint8_t *end) except -1:
        if p != end:
            raise self._error(InvalidRecordError,
                              f"incorrect declared batch size: {end - p} bytes remain after {self.records_count} records")
        return 0

    cdef object _open(self, bint verify_crc, Py_ssize_t limit, const uint8_t **p, const uint8_t **end):
        """Check the CRC (if asked) and the record count; point p/end at the records section, and
        return the object that owns it (None when it is the batch's own bytes)."""
        if verify_crc:
            self.ensure_valid()
        owner = self._section(limit)
        p[0], end[0] = _section_bounds(self, owner)
        self._check_count(end[0] - p[0])
        return owner

    def consumer_records(self, topic, partition, int64_t start_offset, Py_ssize_t max_records,
                         Py_ssize_t max_decompressed_bytes=comp.DEFAULT_MAX_DECOMPRESSED):
        """The batch's records at or after `start_offset` as ConsumerRecords, at most `max_records`
        (none for a control batch); returns (records, next_offset to fetch from)."""
        cdef object owner
        cdef const uint8_t *p
        cdef const uint8_t *end
        cdef RecView rv
        cdef ConsumerRecord r
        cdef int rc
        cdef int32_t i
        cdef int64_t offset
        cdef bint log_append = self.attributes & 0x08
        cdef list out = []
        cdef object epoch = self.partition_leader_epoch if self.partition_leader_epoch >= 0 else None
        cdef _HeaderKeys keys = _HeaderKeys.__new__(_HeaderKeys)
        if self.attributes & 0x20 or max_records <= 0:
            return out, self.base_offset + self.last_offset_delta + 1 if self.attributes & 0x20 else start_offset
        owner = self._open(True, max_decompressed_bytes, &p, &end)
        for i in range(self.records_count):
            rc = _parse_record(&p, end, &rv, self.last_offset_delta, self.base_timestamp)
            if rc:
                self._framing_error(rc)
            offset = self.base_offset + rv.off_delta
            if offset < start_offset:
                continue
            if len(out) == max_records:
                return out, offset
            r = ConsumerRecord.__new__(ConsumerRecord)
            r.topic = topic
            r.partition = partition
            r.leader_epoch = epoch
            r.offset = offset
            r.timestamp = self.max_timestamp if log_append else rv.ts
            r.timestamp_type = log_append
            r.key = _field(rv.key, rv.klen)
            r.value = _field(rv.value, rv.vlen)
            r.serialized_key_size = rv.klen
            r.serialized_value_size = rv.vlen
            r.serialized_header_size = -1
            r.headers = _NO_HEADERS
            if rv.hcount:
                r.headers = _headers_list(rv.headers, rv.end, rv.hcount, keys)
                r.serialized_header_size = _header_bytes(rv.headers, rv.end, rv.hcount)
            out.append(r)
        self._check_end(p, end)
        return out, self.base_offset + self.last_offset_delta + 1

    def first_keyless_offset(self):
        """The offset of the first record without a key, or None (a compacted topic refuses such records)."""
        found = self._first(True, 0, 0)
        return None if found is None else found[1]

    def first_at_or_after(self, int64_t timestamp, int64_t start_offset):
        """(timestamp, offset) of the first record (control records count, as in Kafka's ListOffsets) whose
        timestamp >= `timestamp` and offset >= `start_offset`, or None; reads record headers only (CRC checked)."""
        return self._first(False, timestamp, start_offset)

    cdef object _first(self, bint keyless, int64_t timestamp, int64_t start_offset):
        """(timestamp, offset) of the first record without a key (`keyless`: every record's framing is checked, the
        CRC is not) or else of the first at or after `timestamp` and `start_offset` (CRC checked); None if none."""
        cdef object owner
        cdef const uint8_t *p
        cdef const uint8_t *end
        cdef RecView rv
        cdef int rc
        cdef int32_t i
        cdef int64_t offset, ts
        cdef bint log_append = self.attributes & 0x08
        found = None
        owner = self._open(not keyless, comp.DEFAULT_MAX_DECOMPRESSED, &p, &end)
        for i in range(self.records_count):
            rc = _parse_record(&p, end, &rv, self.last_offset_delta, self.base_timestamp)
            if rc:
                self._framing_error(rc)
            offset = self.base_offset + rv.off_delta
            ts = self.max_timestamp if log_append else rv.ts
            if found is None and (rv.klen < 0 if keyless else ts >= timestamp and offset >= start_offset):
                found = (ts, offset)
                if not keyless:
                    return found
        self._check_end(p, end)
        return found

    def records(self, *, verify_crc=True, max_decompressed_bytes=comp.DEFAULT_MAX_DECOMPRESSED):
        """Decode every record (control records included, with control_type set)."""
        cdef _RecordIterator it = self._iterate(verify_crc, max_decompressed_bytes)
        cdef list out = PyList_New(self.records_count)  # _open bounded the count by the section's size
        cdef int32_t i
        for i in range(self.records_count):
            r = it.next_record()
            Py_INCREF(r)
            PyList_SET_ITEM(out, i, r)
        it.finish()
        return out

    def __iter__(self):
        """The records one at a time (CRC checked first; a record's framing is checked as it is reached): a loop that
        does not keep them decodes a batch of any size in the memory of one record."""
        return self._iterate(True, comp.DEFAULT_MAX_DECOMPRESSED)

    cdef _RecordIterator _iterate(self, bint verify_crc, Py_ssize_t max_decompressed_bytes):
        cdef _RecordIterator it = _RecordIterator.__new__(_RecordIterator)
        it.batch = self
        it.owner = self._open(verify_crc, max_decompressed_bytes, &it.p, &it.end)
        it.keys = _HeaderKeys.__new__(_HeaderKeys)
        return it


@cython.final
cdef class _RecordIterator:
    """Decodes a batch's records in order; holds the batch and the section's owner, so `p`/`end` stay valid."""

    cdef RecordBatch batch
    cdef object owner
    cdef const uint8_t *p
    cdef const uint8_t *end
    cdef int32_t done
    cdef _HeaderKeys keys

    def __iter__(self):
        return self

    def __next__(self):
        if self.done == self.batch.records_count:
            self.finish()
            raise StopIteration
        return self.next_record()

    cdef int finish(self) except -1:
        return self.batch._check_end(self.p, self.end)

    cdef Record next_record(self):
        cdef RecordBatch b = self.batch
        cdef RecView rv
        cdef int rc = _parse_record(&self.p, self.end, &rv, b.last_offset_delta, b.base_timestamp)
        if rc:
            b._framing_error(rc)
        self.done += 1
        cdef Record r = Record.__new__(Record)
        r.offset = b.base_offset + rv.off_delta
        r.timestamp = b.max_timestamp if b.attributes & 0x08 else rv.ts
        r.key = _field(rv.key, rv.klen)
        r.value = _field(rv.value, rv.vlen)
        r.headers = _headers_list(rv.headers, rv.end, rv.hcount, self.keys) if rv.hcount else _NO_HEADERS
        if b.attributes & 0x20:
            try:
                r.control_type, r.coordinator_epoch = bf.control_fields(r.key, r.value)
            except InvalidRecordError as exc:
                raise b._error(InvalidRecordError, exc.message) from None
        return r


cdef inline (const uint8_t *, const uint8_t *) _section_bounds(RecordBatch b, object owner):
    cdef const uint8_t *p
    cdef Py_ssize_t n
    if owner is None:
        return b._p + HEADER_SIZE, b._p + b._n
    if PyByteArray_Check(owner):
        p = <const uint8_t *>PyByteArray_AS_STRING(owner)
    else:
        p = <const uint8_t *>PyBytes_AS_STRING(owner)
    n = len(owner)
    return p, p + n


cdef class _BatchIterator:
    cdef object mv              # the bytes as a 1-D byte memoryview: each batch keeps a slice of it
    cdef Py_buffer buf          # held on `mv` while the iterator lives
    cdef bint held
    cdef Py_ssize_t pos
    cdef Py_ssize_t position
    cdef object source

    def __dealloc__(self):
        if self.held:
            PyBuffer_Release(&self.buf)

    def __iter__(self):
        return self

    def __next__(self):
        cdef const uint8_t *p = <const uint8_t *>self.buf.buf if self.buf.len else _EMPTY
        cdef Py_ssize_t end = _frame_end(p, self.buf.len, self.pos, self.position, self.source)
        cdef RecordBatch b
        if end < 0:
            raise StopIteration
        b = RecordBatch.__new__(RecordBatch)
        b._set(self.mv[self.pos:end], p + self.pos, end - self.pos, self.position + self.pos, self.source)
        self.pos = end
        return b


def iter_batches(buffer, *, position=0, source=None):
    """Walk the batches of a buffer (a `.log` file's bytes or a slice of it).

    Like Kafka's file iterator it stops silently at a partial tail (fewer than 17 bytes, or a
    batch that runs past the end); a size field below 14 is CorruptRecordError; magic 0/1 is
    UnsupportedMessageFormatError. `position` is added to reported positions; `source` names
    the file in errors. CRCs are checked when records are decoded (or by is_valid()).
    """
    cdef _BatchIterator it = _BatchIterator.__new__(_BatchIterator)
    it.mv = _byte_view(buffer)
    PyObject_GetBuffer(it.mv, &it.buf, PyBUF_SIMPLE)
    it.held = True
    it.pos = 0
    it.position = position
    it.source = source
    return it


def first_at_or_after(buffer, int64_t timestamp, int64_t start_offset, *, position=0, source=None):
    """(timestamp, offset) of the first record (control records count) with timestamp >= `timestamp` and offset >=
    `start_offset` in the batches of `buffer` (walked as iter_batches walks them), or None; only a batch whose header
    says it may hold one is decoded (CRC checked)."""
    cdef object mv = _byte_view(buffer)
    cdef Py_buffer buf
    PyObject_GetBuffer(mv, &buf, PyBUF_SIMPLE)
    try:
        return first_in(mv, <const uint8_t *>buf.buf if buf.len else _EMPTY, 0, buf.len, position, timestamp,
                        start_offset, source)
    finally:
        PyBuffer_Release(&buf)


cdef inline bint _may_hold(const uint8_t *p, int64_t timestamp, int64_t start_offset) noexcept nogil:
    """Whether the batch whose header is at `p` may hold a record at or after `timestamp` and `start_offset`: its max
    timestamp and its last offset reach them."""
    return (<int64_t>kl_be64(p + 35) >= timestamp
            and <int64_t>kl_be64(p) + <int32_t>kl_be32(p + 23) >= start_offset)


cdef Py_ssize_t passed_by(const uint8_t *p, Py_ssize_t n, Py_ssize_t position, int64_t timestamp,
                          int64_t start_offset, object source) except -1:
    """The size of the batch whose 61-byte header is at `p` (the file's `position`; `n` the bytes from there to the end
    of the span searched, more than a header) when first_in passes it by, as none of its records can be at or after
    `timestamp` and `start_offset`; 0 when first_in looks in it or stops there (a partial tail). Only its header is
    read; a header first_in refuses is refused here with the same error."""
    cdef Py_ssize_t end = _frame_end(p, n, 0, position, source)
    return 0 if end < 0 or _may_hold(p, timestamp, start_offset) else end


cdef Py_ssize_t read_all(int fd, uint8_t *buf, size_t n, int64_t at) noexcept nogil:
    """pread until `n` bytes are in; the bytes read (fewer at the file's end), -1 on an error (errno set)."""
    cdef size_t got = 0
    cdef ssize_t r
    while got < n:
        r = pread(fd, buf + got, n - got, at + <int64_t>got)
        if r < 0:
            if errno == EINTR:
                continue
            return -1
        if r == 0:
            break
        got += <size_t>r
    return <Py_ssize_t>got


cdef object first_in(object mv, const uint8_t *p, Py_ssize_t pos, Py_ssize_t n, Py_ssize_t position,
                     int64_t timestamp, int64_t start_offset, object source):
    """first_at_or_after on the batches of mv[pos:n] (`p` its buffer, `position` the file position of `pos`)."""
    cdef Py_ssize_t end, at = position - pos
    cdef RecordBatch b
    while True:
        end = _frame_end(p, n, pos, at, source)
        if end < 0:
            return None
        if _may_hold(p + pos, timestamp, start_offset):
            b = RecordBatch.__new__(RecordBatch)
            b._set(mv[pos:end], p + pos, end - pos, at + pos, source)
            found = b._first(False, timestamp, start_offset)
            if found is not None:
                return found
        pos = end


# --- columnar decode ---------------------------------------------------------------------------
cdef struct BinCol:
    Grow data
    Grow offsets
    Grow bits
    Py_ssize_t nulls


cdef int bincol_init(BinCol *c) except -1:
    memset(c, 0, sizeof(BinCol))
    return grow_i32(&c.offsets, 0)


cdef void bincol_free(BinCol *c) noexcept:
    free(c.data.data)
    free(c.offsets.data)
    free(c.bits.data)


cdef inline int bincol_add(BinCol *c, Py_ssize_t row, const uint8_t *p, int32_t n) except -1:
    if n < 0:
        c.nulls += 1
        grow_bit(&c.bits, row, False)
    else:
        if n:
            grow_bytes(&c.data, p, n)
        grow_bit(&c.bits, row, True)
    return grow_i32(&c.offsets, <int32_t>c.data.len)


cdef object bincol_take(BinCol *c):
    bits = take(&c.bits, 1, b"B") if c.nulls else None
    return BinaryColumn(take(&c.data, 1, b"B"), take(&c.offsets, 4, b"i"), bits, c.nulls)


cdef struct ColState:
    Grow offsets
    Grow timestamps
    Grow tstypes
    BinCol keys
    BinCol values
    Grow list_offsets
    Grow list_bits
    Py_ssize_t list_nulls
    BinCol hkeys
    BinCol hvalues
    Py_ssize_t rows
    Py_ssize_t nheaders


cdef int _add_headers(ColState *s, const uint8_t *p, const uint8_t *end, int32_t count) except -1:
    """Append the headers of a record that _parse_record already validated."""
    cdef int32_t i
    cdef HeaderRef h
    for i in range(count):
        _next_header(&p, end, &h)
        bincol_add(&s.hkeys, s.nheaders, h.key.p, <int32_t>h.key.n)
        bincol_add(&s.hvalues, s.nheaders, h.value.p, <int32_t>h.value.n)
        s.nheaders += 1
    grow_bit(&s.list_bits, s.rows, count > 0)
    if count == 0:
        s.list_nulls += 1
    return grow_i32(&s.list_offsets, <int32_t>s.nheaders)


cdef int _reserve_columns(ColState *s, const uint8_t *base, Py_ssize_t n, int64_t lo, int64_t hi) except -1:
    """Size the output buffers once from the headers of the batches in [lo, hi) (no CRC, no
    decoding), so they do not grow by repeated realloc-and-copy. A record needs at least 7 bytes,
    which bounds the count a corrupt header can claim; compressed batches may still grow them."""
    cdef Py_ssize_t pos = 0, size, section, rows = 0, data = 0
    cdef int32_t count
    cdef int64_t first, last
    while n - pos >= HEADER_SIZE:
        size = <int32_t>kl_be32(base + pos + 8)
        if size < HEADER_SIZE - LOG_OVERHEAD or size > n - pos - LOG_OVERHEAD:
            break
        first = <int64_t>kl_be64(base + pos)
        last = <int64_t>(<uint64_t>first + <uint64_t><int64_t><int32_t>kl_be32(base + pos + 23))  # a hint: wrap, no UB
        if first >= hi:
            break
        section = size + LOG_OVERHEAD - HEADER_SIZE
        count = <int32_t>kl_be32(base + pos + 57)
        if count > 0 and last >= lo and not base[pos + 22] & 0x20:  # data batches in range
            rows += min(<Py_ssize_t>count, section // MIN_RECORD_SIZE + 1)
            if not base[pos + 22] & 0x07:
                data += section
        pos += size + LOG_OVERHEAD
    grow_reserve(&s.offsets, 8 * rows)
    grow_reserve(&s.timestamps, 8 * rows)
    grow_reserve(&s.tstypes, 4 * rows)
    grow_reserve(&s.keys.offsets, 4 * rows)
    grow_reserve(&s.values.offsets, 4 * rows)
    grow_reserve(&s.keys.data, data)
    grow_reserve(&s.values.data, data)
    grow_reserve(&s.keys.bits, rows // 8 + 1)
    grow_reserve(&s.values.bits, rows // 8 + 1)
    return 0


def decode_columnar(buffer, *, start_offset=None, end_offset=None, include_headers=False, verify_crc=True,
                    max_decompressed_bytes=comp.DEFAULT_MAX_DECOMPRESSED, position=0, source=None):
    """Decode the data records with start_offset <= offset < end_offset into Arrow-layout columns."""
    cdef object mv = _byte_view(buffer)
    cdef const uint8_t[::1] view = mv
    cdef Py_ssize_t n = view.shape[0]
    cdef const uint8_t *base = &view[0] if n else _EMPTY
    cdef Py_ssize_t pos = 0, end, start
    cdef int64_t lo = -1 if start_offset is None else start_offset
    cdef int64_t hi = INT64_MAX if end_offset is None else end_offset
    cdef bint headers = include_headers
    cdef object next_offset = None
    cdef RecordBatch b = RecordBatch.__new__(RecordBatch)
    cdef ColState s
    cdef RecView rv
    cdef const uint8_t *p
    cdef const uint8_t *rend
    cdef int64_t offset, ts
    cdef int32_t i, tstype
    cdef int rc
    memset(&s, 0, sizeof(ColState))
    try:
        bincol_init(&s.keys)
        bincol_init(&s.values)
        bincol_init(&s.hkeys)
        bincol_init(&s.hvalues)
        grow_i32(&s.list_offsets, 0)
        _reserve_columns(&s, base, n, lo, hi)
        while True:
            end = _frame_end(base, n, pos, position, source)
            if end < 0:
                break
            start = pos
            b._set(None, base + pos, end - pos, position + pos, source)
            pos = end
            if b.base_offset >= hi:
                break
            next_offset = min(b.base_offset + b.last_offset_delta + 1, hi)
            if b.attributes & 0x20 or b.base_offset + b.last_offset_delta < lo:
                continue
            if verify_crc:
                b.ensure_valid()
            if b.attributes & 0x07:
                b.buffer = mv[start:end]
            owner = b._section(max_decompressed_bytes)
            p, rend = _section_bounds(b, owner)
            b._check_count(rend - p)
            tstype = 1 if b.attributes & 0x08 else 0
            for i in range(b.records_count):
                rc = _parse_record(&p, rend, &rv, b.last_offset_delta, b.base_timestamp)
                if rc:
                    b._framing_error(rc)
                offset = b.base_offset + rv.off_delta
                if offset < lo or offset >= hi:
                    continue
                ts = b.max_timestamp if tstype else rv.ts
                grow_i64(&s.offsets, offset)
                grow_i64(&s.timestamps, ts)
                grow_i32(&s.tstypes, tstype)
                bincol_add(&s.keys, s.rows, rv.key, rv.klen)
                bincol_add(&s.values, s.rows, rv.value, rv.vlen)
                if headers:
                    _add_headers(&s, rv.headers, rv.end, rv.hcount)
                s.rows += 1
            b._check_end(p, rend)
        header_col = None
        if headers:
            list_bits = take(&s.list_bits, 1, b"B") if s.list_nulls else None
            header_col = HeadersColumn(take(&s.list_offsets, 4, b"i"), list_bits, s.list_nulls,
                                       bincol_take(&s.hkeys), bincol_take(&s.hvalues))
        return Columns(
            offsets=take(&s.offsets, 8, b"q"),
            timestamps=take(&s.timestamps, 8, b"q"),
            timestamp_types=take(&s.tstypes, 4, b"i"),
            keys=bincol_take(&s.keys),
            values=bincol_take(&s.values),
            headers=header_col,
            next_offset=next_offset,
        )
    finally:
        free(s.offsets.data)
        free(s.timestamps.data)
        free(s.tstypes.data)
        free(s.list_offsets.data)
        free(s.list_bits.data)
        bincol_free(&s.keys)
        bincol_free(&s.values)
        bincol_free(&s.hkeys)
        bincol_free(&s.hvalues)


# --- encode ------------------------------------------------------------------------------------
# Every accepted input shape is read here in one pass: keys, values and header values as bytes or any
# C-contiguous buffer (held through a memoryview, so it cannot be resized while it is copied), headers as None or
# an exact list or tuple of exact (str, value) tuples. A record this pass does not take (a bad type, or an unusual
# shape such as a tuple subclass) sends the whole batch through the shared validator
# engine.record.batch_format, which raises the twin's exact error or returns the normalized fields.
cdef extern from "Python.h":
    const char *PyUnicode_AsUTF8AndSize(object unicode, Py_ssize_t *size)
    object PyUnicode_AsEncodedString(object unicode, const char *encoding, const char *errors)


cdef int bytes_field(object obj, Field *f, list keep) except -1:
    """Point f at a key, value or header value: 0, or 1 when it is not one this pass takes."""
    cdef Py_buffer *view
    if obj is None:
        f.p = _EMPTY
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
    f.p = <const uint8_t *>view.buf if view.len else _EMPTY
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


cdef struct RecInfo:
    Field key
    Field value
    int64_t ts
    int32_t off_delta
    Py_ssize_t hfirst      # index of its first HeaderRef
    int32_t hcount
    int32_t body


cdef struct Params:
    int64_t base_offset
    int32_t ple
    int codec
    int16_t attributes
    int64_t max_ts        # LogAppendTime to store, or -2 for the records' max
    int64_t pid
    int16_t epoch
    int32_t seq


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


# --- the log cleaner's record passes (the per-record loops of engine._native._offset_map) ------------------------
cdef inline void _key_ref(RecordBatch b, const RecView *rv, KeyRef *ref) noexcept:
    """What the cleaner's passes need of a parsed record: its offset, key and whether it is a tombstone."""
    ref.offset, ref.key, ref.klen, ref.tombstone = b.base_offset + rv.off_delta, rv.key, rv.klen, rv.vlen < 0


cdef int _key_refs(RecordBatch b, const uint8_t *p, const uint8_t *end, Grow *refs, Grow *views) except -1:
    """Parse every record of the section [p, end) of `b` (framing checked, as records() does) into `refs` and, unless
    `views` is NULL, its RecView into `views`."""
    cdef RecView rv
    cdef KeyRef ref
    cdef int rc
    cdef int32_t i
    grow_reserve(refs, b.records_count * <Py_ssize_t>sizeof(KeyRef))  # _open bounded the count by the section
    for i in range(b.records_count):
        rc = _parse_record(&p, end, &rv, b.last_offset_delta, b.base_timestamp)
        if rc:
            b._framing_error(rc)
        _key_ref(b, &rv, &ref)
        grow_put(refs, &ref, sizeof(KeyRef))
        if views != NULL:
            grow_put(views, &rv, sizeof(RecView))
    return b._check_end(p, end)


cdef int visit_records(object batch, records_prepare prepare, record_check visit, void *ctx) except -1:
    """Tell `prepare` every record of a batch (CRC and framing checked, as records() does), then `visit` each until it
    returns 1; returns 1 if it stopped the visit, else 0."""
    cdef RecordBatch b = <RecordBatch?>batch
    cdef const uint8_t *p
    cdef const uint8_t *end
    cdef Grow refs = Grow(NULL, 0, 0)
    cdef int32_t i, n
    owner = b._open(True, comp.DEFAULT_MAX_DECOMPRESSED, &p, &end)  # noqa: F841 (keeps the section alive)
    try:
        _key_refs(b, p, end, &refs, NULL)
        n = <int32_t>(refs.len // sizeof(KeyRef))
        prepare(ctx, <const KeyRef *>refs.data, n)
        for i in range(n):
            if visit(ctx, i, <const KeyRef *>refs.data + i):
                return 1
        return 0
    finally:
        free(refs.data)


@cython.final
cdef class RetainedRecords:
    """The records of one batch a clean keeps: pointers into the batch's bytes (or its decompressed section), which
    it holds, so rebuild_batch writes them out with no Python object per record. len() is the number kept."""

    cdef RecordBatch batch
    cdef object owner
    cdef Grow infos  # RecInfo per kept record
    cdef Grow hrefs  # their headers' HeaderRefs
    cdef Py_ssize_t count
    cdef readonly bint all_kept
    cdef readonly bint tombstones

    def __dealloc__(self):
        free(self.infos.data)
        free(self.hrefs.data)

    def __len__(self):
        return self.count


cdef object retain_records(object batch, records_prepare prepare, record_check keep, void *ctx, bint verify_crc,
                           record_dropped dropped):
    """The records of a batch (framing checked, and the CRC if `verify_crc`) that `keep` returns 1 for, after
    `prepare` was told them all, with their timestamps as records() reports them (a LogAppendTime batch's max
    timestamp). With `dropped` (an earlier pass over these same bytes checked their CRC and every record's framing),
    a record it answers 1 for by its offset alone is stepped over by its length, the rest of it unread; `prepare`
    is told of none and `keep` is asked about the others."""
    cdef RecordBatch b = <RecordBatch?>batch
    cdef RetainedRecords out = RetainedRecords.__new__(RetainedRecords)
    cdef const uint8_t *p
    cdef const uint8_t *end
    cdef Grow refs = Grow(NULL, 0, 0)
    cdef Grow views = Grow(NULL, 0, 0)
    cdef int32_t i, n
    out.batch = b
    out.owner = b._open(verify_crc, comp.DEFAULT_MAX_DECOMPRESSED, &p, &end)
    if dropped != NULL:
        _retain_undropped(out, p, end, keep, dropped, ctx)
        n = b.records_count
    else:
        try:
            _key_refs(b, p, end, &refs, &views)
            n = <int32_t>(refs.len // sizeof(KeyRef))
            prepare(ctx, <const KeyRef *>refs.data, n)
            for i in range(n):
                if keep(ctx, i, <const KeyRef *>refs.data + i):
                    _retain(out, <const RecView *>views.data + i)
        finally:
            free(refs.data)
            free(views.data)
    out.all_kept = out.count == n
    return out


cdef int _retain_undropped(RetainedRecords out, const uint8_t *p, const uint8_t *end, record_check keep,
                           record_dropped dropped, void *ctx) except -1:
    """retain_records' walk with `dropped`: each record's framing is read up to its offset delta; one `dropped`
    answers 1 for is stepped over, any other parsed whole (framing checked) and kept if `keep` says so."""
    cdef RecordBatch b = out.batch
    cdef RecView rv
    cdef KeyRef ref
    cdef const uint8_t *q
    cdef int32_t i
    cdef int rc
    for i in range(b.records_count):
        q = p
        rc = _record_head(&q, end, &rv, b.last_offset_delta)
        if rc:
            b._framing_error(rc)
        if dropped(ctx, b.base_offset + rv.off_delta):
            p = rv.end
            continue
        rc = _parse_record(&p, end, &rv, b.last_offset_delta, b.base_timestamp)
        if rc:
            b._framing_error(rc)
        _key_ref(b, &rv, &ref)
        if keep(ctx, i, &ref):
            _retain(out, &rv)
    return b._check_end(p, end)


cdef int _retain(RetainedRecords out, const RecView *rv) except -1:
    """Add a kept record (pointers to its key, value and headers) to `out`."""
    cdef RecInfo info
    cdef HeaderRef ref
    cdef const uint8_t *h = rv.headers
    cdef int32_t j
    info.key.p, info.key.n = rv.key, rv.klen
    info.value.p, info.value.n = rv.value, rv.vlen
    info.ts = out.batch.max_timestamp if out.batch.attributes & 0x08 else rv.ts  # LogAppendTime: the batch's
    info.off_delta = rv.off_delta
    info.hfirst = out.hrefs.len // sizeof(HeaderRef)
    info.hcount = rv.hcount
    for j in range(rv.hcount):
        _next_header(&h, rv.end, &ref)
        grow_put(&out.hrefs, &ref, sizeof(HeaderRef))
    grow_put(&out.infos, &info, sizeof(RecInfo))
    out.count += 1
    out.tombstones |= rv.vlen < 0
    return 0


def rebuild_batch(RecordBatch batch, records, delete_horizon_ms=None):
    """The log cleaner's rewrite of `batch` keeping only `records` (Records, at their own offsets): the same base
    offset, last offset, compression, timestamp type, producer fields, transactional and control flags and leader
    epoch; with `delete_horizon_ms` the base timestamp holds it (attribute bit 6). Without records, the header-only
    empty batch Kafka keeps for a producer's sequence: uncompressed, base timestamp -1, the original max timestamp."""
    cdef Params pr
    cdef bytes out
    cdef RetainedRecords kept = records if type(records) is RetainedRecords else None
    cdef RecInfo *infos
    cdef Py_ssize_t i
    items = records if type(records) is list or kept is not None else list(records)
    pr.base_offset = batch.base_offset
    pr.ple = batch.partition_leader_epoch
    pr.pid = batch.producer_id
    pr.epoch = batch.producer_epoch
    pr.seq = batch.base_sequence
    pr.attributes = batch.attributes & 0x38  # LogAppendTime, transactional, control
    if not items:
        pr.codec = 0
        out = PyBytes_FromStringAndSize(NULL, HEADER_SIZE)
        _put_header(<uint8_t *>PyBytes_AS_STRING(out), HEADER_SIZE, &pr, batch.last_offset_delta, -1,
                    batch.max_timestamp, 0)
        return out
    if delete_horizon_ms is not None:
        pr.attributes |= 0x40
        bf.check_timestamp(delete_horizon_ms)
    pr.codec = batch.attributes & 0x07
    pr.attributes |= pr.codec
    pr.max_ts = batch.max_timestamp if batch.attributes & 0x08 else -2
    if kept is None:
        return _encode_items(items, &pr, None, batch.last_offset_delta, delete_horizon_ms)
    if kept.batch is not batch:
        raise ValueError("these retained records are another batch's")
    infos = <RecInfo *>kept.infos.data
    for i in range(kept.count):
        if infos[i].ts < -1:
            bf.check_timestamp(infos[i].ts)  # the error a decoded record with this timestamp gets
    return _finish(infos, kept.count, <HeaderRef *>kept.hrefs.data, &pr, None, batch.last_offset_delta,
                   delete_horizon_ms)


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


cdef int _column_cell(const uint8_t[::1] data, const int32_t[::1] offsets, const uint8_t[::1] bits,
                      Py_ssize_t bit0, Py_ssize_t i, const uint8_t **ptr, Py_ssize_t *length) except -1:
    """Row i of an Arrow-layout binary column: a pointer and length, or length -1 for null."""
    cdef int32_t lo, hi
    if bits is not None and not (bits[(bit0 + i) >> 3] >> ((bit0 + i) & 7)) & 1:
        length[0] = -1
        return 0
    lo, hi = offsets[i], offsets[i + 1]
    if not (0 <= lo <= hi <= data.shape[0]):
        raise InvalidRecordError(f"column offsets [{lo}, {hi}) out of bounds at row {i}")
    length[0] = hi - lo
    ptr[0] = &data[0] + lo if length[0] > 0 else _EMPTY
    return 0


cdef int64_t _ts_at(int64_t scalar, const int64_t[::1] tss, Py_ssize_t i) except? -2:
    cdef int64_t ts = scalar
    if tss is not None:
        ts = tss[i]
    if ts < -1:
        bf.check_timestamp(ts)
    return ts


def encode_columnar(*, values, keys=None, timestamps=None, **batch_kwargs):
    """Encode one batch from columns: `values`/`keys` as (data, int32 offsets[, validity bitmap])
    tuples or pyarrow binary arrays; `timestamps` an int64 buffer or one int for all records.
    Keywords are encode_batch's. No headers."""
    cdef Params pr
    cdef const uint8_t[::1] vdata, kdata
    cdef const uint8_t[::1] vbits = None, kbits = None  # an unassigned memoryview is not None
    cdef const int32_t[::1] voffs, koffs
    cdef const int64_t[::1] tss = None
    cdef Py_ssize_t n, i, vbit0 = 0, kbit0 = 0
    cdef bint has_keys
    cdef RecInfo *infos
    cdef RecInfo *r
    level = batch_kwargs.pop("compression_level", None)
    last_offset_delta = batch_kwargs.pop("last_offset_delta", None)
    _params(&pr, batch_kwargs.pop("base_offset", 0), batch_kwargs.pop("compression", "none"),
            batch_kwargs.pop("timestamp_type", "create"), batch_kwargs.pop("log_append_time_ms", None),
            batch_kwargs.pop("producer_id", -1), batch_kwargs.pop("producer_epoch", -1),
            batch_kwargs.pop("base_sequence", -1), batch_kwargs.pop("transactional", False),
            batch_kwargs.pop("partition_leader_epoch", -1))
    if batch_kwargs:
        raise TypeError(f"encode_columnar() got unexpected keyword arguments {sorted(batch_kwargs)}")
    vcol = column_buffers("values", values)
    if vcol is None:
        raise InvalidRecordError("values column is required")
    kcol = column_buffers("keys", keys)
    vdata, voffs = vcol[0], vcol[1]
    n = voffs.shape[0] - 1
    has_keys = kcol is not None
    if has_keys:
        kdata, koffs = kcol[0], kcol[1]
        if koffs.shape[0] - 1 != n:
            raise InvalidRecordError("keys and values columns differ in length")
        if kcol[2] is not None:
            kbits, kbit0 = kcol[2]
    if vcol[2] is not None:
        vbits, vbit0 = vcol[2]
    scalar = -1
    if timestamps is None or (isinstance(timestamps, int) and not isinstance(timestamps, bool)):
        scalar = bf.check_timestamp(timestamps)
    else:
        tss = memoryview(timestamps).cast("B").cast("q")
        if tss.shape[0] != n:
            raise InvalidRecordError("timestamps column differs in length from values")
    infos = _alloc_infos(n)
    try:
        for i in range(n):
            r = &infos[i]
            r.off_delta = <int32_t>i
            r.ts = _ts_at(scalar, tss, i)
            r.hfirst = 0
            r.hcount = 0
            _column_cell(vdata, voffs, vbits, vbit0, i, &r.value.p, &r.value.n)
            r.key.n = -1
            if has_keys:
                _column_cell(kdata, koffs, kbits, kbit0, i, &r.key.p, &r.key.n)
        return _finish(infos, n, NULL, &pr, level, last_offset_delta)
    finally:
        free(infos)


# --- index search ------------------------------------------------------------------------------
cdef inline int64_t _index_key(const uint8_t *p, Py_ssize_t slot, int entry_size) noexcept nogil:
    """Entry key: the int64 timestamp of a 12-byte time-index entry, else the int32 relative offset."""
    if entry_size == 12:
        return <int64_t>kl_be64(p + slot * 12)
    return <int32_t>kl_be32(p + slot * entry_size)


cdef Py_ssize_t _largest_le(const uint8_t *p, Py_ssize_t lo, Py_ssize_t hi, int entry_size,
                            int64_t target) noexcept nogil:
    """Largest slot in [lo, hi] whose key <= target, given key(lo) <= target."""
    cdef Py_ssize_t mid
    while lo < hi:
        mid = (lo + hi + 1) >> 1
        if _index_key(p, mid, entry_size) <= target:
            lo = mid
        else:
            hi = mid - 1
    return lo


def index_search(buffer, Py_ssize_t entries, int entry_size, int64_t target):
    """Slot of the largest entry whose key <= target in a Kafka index (-1 if none).

    The key is an entry's first field: a big-endian int32 relative offset (8-byte `.index`
    entries) or int64 timestamp (12-byte `.timeindex` entries). Like Kafka's
    AbstractIndex.indexSlotRangeFor, the last 8 KiB of entries (the "warm" section, which
    recent reads keep in the page cache) are searched first.
    """
    cdef Py_buffer buf
    if entry_size not in (8, 12):
        raise ValueError("entry_size must be 8 (offset index) or 12 (time index)")
    PyObject_GetBuffer(buffer, &buf, PyBUF_SIMPLE)  # a mapping's buffer, without a memoryview around it
    try:
        if entries < 0 or entries * entry_size > buf.len:
            raise ValueError(f"{entries} entries of {entry_size} bytes exceed the {buf.len}-byte index")
        return index_floor(<const uint8_t *>buf.buf, entries, entry_size, target)
    finally:
        PyBuffer_Release(&buf)


cdef Py_ssize_t index_floor(const uint8_t *p, Py_ssize_t entries, int entry_size, int64_t target) noexcept nogil:
    """index_search on `entries` entries at `p` (8 or 12 bytes each, all within the buffer)."""
    cdef Py_ssize_t warm, first_hot
    if entries <= 0:
        return -1
    warm = 8192 // entry_size
    first_hot = max(<Py_ssize_t>0, entries - 1 - warm)
    if _index_key(p, first_hot, entry_size) < target:
        return _largest_le(p, first_hot, entries - 1, entry_size, target)
    if _index_key(p, 0, entry_size) > target:
        return -1
    return _largest_le(p, 0, first_hot, entry_size, target)


def scan_to_offset(buffer, int64_t position, int64_t offset, int64_t entry_offset, int64_t prev_last, upper):
    """The first v2 batch in `buffer` (which starts at file `position`) whose last offset >= `offset`, found from
    batch headers alone: (base offset, its position, its size, the last offset before it). The batch at `position`
    (when position > 0) must end at `entry_offset`, the index entry that pointed there; every other batch must
    follow its predecessor (above `prev_last`, below `upper` unless None). None when this walk cannot answer (the
    buffer ends first, a header is short, a batch is not magic 2, or a check fails): the caller's batch-by-batch
    walk then finds the batch or raises the precise error."""
    cdef Py_buffer buf
    cdef int64_t found[4]
    PyObject_GetBuffer(buffer, &buf, PyBUF_SIMPLE)
    try:
        if not scan_headers(<const uint8_t *>buf.buf, buf.len, position, offset, entry_offset, prev_last,
                            INT64_MAX if upper is None else <int64_t>upper, found):
            return None
        return found[0], found[1], found[2], found[3]
    finally:
        PyBuffer_Release(&buf)


cdef bint scan_headers(const uint8_t *p, Py_ssize_t n, int64_t position, int64_t offset, int64_t entry_offset,
                       int64_t prev_last, int64_t up, int64_t found[4]) noexcept nogil:
    """scan_to_offset on the `n` bytes at `p` (INT64_MAX for no `upper`): True with `found` set, else False."""
    cdef Py_ssize_t pos = 0
    cdef int64_t base, last, size
    while n - pos >= HEADER_SIZE:
        base = <int64_t>kl_be64(p + pos)
        size = <int64_t><int32_t>kl_be32(p + pos + 8) + LOG_OVERHEAD
        if p[pos + 16] != 2 or size < HEADER_SIZE or size > n - pos:
            return False
        if kl_add_overflow(base, <int32_t>kl_be32(p + pos + 23), &last):
            return False
        if pos == 0 and position > 0:
            if last != entry_offset:
                return False
        elif base <= prev_last or last < base or last >= up:
            return False
        if last >= offset:
            found[0], found[1], found[2], found[3] = base, position + pos, size, prev_last
            return True
        prev_last = last
        pos += size
    return False


def take_span(buffer, Py_ssize_t max_size, bint min_one_message, int64_t prev_last, upper, epochs):
    """How many bytes of `buffer` a read returns: whole batches from its start (the first one located and checked
    by the caller) while they fit `max_size` (the first always, with `min_one_message`), up to a partial tail.
    Every batch after the first must follow its predecessor (above `prev_last`, below `upper` unless None), and
    each must carry the leader epoch that `epochs` (a list of (epoch, start offset) in order, the leader-epoch
    cache's entries; None: unchecked) gives its base offset. None when the caller's batch-by-batch walk would raise
    (a malformed header, a check that fails): that walk then raises the precise error."""
    cdef Py_buffer buf
    cdef Py_ssize_t end
    cdef int64_t up = INT64_MAX if upper is None else <int64_t>upper
    check_epochs(epochs)
    PyObject_GetBuffer(buffer, &buf, PyBUF_SIMPLE)
    try:
        end = span_of(<const uint8_t *>buf.buf, buf.len, max_size, min_one_message, prev_last, up, epochs)
        return None if end < 0 else end
    finally:
        PyBuffer_Release(&buf)


cdef Py_ssize_t span_of(const uint8_t *p, Py_ssize_t n, Py_ssize_t max_size, bint min_one_message, int64_t prev_last,
                        int64_t up, object epochs) except -2:
    """take_span on the `n` bytes at `p` (INT64_MAX for no `upper`; `epochs` already checked): -1 for None."""
    cdef Py_ssize_t pos = 0
    cdef int64_t base, last, length, size
    cdef int32_t delta
    while n - pos >= UP_TO_MAGIC:  # the framing checks of iter_batches, in its order
        base = <int64_t>kl_be64(p + pos)
        length = <int32_t>kl_be32(p + pos + 8)
        if length < MIN_ENTRY_SIZE:
            return -1
        size = length + LOG_OVERHEAD
        if size > n - pos:
            break
        if p[pos + 16] != 2 or size < HEADER_SIZE:
            return -1
        delta = <int32_t>kl_be32(p + pos + 23)
        if base < 0 or delta < 0 or base >= INT64_MAX - delta:
            return -1
        last = base + delta
        if pos + size > max_size and not (min_one_message and pos == 0):
            break
        if pos and (base <= prev_last or last >= up):
            return -1
        if epochs is not None and not _epoch_matches(<list>epochs, base, <int32_t>kl_be32(p + pos + 12)):
            return -1
        prev_last = last
        pos += size
    return pos


cdef int check_epochs(object epochs) except -1:
    """TypeError unless `epochs` is None or a list of (int, int) tuples of int64 values (the twin's check, word for
    word)."""
    cdef Py_ssize_t i
    cdef object entry
    cdef int64_t value
    if epochs is None:
        return 0
    if PyList_CheckExact(epochs):
        for i in range(PyList_GET_SIZE(epochs)):
            entry = <object>PyList_GET_ITEM(epochs, i)
            if not (PyTuple_CheckExact(entry) and PyTuple_GET_SIZE(entry) == 2
                    and as_int64(<object>PyTuple_GET_ITEM(entry, 0), &value)
                    and as_int64(<object>PyTuple_GET_ITEM(entry, 1), &value)):
                break
        else:
            return 0
    raise TypeError("epochs must be None or a list of (epoch, start offset) int64 tuples")


cdef bint as_int64(object value, int64_t *out) noexcept:
    """Whether `value` is an int within int64 (then in `out`)."""
    cdef int overflow = 0
    if not PyLong_CheckExact(value):
        return False
    out[0] = PyLong_AsLongLongAndOverflow(value, &overflow)
    return overflow == 0


cdef inline int64_t _entry(list entries, Py_ssize_t i, Py_ssize_t field) except? -1:
    return <int64_t>(<object>PyTuple_GET_ITEM(<object>PyList_GET_ITEM(entries, i), field))


cdef bint _epoch_matches(list entries, int64_t base, int32_t epoch) except -1:
    """Whether a batch at `base` carries the epoch the leader-epoch entries (checked by check_epochs) give that
    offset: the last entry starting at or below it (any epoch below the first entry's start)."""
    cdef Py_ssize_t lo = 0, hi = PyList_GET_SIZE(entries), mid
    if hi == 0 or base < _entry(entries, 0, 1):
        return True
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if _entry(entries, mid, 1) <= base:
            lo = mid
        else:
            hi = mid
    return _entry(entries, lo, 0) == epoch


# --- leader append -----------------------------------------------------------------------------
cdef int64_t leader_batch(const uint8_t *p, Py_ssize_t size, Py_ssize_t pos, int64_t offset, int32_t leader_epoch,
                          int64_t log_append_time, Py_ssize_t max_batch_bytes, bint allow_control, object source,
                          uint8_t *h) except -2:
    """Check one whole batch of a producer's append (at `pos` in it: `size` bytes, framed by _frame_end) and write its
    leader copy of the header to `h`: offsets from `offset`, the leader epoch, and with `log_append_time` >= 0 the
    LogAppendTime flag and timestamp (and a new CRC). Returns the batch's max timestamp as appended."""
    cdef int64_t base_offset = <int64_t>kl_be64(p), batch_max
    cdef int32_t last_delta = <int32_t>kl_be32(p + 23), count = <int32_t>kl_be32(p + 57)
    cdef int16_t attributes = <int16_t>kl_be16(p + 21)
    if size > max_batch_bytes:
        raise RecordTooLargeError(f"batch of {size} bytes exceeds max.message.bytes={max_batch_bytes}",
                                  file=source, offset=base_offset)
    if kl_crc32c(0, p + ATTRS_OFFSET, size - ATTRS_OFFSET) != kl_be32(p + 17):
        raise CorruptRecordError("record batch CRC mismatch", file=source, position=pos, offset=base_offset)
    if attributes & 0x20:
        if not allow_control:
            raise InvalidRecordError("clients may not write control batches", file=source, offset=base_offset)
    elif count != last_delta + 1:
        raise InvalidRecordError("a produced batch must have consecutive offsets", file=source, offset=base_offset)
    memcpy(h, p, HEADER_SIZE)
    kl_put64(h, <uint64_t>offset)
    kl_put32(h + 12, <uint32_t>leader_epoch)
    batch_max = <int64_t>kl_be64(p + 35)
    if log_append_time >= 0:
        batch_max = log_append_time
        kl_put16(h + 21, <uint16_t>(attributes | 0x08))
        kl_put64(h + 35, <uint64_t>log_append_time)
        kl_put32(h + 17, kl_crc32c(kl_crc32c(0, h + ATTRS_OFFSET, HEADER_SIZE - ATTRS_OFFSET),
                                   p + HEADER_SIZE, size - HEADER_SIZE))
    return batch_max


cdef Py_ssize_t lone_batch_size(const uint8_t *p, Py_ssize_t n, int64_t producer_id, int32_t producer_epoch,
                                int32_t base_sequence, bint transactional) noexcept:
    """`n` when the buffer is exactly one well-framed v2 batch that is either without a producer id (`producer_id`
    < 0: no producer state to check) or that producer's next one (its id, its epoch, the expected base sequence, the
    transactional flag given, no control flag); else 0 (its checks are left to the full path)."""
    if n < HEADER_SIZE or <int64_t>kl_be32(p + 8) + LOG_OVERHEAD != n or p[16] != 2:
        return 0
    if <int64_t>kl_be64(p) < 0 or <int32_t>kl_be32(p + 23) < 0:
        return 0
    if producer_id < 0:
        return 0 if <int64_t>kl_be64(p + 43) >= 0 else n
    if (<int64_t>kl_be64(p + 43) != producer_id or <int16_t>kl_be16(p + 51) != producer_epoch
            or <int32_t>kl_be32(p + 53) != base_sequence or (kl_be16(p + 21) & 0x30) != (0x10 if transactional else 0)):
        return 0
    return n


cdef object leader_copy(RecordBatch b, int64_t offset, int32_t leader_epoch, int64_t log_append_time, int target,
                        object level, object bounds):
    """The twin's leader_copy (engine.record.records): the records of one client batch read as Kafka's LogValidator
    reads them, each CreateTime checked against `bounds`, and the batch re-encoded in codec `target` at `level` when
    batch_format.reencoded says so. Returns the new batch, or None when it is stored as sent."""
    cdef bint convert = bf.reencoded(b.attributes, target), bounded = bounds is not None
    cdef bint log_append = b.attributes & 0x08
    cdef int64_t lo = 0, hi = 0, ts
    cdef const uint8_t *p
    cdef const uint8_t *end
    cdef const uint8_t *hp
    cdef RecView rv
    cdef RecInfo *infos = NULL
    cdef RecInfo *r
    cdef HeaderRef ref
    cdef Grow hrefs
    cdef Params pr
    cdef int rc
    cdef int32_t i, j, n = b.records_count, klen, vlen
    if not convert and not bounded:
        return None
    if bounded:
        lo, hi = bounds
    owner = b._open(False, comp.DEFAULT_MAX_DECOMPRESSED, &p, &end)
    hrefs.data, hrefs.len, hrefs.cap = NULL, 0, 0
    if convert:
        infos = _alloc_infos(n)
    try:
        for i in range(n):
            rc = _parse_record(&p, end, &rv, b.last_offset_delta, b.base_timestamp)
            if rc:
                b._framing_error(rc)
            ts = b.max_timestamp if log_append else rv.ts
            if bounded and ts != -1 and (ts < lo or ts > hi):
                raise bf.timestamp_out_of_range(i, offset + i, ts, bounds, b.source)
            if not convert:
                continue
            r = &infos[i]
            r.key.p, r.key.n, r.value.p, r.value.n = rv.key, rv.klen, rv.value, rv.vlen
            r.ts, r.off_delta, r.hcount = ts, i, rv.hcount
            r.hfirst = hrefs.len // sizeof(HeaderRef)
            hp = rv.headers
            for j in range(rv.hcount):  # framing checked by _parse_record
                _skip_field(&hp, rv.end, &ref.key.p, &klen)
                _skip_field(&hp, rv.end, &ref.value.p, &vlen)
                ref.key.n, ref.value.n = klen, vlen
                grow_put(&hrefs, &ref, sizeof(HeaderRef))
        b._check_end(p, end)
        if not convert:
            return None
        pr.base_offset, pr.ple, pr.codec = offset, leader_epoch, target
        pr.attributes = target | (b.attributes & 0x30) | (0x08 if log_append_time >= 0 else 0)
        pr.max_ts = log_append_time if log_append_time >= 0 else -2
        pr.pid, pr.epoch, pr.seq = b.producer_id, b.producer_epoch, b.base_sequence
        return _finish(infos, n, <HeaderRef *>hrefs.data, &pr, level, None)
    finally:
        free(infos)
        free(hrefs.data)


def prepare_leader_append(buffer, int64_t first_offset, int32_t leader_epoch, int64_t log_append_time,
                          Py_ssize_t max_batch_bytes, bint allow_control=False, source=None,
                          checks=None):
    """Check a producer's batches and prepare them for a leader's append.

    Every batch must be whole, within `max_batch_bytes`, CRC-valid, have consecutive offsets and (unless
    `allow_control`) not be a control batch. Each gets offsets from `first_offset` on and the leader
    epoch; with `log_append_time` >= 0 also the LogAppendTime flag and timestamp (and a new CRC).
    With `checks` = (target codec, level, bounds), the records are read as Kafka's LogValidator reads them
    (`leader_copy`): a batch is re-encoded in the topic's codec, and a CreateTime outside `bounds` refuses it.
    Returns (pieces, next_offset, max_timestamp, offset_of_max_timestamp, batch_count), where pieces
    alternate a patched 61-byte header copy and a zero-copy view of the rest of the batch, ready for writev.
    """
    cdef object mv = _byte_view(buffer)
    cdef const uint8_t[::1] view = mv
    cdef Py_ssize_t n = view.shape[0], pos = 0, end
    cdef const uint8_t *base = &view[0] if n else _EMPTY
    cdef int64_t offset = first_offset, max_ts = -1, off_max = first_offset, batch_max
    cdef int32_t last_delta
    cdef list pieces = []
    cdef Py_ssize_t batches = 0
    while pos < n:
        end = _frame_end(base, n, pos, 0, source)
        if end < 0:
            break
        header = bytearray(HEADER_SIZE)
        batch_max = leader_batch(base + pos, end - pos, pos, offset, leader_epoch, log_append_time, max_batch_bytes,
                                 allow_control, source, <uint8_t *>PyByteArray_AS_STRING(header))
        copy = None
        if checks is not None:
            target, level, bounds = checks
            copy = leader_copy(RecordBatch(mv[pos:end], pos, source), offset, leader_epoch, log_append_time, target,
                               level, bounds)
        if copy is None:
            pieces.append(header)
            pieces.append(mv[pos + HEADER_SIZE:end])
            last_delta = <int32_t>kl_be32(base + pos + 23)
        else:
            if len(copy) > max_batch_bytes:
                raise RecordTooLargeError(f"batch of {len(copy)} bytes once re-encoded exceeds max.message.bytes="
                                          f"{max_batch_bytes}", file=source, offset=offset)
            view = memoryview(copy)
            pieces.append(view[:HEADER_SIZE])
            pieces.append(view[HEADER_SIZE:])
            last_delta = <int32_t>kl_be32(<const uint8_t *>PyBytes_AS_STRING(copy) + 23)
            batch_max = <int64_t>kl_be64(<const uint8_t *>PyBytes_AS_STRING(copy) + 35)
        if batch_max > max_ts:
            max_ts, off_max = batch_max, offset + last_delta
        offset += last_delta + 1
        batches += 1
        pos = end
    if pos != n or batches == 0:
        raise CorruptRecordError("the appended bytes are not a sequence of whole record batches", file=source)
    return pieces, offset, max_ts, off_max, batches


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
