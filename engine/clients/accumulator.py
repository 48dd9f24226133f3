"""The producer's record accumulator (Kafka's RecordAccumulator + BuiltInPartitioner): the pure-Python
twin of the native one (engine._native._accumulator) and the batch type both share; the twin "accumulator" of
engine.record.twins, which picks the one the codec's implementation says.

`RecordAccumulator.send()` validates one record, picks its partition (explicit, a custom
partitioner, `toPositive(murmur2(key)) % n`, or the sticky partition for a null key, which moves
on after `batch_size` bytes), appends it to that partition's open `ProducerBatch` and returns a
`RecordFuture`. A batch is sealed when the next record would not fit (`batch_size`, capped by
`max_request_size` and the topic's `max.message.bytes`), when its linger expires
(`seal_expired`), or when asked (`seal`, `seal_all`); sealed batches wait, in sealing order, in
`take_sealed()`, and `on_full()` is called after a full batch is sealed. `send_async()` is send() for engine.aio:
its `AsyncRecordFuture` keeps asyncio's Future protocol. Records are encoded into
their batch's RecordsBuilder as they are added (validation: engine.record.batch_format.check_send).
Thread-safety: both accumulators take a lock around their state (the native one a PyThread lock,
running no Python code while it holds it), so sends from many threads are safe. A batch is completed
once, by whichever thread appended it; callbacks run in that thread.
"""
from __future__ import annotations

import asyncio
import logging
import random
import threading
import time
from array import array
from types import SimpleNamespace

from engine.common.errors import InvalidRecordError
from engine.common.structs import RecordMetadata, TopicPartition
from engine.record import batch_format as bf
from engine.record import twins
from engine.record.columns import column_buffers
from engine.record.records_builder import RecordsBuilder

log = logging.getLogger("kafkalog.producer")


class ProducerBatch:
    """Records bound for one partition, appended together; their futures resolve when it completes."""

    __slots__ = ("topic", "partition", "records", "created_ms", "drain", "done", "base_offset",
                 "log_append_time", "error", "_waiters")

    def __init__(self, topic: str, partition: int, created_ms: int, drain, records) -> None:
        """`records` is a RecordsBuilder of the active codec (records are encoded as they are added)."""
        self.topic, self.partition, self.created_ms, self.drain = topic, partition, created_ms, drain
        self.records = records
        self.done = False
        self.base_offset = -1
        self.log_append_time = -1
        self.error: BaseException | None = None
        self._waiters: list | None = None

    def complete(self, base_offset: int, log_append_time: int = -1) -> None:
        """The batch was appended at `base_offset` (-1 when acks=0)."""
        self.base_offset, self.log_append_time = base_offset, log_append_time
        self._finish()

    def fail(self, error: BaseException) -> None:
        self.error = error
        self._finish()

    def _finish(self) -> None:
        self.done = True
        waiters, self._waiters = self._waiters, None
        for index, callback, errback in waiters or ():
            self._notify(index, callback, errback)

    def _notify(self, index: int, callback, errback) -> None:
        try:
            if self.error is None:
                if callback is not None:
                    callback(self.result(index))
            elif errback is not None:
                errback(self.error)
        except Exception:
            log.exception("a producer callback raised")

    def result(self, index: int) -> RecordMetadata:
        """Record `index`'s metadata (the batch must be done); raises the batch's error."""
        if self.error is not None:
            raise self.error
        offset = self.base_offset + index if self.base_offset >= 0 else -1
        ts, key_size, value_size, header_size = self.records.info(index)
        return RecordMetadata(self.topic, self.partition, TopicPartition(self.topic, self.partition), offset,
                              ts if self.log_append_time < 0 else self.log_append_time, None, key_size, value_size,
                              header_size)

    def wait(self, index: int, timeout: float | None = None) -> RecordMetadata:
        """Push the batch out if it is still pending (waiting at most `timeout` seconds), then return record
        `index`'s metadata."""
        if not self.done:
            self.drain(self, timeout)
        return self.result(index)

    def on_done(self, index: int, callback, errback) -> None:
        """Call `callback(metadata)` or `errback(error)` once the batch is done (now, if it is)."""
        if self.done:
            self._notify(index, callback, errback)
        else:
            if self._waiters is None:
                self._waiters = []
            self._waiters.append((index, callback, errback))


def bind(f, args, kwargs):
    """kafka-python's callback convention: f(*args, result, **kwargs)."""
    return (lambda result: f(*args, result, **kwargs)) if args or kwargs else f


def murmur2(data) -> int:
    """Kafka's Utils.murmur2 of `data` as a signed int32."""
    data = bytes(data)
    m, n = 0x5BD1E995, len(data)
    h = (0x9747B28C ^ n) & 0xFFFFFFFF
    tail = n & ~3
    for i in range(0, tail, 4):
        k = int.from_bytes(data[i:i + 4], "little")
        k = (k * m) & 0xFFFFFFFF
        k ^= k >> 24
        k = (k * m) & 0xFFFFFFFF
        h = ((h * m) & 0xFFFFFFFF) ^ k
    rest = n & 3
    if rest == 3:
        h ^= data[tail + 2] << 16
    if rest >= 2:
        h ^= data[tail + 1] << 8
    if rest >= 1:
        h = ((h ^ data[tail]) * m) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * m) & 0xFFFFFFFF
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def key_partitions(keys, count: int) -> bytearray:
    """Kafka's partition of each key of a binary column (a pyarrow binary array, or (data, int32 offsets[, validity
    bitmap])) among `count` partitions, toPositive(murmur2(key)) % count, as an int32 bytearray; -1 for a null key."""
    if count < 1:
        raise ValueError(f"count={count} must be >= 1")
    data, offsets, bits = column_buffers("keys", keys)
    parts = array("i")
    for i in range(len(offsets) - 1):
        j = i + (bits[1] if bits is not None else 0)
        if bits is not None and not (bits[0][j >> 3] >> (j & 7)) & 1:
            parts.append(-1)
            continue
        start, end = offsets[i], offsets[i + 1]
        if start < 0 or end < start or end > len(data):
            raise InvalidRecordError(f"key {i}'s offsets [{start}, {end}) fall outside the column's data")
        parts.append((murmur2(data[start:end]) & 0x7FFFFFFF) % count)
    return bytearray(parts.tobytes())


class RecordFuture:
    """kafka-python's FutureRecordMetadata: the outcome of one send()."""

    __slots__ = ("batch", "index")

    def __init__(self, batch: ProducerBatch, index: int) -> None:
        self.batch, self.index = batch, index

    def get(self, timeout: float | None = None) -> RecordMetadata:
        """The record's metadata once its batch is appended (sending it now if it is pending); KafkaTimeoutError
        after `timeout` seconds."""
        return self.batch.wait(self.index, timeout)

    @property
    def is_done(self) -> bool:
        return self.batch.done

    @property
    def value(self) -> RecordMetadata | None:
        return self.batch.result(self.index) if self.batch.done and self.batch.error is None else None

    @property
    def exception(self) -> BaseException | None:
        return self.batch.error

    def succeeded(self) -> bool:
        return self.batch.done and self.batch.error is None

    def failed(self) -> bool:
        return self.batch.done and self.batch.error is not None

    def add_callback(self, f, *args, **kwargs) -> "RecordFuture":
        self.batch.on_done(self.index, bind(f, args, kwargs), None)
        return self

    def add_errback(self, f, *args, **kwargs) -> "RecordFuture":
        self.batch.on_done(self.index, None, bind(f, args, kwargs))
        return self

    def add_both(self, f, *args, **kwargs) -> "RecordFuture":
        g = bind(f, args, kwargs)
        self.batch.on_done(self.index, g, g)
        return self


class AsyncRecordFuture:
    """The outcome of one engine.aio send(): asyncio's Future protocol (await, done, result, exception,
    add_done_callback, cancel) over the record's batch. Its `owner` (engine.aio.producer.BatchWaiters) has the
    `loop`, the `waiting` callbacks of each batch not yet done, `run_callbacks` (a cancelled future's) and
    `remove_callback`.
    Cancelling it only stops the waiting: the record is sent all the same."""

    __slots__ = ("batch", "index", "_owner", "_cancelled", "_asyncio_future_blocking")

    def __init__(self, owner, batch: ProducerBatch, index: int) -> None:
        self.batch, self.index, self._owner = batch, index, owner
        self._cancelled = False
        self._asyncio_future_blocking = False

    def get_loop(self):
        return self._owner.loop

    def done(self) -> bool:
        return self._cancelled or self.batch.done

    def cancelled(self) -> bool:
        return self._cancelled

    def cancel(self, msg=None) -> bool:
        if self._cancelled or self.batch.done:
            return False
        self._cancelled = True
        self._owner.run_callbacks(self)
        return True

    def result(self) -> RecordMetadata:
        self._check_done()
        return self.batch.result(self.index)

    def exception(self) -> BaseException | None:
        self._check_done()
        return self.batch.error

    def _check_done(self) -> None:
        if self._cancelled:
            raise asyncio.CancelledError()
        if not self.batch.done:
            raise asyncio.InvalidStateError("the record is not appended yet")

    def add_done_callback(self, fn, *, context=None) -> None:
        if self._cancelled or self.batch.done:
            self._owner.loop.call_soon(fn, self, context=context)
        else:
            self._owner.waiting[self.batch].append((self, fn, context))

    def remove_done_callback(self, fn) -> int:
        return self._owner.remove_callback(self, fn)

    def __await__(self):
        if not (self._cancelled or self.batch.done):
            self._asyncio_future_blocking = True
            yield self
        return self.result()


class _Topic:
    __slots__ = ("count", "limit", "cap", "open", "sizes", "sticky", "sticky_bytes", "all")

    def __init__(self, count: int, limit: int, batch_size: int) -> None:
        self.count, self.limit, self.cap = count, limit, min(batch_size, limit)
        self.open: list[ProducerBatch | None] = [None] * count
        self.sizes = [0] * count
        self.sticky, self.sticky_bytes = -1, 0
        self.all = list(range(count))


OPENED, FULL = 1, 2


class RecordAccumulator:
    builder = RecordsBuilder

    def __init__(self, *, batch_size: int, max_request_size: int, lookup, drain, on_full, on_open=None,
                 clock=None, partitioner=None, seed: int | None = None) -> None:
        """`lookup(topic) -> (partitions, max_message_bytes)`; `drain(batch)` pushes one batch out;
        `on_full()` runs after a full batch is sealed, `on_open()` when a partition's batch opens."""
        self._batch_size, self._max_request = batch_size, max_request_size
        self._lookup, self._drain, self._on_full, self._on_open = lookup, drain, on_full, on_open
        self._clock, self._partitioner = clock, partitioner
        self._random = random.Random(seed)
        self._topics: dict[str, _Topic] = {}
        self._sealed: list[ProducerBatch] = []
        self._lock = threading.RLock()

    def _topic(self, topic: str) -> _Topic:
        t = self._topics.get(topic)
        if t is None:
            count, max_message = self._lookup(topic)
            t = self._topics[topic] = _Topic(count, min(self._max_request, max_message), self._batch_size)
        return t

    def send(self, topic, value=None, key=None, headers=None, partition=None, timestamp_ms=None) -> RecordFuture:
        """Add one record; returns its future (see the module docstring)."""
        batch, index, flags = self._add(topic, value, key, headers, partition, timestamp_ms)
        self._notify(flags)
        return RecordFuture(batch, index)

    def send_async(self, owner, topic, value=None, key=None, headers=None, partition=None,
                   timestamp_ms=None) -> AsyncRecordFuture:
        """send() for engine.aio: an AsyncRecordFuture reporting to `owner`, whose `track(batch)` is called once for
        each batch this opens, before any batch is pushed out."""
        batch, index, flags = self._add(topic, value, key, headers, partition, timestamp_ms)
        if flags & OPENED:
            owner.track(batch)
        self._notify(flags)
        return AsyncRecordFuture(owner, batch, index)

    def send_many(self, topic, records, partition=None) -> list[ProducerBatch]:
        """Add (key, value) or (key, value, headers, timestamp_ms) records without futures; returns
        (batch, first index, last index) for each batch they went into, in order."""
        spans, flags = {}, 0
        try:
            for rec in records:
                key, value, headers, ts = bf.sent_fields(rec)
                batch, index, f = self._add(topic, value, key, headers, partition, ts)
                flags |= f
                spans.setdefault(id(batch), [batch, index, index])[2] = index
        finally:
            self._notify(flags)
        return [tuple(span) for span in spans.values()]

    def _notify(self, flags: int) -> None:
        if flags & OPENED and self._on_open is not None:
            self._on_open()
        if flags & FULL:
            self._on_full()

    def _add(self, topic, value, key, headers, partition, timestamp_ms):
        value, key, headers, size, timestamp_ms = bf.check_send(value, key, headers, timestamp_ms)
        if timestamp_ms is None:
            timestamp_ms = self._now()
        t = self._topic(topic)
        if size + bf.HEADER_SIZE > t.limit:
            raise bf.record_too_large(size + bf.HEADER_SIZE, t.limit, topic)
        with self._lock:
            p = self._choose(t, topic, key, partition)
            flags = 0
            batch = t.open[p]
            if batch is not None and t.sizes[p] + size > t.cap:
                self._seal(t, p)
                batch, flags = None, FULL
            if batch is None:
                batch = t.open[p] = ProducerBatch(topic, p, self._now(), self._drain, self.builder())
                t.sizes[p] = bf.HEADER_SIZE
                flags |= OPENED
            index = batch.records.append(key, value, headers, timestamp_ms)
            t.sizes[p] += size
            if partition is None and key is None and self._partitioner is None:
                t.sticky_bytes += size
                if t.sticky_bytes >= self._batch_size:
                    t.sticky, t.sticky_bytes = -1, 0
            if t.sizes[p] >= t.cap:
                self._seal(t, p)
                flags |= FULL
        return batch, index, flags

    def _now(self) -> int:
        return self._clock.time_ms() if self._clock is not None else time.time_ns() // 1_000_000

    def _choose(self, t: _Topic, topic: str, key, partition) -> int:
        if partition is not None:
            if type(partition) is not int or not 0 <= partition < t.count:
                raise bf.bad_partition(topic, partition, t.count)
            return partition
        if self._partitioner is not None:
            chosen = self._partitioner(key, t.all, t.all)
            return self._choose(t, topic, key, chosen)
        if key is not None:
            return (murmur2(key) & 0x7FFFFFFF) % t.count
        if t.sticky < 0:
            t.sticky = self._random.randrange(t.count)
        return t.sticky

    def _seal(self, t: _Topic, p: int) -> None:
        self._sealed.append(t.open[p])
        t.open[p] = None

    def seal(self, batch: ProducerBatch) -> None:
        """Seal `batch` if it is still open."""
        with self._lock:
            t = self._topics.get(batch.topic)
            if t is not None and t.open[batch.partition] is batch:
                self._seal(t, batch.partition)

    def seal_all(self) -> None:
        with self._lock:
            for t in self._topics.values():
                for p in range(t.count):
                    if t.open[p] is not None:
                        self._seal(t, p)

    def seal_expired(self, now_ms: int, linger_ms: int) -> int:
        """Seal the open batches at least `linger_ms` old; the next expiry time, or -1 if none is open."""
        nxt = -1
        with self._lock:
            for t in self._topics.values():
                for p in range(t.count):
                    b = t.open[p]
                    if b is None:
                        continue
                    if now_ms - b.created_ms >= linger_ms:
                        self._seal(t, p)
                    elif nxt < 0 or b.created_ms + linger_ms < nxt:
                        nxt = b.created_ms + linger_ms
        return nxt

    def take_sealed(self) -> list[ProducerBatch]:
        """The sealed batches in sealing order (the accumulator forgets them)."""
        with self._lock:
            out, self._sealed = self._sealed, []
            return out

    def forget_topic(self, topic: str) -> None:
        """Drop a topic's cached layout (it was deleted or recreated); its open batches are sealed first."""
        with self._lock:
            t = self._topics.pop(topic, None)
            if t is not None:
                self._sealed.extend(b for b in t.open if b is not None)


def _python() -> SimpleNamespace:
    return SimpleNamespace(IMPL="python", RecordAccumulator=RecordAccumulator, RecordFuture=RecordFuture,
                           AsyncRecordFuture=AsyncRecordFuture, murmur2=murmur2, key_partitions=key_partitions)


def _native() -> SimpleNamespace:
    from engine._native import _accumulator as native

    class NativeRecordAccumulator(native.RecordAccumulator):
        batch_class = ProducerBatch

    return SimpleNamespace(IMPL="cython", RecordAccumulator=NativeRecordAccumulator, RecordFuture=native.RecordFuture,
                           AsyncRecordFuture=native.AsyncRecordFuture, murmur2=native.murmur2,
                           key_partitions=native.key_partitions)


# the accumulator, future types, murmur2 and key_partitions of one implementation
twins.register("accumulator", python=_python, native=_native)
selected = twins.selected("accumulator")
