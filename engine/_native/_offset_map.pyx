# cython: language_level=3
"""The log cleaner's key -> last offset map (Kafka's SkimpyOffsetMap), with the per-record loops of a clean;
the twin is segments.offset_map (its docstring has the layout and the probing rule).
Not thread-safe: one clean owns a map at a time.
"""
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t
from libc.stdlib cimport calloc, free
from libc.string cimport memcmp, memcpy, memset

from engine._native._core cimport retain_records, visit_records
from engine.common.errors import InvalidConfigurationError

cdef extern from "md5_impl.h":
    void kl_md5(const uint8_t *data, size_t len, uint8_t *out) nogil

cdef enum:
    HASH = 16   # an MD5 digest
    ENTRY = 24  # digest + offset


cdef inline int64_t _be64(const uint8_t *p) noexcept:
    cdef uint64_t v = 0
    cdef int i
    for i in range(8):
        v = (v << 8) | p[i]
    return <int64_t>v


cdef inline void _put64(uint8_t *p, int64_t value) noexcept:
    cdef uint64_t v = <uint64_t>value
    cdef int i
    for i in range(7, -1, -1):
        p[i] = v & 0xFF
        v >>= 8


cdef class SkimpyOffsetMap:
    cdef uint8_t *buf
    cdef readonly Py_ssize_t memory
    cdef readonly int32_t slots
    cdef readonly int32_t size
    cdef readonly int64_t latest_offset
    cdef readonly double load_factor
    cdef uint8_t hash1[HASH]

    def __cinit__(self, memory, double load_factor=0.9):
        if type(memory) is not int or not ENTRY <= memory <= 2**31 - 1:
            raise InvalidConfigurationError(f"log.cleaner.dedupe.buffer.size={memory!r} must be an int in "
                                            f"[{ENTRY}, 2**31-1]")
        if not 0 < load_factor <= 1:
            raise InvalidConfigurationError(f"log.cleaner.io.buffer.load.factor={load_factor!r} must be in (0, 1]")
        self.memory = memory
        self.slots = <int32_t>(memory // ENTRY)
        self.load_factor = load_factor
        self.buf = <uint8_t *>calloc(self.slots, ENTRY)
        if self.buf == NULL:
            raise MemoryError()
        self.size = 0
        self.latest_offset = -1

    def __dealloc__(self):
        free(self.buf)

    @property
    def utilization(self) -> float:
        return self.size / self.slots

    @property
    def max_entries(self) -> int:
        """How many keys one clean puts in before the map counts as full (slots x load factor)."""
        return <int32_t>(self.slots * self.load_factor)

    cdef inline Py_ssize_t _position(self, int attempt) noexcept:
        cdef int i = attempt if attempt < HASH - 4 else HASH - 4
        cdef uint32_t probe = ((<uint32_t>self.hash1[i] << 24) | (<uint32_t>self.hash1[i + 1] << 16)
                               | (<uint32_t>self.hash1[i + 2] << 8) | self.hash1[i + 3])
        cdef int32_t signed_probe
        if attempt > HASH - 4:
            probe += <uint32_t>(attempt - (HASH - 4))
        signed_probe = <int32_t>probe
        if signed_probe == -2147483648:
            signed_probe = 0  # Kafka's Utils.abs
        elif signed_probe < 0:
            signed_probe = -signed_probe
        return <Py_ssize_t>(signed_probe % self.slots) * ENTRY

    cdef inline bint _empty(self, Py_ssize_t pos) noexcept:
        cdef uint64_t words[3]
        memcpy(words, self.buf + pos, ENTRY)
        return (words[0] | words[1] | words[2]) == 0

    cdef int _put(self, const uint8_t *key, Py_ssize_t n, int64_t offset) except -1:
        cdef int attempt = 0
        cdef Py_ssize_t pos
        if self.size >= self.slots:
            raise ValueError(f"the offset map is full ({self.size} entries in {self.slots} slots)")
        kl_md5(key, n, self.hash1)
        pos = self._position(0)
        while not self._empty(pos):
            if memcmp(self.buf + pos, self.hash1, HASH) == 0:
                _put64(self.buf + pos + HASH, offset)
                self.latest_offset = offset
                return 0
            attempt += 1
            pos = self._position(attempt)
        memcpy(self.buf + pos, self.hash1, HASH)
        _put64(self.buf + pos + HASH, offset)
        self.latest_offset = offset
        self.size += 1
        return 0

    cdef int64_t _get(self, const uint8_t *key, Py_ssize_t n) noexcept:
        cdef int attempt = 0
        cdef int max_attempts = self.slots + HASH - 4
        cdef Py_ssize_t pos
        kl_md5(key, n, self.hash1)
        while attempt < max_attempts:
            pos = self._position(attempt)
            if self._empty(pos):
                return -1
            if memcmp(self.buf + pos, self.hash1, HASH) == 0:
                return _be64(self.buf + pos + HASH)
            attempt += 1
        return -1

    def put(self, const uint8_t[::1] key, int64_t offset) -> None:
        """Map `key` (by its MD5) to `offset`; it becomes the latest offset."""
        self._put(&key[0] if key.shape[0] else <const uint8_t *>b"", key.shape[0], offset)

    def get(self, const uint8_t[::1] key) -> int:
        """The offset mapped to `key`, or -1."""
        return self._get(&key[0] if key.shape[0] else <const uint8_t *>b"", key.shape[0])

    def table(self) -> bytes:
        """The slots as bytes (the layout in segments.offset_map)."""
        return (<char *>self.buf)[:<Py_ssize_t>self.slots * ENTRY]

    def update_latest_offset(self, int64_t offset) -> None:
        self.latest_offset = offset

    def clear(self) -> None:
        memset(self.buf, 0, <size_t>self.slots * ENTRY)
        self.size = 0
        self.latest_offset = -1

    def add_batch(self, batch, int64_t start_offset) -> bool:
        """Map the keyed records of `batch` at or after `start_offset`; True when the map filled up first (the
        records from there on stay unmapped). The latest offset is the caller's to move (by batch)."""
        cdef Pass ps
        ps.map, ps.start, ps.limit = <void *>self, start_offset, self.max_entries
        return visit_records(batch, _map_record, &ps) == 1

    def filter_batch(self, batch, bint discard, int64_t now_ms):
        """The records of `batch` a clean keeps (Kafka's filterBatch with the cleaner's shouldRetainRecord):
        (kept records, whether all were kept, whether a kept one is a tombstone). The kept records are the core's
        RetainedRecords, which rebuild_batch writes out."""
        cdef Pass ps
        ps.map, ps.discard, ps.control, ps.now = <void *>self, discard, batch.is_control, now_ms
        ps.has_horizon = batch.has_delete_horizon
        ps.horizon = batch.base_timestamp
        kept = retain_records(batch, _keep_record, &ps)
        return kept, kept.all_kept, kept.tombstones


cdef struct Pass:
    void *map          # the SkimpyOffsetMap (borrowed for the pass)
    int64_t start      # add_batch: records before it are not mapped
    int32_t limit      # add_batch: the map counts as full at this size
    bint discard       # filter_batch: the whole batch goes
    bint control
    bint has_horizon
    int64_t horizon
    int64_t now


cdef int _map_record(void *ctx, int64_t offset, const uint8_t *key, int32_t klen, bint tombstone) except -1:
    cdef Pass *ps = <Pass *>ctx
    cdef SkimpyOffsetMap m = <SkimpyOffsetMap>ps.map
    if klen >= 0 and offset >= ps.start:
        if m.size >= ps.limit:
            return 1
        m._put(key, klen, offset)
    return 0


cdef int _keep_record(void *ctx, int64_t offset, const uint8_t *key, int32_t klen, bint tombstone) except -1:
    cdef Pass *ps = <Pass *>ctx
    cdef SkimpyOffsetMap m = <SkimpyOffsetMap>ps.map
    if ps.discard:
        return 0
    if ps.control or offset > m.latest_offset:
        return 1
    if klen < 0 or offset < m._get(key, klen):
        return 0
    return not (tombstone and ps.has_horizon and ps.now >= ps.horizon)
