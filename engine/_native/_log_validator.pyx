# cython: language_level=3
"""Kafka's LogValidator for a leader's append: prepare_leader_append checks a producer's batches (whole, within the
size limit, CRC-valid, consecutive offsets, no control batch from a client, every record read: framing, offset
deltas, timestamps, nothing after the last, compressed ones decompressed within a bound) and gives each its offsets
and the leader epoch (and LogAppendTime when the topic asks), as header copies beside zero-copy views of the rest; leader_copy reads
the records where the topic's codec or timestamp bounds require it and re-encodes the batch. _segment_appender.pyx
calls the C-level checks (see _log_validator.pxd). Twin: engine.record.log_validator.

No module state; thread-safe.
"""
from cpython.bytearray cimport PyByteArray_AS_STRING
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
from libc.stdint cimport int16_t, int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t
from libc.stdlib cimport free
from libc.string cimport memcpy

from engine._native._codec cimport (
    ATTRS_OFFSET,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MIN_RECORD_SIZE,
    Grow,
    HeaderRef,
    Params,
    RecInfo,
    RecView,
    _parse_record,
    _skip_field,
    grow_put,
    kl_be16,
    kl_be32,
    kl_be64,
    kl_crc32c,
    kl_crc32c_init,
    kl_empty,
    kl_put16,
    kl_put32,
    kl_put64,
)
from engine._native._records cimport RecordBatch, _byte_view, _frame_end
from engine._native._records_builder cimport _alloc_infos, _finish

from engine.record import batch_format as bf
from engine.record import compression as comp
from engine.common.errors import CorruptRecordError, InvalidRecordError, RecordTooLargeError

kl_crc32c_init()


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
    check_records(p, size, pos, last_delta, source)
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


cdef bint _records_framed(const uint8_t *p, Py_ssize_t size, int32_t last_delta) noexcept nogil:
    """Whether the records section of an uncompressed batch (`size` bytes at `p`) holds exactly its count of
    well-framed records (RecordBatch.check_records' rules, walked without the GIL's objects)."""
    cdef const uint8_t *q = p + HEADER_SIZE
    cdef const uint8_t *end = p + size
    cdef int64_t base_ts = <int64_t>kl_be64(p + 27)
    cdef int32_t count = <int32_t>kl_be32(p + 57), i
    cdef RecView rv
    if count < 0 or <int64_t>count * MIN_RECORD_SIZE > end - q:
        return False
    for i in range(count):
        if _parse_record(&q, end, &rv, last_delta, base_ts):
            return False
    return q == end


cdef int check_records(const uint8_t *p, Py_ssize_t size, Py_ssize_t pos, int32_t last_delta,
                       object source) except -1:
    """Kafka's LogValidator reading every record of one client batch (CRC checked before): an uncompressed batch is
    walked in place; a compressed one, or one that fails the walk, through RecordBatch.check_records, which
    decompresses (bounded) and raises the typed error naming the batch and its position."""
    if kl_be16(p + 21) & 0x07 == 0 and _records_framed(p, size, last_delta):
        return 0
    RecordBatch(memoryview(PyBytes_FromStringAndSize(<const char *>p, size)), pos, source).check_records()
    return 0


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
    """The twin's leader_copy (engine.record.log_validator): the records of one client batch read as Kafka's LogValidator
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

    Every batch must be whole, within `max_batch_bytes`, CRC-valid, have consecutive offsets, hold exactly its
    count of well-framed records (RecordBatch.check_records) and (unless `allow_control`) not be a control batch.
    Each gets offsets from `first_offset` on and the leader epoch; with `log_append_time` >= 0 also the LogAppendTime flag and timestamp (and a new CRC).
    With `checks` = (target codec, level, bounds), the records are read as Kafka's LogValidator reads them
    (`leader_copy`): a batch is re-encoded in the topic's codec, and a CreateTime outside `bounds` refuses it.
    Returns (pieces, next_offset, max_timestamp, offset_of_max_timestamp, batch_count), where pieces
    alternate a patched 61-byte header copy and a zero-copy view of the rest of the batch, ready for writev.
    """
    cdef object mv = _byte_view(buffer)
    cdef const uint8_t[::1] view = mv
    cdef Py_ssize_t n = view.shape[0], pos = 0, end
    cdef const uint8_t *base = &view[0] if n else kl_empty
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

