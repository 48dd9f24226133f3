# cython: language_level=3
"""The log cleaner's key -> last offset map (Kafka's SkimpyOffsetMap), with the per-record loops of a clean;
the twin is segments.offset_map (its docstring has the layout and the probing rule).
A batch's keys are hashed together (up to KL_MD5_LANES side by side) before any is probed, and each probe fetches
the first slots of the key AHEAD records on, so the slots' cache misses overlap instead of following one another.
Superseded offsets: while a pass maps a batch's records in offset order from the `start_offset` of an empty map, each
put that replaces a key's offset sets that older offset's bit in a bitset from `start_offset`. The filter pass then
answers a record the bitset covers from its bit (superseded: dropped) and neither hashes its key nor probes: the
answer is the map's, as an offset is superseded exactly when a later put of its digest replaced it. In a checked batch
(below) whose offsets the bitset all covers, a superseded record is stepped over by its length, the rest of it unread
(the core's retain_records with `dropped`). The bitset grows
as puts arrive, to at most memory / 2 bits (a sixteenth of the map's bytes more: 12 offsets a slot); records beyond
it, or before its start, are looked up; a put out of offset order stops it for the pass.
Checked batches: add_batch checks each batch's CRC, and the map keeps the offsets of the run of consecutive batches it
has checked since clear(); filter_batch checks a batch's CRC only outside that run (the filter pass reads the same
immutable segment bytes moments later; a batch it rewrites gets a new CRC, so it must have been checked once).
Not thread-safe: one clean owns a map at a time.
"""
cimport cython
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t
from libc.stdlib cimport calloc, free, realloc
from libc.string cimport memcmp, memcpy, memset

from engine._native._cleaner_records cimport KeyRef, record_dropped, retain_records, visit_records
from engine.common.errors import InvalidConfigurationError

cdef extern from "md5_impl.h":
    void kl_md5_init() nogil
    void kl_md5(const uint8_t *data, size_t len, uint8_t *out) nogil
    void kl_md5_lanes(const uint8_t * const *keys, const size_t *lens, int count, uint8_t (*out)[16]) nogil
    int kl_md5_lanes_with(int code, const uint8_t * const *keys, const size_t *lens, int count,
                          uint8_t (*out)[16]) nogil
    int kl_md5_lanes_selected() nogil
    enum: KL_MD5_LANES
    enum: KL_MD5_ONE_BLOCK

cdef extern from *:
    """
    /* Fetch the slots at the n positions `probes` (none if the first is -1) into the cache; a slot may straddle two
       lines. A macro: GCC drops a call to a function whose only effect is a prefetch. */
    #define KL_FETCH(buf, probes, n) do {                                       \
        const Py_ssize_t *q_ = (probes);                                        \
        if (q_[0] >= 0)                                                         \
            for (int k_ = 0; k_ < (n); k_++) {                                  \
                const uint8_t *s_ = (buf) + q_[k_];                             \
                __builtin_prefetch(s_, 0, 3);                                   \
                if (((uintptr_t)s_ & 63) > 64 - 24)                             \
                    __builtin_prefetch(s_ + 23, 0, 3);                          \
            }                                                                   \
    } while (0)
    /* a % d with a multiplication by the precomputed kl_mod_magic(d) (Lemire's fastmod, exact for 32-bit a and d) */
    #if defined(__SIZEOF_INT128__)
    static inline uint64_t kl_mod_magic(uint32_t d) { return UINT64_C(0xFFFFFFFFFFFFFFFF) / d + 1; }
    static inline uint32_t kl_mod(uint32_t a, uint32_t d, uint64_t m) {
        return (uint32_t)(((__uint128_t)(m * a) * d) >> 64);
    }
    #else
    static inline uint64_t kl_mod_magic(uint32_t d) { (void)d; return 0; }
    static inline uint32_t kl_mod(uint32_t a, uint32_t d, uint64_t m) { (void)m; return a % d; }
    #endif
    """
    void KL_FETCH(const uint8_t *buf, const Py_ssize_t *probes, int n) noexcept nogil
    uint64_t kl_mod_magic(uint32_t d) noexcept nogil
    uint32_t kl_mod(uint32_t a, uint32_t d, uint64_t m) noexcept nogil

cdef enum:
    HASH = 16   # an MD5 digest
    ENTRY = 24  # digest + offset
    AHEAD = 16  # a record's probe fetches the first PROBES slots of the key this many records on
    PROBES = 2  # at the 0.8 load of a map sized for its keys, 4 lookups in 5 end within 2 probes


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


kl_md5_init()


@cython.final
cdef class SkimpyOffsetMap:
    cdef uint8_t *buf
    cdef readonly Py_ssize_t memory
    cdef readonly int32_t slots
    cdef readonly int32_t size
    cdef readonly int64_t latest_offset
    cdef readonly double load_factor
    cdef uint64_t magic            # kl_mod_magic(slots)
    cdef uint8_t hash1[HASH]
    cdef uint8_t (*digests)[HASH]  # the current batch's: record i's key digest (when it is probed)
    cdef Py_ssize_t *probes        # and at [i * PROBES] the positions of its first probes ([i * PROBES] = -1: none)
    cdef int32_t scratch           # records the two arrays hold
    cdef uint8_t *dead             # the superseded bitset: bit (o - dead_base) of offset o
    cdef int64_t dead_base         # its first offset; -1: none this pass (stopped or not begun)
    cdef int64_t dead_bits         # the offsets it covers from dead_base (its bytes x 8)
    cdef int64_t checked_lo        # the offsets of the run of consecutive batches add_batch checked (lo -1: none)
    cdef int64_t checked_hi

    def __cinit__(self, memory, double load_factor=0.9):
        if type(memory) is not int or not ENTRY <= memory <= 2**31 - 1:
            raise InvalidConfigurationError(f"log.cleaner.dedupe.buffer.size={memory!r} must be an int in "
                                            f"[{ENTRY}, 2**31-1]")
        if not 0 < load_factor <= 1:
            raise InvalidConfigurationError(f"log.cleaner.io.buffer.load.factor={load_factor!r} must be in (0, 1]")
        self.memory = memory
        self.slots = <int32_t>(memory // ENTRY)
        self.magic = kl_mod_magic(<uint32_t>self.slots)
        self.load_factor = load_factor
        self.buf = <uint8_t *>calloc(self.slots, ENTRY)
        if self.buf == NULL:
            raise MemoryError()
        self.size = 0
        self.latest_offset = -1
        self.dead_base = self.checked_lo = self.checked_hi = -1

    def __dealloc__(self):
        free(self.buf)
        free(self.dead)
        free(self.digests)
        free(self.probes)

    @property
    def utilization(self) -> float:
        return self.size / self.slots

    @property
    def superseded_span(self) -> int:
        """How many offsets from the pass's start the superseded bitset covers (0: none)."""
        return self.dead_bits

    @property
    def max_entries(self) -> int:
        """How many keys one clean puts in before the map counts as full (slots x load factor)."""
        return <int32_t>(self.slots * self.load_factor)

    cdef inline Py_ssize_t _position(self, const uint8_t *digest, int attempt) noexcept:
        cdef int i = attempt if attempt < HASH - 4 else HASH - 4
        cdef uint32_t probe = ((<uint32_t>digest[i] << 24) | (<uint32_t>digest[i + 1] << 16)
                               | (<uint32_t>digest[i + 2] << 8) | digest[i + 3])
        cdef int32_t signed_probe
        if attempt > HASH - 4:
            probe += <uint32_t>(attempt - (HASH - 4))
        signed_probe = <int32_t>probe
        if signed_probe == -2147483648:
            signed_probe = 0  # Kafka's Utils.abs
        elif signed_probe < 0:
            signed_probe = -signed_probe
        return <Py_ssize_t>kl_mod(<uint32_t>signed_probe, <uint32_t>self.slots, self.magic) * ENTRY

    cdef inline bint _empty(self, Py_ssize_t pos) noexcept:
        cdef uint64_t words[3]
        memcpy(words, self.buf + pos, ENTRY)
        return (words[0] | words[1] | words[2]) == 0

    cdef inline Py_ssize_t _probe(self, const uint8_t *digest, const Py_ssize_t *probes, int attempt) noexcept:
        return probes[attempt] if attempt < PROBES else self._position(digest, attempt)

    cdef void _locate(self, const uint8_t *digest, Py_ssize_t *probes) noexcept:
        cdef int attempt
        for attempt in range(PROBES):
            probes[attempt] = self._position(digest, attempt)

    cdef int _put(self, const uint8_t *digest, const Py_ssize_t *probes, int64_t offset) except -1:
        """Map `digest` (its first probes located at `probes`) to `offset`."""
        cdef int attempt = 0
        cdef Py_ssize_t pos = probes[0]
        cdef int64_t rel
        if self.size >= self.slots:
            raise ValueError(f"the offset map is full ({self.size} entries in {self.slots} slots)")
        if self.dead_base >= 0:
            rel = offset - self.dead_base
            if offset <= self.latest_offset:
                self._stop_tracking()
            elif rel >= self.dead_bits and rel < self.memory // 2:
                self._cover(rel)
        while not self._empty(pos):
            if memcmp(self.buf + pos, digest, HASH) == 0:
                if self.dead_base >= 0:
                    rel = _be64(self.buf + pos + HASH) - self.dead_base
                    if 0 <= rel < self.dead_bits:
                        self.dead[rel >> 3] |= <uint8_t>(1 << (rel & 7))
                _put64(self.buf + pos + HASH, offset)
                self.latest_offset = offset
                return 0
            attempt += 1
            pos = self._probe(digest, probes, attempt)
        memcpy(self.buf + pos, digest, HASH)
        _put64(self.buf + pos + HASH, offset)
        self.latest_offset = offset
        self.size += 1
        return 0

    cdef int _cover(self, int64_t rel) except -1:
        """Grow the bitset (doubling, zero-filled, to at most memory / 2 bits) to cover offset dead_base + rel."""
        cdef int64_t nbytes = max(self.dead_bits // 4, (rel >> 3) + 1, 4096)
        nbytes = min(nbytes, (self.memory // 2 + 7) // 8)
        _grow(<void **>&self.dead, <size_t>nbytes)
        memset(self.dead + self.dead_bits // 8, 0, <size_t>(nbytes - self.dead_bits // 8))
        self.dead_bits = nbytes * 8
        return 0

    cdef void _stop_tracking(self) noexcept:
        free(self.dead)
        self.dead, self.dead_base, self.dead_bits = NULL, -1, 0

    cdef inline bint _covered(self, int64_t offset) noexcept:
        """Whether the bitset answers for `offset` (a record at or before the latest offset)."""
        return self.dead_base >= 0 and 0 <= offset - self.dead_base < self.dead_bits

    cdef inline bint _superseded(self, int64_t offset) noexcept:
        cdef int64_t rel = offset - self.dead_base
        return (self.dead[rel >> 3] >> (rel & 7)) & 1

    cdef int64_t _get(self, const uint8_t *digest, const Py_ssize_t *probes) noexcept:
        """The offset mapped to `digest` (its first probes located at `probes`), or -1."""
        cdef int attempt = 0
        cdef int max_attempts = self.slots + HASH - 4
        cdef Py_ssize_t pos
        while attempt < max_attempts:
            pos = self._probe(digest, probes, attempt)
            if self._empty(pos):
                return -1
            if memcmp(self.buf + pos, digest, HASH) == 0:
                return _be64(self.buf + pos + HASH)
            attempt += 1
        return -1

    cdef int _hash_batch(self, const KeyRef *refs, int32_t n, Pass *ps) except -1:
        """Digest (side by side) and locate the key of every record of the batch the pass will probe, and fetch the
        first AHEAD slots."""
        cdef const uint8_t *keys[KL_MD5_LANES]
        cdef size_t lens[KL_MD5_LANES]
        cdef int32_t at[KL_MD5_LANES]
        cdef int count = 0
        cdef int32_t i
        if n > self.scratch:
            _grow(<void **>&self.digests, <size_t>n * HASH)
            _grow(<void **>&self.probes, <size_t>n * PROBES * sizeof(Py_ssize_t))
            self.scratch = n
        for i in range(n):
            self.probes[i * PROBES] = -1
            if not _probed(ps, self, &refs[i]):
                continue
            self.probes[i * PROBES] = -2  # located below, once hashed
            if refs[i].klen > KL_MD5_ONE_BLOCK:
                kl_md5(refs[i].key, refs[i].klen, self.digests[i])
                continue
            keys[count], lens[count], at[count] = refs[i].key, refs[i].klen, i
            count += 1
            if count == KL_MD5_LANES:
                self._hash_lanes(keys, lens, at, count)
                count = 0
        self._hash_lanes(keys, lens, at, count)
        for i in range(n):
            if self.probes[i * PROBES] == -2:
                self._locate(self.digests[i], self.probes + i * PROBES)
                if i < AHEAD:
                    KL_FETCH(self.buf, self.probes + i * PROBES, PROBES)
        return 0

    cdef void _hash_lanes(self, const uint8_t **keys, const size_t *lens, const int32_t *at, int count) noexcept:
        cdef uint8_t out[KL_MD5_LANES][16]
        cdef int l
        if count:
            kl_md5_lanes(keys, lens, count, out)
            for l in range(count):
                memcpy(self.digests[at[l]], out[l], HASH)

    def put(self, const uint8_t[::1] key, int64_t offset) -> None:
        """Map `key` (by its MD5) to `offset`; it becomes the latest offset."""
        cdef Py_ssize_t probes[PROBES]
        kl_md5(&key[0] if key.shape[0] else <const uint8_t *>b"", key.shape[0], self.hash1)
        self._locate(self.hash1, probes)
        self._put(self.hash1, probes, offset)

    def get(self, const uint8_t[::1] key) -> int:
        """The offset mapped to `key`, or -1."""
        cdef Py_ssize_t probes[PROBES]
        kl_md5(&key[0] if key.shape[0] else <const uint8_t *>b"", key.shape[0], self.hash1)
        self._locate(self.hash1, probes)
        return self._get(self.hash1, probes)

    def table(self) -> bytes:
        """The slots as bytes (the layout in segments.offset_map)."""
        return (<char *>self.buf)[:<Py_ssize_t>self.slots * ENTRY]

    def update_latest_offset(self, int64_t offset) -> None:
        self.latest_offset = offset

    def clear(self) -> None:
        """Empty the map and forget what its passes saw (the slots are zeroed only when some were filled)."""
        if self.size:
            memset(self.buf, 0, <size_t>self.slots * ENTRY)
        self.size = 0
        self.latest_offset = -1
        self.checked_lo = self.checked_hi = -1
        self._stop_tracking()

    def add_batch(self, batch, int64_t start_offset) -> bool:
        """Map the keyed records of `batch` at or after `start_offset`; True when the map filled up first (the
        records from there on stay unmapped). The latest offset is the caller's to move (by batch)."""
        cdef Pass ps
        if self.size == 0:  # the pass begins: it tracks superseded offsets from its start (none is set yet)
            self._stop_tracking()
            self.dead_base = max(start_offset, 0)
        ps.map, ps.start, ps.limit, ps.filtering = <void *>self, start_offset, self.max_entries, False
        filled = visit_records(batch, _prepare, _map_record, &ps) == 1
        if self.checked_lo < 0 or batch.base_offset != self.checked_hi + 1:
            self.checked_lo = batch.base_offset
        self.checked_hi = batch.last_offset
        return filled

    def filter_batch(self, batch, bint discard, int64_t now_ms):
        """The records of `batch` a clean keeps (Kafka's filterBatch with the cleaner's shouldRetainRecord):
        (kept records, whether all were kept, whether a kept one is a tombstone). The kept records are the core's
        RetainedRecords, which rebuild_batch writes out."""
        cdef Pass ps
        cdef int64_t first = batch.base_offset, last = batch.last_offset
        cdef bint checked = 0 <= self.checked_lo <= first <= last <= self.checked_hi
        cdef record_dropped dropped = NULL
        ps.map, ps.discard, ps.control, ps.now, ps.filtering = <void *>self, discard, batch.is_control, now_ms, True
        ps.has_horizon = batch.has_delete_horizon
        ps.horizon = batch.base_timestamp
        ps.n = 0  # (prepare sets it; with _dropped it is not called, and _keep_record then fetches nothing ahead)
        if (checked and not discard and not ps.control and last <= self.latest_offset and self._covered(first)
                and self._covered(last)):
            dropped = _dropped  # checked (CRC, framing) by the map pass, every offset answered by the bitset
        kept = retain_records(batch, _prepare, _keep_record, &ps, not checked, dropped)
        return kept, kept.all_kept, kept.tombstones


MD5_CODES = ("portable", "avx2", "avx512")  # the side-by-side codes, in md5_impl.h's order


def md5_lanes(keys, code=None) -> list:
    """The MD5 digests of `keys` (each at most KL_MD5_ONE_BLOCK bytes, at most KL_MD5_LANES of them) computed side
    by side as the map does, with the code named (one of MD5_CODES; None: the one the map uses on this CPU); a code
    this CPU cannot run is refused (OSError)."""
    cdef const uint8_t *ptrs[KL_MD5_LANES]
    cdef size_t lens[KL_MD5_LANES]
    cdef uint8_t out[KL_MD5_LANES][16]
    cdef int i
    cdef int which = kl_md5_lanes_selected() if code is None else MD5_CODES.index(code)
    if len(keys) > KL_MD5_LANES or any(len(k) > KL_MD5_ONE_BLOCK for k in keys):
        raise ValueError(f"at most {KL_MD5_LANES} keys of at most {KL_MD5_ONE_BLOCK} bytes")
    held = [bytes(k) for k in keys]
    for i in range(len(held)):
        ptrs[i], lens[i] = <const uint8_t *>(<bytes>held[i]), len(held[i])
    if kl_md5_lanes_with(which, ptrs, lens, len(held), out):
        raise OSError(f"this CPU does not run the {MD5_CODES[which]} MD5 code")
    return [(<char *>out[i])[:16] for i in range(len(held))]


def md5_code() -> str:
    """The side-by-side MD5 code the map uses on this CPU."""
    return MD5_CODES[kl_md5_lanes_selected()]


cdef struct Pass:
    void *map          # the SkimpyOffsetMap (borrowed for the pass)
    int32_t n          # the batch's records
    bint filtering     # filter_batch (else add_batch)
    int64_t start      # add_batch: records before it are not mapped
    int32_t limit      # add_batch: the map counts as full at this size
    bint discard       # filter_batch: the whole batch goes
    bint control
    bint has_horizon
    int64_t horizon
    int64_t now


cdef int _grow(void **p, size_t size) except -1:
    cdef void *q = realloc(p[0], size)
    if q == NULL:
        raise MemoryError()
    p[0] = q
    return 0


cdef inline bint _probed(Pass *ps, SkimpyOffsetMap m, const KeyRef *ref) noexcept:
    """Whether the pass looks `ref`'s key up in the map (the conditions of _map_record and _keep_record)."""
    if ref.klen < 0:
        return False
    if ps.filtering:
        return not ps.discard and not ps.control and ref.offset <= m.latest_offset and not m._covered(ref.offset)
    return ref.offset >= ps.start


cdef int _prepare(void *ctx, const KeyRef *refs, int32_t n) except -1:
    cdef Pass *ps = <Pass *>ctx
    ps.n = n
    return (<SkimpyOffsetMap>ps.map)._hash_batch(refs, n, ps)


cdef int _map_record(void *ctx, int32_t i, const KeyRef *ref) except -1:
    cdef Pass *ps = <Pass *>ctx
    cdef SkimpyOffsetMap m = <SkimpyOffsetMap>ps.map
    if _probed(ps, m, ref):
        if m.size >= ps.limit:
            return 1
        if i + AHEAD < ps.n:
            KL_FETCH(m.buf, m.probes + (i + AHEAD) * PROBES, PROBES)
        m._put(m.digests[i], m.probes + i * PROBES, ref.offset)
    return 0


cdef bint _dropped(void *ctx, int64_t offset) noexcept:
    """A filter pass's record whose offset the bitset covers: whether a later record of its key superseded it."""
    return (<SkimpyOffsetMap>(<Pass *>ctx).map)._superseded(offset)


cdef int _keep_record(void *ctx, int32_t i, const KeyRef *ref) except -1:
    cdef Pass *ps = <Pass *>ctx
    cdef SkimpyOffsetMap m = <SkimpyOffsetMap>ps.map
    if ps.discard:
        return 0
    if ps.control or ref.offset > m.latest_offset:
        return 1
    if ref.klen < 0:
        return 0
    if i + AHEAD < ps.n:
        KL_FETCH(m.buf, m.probes + (i + AHEAD) * PROBES, PROBES)
    if m._covered(ref.offset):
        if m._superseded(ref.offset):
            return 0
    elif ref.offset < m._get(m.digests[i], m.probes + i * PROBES):
        return 0
    return not (ref.tombstone and ps.has_horizon and ps.now >= ps.horizon)
