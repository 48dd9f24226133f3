# cython: language_level=3
"""The producer's hot loop: Kafka's RecordAccumulator with its built-in partitioner (murmur2, sticky
partitions) and the futures send() returns (kafka-python's RecordFuture; AsyncRecordFuture, asyncio's Future protocol,
for engine.aio); the twin is engine.clients.accumulator.

Records are checked in C by the core's field checks (keys, values and header values as bytes or any C-contiguous
buffer, headers as a list or tuple of (str, value) tuples); one they do not take goes through the shared
validator engine.record.batch_format.check_send, which raises the twin's error. Each record is encoded straight
into its partition's open batch, a RecordsBuilder of the native core. The batch objects come from the
`batch_class` the producer layer gives.
Thread-safety: state changes hold the accumulator's lock (a pthread mutex, taken without the GIL only
when contended); no Python code runs while it is held.
"""
cimport cython
from cpython.bytes cimport PyBytes_CheckExact, PyBytes_FromStringAndSize
from cpython.list cimport PyList_AsTuple, PyList_CheckExact
from cpython.long cimport PyLong_CheckExact
from cpython.tuple cimport PyTuple_CheckExact, PyTuple_GET_ITEM, PyTuple_GET_SIZE
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t
from libc.stdlib cimport free, malloc
from posix.time cimport CLOCK_REALTIME, clock_gettime, timespec

from engine._native._codec cimport HEADER_SIZE, Field, Grow, HeaderRef
from engine._native._records cimport _byte_view
from engine._native._records_builder cimport RecordsBuilder, bytes_field, header_refs, new_builder, pair_refs
from engine._native._lock cimport (
    pthread_mutex_destroy,
    pthread_mutex_init,
    pthread_mutex_t,
    pthread_mutex_unlock,
    wait_for,
)

import asyncio as _asyncio
import random as _random_module

from engine.common.errors import InvalidRecordError
from engine.record import batch_format as bf
from engine.record.columns import column_buffers

cdef object _TS_MAX = bf.INT64_MAX

cdef enum:
    RECORD_OVERHEAD = 21  # engine.record.batch_format.RECORD_OVERHEAD

cdef uint8_t _EMPTY[1]


cdef uint32_t _murmur2(const uint8_t *p, Py_ssize_t n) noexcept nogil:
    cdef uint32_t m = 0x5bd1e995U, h = 0x9747b28cU ^ <uint32_t>n, k
    cdef Py_ssize_t i, tail = n & ~(<Py_ssize_t>3)
    for i in range(0, tail, 4):
        k = <uint32_t>p[i] | (<uint32_t>p[i + 1] << 8) | (<uint32_t>p[i + 2] << 16) | (<uint32_t>p[i + 3] << 24)
        k *= m
        k ^= k >> 24
        k *= m
        h = (h * m) ^ k
    if n & 3 == 3:
        h ^= <uint32_t>p[tail + 2] << 16
    if n & 3 >= 2:
        h ^= <uint32_t>p[tail + 1] << 8
    if n & 3 >= 1:
        h = (h ^ p[tail]) * m
    h ^= h >> 13
    h *= m
    h ^= h >> 15
    return h


def murmur2(data):
    """Kafka's Utils.murmur2 of `data` as a signed int32."""
    cdef const uint8_t[::1] v = _byte_view(data)
    return <int32_t>_murmur2(&v[0] if v.shape[0] else _EMPTY, v.shape[0])


def key_partitions(keys, int count):
    """Kafka's partition of each key of a binary column (a pyarrow binary array, or (data, int32 offsets[, validity
    bitmap])) among `count` partitions, toPositive(murmur2(key)) % count, as an int32 bytearray; -1 for a null key."""
    if count < 1:
        raise ValueError(f"count={count} must be >= 1")
    data, offsets, bits = column_buffers("keys", keys)
    cdef const uint8_t[::1] d = data if len(data) else b"\0"
    cdef const int32_t[::1] o = offsets
    cdef const uint8_t[::1] v = bits[0] if bits is not None else None
    cdef Py_ssize_t bit0 = bits[1] if bits is not None else 0
    cdef Py_ssize_t n = o.shape[0] - 1, i, j, start, end
    out = bytearray(4 * max(n, 0))
    cdef int32_t[::1] parts = memoryview(out).cast("i")
    for i in range(n):
        j = bit0 + i
        if v is not None and not (v[j >> 3] >> (j & 7)) & 1:
            parts[i] = -1
            continue
        start, end = o[i], o[i + 1]
        if start < 0 or end < start or end > len(data):
            raise InvalidRecordError(f"key {i}'s offsets [{start}, {end}) fall outside the column's data")
        parts[i] = <int32_t>((_murmur2(&d[start] if end > start else _EMPTY, end - start) & 0x7FFFFFFFU)
                             % <uint32_t>count)
    return out


cdef object _bind(f, tuple args, dict kwargs):
    """kafka-python's callback convention: f(*args, result, **kwargs)."""
    return (lambda result: f(*args, result, **kwargs)) if args or kwargs else f


@cython.no_gc
@cython.freelist(256)
cdef class RecordFuture:
    """kafka-python's FutureRecordMetadata: the outcome of one send()."""

    cdef readonly object batch
    cdef readonly Py_ssize_t index

    def __init__(self, batch, index):
        self.batch = batch
        self.index = index

    def get(self, timeout=None):
        """The record's metadata once its batch is appended (sending it now if it is pending); KafkaTimeoutError
        after `timeout` seconds."""
        return self.batch.wait(self.index, timeout)

    @property
    def is_done(self):
        return self.batch.done

    @property
    def value(self):
        return self.batch.result(self.index) if self.batch.done and self.batch.error is None else None

    @property
    def exception(self):
        return self.batch.error

    def succeeded(self):
        return self.batch.done and self.batch.error is None

    def failed(self):
        return self.batch.done and self.batch.error is not None

    def add_callback(self, f, *args, **kwargs):
        self.batch.on_done(self.index, _bind(f, args, kwargs), None)
        return self

    def add_errback(self, f, *args, **kwargs):
        self.batch.on_done(self.index, None, _bind(f, args, kwargs))
        return self

    def add_both(self, f, *args, **kwargs):
        g = _bind(f, args, kwargs)
        self.batch.on_done(self.index, g, g)
        return self


@cython.freelist(256)
cdef class AsyncRecordFuture:
    """The outcome of one engine.aio send(): asyncio's Future protocol over the record's batch (see
    engine.clients.accumulator.AsyncRecordFuture, its twin, for the owner it reports to)."""

    cdef readonly object batch
    cdef readonly Py_ssize_t index
    cdef object _owner
    cdef bint _cancelled
    cdef public object _asyncio_future_blocking

    def __init__(self, owner, batch, Py_ssize_t index):
        self._owner, self.batch, self.index = owner, batch, index
        self._asyncio_future_blocking = False

    def get_loop(self):
        return self._owner.loop

    def done(self):
        return self._cancelled or self.batch.done

    def cancelled(self):
        return self._cancelled

    def cancel(self, msg=None):
        if self._cancelled or self.batch.done:
            return False
        self._cancelled = True
        self._owner.run_callbacks(self)
        return True

    def result(self):
        self._check_done()
        return self.batch.result(self.index)

    def exception(self):
        self._check_done()
        return self.batch.error

    cdef _check_done(self):
        if self._cancelled:
            raise _asyncio.CancelledError()
        if not self.batch.done:
            raise _asyncio.InvalidStateError("the record is not appended yet")

    def add_done_callback(self, fn, *, context=None):
        if self._cancelled or self.batch.done:
            self._owner.loop.call_soon(fn, self, context=context)
        else:
            self._owner.waiting[self.batch].append((self, fn, context))

    def remove_done_callback(self, fn):
        return self._owner.remove_callback(self, fn)

    def __await__(self):
        if not (self._cancelled or self.batch.done):
            self._asyncio_future_blocking = True
            yield self
        return self.result()


cdef class _Topic:
    cdef Py_ssize_t count, limit, cap, sticky, sticky_bytes
    cdef list open
    cdef list builders   # the open batches' RecordsBuilders (C-level access on the hot path)
    cdef list all
    cdef Py_ssize_t *sizes

    def __dealloc__(self):
        free(self.sizes)


cdef class RecordAccumulator:
    """Kafka's RecordAccumulator with its built-in partitioner (see engine.clients.accumulator, its twin)."""

    cdef Py_ssize_t _batch_size, _max_request
    cdef object _lookup, _drain, _on_full, _on_open, _clock, _partitioner, _random
    cdef dict _topics
    cdef list _sealed
    cdef pthread_mutex_t _lock
    cdef bint _lock_made

    def __cinit__(self):
        if pthread_mutex_init(&self._lock, NULL):
            raise MemoryError()
        self._lock_made = True

    def __dealloc__(self):
        if self._lock_made:
            pthread_mutex_destroy(&self._lock)

    def __init__(self, *, batch_size, max_request_size, lookup, drain, on_full, on_open=None, clock=None,
                 partitioner=None, seed=None):
        self._batch_size = batch_size
        self._max_request = max_request_size
        self._lookup, self._drain, self._on_full, self._on_open = lookup, drain, on_full, on_open
        self._clock, self._partitioner = clock, partitioner
        self._random = _random_module.Random(seed)
        self._batch_class = type(self).batch_class
        self._topics = {}
        self._sealed = []

    cdef int64_t _now_ms(self) except? -1:
        cdef timespec ts
        if self._clock is not None:
            return self._clock.time_ms()
        clock_gettime(CLOCK_REALTIME, &ts)
        return <int64_t>ts.tv_sec * 1000 + ts.tv_nsec // 1000000
    cdef _Topic _topic(self, topic):
        cdef _Topic t = <_Topic>self._topics.get(topic)
        cdef Py_ssize_t i
        if t is not None:
            return t
        count, max_message = self._lookup(topic)  # outside the lock: it may take the engine's
        t = _Topic.__new__(_Topic)
        t.count = count
        t.limit = min(self._max_request, max_message)
        t.cap = min(self._batch_size, t.limit)
        t.open = [None] * t.count
        t.builders = [None] * t.count
        t.all = list(range(t.count))
        t.sticky = -1
        t.sticky_bytes = 0
        t.sizes = <Py_ssize_t *>malloc(t.count * sizeof(Py_ssize_t))
        if t.sizes == NULL:
            raise MemoryError()
        for i in range(t.count):
            t.sizes[i] = 0
        wait_for(&self._lock)
        t = <_Topic>self._topics.setdefault(topic, t)
        pthread_mutex_unlock(&self._lock)
        return t

    cdef Py_ssize_t _fixed_partition(self, _Topic t, topic, key, const Field *kf, partition) except -2:
        """The partition an explicit choice, the custom partitioner or the key gives; -1 for sticky."""
        if partition is None and self._partitioner is not None:
            if key is not None and not PyBytes_CheckExact(key):
                key = PyBytes_FromStringAndSize(<const char *>kf.p, kf.n)  # the partitioner gets bytes, as in the twin
            partition = self._partitioner(key, t.all, t.all)
        if partition is not None:
            if type(partition) is not int or not 0 <= partition < t.count:
                raise bf.bad_partition(topic, partition, t.count)
            return partition
        if kf.n >= 0:
            return <int64_t>(_murmur2(kf.p, kf.n) & 0x7fffffff) % t.count
        return -1

    cdef Py_ssize_t _sticky(self, _Topic t) except -1:
        if t.sticky < 0:
            t.sticky = self._random.randrange(t.count)
        return t.sticky

    cdef void _seal(self, _Topic t, Py_ssize_t p):
        self._sealed.append(t.open[p])
        t.open[p] = t.builders[p] = None

    def send(self, topic, value=None, key=None, headers=None, partition=None, timestamp_ms=None):
        """Add one record; returns its future (see engine.clients.accumulator)."""
        cdef int flags = 0
        cdef RecordFuture f = RecordFuture.__new__(RecordFuture)
        f.batch = self._add(topic, value, key, headers, partition, timestamp_ms, &flags, &f.index)
        if flags:
            self._notify(flags)
        return f

    def send_async(self, owner, topic, value=None, key=None, headers=None, partition=None, timestamp_ms=None):
        """send() for engine.aio: returns an AsyncRecordFuture reporting to `owner`, whose `track(batch)` is called
        once for each batch this opens, before any batch is pushed out."""
        cdef int flags = 0
        cdef AsyncRecordFuture f = AsyncRecordFuture.__new__(AsyncRecordFuture)
        f.batch = self._add(topic, value, key, headers, partition, timestamp_ms, &flags, &f.index)
        f._owner = owner
        f._asyncio_future_blocking = False
        if flags:
            if flags & 1:
                owner.track(f.batch)
            self._notify(flags)
        return f

    def send_many(self, topic, records, partition=None):
        """Add (key, value) or (key, value, headers, timestamp_ms) records without futures; returns
        (batch, first index, last index) for each batch they went into, in order."""
        cdef int flags = 0
        cdef Py_ssize_t index
        cdef dict spans = {}
        cdef list span
        cdef object batch
        try:
            for rec in records:
                if PyTuple_CheckExact(rec) and PyTuple_GET_SIZE(rec) == 2:
                    batch = self._add(topic, <object>PyTuple_GET_ITEM(rec, 1), <object>PyTuple_GET_ITEM(rec, 0), None,
                                      partition, None, &flags, &index)
                else:
                    key, value, headers, ts = (rec if PyTuple_CheckExact(rec) and PyTuple_GET_SIZE(rec) == 4
                                               else bf.sent_fields(rec))
                    batch = self._add(topic, value, key, headers, partition, ts, &flags, &index)
                span = spans.get(id(batch))
                if span is None:
                    spans[id(batch)] = [batch, index, index]
                else:
                    span[2] = index
        finally:
            if flags:
                self._notify(flags)
        return [tuple(span) for span in spans.values()]

    cdef _notify(self, int flags):
        if flags & 1 and self._on_open is not None:
            self._on_open()
        if flags & 2:
            self._on_full()

    cdef object _add(self, topic, value, key, headers, partition, timestamp_ms, int *flags, Py_ssize_t *index):
        """Check and append one record; returns its batch, sets its index and ORs flags (1 opened, 2 full)."""
        cdef Field kf, vf
        cdef Grow refs
        cdef list keep = None  # the views of buffers that are not bytes, held while the record is copied
        refs.data, refs.len, refs.cap = NULL, 0, 0
        try:
            if PyList_CheckExact(headers):
                headers = PyList_AsTuple(headers)  # a snapshot: the caller's list may change while we wait for the lock
            if not (headers is None and (value is None or PyBytes_CheckExact(value))
                    and (key is None or PyBytes_CheckExact(key))):
                keep = []  # only plain bytes (and no headers) leave it unused
            if (bytes_field(value, &vf, keep) or bytes_field(key, &kf, keep) or header_refs(headers, &refs, keep)
                    or not (timestamp_ms is None or PyLong_CheckExact(timestamp_ms)
                            and 0 <= timestamp_ms <= _TS_MAX)):
                value, key, headers, _, timestamp_ms = bf.check_send(value, key, headers, timestamp_ms)
                if keep is None:
                    keep = []
                refs.len = 0
                bytes_field(value, &vf, keep)
                bytes_field(key, &kf, keep)
                if headers:
                    pair_refs(headers, &refs)
            return self._append(topic, key, &kf, &vf, <HeaderRef *>refs.data, refs.len // sizeof(HeaderRef),
                                partition, timestamp_ms, flags, index)
        finally:
            free(refs.data)

    cdef object _append(self, topic, key, const Field *kf, const Field *vf, const HeaderRef *headers,
                        Py_ssize_t hcount, partition, timestamp_ms, int *flags, Py_ssize_t *index):
        """Append one checked record to its partition's open batch (opening one if needed)."""
        cdef Py_ssize_t size = RECORD_OVERHEAD, p, fixed, i
        cdef _Topic t
        cdef bint sticky
        cdef int64_t ts
        cdef object batch, spare = None
        size += (kf.n if kf.n > 0 else 0) + (vf.n if vf.n > 0 else 0)
        for i in range(hcount):
            size += headers[i].key.n + (headers[i].value.n if headers[i].value.n > 0 else 0) + 10
        ts = self._now_ms() if timestamp_ms is None else timestamp_ms
        t = self._topic(topic)
        if size + HEADER_SIZE > t.limit:
            raise bf.record_too_large(size + HEADER_SIZE, t.limit, topic)
        fixed = self._fixed_partition(t, topic, key, kf, partition)
        sticky = fixed < 0
        while True:  # build a batch outside the lock if one may be needed, then re-check under it
            wait_for(&self._lock)
            try:
                p = self._sticky(t) if sticky else fixed
                batch = t.open[p]
                if batch is not None and t.sizes[p] + size > t.cap:
                    self._seal(t, p)
                    batch = None
                    flags[0] |= 2
                if batch is None and spare is not None and spare.partition == p:
                    batch, spare = spare, None
                    t.open[p] = batch
                    t.builders[p] = batch.records
                    t.sizes[p] = HEADER_SIZE
                    flags[0] |= 1
                if batch is not None:
                    index[0] = (<RecordsBuilder>t.builders[p]).add(kf, vf, headers, hcount, ts)
                    t.sizes[p] += size
                    if sticky:
                        t.sticky_bytes += size
                        if t.sticky_bytes >= self._batch_size:
                            t.sticky = -1
                            t.sticky_bytes = 0
                    if t.sizes[p] >= t.cap:
                        self._seal(t, p)
                        flags[0] |= 2
                    return batch
            finally:
                pthread_mutex_unlock(&self._lock)
            spare = self._batch_class(topic, p, self._now_ms(), self._drain, new_builder(t.cap))

    def seal(self, batch):
        """Seal `batch` if it is still open."""
        cdef _Topic t = <_Topic>self._topics.get(batch.topic)
        wait_for(&self._lock)
        if t is not None and t.open[batch.partition] is batch:
            self._seal(t, batch.partition)
        pthread_mutex_unlock(&self._lock)

    def seal_all(self):
        cdef _Topic t
        cdef Py_ssize_t p
        wait_for(&self._lock)
        for t in self._topics.values():
            for p in range(t.count):
                if t.open[p] is not None:
                    self._seal(t, p)
        pthread_mutex_unlock(&self._lock)

    def seal_expired(self, int64_t now_ms, int64_t linger_ms):
        """Seal the open batches at least `linger_ms` old; the next expiry time, or -1 if none is open."""
        cdef _Topic t
        cdef Py_ssize_t p
        cdef int64_t nxt = -1, created
        wait_for(&self._lock)
        try:
            for t in self._topics.values():
                for p in range(t.count):
                    b = t.open[p]
                    if b is None:
                        continue
                    created = b.created_ms
                    if now_ms - created >= linger_ms:
                        self._seal(t, p)
                    elif nxt < 0 or created + linger_ms < nxt:
                        nxt = created + linger_ms
        finally:
            pthread_mutex_unlock(&self._lock)
        return nxt

    def take_sealed(self):
        """The sealed batches in sealing order (the accumulator forgets them)."""
        wait_for(&self._lock)
        out, self._sealed = self._sealed, []
        pthread_mutex_unlock(&self._lock)
        return out

    def forget_topic(self, topic):
        """Drop a topic's cached layout (it was deleted or recreated); its open batches are sealed first."""
        cdef _Topic t
        wait_for(&self._lock)
        t = <_Topic>self._topics.pop(topic, None)
        if t is not None:
            self._sealed.extend([b for b in t.open if b is not None])
        pthread_mutex_unlock(&self._lock)
