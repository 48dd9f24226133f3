# cython: language_level=3
"""The native twin of engine.log.log_read.LogReader (see that module for which reads it serves, its crash policy and its
thread-safety): the same answers, with the log's state, the segment list, the offset index and the segment's mapping
read from here. The locks it takes (the log's, the segment list's, the segment's, the index's) are
engine._native._lock's, as segments.fs.new_lock makes them with the native core loaded. What a segment is made of
(its locks, appender, offset index, descriptor pool) is kept between reads of the same segment, and the active
segment's while it stays the active one; threads sharing the reader each work from the record they took.
A lookup by time reads with pread where its reads have not touched the mapping (MappedReads.cold_read, with the
windows it flags as its reads touch them); what it reads goes into one buffer of the module's, which one lookup holds
at a time (a lookup on another thread meanwhile reads into a buffer of its own). On a file system that does not do its
own reads (`FileSystem.direct_reads`) it preads the append handle's descriptor itself, with no Python call, and reads
only the header of the batch it starts from when that batch cannot hold the answer (the time index's entry is at the
last batch before the answer's, so most lookups copy one batch, not two).
"""
cimport cython
from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytearray cimport PyByteArray_AS_STRING
from cpython.dict cimport PyDict_GetItem
from cpython.list cimport PyList_GET_ITEM, PyList_GET_SIZE
from cpython.ref cimport PyObject
from libc.errno cimport errno
from libc.stdint cimport INT32_MAX, int32_t, int64_t, uint8_t, uint32_t, uint64_t

from engine._native._codec cimport HEADER_SIZE
from engine._native._log_scan cimport as_int64, check_epochs, index_floor, read_all, scan_headers, span_of
from engine._native._records cimport first_in, passed_by
from engine._native._lock cimport Lock
from engine._native._residency cimport TouchedWindows

import os

from engine.common.errors import KafkaStorageError

cdef extern from "crc32c_impl.h":  # its inline byte-order helpers only
    uint32_t kl_be32(const uint8_t *p) nogil

cdef object _EMPTY = memoryview(b"")

cdef enum:
    ENTRY_SIZE = 8  # an `.index` entry: int32 offset relative to the segment's base, int32 position
    TIME_ENTRY_SIZE = 12  # a `.timeindex` entry: int64 timestamp, int32 offset relative to the segment's base
    LOOKUP_READ_BYTES = 256 << 10  # segments.segment_reads.LOOKUP_READ_BYTES

LOOKUP_READ = LOOKUP_READ_BYTES  # for the test that it is the segment layer's


@cython.final
cdef class _Pool:
    """One file system's descriptor pool, as FileSystem.track_map tests it."""

    cdef object fs
    cdef object handles                 # an OrderedDict
    cdef Py_ssize_t budget

    def __init__(self, fs):
        self.fs, self.handles, self.budget = fs, fs.handles, fs.fd_budget

    cdef int track(self, object owner, object key) except -1:
        """FileSystem.track_map(owner): its first test (the pool less than half full and `key`, the owner's
        ("map", id) key, counted already) made here without a Python call, else the method."""
        if 2 * len(self.handles) < self.budget and key in self.handles:
            return 0
        self.fs.track_map(owner)
        return 0


@cython.final
cdef class _Segment:
    """What one segment is made of (none of it is replaced while the segment lives), made whole before a reader
    keeps it: readers on other threads share the reader, and each works from the record it took."""

    cdef object segment, appender, index, segment_key, index_key
    cdef object reads                   # its MappedReads (segments.segment_reads)
    cdef TouchedWindows windows         # their Residency's, when the native twin (None: nothing is flagged)
    cdef Lock segment_lock, index_lock
    cdef _Pool pool
    cdef int64_t base
    cdef object time_index, time_key    # the time index, taken on its first lookup (a read never opens it)
    cdef Lock time_lock
    cdef bint direct                    # whether a lookup may pread the append handle's descriptor itself

    def __init__(self, segment, _Pool pool):
        index = segment.offset_index
        self.segment_lock, self.index_lock = segment.lock, index.lock
        self.appender, self.index, self.base = segment.appender, index, segment.base_offset
        self.segment_key, self.index_key = ("map", id(segment)), ("map", id(index))
        self.pool = pool if pool is not None and pool.fs is segment.fs else _Pool(segment.fs)
        self.direct = segment.fs.direct_reads()
        self.reads = segment.reads
        windows = segment.reads.residency.windows
        self.windows = windows if isinstance(windows, TouchedWindows) else None
        self.segment = segment


@cython.final
cdef class LogReader:
    """The native twin of engine.log.log_read.LogReader."""

    cdef object log, local, epochs, fetch, new_tuple
    cdef Lock _lock, _list_lock                 # the log's, the segment list's
    cdef list _bases
    cdef dict _by_base
    cdef Py_ssize_t _window
    cdef _Segment _active                       # the active segment when last seen
    cdef _Segment _last                         # the segment last read
    cdef _Segment _looked_up                    # the segment last searched by time

    def __init__(self, log, fetch_type, Py_ssize_t window_bytes):
        segments = log.local.segments
        self.log, self.local, self.epochs = log, log.local, log.leader_epochs
        self.fetch, self.new_tuple, self._window = fetch_type, tuple.__new__, window_bytes
        self._lock, self._list_lock = log.lock, segments.lock
        self._bases, self._by_base = segments.bases, segments.by_base
        self._active = self._last = self._looked_up = None

    def read(self, offset, max_size, upper_bound, bint min_one_message):
        """UnifiedLog.read's FetchData, or None with nothing read when the layers must serve the read (also for
        arguments that are not ints within int64: the layers refuse them or answer as Python ints do)."""
        cdef object active, segment, mapping, entries
        cdef _Segment seg, tail
        cdef int64_t start_offset, max_bytes, leo, bound, active_base, active_size, upper, entry_offset, position
        cdef int64_t limit, stop, want
        cdef int64_t found[4]
        cdef Py_ssize_t end, size
        cdef Py_buffer buf
        cdef const uint8_t *p
        if not (as_int64(offset, &start_offset) and as_int64(max_size, &max_bytes)
                and (upper_bound is None or as_int64(upper_bound, &bound))):
            return None
        self._lock.take()  # UnifiedLog.tail
        try:
            leo = self.local.log_end_offset
            active = self.local.active_segment
            tail = self._active
            if tail is not None and tail.segment is active:
                active_base, active_size = tail.base, tail.appender.size
            else:
                active_base, active_size = active.base_offset, active.appender.size
        finally:
            self._lock.give()
        if tail is None or tail.segment is not active:  # made outside the lock: it may open the index
            tail = self._active = _Segment(active, None if self._last is None else self._last.pool)
        if not <int64_t>self.log.log_start_offset <= start_offset <= leo:
            return None
        bound = leo if upper_bound is None else min(bound, leo)
        if start_offset >= bound:  # nothing to read below the bound
            return self.new_tuple(self.fetch, (start_offset, active_base, active_size, _EMPTY))
        if bound < leo:
            return None
        segment = self._holding(start_offset, &upper)
        if segment is None:
            return None
        if upper < 0:
            upper = leo
        seg = self._last
        if seg is None or seg.segment is not segment:
            seg = tail if tail.segment is segment else _Segment(segment, tail.pool)
            self._last = seg
        if not _floor(seg, start_offset, &entry_offset, &position, NULL):
            return None
        mapping = _mapping(seg, position, &size)  # a view: the mapping cannot be closed while it lives
        if mapping is None:
            return None
        PyObject_GetBuffer(mapping, &buf, PyBUF_SIMPLE)
        try:
            p = <const uint8_t *>buf.buf
            size = min(size, buf.len)
            if not scan_headers(p + position, size - position, position, start_offset, entry_offset, seg.base - 1,
                                upper, found):
                return None
            limit = min(active_size, size) if seg.base == active_base else size
            if found[1] >= limit:
                return self.new_tuple(self.fetch, (start_offset, seg.base, found[1], _EMPTY))
            want = max(max_bytes, found[2]) if min_one_message else max_bytes
            stop = limit if want > limit - found[1] else found[1] + want
            if stop - found[1] >= self._window:
                return None
            entries = self.epochs.entries
            check_epochs(entries)
            end = span_of(p + found[1], stop - found[1], max_bytes, min_one_message, found[3], upper, entries)
            if end < 0:
                return None
            if seg.windows is not None:
                seg.windows.touch(mapping.obj, p, position, found[1] + end)
        finally:
            PyBuffer_Release(&buf)
        seg.reads.note_read(position, found[1] + end - position)  # the headers scanned and the batches returned
        return self.new_tuple(self.fetch, (start_offset, seg.base, found[1], mapping[found[1]:found[1] + end]))

    def offset_for_timestamp(self, timestamp):
        """UnifiedLog.offset_for_timestamp for a timestamp other than -1 and -2 (LogSegments.offset_for_timestamp, then
        LogSegment.find_offset_by_timestamp, in one call), or False when the layers must answer (a timestamp that is
        not an int within int64, a read-only segment, an index with no mapping to search)."""
        cdef int64_t ts, start, index_offset, entry_offset, position, following
        cdef Py_ssize_t size
        cdef _Segment seg
        cdef Py_buffer buf
        cdef object mapping, max_ts, found
        if not (as_int64(timestamp, &ts) and as_int64(self.log.log_start_offset, &start)):
            return False
        self._list_lock.take()  # LogSegments.all
        try:
            segments = [self._by_base[base] for base in self._bases]
        finally:
            self._list_lock.give()
        for segment in segments:
            if not segment.appender.size:
                continue
            max_ts = segment.appender.max_ts  # LogSegment.max_timestamp_and_offset, once loaded
            if <int64_t>(segment.max_timestamp_and_offset() if max_ts is None else max_ts)[0] < ts:
                continue
            if not segment.reads.mapped:  # a read-only segment's reads map nothing
                return False
            seg = self._looked_up
            if seg is None or seg.segment is not segment:
                seg = self._looked_up = _Segment(segment, None if self._last is None else self._last.pool)
            if not _time_floor(seg, ts, &index_offset):
                return False
            if not _floor(seg, max(index_offset, start), &entry_offset, &position, &following):
                return False
            found = _cold_lookup(seg, position, following, ts, start)  # the same bytes as the mapping's
            if found is not None:
                return found
            mapping = _mapping(seg, position, &size)
            if mapping is None:  # no bytes at the indexed position: no batch to look in
                continue
            PyObject_GetBuffer(mapping, &buf, PyBUF_SIMPLE)
            try:  # markers count, as in Kafka; a lookup is a random read, not reported to note_read
                found = first_in(mapping, <const uint8_t *>buf.buf, position, min(size, buf.len), position, ts, start,
                                 segment.log_path)
            finally:
                PyBuffer_Release(&buf)
            if found is not None:
                return found
        return None

    cdef object _holding(self, int64_t offset, int64_t *next_base):
        """LogSegments.holding: the segment with the greatest base <= offset (else the first), the next base in
        `next_base` (-1 for the last); None with no segments."""
        cdef Py_ssize_t lo = 0, hi, mid
        cdef list bases = self._bases
        cdef PyObject *segment
        self._list_lock.take()
        try:
            hi = PyList_GET_SIZE(bases)
            if hi == 0:
                return None
            while lo < hi:  # bisect_right
                mid = (lo + hi) >> 1
                if offset < <int64_t><object>PyList_GET_ITEM(bases, mid):
                    hi = mid
                else:
                    lo = mid + 1
            lo = max(lo - 1, 0)
            next_base[0] = <int64_t><object>PyList_GET_ITEM(bases, lo + 1) if lo + 1 < PyList_GET_SIZE(bases) else -1
            segment = PyDict_GetItem(self._by_base, <object>PyList_GET_ITEM(bases, lo))
            return None if segment is NULL else <object>segment
        finally:
            self._list_lock.give()


cdef bint _floor(_Segment seg, int64_t offset, int64_t *entry_offset, int64_t *position,
                 int64_t *following) except -1:
    """OffsetIndex.lookup: the (offset, position) of the largest entry at or below `offset`, (base, 0) if none, and
    unless `following` is NULL there OffsetIndex.lookup_span's position (-1 for None); False when the index has no
    mapping to search."""
    cdef int64_t entry[2]
    cdef int found
    entry_offset[0], position[0] = seg.base, 0
    found = _search(seg.index, seg.index_lock, seg.pool, seg.index_key, ENTRY_SIZE,
                    max(min(offset - seg.base, <int64_t>INT32_MAX), -1), entry, following)
    if found > 0:
        entry_offset[0], position[0] = seg.base + entry[0], entry[1]
    return found >= 0


cdef bint _time_floor(_Segment seg, int64_t timestamp, int64_t *offset) except -1:
    """TimeIndex.lookup's offset: that of the largest entry whose timestamp <= `timestamp`, the base if none; False
    when the index has no mapping to search."""
    cdef int64_t entry[2]
    cdef int found
    if seg.time_index is None:
        index = seg.segment.time_index  # opens it
        seg.time_lock, seg.time_key, seg.time_index = index.lock, ("map", id(index)), index
    found = _search(seg.time_index, seg.time_lock, seg.pool, seg.time_key, TIME_ENTRY_SIZE, timestamp, entry, NULL)
    offset[0] = seg.base + entry[1] if found > 0 else seg.base
    return found >= 0


cdef int _search(object index, Lock lock, _Pool pool, object pool_key, int entry_size, int64_t target,
                 int64_t entry[2], int64_t *following) except -2:
    """MmapIndex._floor under the index's lock: 1 with the largest entry whose key <= `target` in `entry` (an `.index`
    entry's relative offset and position, a `.timeindex` entry's timestamp and relative offset), 0 when there is
    none, -1 when the index has no mapping to search; unless `following` is NULL (an `.index` only), the position of
    the second entry past the position found there (-1 if none: OffsetIndex.lookup_span)."""
    cdef object mapping
    cdef Py_buffer buf
    cdef Py_ssize_t entries, slot, after
    cdef const uint8_t *p
    if following != NULL:
        following[0] = -1
    lock.take()
    try:
        entries = index.readable() if index.pending else index.entries
        if not entries:
            return 0
        mapping = index.mapping  # MmapIndex.mapped
        if mapping is None:
            mapping = index.mapped()
            if mapping is None:
                return -1
        else:
            pool.track(index, pool_key)
        PyObject_GetBuffer(mapping, &buf, PyBUF_SIMPLE)
        try:
            if entries * entry_size > buf.len:
                return -1
            slot = index_floor(<const uint8_t *>buf.buf, entries, entry_size, target)
            if following != NULL:  # OffsetIndex.lookup_span: the second entry past the position found
                after = 1 if slot < 0 and kl_be32(<const uint8_t *>buf.buf + entry_size - 4) == 0 else slot + 1
                if after + 1 < entries:
                    following[0] = <int32_t>kl_be32(<const uint8_t *>buf.buf + (after + 1) * entry_size + entry_size - 4)
            if slot < 0:
                return 0
            p = <const uint8_t *>buf.buf + slot * entry_size
            if entry_size == TIME_ENTRY_SIZE:
                entry[0], entry[1] = <int64_t>((<uint64_t>kl_be32(p) << 32) | kl_be32(p + 4)), <int32_t>kl_be32(p + 8)
            else:
                entry[0], entry[1] = <int32_t>kl_be32(p), <int32_t>kl_be32(p + 4)
            return 1
        finally:
            PyBuffer_Release(&buf)
    finally:
        lock.give()


cdef object _mapping(_Segment seg, int64_t position, Py_ssize_t *size):
    """A view of the segment's shared mapping, made again when it does not reach the segment's size (LogSegment.view),
    with that size in `size`; None when there are no bytes at `position`. The view is taken under the segment's lock:
    from then on the mapping refuses to close (the pool, a roll, retention or the cleaner keep it until the view is
    gone), so the reader finishes on the bytes it started on."""
    cdef object segment = seg.segment, mapping
    seg.segment_lock.take()
    try:
        size[0] = seg.appender.size
        if size[0] <= position:
            return None
        mapping = seg.reads.map
        if mapping is None or len(mapping) < size[0]:
            mapping = seg.reads.remap()
        else:
            mapping = memoryview(mapping)
            seg.pool.track(segment, seg.segment_key)
        return mapping
    finally:
        seg.segment_lock.give()


cdef bytearray _scratch = None  # what a lookup reads with pread (one lookup at a time: another one meanwhile reads
cdef bint _scratch_taken = False  # into a buffer of its own)


cdef object _cold_lookup(_Segment seg, int64_t position, int64_t following, int64_t timestamp, int64_t start):
    """first_in on the batches MappedReads.cold_read would read with pread, read into a buffer kept for it (a new
    buffer a lookup would take fresh pages for); None when the mapping is to be read (touched there, or the batches
    are more than LOOKUP_READ_BYTES) or their records do not hold the answer."""
    global _scratch, _scratch_taken
    cdef object segment = seg.segment
    cdef int64_t end = _cold_end(seg, position, following)
    cdef bytearray buffer
    cdef bint kept = not _scratch_taken  # (the GIL makes the test and the take one step)
    cdef Py_ssize_t n = -2
    if end < 0:
        return None
    if kept:
        _scratch_taken = True
        if _scratch is None:
            _scratch = bytearray(LOOKUP_READ_BYTES)
        buffer = _scratch
    else:
        buffer = bytearray(end - position)
    try:
        if seg.direct:
            n = _read_direct(seg, buffer, &position, end, timestamp, start)
        if n == -2:
            n = segment.read_into(buffer, position, end)
        return first_in(memoryview(buffer), <const uint8_t *>PyByteArray_AS_STRING(buffer), 0, n, position,
                        timestamp, start, segment.log_path)
    finally:
        if kept:
            _scratch_taken = False


cdef Py_ssize_t _read_direct(_Segment seg, bytearray buffer, int64_t *position, int64_t end, int64_t timestamp,
                             int64_t start) except -3:
    """LogSegment.read_into of the bytes [position, end) with pread(2) on the descriptor of the segment's append handle
    (pinned meanwhile), with no Python call, less the first batch when its header shows first_in would pass it by
    (`position` then moves past it: one batch's bytes fewer are copied); the bytes read, or -2 when the segment has no
    append handle to read (the caller reads with read_into)."""
    cdef uint8_t *p = <uint8_t *>PyByteArray_AS_STRING(buffer)
    cdef int64_t at = position[0]
    cdef object source = seg.segment.log_path, handle
    cdef int fd
    seg.segment_lock.take()
    try:
        end = min(end, <int64_t>seg.appender.size)
        if end <= at:
            return 0
        handle = seg.appender.handle
        if handle is None or not handle.repin():
            return -2
        try:
            fd = handle.file.fileno()
            if end - at > HEADER_SIZE:
                _pread_exact(fd, p, HEADER_SIZE, at, source)
                at += passed_by(p, end - at, at, timestamp, start, source)
            _pread_exact(fd, p, end - at, at, source)
        finally:
            handle.__exit__(None, None, None)
    finally:
        seg.segment_lock.give()
    position[0] = at
    return end - at


cdef int _pread_exact(int fd, uint8_t *p, Py_ssize_t n, int64_t at, object source) except -1:
    """`n` bytes at `at` into `p`, the GIL let go meanwhile; a failed or short read is read_into's KafkaStorageError."""
    cdef Py_ssize_t got
    cdef int error
    with nogil:
        got = read_all(fd, p, <size_t>n, at)
        error = errno
    if got < 0:
        raise KafkaStorageError(f"cannot read: {OSError(error, os.strerror(error))}", file=source, position=at)
    if got != n:
        raise KafkaStorageError(f"short read of [{at}, {at + n})", file=source, position=at)
    return 0


cdef int64_t _cold_end(_Segment seg, int64_t position, int64_t following) except -2:
    """MappedReads.cold_read's choice, with the windows the span falls in at the mapping's address: the end of the
    batches from the indexed `position` to `following` (else the segment's end) to read with pread, or -1 to read
    them through the mapping (every window of it they fall in was touched by a read, or they are more than
    LOOKUP_READ_BYTES)."""
    cdef object mapping
    cdef int64_t size, end
    seg.segment_lock.take()
    try:
        size = seg.appender.size
        end = following if position < following <= size else size
        if not position < end <= position + LOOKUP_READ_BYTES:
            return -1
        mapping = seg.reads.map
        if (mapping is not None and len(mapping) >= size and seg.windows is not None
                and seg.windows.all_touched(mapping, position, end)):
            return -1
        return end
    finally:
        seg.segment_lock.give()
