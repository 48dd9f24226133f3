"""aiokafka's AIOKafkaProducer over an open engine: the same names, the engine's semantics.

The records go through the synchronous producer's machinery (engine.clients.producer): the native accumulator
encodes each one as it is sent, batches are sealed and appended whole, idempotence and transactions are the same
code. What this class adds is the waiting: `send()` returns the accumulator's AsyncRecordFuture (made by the native
core with the record), an awaitable that follows asyncio's Future protocol (await it, gather it,
add_done_callback), done when its batch is appended; its metadata is made only when asked for. A batch's completion
reaches the loop as one `call_soon_threadsafe` (none when the loop's own thread appended it).
Who appends: in an engine of one broker, a full batch is appended by the thread that filled it (the loop's, as the
synchronous producer does: an append is a copy into the page cache, no wait); the producer's sender thread appends
what linger_ms sealed. In an engine with followers, acks='all' waits for them, so there every batch is handed to
the sender thread and the loop never waits; `send()` then waits (asynchronously) while more than
`max_pending_batches` batches are sealed and not yet appended.
Defaults are aiokafka's where they differ from the synchronous producer's: acks=1 and enable_idempotence=False
(acks='all' with a transactional_id or enable_idempotence=True), request_timeout_ms=40000, and the batch size is
named max_batch_size. The synchronous producer's other configs (retries, delivery_timeout_ms, compression levels,
max_block_ms, ...) are taken as they are. Configs that only mean something on a network (bootstrap_servers,
security and SASL settings, metadata ages) are refused: against `kafkalog serve`, aiokafka itself is the client.
Threads: one sender thread per producer (the synchronous producer's) from construction until stop() or the
engine's close(). Use a producer from its loop's thread.
"""
from __future__ import annotations

import asyncio
import contextlib
import functools
import threading

from engine.clients import accumulator
from engine.clients.producer import Producer
from engine.common.errors import IllegalStateError, InvalidConfigurationError, ProducerFencedError
from engine.common.structs import RecordMetadata
from engine.record import batch_format as bf

NETWORK_ONLY = frozenset((
    "bootstrap_servers", "security_protocol", "ssl_context", "sasl_mechanism", "sasl_plain_password",
    "sasl_plain_username", "sasl_kerberos_service_name", "sasl_kerberos_domain_name", "sasl_oauth_token_provider",
    "metadata_max_age_ms", "connections_max_idle_ms", "api_version", "loop", "client_rack"))
_MISSING = object()


def refuse_network_configs(configs: dict, kind: str) -> None:
    """InvalidConfigurationError naming the configs that only a networked client has."""
    found = sorted(NETWORK_ONLY.intersection(configs))
    if found:
        raise InvalidConfigurationError(
            f"{', '.join(found)}: no meaning for an in-process {kind} (it is given engine=); to reach "
            f"`kafkalog serve` over the network, use aiokafka's own client")


class BatchBuilder:
    """aiokafka's BatchBuilder: records gathered for one `send_batch()` to one partition (`records`: their (key,
    value, headers, timestamp) tuples, serialized and checked)."""

    def __init__(self, max_size: int, key_serializer, value_serializer) -> None:
        self._max, self._size = max_size, 0
        self._key_ser, self._value_ser = key_serializer, value_serializer
        self.records: list[tuple] = []
        self._closed = False

    def append(self, *, timestamp=None, key=None, value=None, headers=()):
        """Add a record; None (nothing added) once the batch would pass the producer's max_batch_size."""
        if self._closed:
            raise IllegalStateError("the batch was already sent")
        if self._key_ser is not None and key is not None:
            key = self._key_ser(key)
        if self._value_ser is not None and value is not None:
            value = self._value_ser(value)
        value, key, headers, size, timestamp = bf.check_send(value, key, headers, timestamp)  # (typed errors here)
        if self.records and self._size + size > self._max:
            return None
        self._size += size
        self.records.append((key, value, headers, timestamp))
        return len(self.records) - 1

    def record_count(self) -> int:
        return len(self.records)

    def size(self) -> int:
        return self._size

    def close(self) -> None:
        self._closed = True


class BatchWaiters:
    """What one AIOKafkaProducer's record futures report to (engine.clients.accumulator.AsyncRecordFuture and its
    native twin): the producer's `loop`, the done callbacks `waiting` on each batch not yet appended, `track(batch)`
    (called by the accumulator for each batch a send opens), `run_callbacks(future)` (a cancelled future's) and
    `remove_callback(future, fn)`. It also keeps the counts send() and flush() wait on: `room` is set while fewer than
    `max_pending` batches are pending (only where batches are handed to the sender thread), `drained` whenever none
    is, and `ready` says that send() may go straight through (started, not stopped, room)."""

    def __init__(self, max_pending: int, hand_off: bool) -> None:
        self.max_pending, self.hand_off = max_pending, hand_off
        self.loop: asyncio.AbstractEventLoop | None = None
        self.loop_thread = -1
        self.waiting: dict = {}  # batch -> [(future, callback, context)] of its futures' done callbacks
        self.drained: asyncio.Event | None = None
        self.room: asyncio.Event | None = None
        self.stopped = self.ready = False

    def start(self) -> None:
        """Bind to the running loop."""
        self.loop, self.loop_thread = asyncio.get_running_loop(), threading.get_ident()
        self.drained, self.room = asyncio.Event(), asyncio.Event()
        self.drained.set()
        self.room.set()
        self.ready = True

    def stop(self) -> None:
        self.stopped, self.ready = True, False

    def track(self, batch) -> None:
        """Follow a batch first seen here until it is appended: its futures' callbacks, flush() and the pending
        count wait for it."""
        self.waiting[batch] = []
        self.drained.clear()
        if len(self.waiting) >= self.max_pending and self.hand_off:
            self.room.clear()
            self.ready = False
        loop, loop_thread, in_loop = self.loop, self.loop_thread, self._done_in_loop

        def done(_result) -> None:  # (any thread: the one that appended the batch)
            if threading.get_ident() == loop_thread:
                in_loop(batch)
            else:
                with contextlib.suppress(RuntimeError):  # the loop closed: nothing awaits the batch any more
                    loop.call_soon_threadsafe(in_loop, batch)

        batch.on_done(0, done, done)

    def _done_in_loop(self, batch) -> None:
        for future, fn, context in self.waiting.pop(batch, ()):
            self.loop.call_soon(fn, future, context=context)
        if len(self.waiting) < self.max_pending and not self.room.is_set():
            self.room.set()
            self.ready = not self.stopped
        if not self.waiting:
            self.drained.set()

    def run_callbacks(self, future) -> None:
        """A cancelled future's callbacks, now."""
        waiting = self.waiting.get(future.batch, [])
        for entry in [e for e in waiting if e[0] is future]:
            waiting.remove(entry)
            self.loop.call_soon(entry[1], future, context=entry[2])

    def remove_callback(self, future, fn) -> int:
        waiting = self.waiting.get(future.batch)
        if not waiting:
            return 0
        kept = [entry for entry in waiting if entry[0] is not future or entry[1] != fn]
        removed = len(waiting) - len(kept)
        waiting[:] = kept
        return removed


class AIOKafkaProducer:
    """`AIOKafkaProducer(engine=eng, **configs)`: start/stop or `async with`, send (an awaitable of the record's
    future), send_and_wait, create_batch/send_batch, flush, partitions_for, and transactions
    (begin/commit/abort_transaction, `async with producer.transaction()`, send_offsets_to_transaction)."""

    def __init__(self, *, engine, acks=_MISSING, enable_idempotence: bool = False, max_batch_size: int = 16384,
                 request_timeout_ms: int = 40000, transactional_id: str | None = None,
                 max_pending_batches: int = 1024, **configs) -> None:
        refuse_network_configs(configs, "producer")
        if "batch_size" in configs:
            raise InvalidConfigurationError("batch_size is named max_batch_size here (aiokafka's name)")
        if transactional_id is not None:
            enable_idempotence = True  # (as aiokafka: a transactional producer is idempotent)
        if enable_idempotence is True:
            acks = "all" if acks is _MISSING else acks
        elif acks is _MISSING:
            acks = 1
        if type(max_pending_batches) is not int or max_pending_batches < 1:
            raise InvalidConfigurationError(f"max_pending_batches={max_pending_batches!r} must be an int >= 1")
        self._engine = engine
        self._producer: Producer = engine.registry.register(Producer(
            engine, acks=acks, enable_idempotence=enable_idempotence, batch_size=max_batch_size,
            request_timeout_ms=request_timeout_ms, transactional_id=transactional_id,
            hand_off=len(engine.replicas.brokers) > 1, **configs))
        self._accumulator = self._producer.accumulator
        self._waiters = BatchWaiters(max_pending_batches, self._producer.hand_off)
        self._add = self._accumulator.send_async  # (owner, topic, value, key, headers, partition, timestamp)
        chain = self._producer.send_chain(functools.partial(self._add, self._waiters))
        self._send = None if isinstance(chain, functools.partial) else chain  # None: no serializer, no transaction
        self._transactional = transactional_id is not None

    # --- lifecycle ------------------------------------------------------------------------------
    async def start(self) -> None:
        """Bind to the running loop; a transactional producer registers its transactional_id (fencing older ones)."""
        if self._waiters.stopped:
            raise IllegalStateError("the producer was stopped")
        if self._waiters.loop is not None:
            return
        self._waiters.start()
        if self._transactional:
            self._producer.init_transactions()

    async def stop(self) -> None:
        """Append everything sent, then stop the sender thread; later sends raise IllegalStateError."""
        if self._waiters.stopped:
            return
        try:
            if self._waiters.loop is not None:
                await self.flush()
        finally:
            self._waiters.stop()
            self._producer.close()

    async def __aenter__(self) -> "AIOKafkaProducer":
        await self.start()
        return self

    async def __aexit__(self, *exc) -> None:
        await self.stop()

    def _check(self) -> None:
        if self._waiters.loop is None or self._waiters.stopped:
            raise IllegalStateError("the producer is not started" if self._waiters.loop is None else
                                    "the producer is stopped")

    # --- sending --------------------------------------------------------------------------------
    async def send(self, topic: str, value=None, key=None, partition: int | None = None,
                   timestamp_ms: int | None = None, headers=None):
        """Add the record to its partition's batch; returns its AsyncRecordFuture (await it for the metadata). Errors
        that the record itself causes (size, type, an unknown topic) are raised here."""
        waiters = self._waiters
        if not waiters.ready:
            self._check()
            await waiters.room.wait()
        send = self._send
        if send is None:
            return self._add(waiters, topic, value, key, headers, partition, timestamp_ms)
        return send(topic, value, key, headers, partition, timestamp_ms)

    async def send_and_wait(self, topic: str, value=None, key=None, partition: int | None = None,
                            timestamp_ms: int | None = None, headers=None) -> RecordMetadata:
        """send(), then the record's metadata once it is appended (its batch is sealed at once, as a get() does)."""
        future = await self.send(topic, value, key, partition, timestamp_ms, headers)
        if not future.done():
            self._accumulator.seal(future.batch)
            self._producer.push_full()
        return await future

    def create_batch(self) -> BatchBuilder:
        return BatchBuilder(self._producer.batch_size, self._producer.key_serializer, self._producer.value_serializer)

    async def send_batch(self, batch: BatchBuilder, topic: str, *, partition: int):
        """Send the records of `batch` to `partition`, together; returns the future of the first one's metadata."""
        self._check()
        batch.close()
        if not batch.records:
            raise InvalidConfigurationError("send_batch() of an empty batch")
        if self._transactional and not self._producer.transaction_manager.in_transaction:
            self._producer.transaction_manager.check_send()
        spans = self._accumulator.send_many(topic, batch.records, partition)
        for b, _first, _last in spans:
            if b not in self._waiters.waiting:
                self._waiters.track(b)
            self._accumulator.seal(b)
        self._producer.push_full()
        first, index, _ = spans[0]
        return accumulator.selected.AsyncRecordFuture(self._waiters, first, index)

    async def flush(self) -> None:
        """Until every record sent so far is appended (or failed)."""
        self._check()
        self._accumulator.seal_all()
        self._producer.push_full()
        await self._waiters.drained.wait()

    async def partitions_for(self, topic: str) -> set[int]:
        return self._producer.partitions_for(topic)

    # --- transactions -----------------------------------------------------------------------------
    async def begin_transaction(self) -> None:
        self._check()
        self._producer.begin_transaction()

    async def commit_transaction(self) -> None:
        """Append everything sent in the transaction, then commit it (TransactionAbortableError if a send failed)."""
        await self._end(commit=True)

    async def abort_transaction(self) -> None:
        await self._end(commit=False)

    async def _end(self, commit: bool) -> None:
        self._check()
        txn = self._producer.require_transactions()
        (txn.check_commit if commit else txn.check_abort)()
        await self.flush()
        (self._producer.commit_transaction if commit else self._producer.abort_transaction)()

    async def send_offsets_to_transaction(self, offsets: dict, group_id) -> None:
        """Commit `offsets` for the group (its id, or a consumer's group_metadata()) with the transaction."""
        self._check()
        self._producer.send_offsets_to_transaction(offsets, group_id)

    def transaction(self) -> "_Transaction":
        """`async with producer.transaction():` begins; commits when the block ends, aborts when it raises."""
        return _Transaction(self)


class _Transaction:
    def __init__(self, producer: AIOKafkaProducer) -> None:
        self._producer = producer

    async def __aenter__(self) -> "_Transaction":
        await self._producer.begin_transaction()
        return self

    async def __aexit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            await self._producer.commit_transaction()
            return
        if not isinstance(exc, ProducerFencedError):  # (a fenced producer cannot abort: its error goes up as it is)
            await self._producer.abort_transaction()
