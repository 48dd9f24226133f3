"""A kafka-python-shaped producer over an Engine.

`send()` is the accumulator's (engine._native._accumulator, per record); this class moves whole batches: it
encodes each sealed batch once (with the producer id, epoch and the partition's next sequence when
idempotent) and appends it to the partition, retrying retriable errors with the same bytes, so a
retry after a lost acknowledgement is recognised by the log as a duplicate and appended once.
Configs are kafka-python's names with Kafka's defaults (acks='all', enable_idempotence=True,
linger_ms=0, batch_size=16384, max_request_size=1048576, retries=2**31-1, delivery_timeout_ms=120000,
request_timeout_ms=30000, max_block_ms=60000: how long transactional calls retry; compression_gzip_level=-1,
compression_lz4_level=9, compression_zstd_level=3: Kafka's producer levels). acks='all' waits for the
partition's ISR (at most request_timeout_ms per attempt);
retriable errors (no leader during a failover, NotEnoughReplicas, a timeout) are retried until
delivery_timeout_ms.
With `transactional_id` the producer is transactional (engine.clients.transaction_manager): kafka-python's
init_transactions, begin_transaction, send_offsets_to_transaction, commit_transaction and abort_transaction;
its batches carry the transactional bit, each partition joins the transaction before its first batch, and
commit/abort first append everything sent (a failed batch makes the transaction abort-only).
The steps under the blocking calls are public, for the asyncio producer (engine.aio.producer), which wraps this
one: `accumulator` (send, seal), `drain()` (append what is sealed, now), `push_full()`, `key_serializer` and
`value_serializer`, `transaction_manager` and `require_transactions()`. flush(), a future's get() and close() are the
only calls that wait.
Threads: send/flush/close are thread-safe. One sender thread per producer seals batches whose
linger expired and appends them; full batches are appended by the sending thread itself (by the sender thread with
`hand_off=True`, the asyncio producer's choice in an engine with followers, whose acks='all' waits). Batches
are appended one at a time, in sealing order, so records of a partition keep their send order.
"""
from __future__ import annotations

import contextlib
import struct
import threading
from typing import NamedTuple

from engine.clients import accumulator
from engine.clients.accumulator import ProducerBatch
from engine.clients.transaction_manager import TransactionManager
from engine.common.clock import SystemClock
from engine.common.errors import (
    IllegalStateError,
    InvalidConfigurationError,
    InvalidRecordError,
    KafkaError,
    KafkaTimeoutError,
)
from engine.record import batch_format as bf
from engine.record import compression as comp
from engine.record.codec import crc32c

MAX_IN_FLIGHT = 5  # a partition's batches appended before their acks='all' waits (Kafka's max.in.flight default:
#                    5 requests per broker, each with up to one batch per partition)
SETTLE_TICK_MS = 2
ACKS = {0: 0, 1: 1, -1: -1, "all": -1, "0": 0, "1": 1, "-1": -1}
COMPRESSION = (None, "none", "gzip", "snappy", "lz4", "zstd")
_UNSET = object()


class BatchAppend(NamedTuple):
    """Where one batch of a send_batch() call landed."""

    partition: int
    base_offset: int
    record_count: int


def _int(name: str, value, minimum: int) -> int:
    if type(value) is not int or value < minimum:
        raise InvalidConfigurationError(f"{name}={value!r} must be an int >= {minimum}")
    return value


def _level(compression: str, levels: dict) -> int | None:
    """The level the producer compresses at (Kafka's compression.<codec>.level, each checked against its codec's
    range whether or not that codec is used, as Kafka's config does); None for a codec without levels."""
    for name, level in levels.items():
        comp.check_level(comp.codec_id(name), level, f"compression_{name}_level")
    return levels.get(compression)


_RESTAMP = struct.Struct(">hiqqqhi")  # attributes @21 .. base sequence @53


def _restamp(batch: bytearray, producer_id: int, epoch: int, base_sequence: int, transactional: bool,
             timestamp_ms: int | None) -> int:
    """Set a whole uncompressed batch's producer fields (and its timestamps when `timestamp_ms`), recompute its
    CRC; returns its record count. InvalidRecordError when it is not one whole RecordBatch v2."""
    if len(batch) < bf.HEADER_SIZE or batch[16] != bf.MAGIC \
            or bf.LOG_OVERHEAD + int.from_bytes(batch[8:12], "big", signed=True) != len(batch):
        raise InvalidRecordError("append_batch takes one whole RecordBatch v2")
    attributes, last_delta, base_ts, max_ts, _, _, _ = _RESTAMP.unpack_from(batch, bf.ATTRIBUTES_OFFSET)
    if attributes & (bf.COMPRESSION_MASK | bf.CONTROL_FLAG):
        raise InvalidRecordError("append_batch takes an uncompressed data batch")
    if transactional:
        attributes |= bf.TRANSACTIONAL_FLAG
    if timestamp_ms is not None:
        base_ts = max_ts = timestamp_ms
    _RESTAMP.pack_into(batch, bf.ATTRIBUTES_OFFSET, attributes, last_delta, base_ts, max_ts, producer_id, epoch,
                       base_sequence)
    struct.pack_into(">I", batch, 17, crc32c(memoryview(batch)[bf.ATTRIBUTES_OFFSET:]))
    return int.from_bytes(batch[bf.HEADER_SIZE - 4:bf.HEADER_SIZE], "big")


class Producer:
    """`send(topic, value=None, key=None, headers=None, partition=None, timestamp_ms=None)` returns a future
    (`get()`, `add_callback`, `add_errback`); `send_batch`, `flush`, `close`, `partitions_for`. Its sealed batches,
    the sequences they take, the appends waiting for the ISR and the sender thread change under one send lock,
    which is why it stays one class of about 400 lines."""

    def __init__(self, engine, *, acks="all", enable_idempotence=_UNSET, linger_ms: int = 0,
                 batch_size: int = 16384, compression_type: str | None = None,
                 max_request_size: int = 1048576, partitioner=None, retries: int = 2**31 - 1,
                 retry_backoff_ms: int = 100, delivery_timeout_ms: int = 120_000,
                 request_timeout_ms: int = 30_000, key_serializer=None,
                 value_serializer=None, client_id: str | None = None, transactional_id: str | None = None,
                 transaction_timeout_ms: int = 60_000, max_block_ms: int = 60_000,
                 compression_gzip_level: int = comp.LEVELS[comp.GZIP][2],
                 compression_lz4_level: int = comp.LEVELS[comp.LZ4][2],
                 compression_zstd_level: int = comp.LEVELS[comp.ZSTD][2], hand_off: bool = False,
                 **unknown) -> None:
        if unknown:
            raise InvalidConfigurationError(f"unknown producer config(s): {', '.join(sorted(unknown))}")
        if acks not in ACKS:
            raise InvalidConfigurationError(f"acks={acks!r} must be 0, 1 or 'all'")
        self.acks = ACKS[acks]
        if transactional_id is not None:
            if enable_idempotence is False or self.acks != -1:
                raise InvalidConfigurationError("a transactional_id needs enable_idempotence=True and acks='all'")
            enable_idempotence = True
        if enable_idempotence is _UNSET:
            enable_idempotence = self.acks == -1  # Kafka turns it off quietly when it was not asked for
        elif enable_idempotence not in (True, False):
            raise InvalidConfigurationError(f"enable_idempotence={enable_idempotence!r} must be a bool")
        elif enable_idempotence and self.acks != -1:
            raise InvalidConfigurationError("enable_idempotence=True requires acks='all'")
        if compression_type not in COMPRESSION:
            raise InvalidConfigurationError(f"compression_type={compression_type!r} must be one of {COMPRESSION}")
        for name, fn in (("partitioner", partitioner), ("key_serializer", key_serializer),
                         ("value_serializer", value_serializer)):
            if fn is not None and not callable(fn):
                raise InvalidConfigurationError(f"{name} must be callable")
        self.linger_ms = _int("linger_ms", linger_ms, 0)
        self.batch_size = _int("batch_size", batch_size, 0)
        self.max_request_size = _int("max_request_size", max_request_size, bf.HEADER_SIZE + 1)
        self.retries = _int("retries", retries, 0)
        self.retry_backoff_ms = _int("retry_backoff_ms", retry_backoff_ms, 0)
        self.delivery_timeout_ms = _int("delivery_timeout_ms", delivery_timeout_ms, 1)
        self.request_timeout_ms = _int("request_timeout_ms", request_timeout_ms, 1)
        self.compression = compression_type or "none"
        self.compression_level = _level(self.compression, {"gzip": compression_gzip_level, "lz4": compression_lz4_level,
                                                           "zstd": compression_zstd_level})
        self.client_id = client_id
        if type(hand_off) is not bool:
            raise InvalidConfigurationError(f"hand_off={hand_off!r} must be a bool")
        self.hand_off = hand_off
        self._engine, self._clock = engine, engine.clock
        self.idempotent = enable_idempotence
        self.max_block_ms = _int("max_block_ms", max_block_ms, 0)
        self.transaction_manager = None if transactional_id is None else TransactionManager(
            engine, transactional_id, transaction_timeout_ms, retry_backoff_ms=self.retry_backoff_ms,
            max_block_ms=self.max_block_ms)
        self.producer_id, self.producer_epoch = (engine.allocate_producer_id(), 0) \
            if self.idempotent and self.transaction_manager is None else (-1, -1)
        self._sequences: dict[tuple[str, int], int] = {}
        self._send_lock = threading.RLock()
        self._handoff: list[ProducerBatch] = []  # sealed batches taken for the sender thread to append
        self._draining: list[ProducerBatch] = []  # the batches the current drain is appending
        self._in_flight: list[tuple] = []  # acks='all': (batch, bytes, AppendInfo) appended, not yet replicated
        self._handoff_lock = threading.Lock()
        self._wake, self._stop = threading.Event(), threading.Event()
        self._closed = self._flushing = False
        self._idle = True
        clock = None if type(engine.clock) is SystemClock else engine.clock  # None: the core reads wall time itself
        self.accumulator = accumulator.selected.RecordAccumulator(
            batch_size=self.batch_size, max_request_size=self.max_request_size, lookup=engine.partition_layout,
            drain=self._force, on_full=self.push_full, on_open=self._on_open, clock=clock, partitioner=partitioner)
        self.key_serializer, self.value_serializer = key_serializer, value_serializer
        self.send = self.send_chain(self.accumulator.send)
        self._thread = threading.Thread(target=self._run, name="kafkalog-producer-sender", daemon=True)
        self._thread.start()

    def send_chain(self, add):
        """send() over `add` (the accumulator's send, or its send_async with the owner bound): the configured
        serializers applied, and in a transactional producer the transaction checked. With neither, `add` itself:
        the per-record path is then the native accumulator, nothing in between."""
        key_ser, value_ser, txn = self.key_serializer, self.value_serializer, self.transaction_manager
        if key_ser is None and value_ser is None:
            serialized = add
        else:
            def serialized(topic, value=None, key=None, headers=None, partition=None, timestamp_ms=None):
                if value_ser is not None and value is not None:
                    value = value_ser(value)
                if key_ser is not None and key is not None:
                    key = key_ser(key)
                return add(topic, value, key, headers, partition, timestamp_ms)
        if txn is None:
            return serialized

        def transactional(topic, value=None, key=None, headers=None, partition=None, timestamp_ms=None):
            if not txn.in_transaction:
                txn.check_send()
            try:
                return serialized(topic, value, key, headers, partition, timestamp_ms)
            except KafkaError as exc:  # as Kafka's client: a record refused in send() makes the transaction abort-only
                raise txn.on_failed(exc) from None
        return transactional

    # --- moving batches -------------------------------------------------------------------------
    def drain(self, settle: bool = True) -> None:
        """Append every sealed batch, in sealing order (those handed to the sender first: they were sealed
        before any still in the accumulator). With acks='all' up to MAX_IN_FLIGHT appended batches per partition
        wait for the ISR together (Kafka's max.in.flight.requests.per.connection); `settle` ends that wait now (a
        full batch's drain leaves it to the next drain or to the sender thread's next tick)."""
        with self._send_lock:
            with self._handoff_lock:
                batches, self._handoff = self._handoff, []
                self._draining = batches = batches + self.accumulator.take_sealed()
            if self.transaction_manager is not None and batches:
                with contextlib.suppress(KafkaError):  # each batch's own attempt below fails it with the error
                    self.transaction_manager.before_append((b.topic, b.partition) for b in batches)
            # the partitions first used here are made at once, the collector paused meanwhile (engine.partitions_of);
            # not the appends, which may wait (acks, retries); an error is met again by the batch's own append below
            with contextlib.suppress(KafkaError):
                self._engine.partitions_of([(b.topic, b.partition) for b in batches])
            for batch in batches:
                self._append(batch)
            if settle:
                self._settle()

    def _force(self, batch: ProducerBatch, timeout: float | None = None) -> None:
        """A future's get() on a pending batch: seal and append it now (in this thread), or, with a
        timeout, have the sender append it and wait at most that long (KafkaTimeoutError)."""
        self.accumulator.seal(batch)
        if timeout is not None:
            self._await(timeout, only=batch)
            return
        self.drain()
        if not batch.done:
            batch.fail(IllegalStateError("the producer is closed; the record was not sent"))

    def _await(self, timeout: float, only: ProducerBatch | None = None) -> None:
        """Hand every sealed batch to the sender thread, then wait up to `timeout` seconds for `only` (or for
        every batch not yet appended)."""
        if not isinstance(timeout, (int, float)) or timeout < 0:
            raise InvalidConfigurationError(f"timeout={timeout!r} must be a number of seconds >= 0")
        with self._handoff_lock:
            self._handoff += self.accumulator.take_sealed()
            pending = self._draining + self._handoff + [entry[0] for entry in list(self._in_flight)]
            targets = [only] if only is not None else [b for b in pending if not b.done]
        if self._closed and not self._flushing:
            self.drain()
        self._wake_sender()
        deadline = self._clock.time_ms() + timeout * 1000
        for batch in targets:
            if batch.done:
                continue
            done = threading.Event()
            batch.on_done(0, lambda _meta: done.set(), lambda _exc: done.set())
            if not batch.done and not self._clock.wait(done, deadline - self._clock.time_ms()):
                raise KafkaTimeoutError(f"the batch for {batch.topic}-{batch.partition} was not appended within "
                                        f"{timeout} s; it is still being sent")

    def _append(self, batch: ProducerBatch) -> None:
        """Build and append `batch`; with acks='all' on a replicated partition, leave the wait for the ISR to
        `_settle` (the batch joins those in flight)."""
        if self._closed and not self._flushing:
            batch.fail(IllegalStateError("the producer is closed; the record was not sent"))
            return
        tp = (batch.topic, batch.partition)
        seq = self._sequences.get(tp, 0)
        try:
            if self.transaction_manager is not None:
                self.transaction_manager.before_append([tp])
            data = batch.records.build(compression=self.compression, compression_level=self.compression_level,
                                       producer_id=self.producer_id,
                                       producer_epoch=self.producer_epoch, base_sequence=seq if self.idempotent else -1,
                                       transactional=self.transaction_manager is not None)
        except KafkaError as exc:
            self._fail(batch, exc)
            return
        if self.acks == -1 and self._replicated(batch):
            if sum(1 for entry in self._in_flight if entry[0].topic == batch.topic
                   and entry[0].partition == batch.partition) >= MAX_IN_FLIGHT:
                self._settle()
            try:
                info = self._engine.append(batch.topic, batch.partition, data, -1, self.request_timeout_ms, False)
            except KafkaError:
                info = None  # this one goes the retrying way below, after the batches before it
            if info is not None:
                self._advance(tp, seq, len(batch.records))
                self._in_flight.append((batch, data, info))
                return
        self._settle()  # batches in flight are settled (or resent) before any later batch is sent on its own
        self._send(batch, data, seq)

    def _replicated(self, batch: ProducerBatch) -> bool:
        try:
            return self._engine.is_replicated(batch.topic, batch.partition)
        except KafkaError:
            return False  # no leader now: the retrying path says so

    def _settle(self) -> None:
        """Wait for the ISR to take each appended batch, in order; from the first that fails (leadership moved,
        a timeout), resend the rest with retries: an idempotent resend that the log already holds is a
        duplicate answered with its first offsets."""
        resend = False
        in_flight, self._in_flight = self._in_flight, []
        for batch, data, info in in_flight:
            if not resend:
                try:
                    self._engine.wait_for_replication(batch.topic, batch.partition, info, self.request_timeout_ms)
                    batch.complete(info.first_offset, info.log_append_time)
                    continue
                except KafkaError:
                    resend = True
            self._send(batch, data, None)

    def _send(self, batch: ProducerBatch, data: bytes, seq: int | None) -> None:
        """Append `data` (waiting for the ISR with acks='all'), retrying retriable errors until retries or
        delivery_timeout_ms run out; `seq` None: the sequences already count this batch."""
        try:
            info = self._append_retrying(batch.topic, batch.partition, data, batch.created_ms)
        except KafkaError as exc:
            self._fail(batch, exc)
            return
        if seq is not None:
            self._advance((batch.topic, batch.partition), seq, len(batch.records))
        batch.complete(info.first_offset if self.acks else -1, info.log_append_time)

    def _append_retrying(self, topic: str, partition: int, data, created_ms: int):
        """The engine's append of `data`, retried as _send says; the AppendInfo, or the last KafkaError."""
        attempt = 0
        while True:
            try:
                left = self.delivery_timeout_ms - (self._clock.time_ms() - created_ms)
                return self._engine.append(topic, partition, data, self.acks,
                                           max(1, min(self.request_timeout_ms, left)))
            except KafkaError as exc:
                expired = self._clock.time_ms() - created_ms >= self.delivery_timeout_ms
                if exc.retriable and attempt < self.retries and not expired and not self._stop.is_set():
                    attempt += 1
                    self._clock.wait(self._stop, self.retry_backoff_ms)
                    continue
                if exc.retriable and self.idempotent and self.transaction_manager is None:
                    self._bump_epoch()  # the batch may or may not be in the log: start a fresh sequence space
                raise

    def _fail(self, batch: ProducerBatch, exc: KafkaError) -> None:
        batch.fail(self.transaction_manager.on_failed(exc) if self.transaction_manager is not None else exc)

    def _advance(self, tp: tuple[str, int], seq: int, records: int) -> None:
        if self.idempotent:
            self._sequences[tp] = bf.increment_sequence(seq, records)

    def _bump_epoch(self) -> None:
        self.producer_epoch += 1
        self._sequences.clear()

    def _wake_sender(self) -> None:
        """Have the sender thread look at the batches now (a manual clock's wait too)."""
        self._wake.set()
        if hasattr(self._clock, "wake"):
            self._clock.wake()

    def push_full(self) -> None:
        """Have the full batches appended: now, on this thread (what the accumulator does as a batch fills), or, with
        `hand_off`, by the sender thread (the asyncio producer's loop never appends in an engine with followers)."""
        if self.hand_off:
            self._wake_sender()
        else:
            self.drain(settle=False)

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.clear()
            self._idle = True  # before the scan: a batch opened after it wakes us (see _on_open)
            nxt = self.accumulator.seal_expired(self._clock.time_ms(), self.linger_ms)
            self._idle = nxt < 0
            self.drain()
            wait = 3_600_000 if nxt < 0 else max(0, nxt - self._clock.time_ms())
            if self._in_flight:  # a sending thread's batches wait for the ISR: settle them soon
                wait = min(wait, SETTLE_TICK_MS)
            self._clock.wait(self._wake, wait)

    def _on_open(self) -> None:
        """A partition's batch opened: wake the sender only if it sleeps without a linger deadline (a batch
        opened while it waits for an earlier deadline expires no sooner)."""
        if self._idle:
            self._wake.set()

    def on_topic_changed(self, topic: str) -> None:
        """The engine deleted `topic` or added partitions to it: push out what is pending for it (sends to a
        deleted topic fail) and forget its layout, so the next send looks it up again."""
        self.accumulator.forget_topic(topic)
        self.drain()

    # --- kafka-python API -----------------------------------------------------------------------
    def send_batch(self, topic: str, records, partition: int | None = None) -> list[BatchAppend]:
        """Send many (key, value) or (key, value, headers, timestamp_ms) records at once, partitioned as send()
        would, without a future each. Once all are appended, returns for each batch they went into its partition,
        the offset of the first of these records in it and how many of them it holds (a batch may also carry
        records sent just before, or by another thread at the same time)."""
        spans = self.accumulator.send_many(topic, records, partition)
        self.flush()
        out = []
        for batch, first, last in spans:
            batch.result(first)  # raises the batch's error
            out.append(BatchAppend(batch.partition, batch.base_offset + first, last - first + 1))
        return out

    def append_batch(self, topic: str, partition: int, batch: bytearray, timestamp_ms: int | None = None) -> int:
        """Append one uncompressed RecordBatch v2 encoded elsewhere (the Spark sink's tasks encode their rows:
        engine.staged_writes) as this producer's own batch: its producer id, epoch, base sequence and transactional
        bit are set in `batch` to this producer's (and with `timestamp_ms` its base and max timestamps, for records
        whose deltas are 0), its CRC is recomputed, and it is appended after everything sent before it, retried as
        send()'s batches are. Returns the offset of its first record."""
        self.flush()
        with self._send_lock:
            if self._closed:
                raise IllegalStateError("the producer is closed; the batch was not sent")
            tp = (topic, partition)
            if self.transaction_manager is not None:
                self.transaction_manager.before_append([tp])
            seq = self._sequences.get(tp, 0)
            records = _restamp(batch, self.producer_id, self.producer_epoch, seq if self.idempotent else -1,
                               self.transaction_manager is not None, timestamp_ms)
            try:
                info = self._append_retrying(topic, partition, batch, self._clock.time_ms())
            except KafkaError as exc:
                raise self.transaction_manager.on_failed(exc) if self.transaction_manager is not None else exc from None
            self._advance(tp, seq, records)
            return info.first_offset

    def flush(self, timeout: float | None = None) -> None:
        """Append everything sent so far; with `timeout` (seconds), KafkaTimeoutError if that takes longer
        (the batches are still sent)."""
        self.accumulator.seal_all()
        if timeout is None:
            self.drain()
        else:
            self._await(timeout)

    # --- transactions ------------------------------------------------------------------------------
    def require_transactions(self) -> TransactionManager:
        """The transaction manager; IllegalStateError without a transactional_id or once closed."""
        if self.transaction_manager is None:
            raise IllegalStateError("this producer has no transactional_id")
        if self._closed:
            raise IllegalStateError("the producer is closed")
        return self.transaction_manager

    def init_transactions(self) -> None:
        """Register the transactional_id: a new epoch that fences any older producer using it (and aborts a
        transaction it left open)."""
        with self._send_lock:
            self.producer_id, self.producer_epoch = self.require_transactions().init()
            self._sequences.clear()

    def begin_transaction(self) -> None:
        with self._send_lock:
            self.require_transactions().begin()

    def send_offsets_to_transaction(self, offsets: dict, consumer_group_id) -> None:
        """Commit `offsets` ({TopicPartition: OffsetAndMetadata or int}, the next offsets to read) for the
        consumer group inside this transaction: visible to `committed()` only once it commits. Pass the consumer's
        `group_metadata()` rather than the group id to have its membership checked (a zombie consumer's offsets
        then raise CommitFailedError and the transaction must be aborted)."""
        with self._send_lock:
            self.require_transactions().send_offsets(offsets, consumer_group_id)

    def commit_transaction(self) -> None:
        """Append everything sent in the transaction, then commit it (TransactionAbortableError if a send
        failed: abort instead)."""
        self._end(commit=True)

    def abort_transaction(self) -> None:
        """Append what is still pending, then abort: no read_committed reader ever sees the transaction."""
        self._end(commit=False)

    def _end(self, commit: bool) -> None:
        txn = self.require_transactions()
        with self._send_lock:
            (txn.check_commit if commit else txn.check_abort)()
        self.flush()
        with self._send_lock:
            if commit:
                txn.check_commit()  # a batch that failed while flushing makes the transaction abort-only
            if txn.end(commit):
                self.producer_id, self.producer_epoch = txn.producer_id, txn.producer_epoch
                self._sequences.clear()

    def partitions_for(self, topic: str) -> set[int]:
        return set(range(self._engine.partitions_for(topic)))

    def close(self, timeout: float | None = None) -> None:
        """Flush, then stop the sender thread; later sends raise IllegalStateError."""
        if self._closed:
            return
        self._flushing = True
        self.flush()
        self._closed = True
        self._flushing = False
        self.send = self._closed_send
        self._stop.set()
        self._wake_sender()
        if threading.current_thread() is not self._thread:
            self._thread.join()

    def _closed_send(self, *args, **kwargs):
        raise IllegalStateError("cannot send after the producer is closed")

    def __enter__(self) -> "Producer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
