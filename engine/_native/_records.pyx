# cython: language_level=3
"""The native decode of RecordBatch v2 (kafka-format.md §1-2): CRC-32C, the RecordBatch view and its records (as
Records, ConsumerRecords, or the first one at or after a timestamp), the batch walk of a buffer (iter_batches) and the
header checks a read or a follower's append makes before it decodes anything. Twin: engine.record.records.

Memory safety: every read is checked against the end of its batch (or decompressed section) before it happens, and
offset/timestamp arithmetic is checked for overflow; a batch holds a memoryview of its buffer, so the bytes (even an
mmap) stay alive and cannot be resized or closed under it. Corrupt input raises a typed error, never crashes.
No module state but the two record types' attribute descriptors, set at import; functions are thread-safe (the GIL
is held except while computing a large CRC).
"""
cimport cython
from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytearray cimport PyByteArray_AS_STRING, PyByteArray_Check
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_Check, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.list cimport PyList_New, PyList_SET_ITEM
from cpython.memoryview cimport PyMemoryView_GET_BUFFER
from cpython.ref cimport Py_INCREF, Py_XDECREF, PyObject
from cpython.tuple cimport PyTuple_GET_ITEM
from cpython.unicode cimport PyUnicode_DecodeUTF8, PyUnicode_GET_LENGTH
from libc.stdint cimport INT64_MAX, int16_t, int32_t, int64_t, uint8_t, uint32_t
from libc.string cimport memcmp

from engine._native._codec cimport (
    ATTRS_OFFSET, HEADER_SIZE, LOG_OVERHEAD, MIN_ENTRY_SIZE, MIN_RECORD_SIZE, NOGIL_CRC_BYTES, UP_TO_MAGIC,
    HeaderRef, RecView, _next_header, _parse_record, kl_be16, kl_be32, kl_be64, kl_crc32c,
    kl_crc32c_hardware_available, kl_crc32c_init, kl_crc32c_software, kl_empty)

from engine.record import batch_format as bf
from engine.record import compression as comp
from engine.common.structs import consumer_record_fields, consumer_record_repr
from engine.common.errors import CorruptRecordError, InvalidRecordError, KafkaError, UnsupportedMessageFormatError

cdef object _NO_HEADERS = bf.NO_HEADERS

cdef extern from "Python.h":
    void *PyUnicode_DATA(object unicode)
    bint PyUnicode_IS_COMPACT_ASCII(object unicode)
    void PyObject_GC_UnTrack(void *obj)

cdef enum:
    PAIR_VALUE_BYTES = 64  # a header pair is kept for sharing when its value is at most this long
    KEY_SLOTS = 16  # the header key cache's slots (h >> 28 of a 32-bit hash picks one)

kl_crc32c_init()


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
    cdef const uint8_t *p = kl_empty
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

# --- records -----------------------------------------------------------------------------------
@cython.no_gc
@cython.freelist(256)
cdef class ConsumerRecord:
    """A record as a consumer sees it, with kafka-python's fields (timestamp_type 0 CreateTime, 1 LogAppendTime)."""


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
    #define KL_SLOT(cls, field) offsetof(struct __pyx_obj_6engine_7_native_8_records_##cls, field)
    """
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


# Record framing errors (InvalidRecordError, as Kafka), indexed by _parse_record's return code.
_FRAMING = (
    None,
    "varint is truncated",
    "varint is too long or overflows its width",
    bf.SIZE_OVERRUN,
    "a field overruns the record",
    "invalid number of record headers",
    "invalid negative header key size",
    bf.SIZE_MISMATCH,
    bf.BAD_OFFSET_DELTA,
    bf.TIMESTAMP_OVERFLOW,
)

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
        self._ensure_valid()

    cdef int _ensure_valid(self) except -1:
        if not self._valid():
            raise self._error(CorruptRecordError,
                              f"record batch CRC mismatch (stored {self.crc:#010x}, computed {self.compute_crc():#010x})")
        return 0

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
            self._ensure_valid()
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

    def check_records(self):
        """Kafka's LogValidator reading every record (decompressed, bounded): the count, each record's framing, offset
        delta and timestamp, nothing after the last; InvalidRecordError (or the codec's error) naming the batch. The
        CRC is not checked here."""
        self._first(True, 0, 0)

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
        cdef _RecordIterator it = _iterate(self, verify_crc, max_decompressed_bytes)
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
        return _iterate(self, True, comp.DEFAULT_MAX_DECOMPRESSED)



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
    """The records section of `b`: its own bytes when `owner` is None, else the decompressed bytes `owner` holds."""
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


cdef _RecordIterator _iterate(RecordBatch b, bint verify_crc, Py_ssize_t max_decompressed_bytes):
    cdef _RecordIterator it = _RecordIterator.__new__(_RecordIterator)
    it.batch = b
    it.owner = b._open(verify_crc, max_decompressed_bytes, &it.p, &it.end)
    it.keys = _HeaderKeys.__new__(_HeaderKeys)
    return it


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
        cdef const uint8_t *p = <const uint8_t *>self.buf.buf if self.buf.len else kl_empty
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
        return first_in(mv, <const uint8_t *>buf.buf if buf.len else kl_empty, 0, buf.len, position, timestamp,
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
