# cython: language_level=3
"""The log cleaner's passes over a batch's records (the per-record loops of _offset_map.pyx, which decides what a
clean keeps) and its rewrite of a batch keeping only some of them (rebuild_batch, also the twin's entry point).
Twin: engine.record.cleaner_records.

The framing of every record is checked first, as records() checks it; kept records are pointers into the batch's
bytes (or its decompressed section), which the RetainedRecords holding them keeps alive, so a batch is rewritten with
no Python object per record. No module state; thread-safe.
"""
cimport cython
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
from libc.stdint cimport int32_t, uint8_t
from libc.stdlib cimport free

from engine._native._codec cimport (
    HEADER_SIZE,
    Grow,
    HeaderRef,
    Params,
    RecInfo,
    RecView,
    _next_header,
    _parse_record,
    _record_head,
    grow_put,
    grow_reserve,
)
from engine._native._records cimport RecordBatch
from engine._native._records_builder cimport _encode_items, _finish, _put_header

from engine.record import batch_format as bf
from engine.record import compression as comp


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
