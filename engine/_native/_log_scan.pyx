# cython: language_level=3
"""Index search and log scanning on raw bytes: the binary search of an offset or time index (index_search, Kafka's
warm-section search), and the walks of batch headers a read makes without decoding a record: to the batch holding an
offset (scan_to_offset), over the whole batches a fetch returns with their leader epochs checked (take_span), and
pread of a file span. _log_read.pyx calls the C-level forms (see _log_scan.pxd). Twin: engine.record.log_scan.

Every header field is read within the bytes given; a walk that cannot answer returns None (the caller's
batch-by-batch walk then raises the precise error). No module state; thread-safe; the C-level forms run without the
GIL where declared nogil.
"""
from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.list cimport PyList_CheckExact, PyList_GET_ITEM, PyList_GET_SIZE
from cpython.long cimport PyLong_AsLongLongAndOverflow, PyLong_CheckExact
from cpython.tuple cimport PyTuple_CheckExact, PyTuple_GET_ITEM, PyTuple_GET_SIZE
from libc.errno cimport EINTR, errno
from libc.stdint cimport INT64_MAX, int32_t, int64_t, uint8_t

from engine._native._codec cimport (
    HEADER_SIZE,
    LOG_OVERHEAD,
    MIN_ENTRY_SIZE,
    UP_TO_MAGIC,
    kl_add_overflow,
    kl_be32,
    kl_be64,
)

cdef extern from "<unistd.h>" nogil:
    ssize_t pread(int fd, void *buf, size_t n, long offset)


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

