# cython: language_level=3
"""The native twin of segments.segment_appender: a segment's roll check, `.log` write and index cadence in one
call per append, writing the same bytes and index entries as the Python twin (see that module for the layout,
the crash policy and the thread-safety).

The segment owns the files, the locks and the indexes (segments.segment); this appender keeps the counters and
reaches them through the segment's methods. When the segment's file system does its own writes (a plain
segments.fs.FileSystem: `direct_writes()`), the batches go to the pooled handle's descriptor with one writev(2)
and the GIL released; otherwise (fault injection, tests) through the file system's `write`/`writev`. A new
index entry is added to the index's buffered entries (segments.index: `_pending`, `entries`, `_last`, under
its lock) when the index can take it as it is; any other case, and every entry under a file system that injects
faults, goes through the segment's Python method. The locks it takes (the log's, the segment's, the indexes', the
descriptor pool's) are engine._native._lock's, as segments.fs.new_lock makes them with the native core loaded: it
takes them with C calls (a lock of another type is a TypeError when the appender first meets it).
`start_writeback` is the file-system seam's writeback hint (segments.fs.FileSystem.start_writeback).
"""
cimport cython
from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_CheckBuffer, PyObject_GetBuffer
from cpython.bytes cimport PyBytes_FromStringAndSize
from cpython.bytearray cimport PyByteArray_AS_STRING, PyByteArray_CheckExact, PyByteArray_GET_SIZE, PyByteArray_Resize
from cpython.list cimport PyList_CheckExact, PyList_GET_ITEM, PyList_GET_SIZE
from cpython.tuple cimport PyTuple_CheckExact
from libc.errno cimport EINTR, errno
from libc.stdint cimport INT32_MAX, int16_t, int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t
from libc.stdlib cimport free, malloc
from libc.string cimport memcpy
from posix.uio cimport iovec, writev

from engine._native._codec cimport HEADER_SIZE
from engine._native._log_validator cimport leader_batch, lone_batch_size
from engine._native._records cimport replica_batch
from engine._native._lock cimport Lock

import logging
import os

from engine.common.errors import KafkaStorageError

cdef extern from "crc32c_impl.h":  # its inline byte-order helpers only
    uint16_t kl_be16(const uint8_t *p) nogil
    uint32_t kl_be32(const uint8_t *p) nogil
    uint64_t kl_be64(const uint8_t *p) nogil
    void kl_put32(uint8_t *p, uint32_t v) nogil
    void kl_put64(uint8_t *p, uint64_t v) nogil

cdef extern from *:
    """
    #if defined(__linux__)
    #include <fcntl.h>
    static void kl_start_writeback(int fd) { (void)sync_file_range(fd, 0, 0, SYNC_FILE_RANGE_WRITE); }
    #else
    static void kl_start_writeback(int fd) { (void)fd; }
    #endif
    """
    void kl_start_writeback(int fd) nogil

cdef Py_ssize_t IOV_BATCH = 512     # iovecs per writev call (below every platform's IOV_MAX)
log = logging.getLogger("kafkalog.segment")


cdef int _write_all(int fd, iovec *iov, Py_ssize_t count) except -1:
    """writev(2) the iovecs in order, resuming after short writes, with the GIL released; OSError on failure."""
    cdef Py_ssize_t first = 0, n
    cdef ssize_t done
    cdef int err = 0
    while first < count:
        n = min(count - first, IOV_BATCH)
        with nogil:
            done = writev(fd, iov + first, <int>n)
            if done < 0:
                err = errno
        if done < 0:
            if err == EINTR:
                continue
            raise OSError(err, os.strerror(err))
        while first < count and <size_t>done >= iov[first].iov_len:
            done -= iov[first].iov_len
            first += 1
        if first < count and done:
            iov[first].iov_base = <char *>iov[first].iov_base + done
            iov[first].iov_len -= done
    return 0


cdef int _write_buffers(int fd, object data, Py_ssize_t size) except -1:
    """Write a buffer, or a list of buffers in order, to `fd`; `size` is their total length."""
    cdef bint is_list = PyList_CheckExact(data)
    cdef Py_ssize_t count = PyList_GET_SIZE(data) if is_list else 1
    cdef Py_buffer *views = <Py_buffer *>malloc(count * sizeof(Py_buffer))
    cdef iovec *iov = <iovec *>malloc(count * sizeof(iovec))
    cdef Py_ssize_t held = 0, i, total = 0
    if views == NULL or iov == NULL:
        free(views)
        free(iov)
        raise MemoryError()
    try:
        for i in range(count):
            PyObject_GetBuffer(<object>PyList_GET_ITEM(data, i) if is_list else data, &views[i], PyBUF_SIMPLE)
            held += 1
            iov[i].iov_base = views[i].buf
            iov[i].iov_len = views[i].len
            total += views[i].len
        if total != size:
            raise ValueError(f"the buffers hold {total} bytes, not {size}")
        _write_all(fd, iov, count)
    finally:
        for i in range(held):
            PyBuffer_Release(&views[i])
        free(views)
        free(iov)
    return 0


cdef int _add_entry(object index, object pending, int64_t entries, const uint8_t *entry, Py_ssize_t entry_size,
                    object last, Py_ssize_t pending_entries) except -1:
    """Add a packed entry to an index's buffered entries (`pending`, a bytearray; its lock held, `entries` its
    count); written once `pending_entries` (the index's PENDING_ENTRIES) are buffered (a failed write stays
    buffered, logged: the index is only sparser until it goes through)."""
    cdef Py_ssize_t n = PyByteArray_GET_SIZE(pending)
    PyByteArray_Resize(pending, n + entry_size)
    memcpy(PyByteArray_AS_STRING(pending) + n, entry, entry_size)
    index.last = last
    index.entries = entries + 1
    if n + entry_size >= pending_entries * entry_size:
        try:
            index.write_pending()
        except (OSError, KafkaStorageError) as exc:
            log.error("could not write the index entries of %s: %s", index.path, exc)
    return 0


@cython.final
cdef class SegmentAppender:
    """The counters a segment's appends keep, and the appends themselves (the segment delegates to it)."""

    cdef public object segment
    cdef public int64_t size, created_ms, roll_ms, bytes_since_last_index_entry
    cdef public object max_ts, rolling_ts, cut_pending, handle
    cdef public bint rolling_ts_loaded
    cdef int64_t base_offset, interval
    cdef bint direct
    cdef Lock _seg_lock                         # the segment's lock (it never changes)
    cdef object _pinned                         # the handle last pinned
    cdef Lock _pin_lock                         # its lock
    cdef int _fd                                # its descriptor (direct writes only)
    cdef object _oi, _ti                        # the opened indexes (see _indexes) and their locks
    cdef Lock _oi_lock, _ti_lock
    cdef Py_ssize_t _pending_entries

    def __init__(self, segment, int64_t size, int64_t created_ms, int64_t roll_ms):
        self.segment = segment
        self.size = size
        self.created_ms = created_ms
        self.roll_ms = roll_ms
        self.bytes_since_last_index_entry = 0
        self.max_ts = None
        self.rolling_ts = None
        self.rolling_ts_loaded = False
        self.cut_pending = None
        self.handle = None
        self.base_offset = segment.base_offset
        self.interval = segment.config.index_interval_bytes
        self.direct = segment.fs.direct_writes()
        self._seg_lock = segment.lock
        self._pinned = None
        self._oi = self._ti = None

    # --- the roll check ------------------------------------------------------------------------
    cdef bint _must_roll(self, int64_t incoming_bytes, int64_t incoming_max_ts, int64_t incoming_last_offset,
                         object clock, int64_t now_ms, int64_t segment_bytes) except -1:
        """Kafka's LogSegment.shouldRoll; the clock (when given) is read only if the time check needs it."""
        cdef object seg = self.segment
        cdef object rolling
        cdef object oi, ti
        if self.size > segment_bytes - incoming_bytes:
            return True
        if not 0 <= incoming_last_offset - self.base_offset <= INT32_MAX:
            return True
        if self.size > 0:
            rolling = self.rolling_ts if self.rolling_ts_loaded else seg.rolling_timestamp()
            if rolling is not None and rolling >= 0:
                if incoming_max_ts - <int64_t>rolling > self.roll_ms:
                    return True
            else:
                if clock is not None:
                    now_ms = clock.time_ms()
                if now_ms - self.created_ms > self.roll_ms:
                    return True
        if not self._indexes():
            return seg.indexes_full()  # (a new segment's: told without opening an index not made yet)
        oi, ti = self._oi, self._ti
        return oi.entries >= oi.max_entries or ti.entries >= ti.max_entries - 1

    cdef bint _indexes(self) except -1:
        """Whether the segment has opened both indexes; once it has, they are kept here with their locks' methods
        (a segment opens each index once and never replaces it)."""
        cdef object opened, oi, ti
        if self._oi is None:
            opened = self.segment.opened_indexes()
            if opened is None:
                return False
            oi, ti = opened
            self._oi_lock, self._ti_lock = oi.lock, ti.lock
            self._pending_entries = oi.PENDING_ENTRIES
            self._oi, self._ti = oi, ti
        return True

    def should_roll(self, int64_t incoming_bytes, int64_t incoming_max_ts, int64_t incoming_last_offset,
                    int64_t now_ms, int64_t segment_bytes):
        """Kafka's LogSegment.shouldRoll."""
        return self._must_roll(incoming_bytes, incoming_max_ts, incoming_last_offset, None, now_ms, segment_bytes)

    def try_append(self, int64_t largest_offset, int64_t largest_timestamp, int64_t offset_of_max_timestamp, data,
                   Py_ssize_t size, batches, int64_t segment_bytes, clock):
        """Append, unless the segment must roll first (False, nothing written)."""
        if self._must_roll(size, largest_timestamp, largest_offset, clock, 0, segment_bytes):
            return False
        self._append(largest_offset, largest_timestamp, offset_of_max_timestamp, data, size, batches, NULL, 0)
        return True

    def append_batch(self, data, int64_t first_offset, int32_t leader_epoch, int64_t log_append_time,
                     Py_ssize_t max_batch_bytes, source, int64_t segment_bytes, clock, int64_t producer_id=-1,
                     int32_t producer_epoch=-1, int32_t base_sequence=-1, bint transactional=False):
        """A leader's append of one batch in one call, when its producer state needs no check (no producer id) or
        is the one given (`producer_id` >= 0: the batch must carry that id, `producer_epoch`, `base_sequence` and
        the `transactional` flag, and not be a control batch): the leader's checks of the batch
        (engine._native._log_validator), offsets from `first_offset` and the leader epoch, the roll check and the write.
        Returns (next offset, max timestamp, offset of the max timestamp); None, with nothing done, when `data` is
        not one such batch or the segment must roll first (the log's general path then checks, rolls and
        appends)."""
        cdef Py_buffer buf
        cdef int64_t out[2]
        PyObject_GetBuffer(data, &buf, PyBUF_SIMPLE)
        try:
            if not self._append_lone(data, <const uint8_t *>buf.buf, buf.len, first_offset, leader_epoch,
                                     log_append_time, max_batch_bytes, source, segment_bytes, clock, producer_id,
                                     producer_epoch, base_sequence, transactional, out):
                return None
            return out[0] + 1, out[1], out[0]
        finally:
            PyBuffer_Release(&buf)

    cdef bint _append_lone(self, object data, const uint8_t *p, Py_ssize_t n, int64_t first_offset,
                           int32_t leader_epoch, int64_t log_append_time, Py_ssize_t max_batch_bytes, object source,
                           int64_t segment_bytes, object clock, int64_t producer_id, int32_t producer_epoch,
                           int32_t base_sequence, bint transactional, int64_t *out) except -1:
        """append_batch on `data`'s bytes (`p`, `n`): whether it appended; `out` then holds the batch's last
        offset and max timestamp (the offset of that timestamp is the last offset)."""
        cdef uint8_t header[HEADER_SIZE]
        cdef iovec iov[2]
        cdef int64_t last, max_ts
        if not lone_batch_size(p, n, producer_id, producer_epoch, base_sequence, transactional):
            return False
        last = first_offset + <int32_t>kl_be32(p + 23)
        max_ts = log_append_time if log_append_time >= 0 else <int64_t>kl_be64(p + 35)
        if self._must_roll(n, max_ts, last, clock, 0, segment_bytes):
            return False
        max_ts = leader_batch(p, n, 0, first_offset, leader_epoch, log_append_time, max_batch_bytes, False, source,
                              header)
        if self.direct:
            iov[0].iov_base, iov[0].iov_len = header, HEADER_SIZE
            iov[1].iov_base, iov[1].iov_len = <void *>(p + HEADER_SIZE), n - HEADER_SIZE
            self._append(last, max_ts, last, None, n, None, iov, 2)
        else:
            self._append(last, max_ts, last, [PyBytes_FromStringAndSize(<char *>header, HEADER_SIZE),
                                              memoryview(data)[HEADER_SIZE:]], n, None, NULL, 0)
        out[0], out[1] = last, max_ts
        return True

    # --- the append -----------------------------------------------------------------------------
    def append(self, int64_t largest_offset, int64_t largest_timestamp, int64_t offset_of_max_timestamp, data,
               size=None, batches=None):
        """Append whole batches (a buffer, or a list of buffers written in order with `size` bytes in all); index
        them as Kafka's LogSegment.append does: each batch in turn when `batches` gives their (last offset, size),
        else the whole append as one."""
        self._append(largest_offset, largest_timestamp, offset_of_max_timestamp, data,
                     len(data) if size is None else size, batches, NULL, 0)

    cdef int _append(self, int64_t largest_offset, int64_t largest_timestamp, int64_t offset_of_max, object data,
                     Py_ssize_t size, object batches, iovec *iov, int iovcnt, bint written=False) except -1:
        """The append: the bytes are `data` (a buffer or a list of them), or the iovecs when given (direct writes);
        `written`: they are at the segment's end already (the native replica fetcher wrote them), all but the write."""
        cdef object seg = self.segment
        cdef int64_t position, last, batch_size
        cdef Py_ssize_t i, n
        cdef object extent
        if not size:
            return 0
        self._seg_lock.take()
        try:
            position = self._start(largest_offset, largest_timestamp, size)
            if self.max_ts is None:
                seg.max_timestamp_and_offset()  # before the write: it may open the indexes
            if written:
                self.size = position + size
            else:
                self._write(data, size, position, iov, iovcnt)
            if largest_timestamp > <int64_t>self.max_ts[0]:
                self.max_ts = (largest_timestamp, offset_of_max)
            if batches is None:
                self._cadence(largest_offset, size, position)
            else:
                n = len(batches)
                for i in range(n):
                    extent = batches[i]
                    last, batch_size = extent
                    self._cadence(last, batch_size, position)
                    position += batch_size
        finally:
            self._seg_lock.give()
        return 0

    cdef int64_t _start(self, int64_t largest_offset, int64_t largest_timestamp, Py_ssize_t size) except -1:
        """The checks before a write (and the cut an earlier failed write left): the position it starts at."""
        cdef int64_t position
        if self.cut_pending is not None:
            self.segment.cut_failed_append()
        position = self.size
        if position == 0:
            self.rolling_ts, self.rolling_ts_loaded = largest_timestamp, True
        if not 0 <= largest_offset - self.base_offset <= INT32_MAX or position + size > INT32_MAX:
            self.segment.check_append_fits(largest_offset, position, size)
        return position

    cdef object _pin(self):
        """The last append handle pinned again, else the segment's new one. `_Handle.repin` and `__exit__` inline,
        with the handle's lock methods and descriptor kept from its first use: calling and looking them up costs
        ~0.7 µs an append, ~10% of a 16 KiB batch's."""
        cdef object handle = self.handle
        if handle is not None and handle is self._pinned:
            self._pin_lock.take()
            try:
                if not handle.evicted:
                    handle.pins += 1
                    return handle
            finally:
                self._pin_lock.give()
        elif handle is not None and handle.repin():  # taken by the segment's Python path since our last write
            self._remember(handle)
            return handle
        handle = self.segment.append_handle()
        if handle is not self._pinned:
            self._remember(handle)
        return handle

    cdef int _remember(self, object handle) except -1:
        self._pin_lock = handle.lock
        self._fd = handle.file.fileno() if self.direct else -1
        self._pinned = handle
        return 0

    cdef int _write(self, object data, Py_ssize_t size, int64_t position, iovec *iov, int iovcnt) except -1:
        cdef object seg = self.segment
        cdef object handle = self._pin()
        try:
            try:
                if iov != NULL:
                    _write_all(self._fd, iov, iovcnt)
                elif self.direct:
                    _write_buffers(self._fd, data, size)
                elif PyList_CheckExact(data):
                    seg.fs.writev(handle.file, data, size)
                else:
                    seg.fs.write(handle.file, data)
            finally:
                self._pin_lock.take()
                handle.pins -= 1
                self._pin_lock.give()
        except OSError as exc:
            seg.restore_after_failed_write(position)
            raise KafkaStorageError(f"append failed: {exc}", file=seg.log_path, position=position) from exc
        self.size = position + size  # the batches are in the log: nothing below may undo that
        return 0

    # --- the index cadence ------------------------------------------------------------------------
    cdef int _cadence(self, int64_t last, int64_t batch_size, int64_t position) except -1:
        if self.bytes_since_last_index_entry > self.interval:
            if not (self.direct and self._index_fast(last, position)):
                self.segment.add_index_entries(last, position)
            self.bytes_since_last_index_entry = 0
        self.bytes_since_last_index_entry += batch_size
        return 0

    cdef bint _index_fast(self, int64_t last, int64_t position) except -1:
        """Both index entries added to the indexes' buffers when they can take them as they are (False, nothing
        added, when an index is unopened, full, read-only or out of order: the Python path decides then)."""
        if not self._indexes() or not PyTuple_CheckExact(self.max_ts):
            return False
        oi, ti = self._oi, self._ti
        self._oi_lock.take()
        try:
            self._ti_lock.take()
            try:
                return self._add_entries(oi, ti, last - self.base_offset, position)
            finally:
                self._ti_lock.give()
        finally:
            self._oi_lock.give()

    cdef bint _add_entries(self, object oi, object ti, int64_t rel, int64_t position) except -1:
        """_index_fast with both indexes' locks held."""
        cdef object olast, tlast, opending, tpending
        cdef int64_t ts = self.max_ts[0], ts_rel = <int64_t>self.max_ts[1] - self.base_offset
        cdef int64_t last_ts = -1, last_rel = 0, oentries, tentries
        cdef bint add_time
        cdef uint8_t entry[12]
        if not (oi.writable and ti.writable) or not 0 <= rel <= INT32_MAX:
            return False
        opending, tpending = oi.pending, ti.pending
        if not (PyByteArray_CheckExact(opending) and PyByteArray_CheckExact(tpending)):
            return False
        oentries, olast = oi.entries, oi.last
        if oentries >= <int64_t>oi.max_entries or (oentries and (olast is None or rel <= <int64_t>olast[0])):
            return False
        tentries = ti.entries
        if tentries:
            tlast = ti.last
            if tlast is None:
                return False
            last_ts, last_rel = tlast[0], tlast[1]
            if ts_rel < last_rel or ts < last_ts:
                return False
        add_time = ts > last_ts
        if add_time and (tentries >= <int64_t>ti.max_entries - 1 or not 0 <= ts_rel <= INT32_MAX):
            return False
        kl_put32(entry, <uint32_t>rel)
        kl_put32(entry + 4, <uint32_t>position)
        _add_entry(oi, opending, oentries, entry, 8, (rel, position), self._pending_entries)
        if add_time:
            kl_put64(entry, <uint64_t>ts)
            kl_put32(entry + 8, <uint32_t>ts_rel)
            _add_entry(ti, tpending, tentries, entry, 12, (ts, ts_rel), self._pending_entries)
        return True


cdef class _OneCallAppend:
    """What the one-call appends of one UnifiedLog share: the log's state, its config as last read (re-read when the
    LocalLog's config object is replaced) and the active segment's appender (re-read when the active segment is)."""

    cdef object log, local, ps, epochs, clock, source, info, new_tuple
    cdef Lock _lock                             # the log's
    cdef object _config, _segment
    cdef SegmentAppender _appender              # None when the active segment's appender is not this module's
    cdef int64_t _segment_bytes, _flush_messages
    cdef Py_ssize_t _max_batch_bytes
    cdef bint _log_append_time, _compact, _checks, _bounded
    cdef int _target                            # the topic's codec, -1: the producer's (LogConfig.target_compression)

    def __init__(self, log, info_type):
        self.log, self.local, self.ps, self.epochs = log, log.local, log.producer_state, log.leader_epochs
        self.clock, self.source, self.info, self.new_tuple = log.clock, log.dir, info_type, tuple.__new__
        self._lock = log.lock
        self._config = self._segment = self._appender = None

    cdef int _configure(self, object config) except -1:
        self._segment_bytes, self._flush_messages = config.segment_bytes, config.flush_messages
        self._max_batch_bytes = config.max_message_bytes
        self._log_append_time = config.message_timestamp_type == "LogAppendTime"
        self._compact = config.compact
        self._checks, self._bounded = config.leader_checks, config.timestamp_bounds is not None
        self._target = config.target_compression[0]
        self._config = config
        return 0

    cdef SegmentAppender _active(self):
        """The active segment's appender (log's lock held), None when it is not this module's."""
        segment = self.local.active_segment
        if segment is not self._segment:
            appender = segment.appender
            self._appender = appender if type(appender) is SegmentAppender else None
            self._segment = segment
        return self._appender

    cdef int _appended(self, int64_t end) except -1:
        """LocalLog._appended: the LEO moved to `end`, and the flush that `flush.messages` asks for."""
        self.local.log_end_offset = end
        if end >= self._flush_messages and end - <int64_t>self.local.recovery_point >= self._flush_messages:
            self.local.flush()
        return 0

    cdef int _epoch_starts(self, int32_t leader_epoch, int64_t offset) except -1:
        """LeaderEpochCache.assign, whose common case (the latest epoch again, at or after its start) is a no-op."""
        entries = self.epochs.entries
        latest = entries[len(entries) - 1] if entries else None
        if latest is None or latest[0] != leader_epoch or latest[1] > offset:
            self.epochs.assign(leader_epoch, offset)
        return 0


@cython.final
cdef class LeaderAppender(_OneCallAppend):
    """The native twin of engine.log.leader_append.LeaderAppender (see that module for what the one-call append changes,
    its crash policy and its thread-safety): the same answers, with the log's state read and written from here."""

    def append(self, data, int32_t leader_epoch, bint client):
        """The append's AppendInfo, or None with nothing done when the general path must append `data`."""
        cdef object local = self.local, config = local.config, producer = None
        cdef Py_buffer buf
        cdef const uint8_t *p
        cdef int64_t first, end, append_time = -1, producer_id = -1
        cdef int64_t out[2]
        cdef int32_t epoch = -1, sequence = -1
        cdef bint transactional = False
        if config is not self._config:
            self._configure(config)
        if self._compact or not PyObject_CheckBuffer(data):
            return None
        PyObject_GetBuffer(data, &buf, PyBUF_SIMPLE)
        try:
            p = <const uint8_t *>buf.buf
            if buf.len > self._segment_bytes or buf.len < HEADER_SIZE:
                return None
            if self._checks and (self._bounded or (0 <= self._target != (p[22] & 0x07) and not (
                    (p[22] & 0x07) == 0 and p[22] & 0x20))):  # leader_append._stored_as_sent
                return None
            if <int64_t>kl_be64(p + 43) >= 0 and not client:
                return None
            self._lock.take()
            try:
                if self._log_append_time:
                    append_time = self.clock.time_ms()
                first = local.log_end_offset
                if <int64_t>kl_be64(p + 43) >= 0:
                    producer = self.ps.next_batch(data)
                    if producer is None:
                        return None
                    producer_id, epoch, sequence, transactional = producer
                if self._active() is None:
                    return None
                try:
                    if not self._appender._append_lone(data, p, buf.len, first, leader_epoch, append_time,
                                                       self._max_batch_bytes, self.source, self._segment_bytes,
                                                       self.clock, producer_id, epoch, sequence, transactional, out):
                        return None
                    end = out[0] + 1
                    self._appended(end)
                except OSError as exc:
                    raise self.log.storage_error("append", exc) from exc
                self._epoch_starts(leader_epoch, first)
                if producer is not None:
                    self.ps.append_next(producer, first, out[0], out[1])
                self.ps.map_end_offset = end
                return self.new_tuple(self.info, (first, out[0], out[1], out[0], append_time, 1, buf.len, False,
                                                  leader_epoch))
            finally:
                self._lock.give()
        finally:
            PyBuffer_Release(&buf)


@cython.final
cdef class FollowerAppender(_OneCallAppend):
    """The native twin of engine.log.follower_append.FollowerAppender (see that module for what the one-call append changes,
    its crash policy and its thread-safety): a replica's batches checked, written and accounted for from here."""

    def append(self, data):
        """UnifiedLog.append_as_follower's AppendInfo, or None with nothing done when the general path must append."""
        cdef object extents
        cdef Py_buffer buf
        cdef const uint8_t *p
        cdef Py_ssize_t n, pos, size, count = 0
        cdef int64_t first, last = -1, max_ts = -1, offset_of_max, ts
        if self.local.config is not self._config:
            self._configure(self.local.config)
        if not PyObject_CheckBuffer(data):
            return None
        PyObject_GetBuffer(data, &buf, PyBUF_SIMPLE)
        try:
            p, n = <const uint8_t *>buf.buf, buf.len
            if n == 0 or n > self._segment_bytes:
                return None
            first = offset_of_max = <int64_t>kl_be64(p) if n >= 8 else -1
            extents = []
            pos = 0
            while pos < n:  # UnifiedLog._validate and the order check, on the batch headers
                size = replica_batch(p + pos, n - pos)
                if size < 0 or size > self._max_batch_bytes or p[pos + 22] & 0x20:  # a marker: the general path
                    return None
                if pos and <int64_t>kl_be64(p + pos) <= last:
                    return None
                last = <int64_t>kl_be64(p + pos) + <int32_t>kl_be32(p + pos + 23)
                ts = <int64_t>kl_be64(p + pos + 35)
                if ts > max_ts:
                    max_ts, offset_of_max = ts, last
                extents.append((last, size))
                count += 1
                pos += size
            self._lock.take()
            try:
                if first < <int64_t>self.local.log_end_offset or self._active() is None:
                    return None
                try:
                    if self._appender._must_roll(n, max_ts, last, self.clock, 0, self._segment_bytes):
                        return None
                    self._appender._append(last, max_ts, offset_of_max, data, n, extents, NULL, 0)
                    self._appended(last + 1)
                except OSError as exc:
                    raise self.log.storage_error("append", exc) from exc
                self._account(p, n)
                self.ps.map_end_offset = last + 1
                return self.new_tuple(self.info, (first, last, max_ts, offset_of_max, -1, count, n, False, -1))
            finally:
                self._lock.give()
        finally:
            PyBuffer_Release(&buf)

    def account(self, take):
        """The batches a native replica fetcher wrote at the active segment's end, whose headers `take()` gives (the
        link's, called with the log's lock held, so that accounts follow one another in the order of the writes):
        everything `append` does for them but the write; the bytes accounted. The link was made with the log and
        segment as the leader's, so none of them makes the segment roll (engine.replication.replica_fetcher)."""
        cdef object headers, extents = []
        cdef const uint8_t *p
        cdef Py_ssize_t n, pos, size, total = 0
        cdef int64_t first, last = -1, max_ts = -1, offset_of_max = -1, ts
        self._lock.take()
        try:
            headers = take()
            n = len(headers)
            if not n:
                return 0
            p = <const uint8_t *>(<bytes>headers)
            first = <int64_t>kl_be64(p)
            if self.local.config is not self._config:
                self._configure(self.local.config)
            if first != <int64_t>self.local.log_end_offset or self._active() is None:
                raise ValueError(f"the linked batches from {first} do not follow the log end "
                                 f"{self.local.log_end_offset} of {self.source}")
            for pos in range(0, n, HEADER_SIZE):
                size = 12 + <int32_t>kl_be32(p + pos + 8)
                last = <int64_t>kl_be64(p + pos) + <int32_t>kl_be32(p + pos + 23)
                ts = <int64_t>kl_be64(p + pos + 35)
                if ts > max_ts:
                    max_ts, offset_of_max = ts, last
                extents.append((last, size))
                total += size
            self._appender._append(last, max_ts, offset_of_max, None, total, extents, NULL, 0, True)
            self._appended(last + 1)
            self._account(p, n, HEADER_SIZE)
            self.ps.map_end_offset = last + 1
            return total
        finally:
            self._lock.give()

    cdef int _account(self, const uint8_t *p, Py_ssize_t n, Py_ssize_t stride=0) except -1:
        """Each appended batch in turn: its leader epoch, and its producer's state when it has a producer id (`p`
        holds the batches, or with a `stride`, their headers that far apart)."""
        cdef Py_ssize_t pos = 0
        cdef int64_t base
        while pos < n:
            base = <int64_t>kl_be64(p + pos)
            self._epoch_starts(<int32_t>kl_be32(p + pos + 12), base)
            if <int64_t>kl_be64(p + pos + 43) >= 0:
                self.ps.update_data(<int64_t>kl_be64(p + pos + 43), <int16_t>kl_be16(p + pos + 51),
                                    <int32_t>kl_be32(p + pos + 53), base, <int32_t>kl_be32(p + pos + 23),
                                    <int64_t>kl_be64(p + pos + 35), bool(p[pos + 22] & 0x10))
            pos += stride or 12 + <int32_t>kl_be32(p + pos + 8)  # the offset and size fields, then the batch
        return 0


def start_writeback(int fd) -> None:
    """Begin writing the dirty pages of the file at `fd` to its device and return without waiting for them (Linux's
    sync_file_range with SYNC_FILE_RANGE_WRITE; nothing elsewhere). A hint: only fsync makes the bytes durable, and
    what the device refuses is that fsync's error to report."""
    with nogil:
        kl_start_writeback(fd)
