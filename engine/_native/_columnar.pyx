# cython: language_level=3
"""The native columnar codec: decode_columnar turns a span of batches into Arrow-layout columns (offsets, timestamps,
timestamp types, keys, values and optionally headers, in buffers this module allocates and hands over without a
copy), and encode_columnar writes one batch from such columns. Twin: engine.record.columnar.

Every read is bounded as in _records.pyx; a column that would pass 2 GiB is refused (RecordTooLargeError). An
uncompressed batch's CRC is verified as it is decoded, and its records join the columns only if it matches. A decode
of 4 MiB or more writes its value column with stores that bypass the cache (stream_copy.h). Memory:
freed column buffers (up to 64 MiB of them) are kept for the next decode (see "pool" below), the module's only state,
guarded by the GIL; otherwise each call owns its buffers, and calls are thread-safe.
"""
from cpython.buffer cimport PyBUF_FORMAT, PyBUF_WRITABLE
from cpython.bytes cimport PyBytes_AS_STRING
from libc.stdint cimport INT32_MAX, INT64_MAX, int32_t, int64_t, uint8_t, uint32_t, uint64_t
from libc.stdlib cimport free, malloc
from libc.string cimport memcpy, memset

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
    _next_header,
    _parse_record,
    grow_put,
    grow_reserve,
    kl_be32,
    kl_be64,
    kl_crc32c,
    kl_crc32c_init,
    kl_empty,
)
from engine._native._records cimport RecordBatch, _byte_view, _frame_end
from engine._native._records_builder cimport _alloc_infos, _finish, _params

from engine.record import batch_format as bf
from engine.record import compression as comp
from engine.record.columns import BinaryColumn, Columns, HeadersColumn, column_buffers
from engine.common.errors import InvalidRecordError, RecordTooLargeError

kl_crc32c_init()


cdef extern from "stream_copy.h":
    void kl_stream_copy(uint8_t *dst, const uint8_t *src, size_t n) nogil
    void kl_stream_fence() nogil


# --- native buffers (Arrow-compatible, zero-copy) ------------------------------------------

cdef inline int grow_i64(Grow *g, int64_t v) except -1:
    return grow_put(g, &v, 8)


cdef inline int grow_i32(Grow *g, int32_t v) except -1:
    return grow_put(g, &v, 4)


cdef inline int grow_bytes(Grow *g, const uint8_t *p, Py_ssize_t n, bint stream) except -1:
    """Append n bytes; `stream`: with stores that bypass the cache (kl_stream_copy), for a column too large to stay in
    it anyway."""
    if g.len + n > g.cap:
        grow_reserve(g, n)
    if stream:
        kl_stream_copy(<uint8_t *>g.data + g.len, p, n)
    else:
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


# A decode's columns are large (a span's values) and often short-lived (a Spark batch, one poll's worth); glibc gives
# blocks this large back to the kernel when they are freed, so the next decode would fault in every page of its
# columns again, which costs more than decoding into them. Freed column buffers of at least POOL_MIN bytes are kept
# instead, up to POOL_BLOCKS of them and POOL_BYTES in all, and the next decode reserves its columns from them. The
# pool is only touched with the GIL held (a buffer is freed by its NativeBuffer's dealloc).
cdef enum:
    POOL_MIN = 128 << 10  # glibc's default threshold for giving a freed block back to the kernel
    POOL_BLOCKS = 16
    POOL_BYTES = 64 << 20

cdef char *_pool_data[POOL_BLOCKS]
cdef Py_ssize_t _pool_cap[POOL_BLOCKS]
cdef int _pool_n = 0
cdef Py_ssize_t _pool_total = 0


cdef int pool_reserve(Grow *g, Py_ssize_t cap) except -1:
    """Room for `cap` bytes in a Grow: for an empty one, the smallest kept block that holds them, else (or for one
    already holding bytes) what grow_reserve gives."""
    global _pool_n, _pool_total
    cdef int i, best = -1
    if g.data == NULL and cap >= POOL_MIN:
        for i in range(_pool_n):
            if _pool_cap[i] >= cap and (best < 0 or _pool_cap[i] < _pool_cap[best]):
                best = i
    if best < 0:
        return grow_reserve(g, cap)
    g.data, g.cap, g.len = _pool_data[best], _pool_cap[best], 0
    _pool_total -= _pool_cap[best]
    _pool_n -= 1
    _pool_data[best], _pool_cap[best] = _pool_data[_pool_n], _pool_cap[_pool_n]
    return 0


cdef void pool_release(char *data, Py_ssize_t cap) noexcept:
    """Keep a freed column buffer for the next decode if the pool has room for it, else free it."""
    global _pool_n, _pool_total
    if cap >= POOL_MIN and _pool_n < POOL_BLOCKS and _pool_total + cap <= POOL_BYTES:
        _pool_data[_pool_n], _pool_cap[_pool_n] = data, cap
        _pool_n += 1
        _pool_total += cap
    else:
        free(data)


cdef class NativeBuffer:
    """A read-only buffer owning malloc'd memory (int64 'q', int32 'i' or bytes 'B' items)."""

    cdef char *data
    cdef Py_ssize_t nbytes
    cdef Py_ssize_t cap
    cdef Py_ssize_t itemsize
    cdef bytes fmt
    cdef Py_ssize_t shape[1]
    cdef Py_ssize_t strides[1]

    def __dealloc__(self):
        pool_release(self.data, self.cap)

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
        g.cap = 1
    b.data = g.data
    b.nbytes = g.len
    b.cap = g.cap
    b.itemsize = itemsize
    b.fmt = fmt
    b.shape[0] = g.len // itemsize
    b.strides[0] = itemsize
    g.data = NULL
    g.len = g.cap = 0
    return b


# --- columnar decode ---------------------------------------------------------------------------
# A decode whose uncompressed batches hold at least this many bytes writes its value column with stores that bypass
# the cache: a column that size would not stay there, and ordinary stores would first read each of its lines from
# memory and push out the input the decode is about to read. Smaller decodes keep their columns in the cache.
cdef enum:
    STREAM_MIN_BYTES = 4 << 20


cdef struct BinCol:
    Grow data
    Grow offsets
    Grow bits
    Py_ssize_t nulls
    bint stream  # data is copied with kl_stream_copy (see STREAM_MIN_BYTES)


cdef int bincol_init(BinCol *c) except -1:
    """Start a zeroed (or reserved) column: its first offset."""
    return grow_i32(&c.offsets, 0)


cdef void bincol_free(BinCol *c) noexcept:
    free(c.data.data)
    free(c.offsets.data)
    free(c.bits.data)


cdef inline int bincol_add(BinCol *c, Py_ssize_t row, const uint8_t *p, int32_t n) except -1:
    """Append row `row` (n < 0: null). The validity bitmap is only written once a null has been seen: a column without
    nulls (the usual case) has none."""
    if n < 0:
        bincol_null(c, row)
    else:
        if n:
            grow_bytes(&c.data, p, n, c.stream)
        if c.nulls:
            grow_bit(&c.bits, row, True)
    return grow_i32(&c.offsets, <int32_t>c.data.len)


cdef int bincol_null(BinCol *c, Py_ssize_t row) except -1:
    """Mark row `row` null, starting the bitmap (every earlier row valid) at the first null."""
    cdef Py_ssize_t full = row >> 3
    if c.nulls == 0:
        grow_reserve(&c.bits, full + 1)
        memset(c.bits.data, 0xFF, full)
        c.bits.data[full] = <char>((1 << (row & 7)) - 1)
        c.bits.len = full + 1
    c.nulls += 1
    return grow_bit(&c.bits, row, False)


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
    pool_reserve(&s.offsets, 8 * rows)
    pool_reserve(&s.timestamps, 8 * rows)
    pool_reserve(&s.tstypes, 4 * rows)
    pool_reserve(&s.keys.offsets, 4 * rows + 4)
    pool_reserve(&s.values.offsets, 4 * rows + 4)
    pool_reserve(&s.keys.data, data)
    pool_reserve(&s.values.data, data)
    s.values.stream = data >= STREAM_MIN_BYTES
    return 0


# An uncompressed batch's CRC is computed as its records are decoded, CRC_AHEAD bytes at a time just ahead of them,
# so each stretch of a large batch is read from memory once, by the CRC, and decoded from the cache. The batch's
# records only join the columns returned when its CRC matches: a corrupt batch raises the error it raises when the
# CRC is checked first (the twin's order), whatever its records hold.
cdef enum:
    CRC_AHEAD = 16384
    NO_CRC = -1  # `crc` when the batch's CRC is not computed as it is decoded (not asked, or checked first)


cdef object _open_section(RecordBatch b, object mv, Py_ssize_t start, Py_ssize_t end, bint verify_crc,
                          Py_ssize_t max_decompressed_bytes, const uint8_t **p, const uint8_t **rend, int64_t *crc):
    """RecordBatch._open for the batch mv[start:end], except that an uncompressed batch whose CRC is to be verified
    gets `crc` started over its header (its records follow as they are decoded); `crc` is NO_CRC otherwise."""
    crc[0] = NO_CRC
    if verify_crc and not b.attributes & 0x07:
        crc[0] = kl_crc32c(0, b._p + ATTRS_OFFSET, HEADER_SIZE - ATTRS_OFFSET)
        try:
            return b._open(False, max_decompressed_bytes, p, rend)
        except InvalidRecordError:
            pass  # its record count is refused: a bad CRC is the error, as when the CRC is checked first
        b._ensure_valid()
        return b._open(False, max_decompressed_bytes, p, rend)  # the count's error again
    if b.attributes & 0x07:
        b.buffer = mv[start:end]  # what _section decompresses
    return b._open(verify_crc, max_decompressed_bytes, p, rend)


cdef inline int64_t _crc_ahead(int64_t crc, const uint8_t **checked, const uint8_t *rend) noexcept:
    """`crc` extended over the next CRC_AHEAD bytes from *checked (fewer at `rend`), *checked moved past them."""
    cdef Py_ssize_t n = min(<Py_ssize_t>CRC_AHEAD, rend - checked[0])
    crc = kl_crc32c(<uint32_t>crc, checked[0], n)
    checked[0] += n
    return crc


cdef int _check_crc(RecordBatch b, int64_t crc, const uint8_t *checked, const uint8_t *rend) except -1:
    """Finish the CRC of a batch decoded with it (from `checked` to the section's end `rend`): CorruptRecordError,
    as RecordBatch.ensure_valid raises it, when it does not match."""
    if crc != NO_CRC and <uint32_t>kl_crc32c(<uint32_t>crc, checked, rend - checked) != b.crc:
        b._ensure_valid()
    return 0


def decode_columnar(buffer, *, start_offset=None, end_offset=None, include_headers=False, verify_crc=True,
                    max_decompressed_bytes=comp.DEFAULT_MAX_DECOMPRESSED, position=0, source=None):
    """Decode the data records with start_offset <= offset < end_offset into Arrow-layout columns."""
    cdef object mv = _byte_view(buffer)
    cdef const uint8_t[::1] view = mv
    cdef Py_ssize_t n = view.shape[0]
    cdef const uint8_t *base = &view[0] if n else kl_empty
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
    cdef const uint8_t *checked
    cdef int32_t i, tstype
    cdef int64_t crc
    cdef int rc
    memset(&s, 0, sizeof(ColState))
    try:
        _reserve_columns(&s, base, n, lo, hi)
        bincol_init(&s.keys)
        bincol_init(&s.values)
        bincol_init(&s.hkeys)
        bincol_init(&s.hvalues)
        grow_i32(&s.list_offsets, 0)
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
            owner = _open_section(b, mv, start, end, verify_crc, max_decompressed_bytes, &p, &rend, &crc)
            checked = p if crc != NO_CRC else rend  # the section's bytes before `checked` are in `crc`
            tstype = 1 if b.attributes & 0x08 else 0
            for i in range(b.records_count):
                if checked - p < CRC_AHEAD // 2 and checked < rend:
                    crc = _crc_ahead(crc, &checked, rend)
                rc = _parse_record(&p, rend, &rv, b.last_offset_delta, b.base_timestamp)
                if rc:
                    _check_crc(b, crc, checked, rend)
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
            _check_crc(b, crc, checked, rend)
            b._check_end(p, rend)
        kl_stream_fence()
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
    ptr[0] = &data[0] + lo if length[0] > 0 else kl_empty
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

