"""The transaction coordinator (Kafka's TransactionCoordinator and TransactionMetadata), in process.

Each transactional id maps to a producer id and epoch and a transaction state (txn.transaction_log.TxnState)
with Kafka's transitions: InitProducerId bumps the epoch (fencing the previous producer; an Ongoing transaction
is first aborted under a fenced epoch), AddPartitionsToTxn/AddOffsetsToTxn move Empty/Complete* to Ongoing and
add partitions, EndTxn goes Ongoing -> Prepare{Commit,Abort} -> markers on every partition -> Complete*. Every
state change is written to `__transaction_state` before it holds, through `TxnIO` (the engine's appends).
`abort_timed_out` fences and aborts transactions open past their timeout and finishes any Prepare* state whose
markers did not all land; `expire_ids` writes tombstones for ids idle past transactional.id.expiration.ms.
Crash policy: the log is the truth. `load` takes the latest record per id; a PrepareCommit/PrepareAbort found
there has its markers written again (a second marker for a closed transaction is harmless) and completes;
Ongoing transactions stay open until their timeout, measured from their start.
Thread-safety: one lock serialises every request (coordinator lock, then the partitions' locks).
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Iterable, NamedTuple, Protocol

from engine.common.clock import Clock
from engine.common.errors import (
    InvalidConfigurationError,
    InvalidProducerIdMappingError,
    InvalidTransactionTimeoutError,
    InvalidTxnStateError,
    KafkaError,
    ProducerFencedError,
    TransactionalIdNotFoundError,
)
from engine.common.structs import settings_of
from engine.txn import transaction_log
from engine.txn.transaction_log import TxnLogValue, TxnState

MAX_TIMEOUT_MS = 900_000            # transaction.max.timeout.ms
ID_EXPIRATION_MS = 604_800_000      # transactional.id.expiration.ms (7 days)
ABORT_CHECK_INTERVAL_MS = 10_000    # transaction.abort.timed.out.transaction.cleanup.interval.ms
EXPIRE_CHECK_INTERVAL_MS = 3_600_000  # transaction.remove.expired.transaction.cleanup.interval.ms
MAX_EPOCH = 32767                   # Short.MaxValue: an epoch >= MAX_EPOCH - 1 is exhausted
TopicPartition = tuple[str, int]


class TxnIO(Protocol):
    """What the coordinator needs from the engine."""

    def write_state(self, transactional_id: str, value: bytes | None) -> None:
        """Append (key, value) to the id's `__transaction_state` partition and wait for it (acks='all')."""

    def coordinator_epoch(self, transactional_id: str) -> int:
        """The leader epoch of the id's `__transaction_state` partition."""

    def write_markers(self, producer_id: int, producer_epoch: int, coordinator_epoch: int,
                      partitions: list[TopicPartition], commit: bool) -> None:
        """Append a marker to each partition's leader and wait for it (a deleted partition is skipped)."""

    def allocate_producer_id(self) -> int:
        """A producer id never handed out before (for a new transactional id, or when an epoch is exhausted)."""


@dataclass
class TransactionMetadata:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState = TxnState.EMPTY
    partitions: set[TopicPartition] = field(default_factory=set)
    start_ms: int = -1
    last_update_ms: int = -1
    # memory only: the partitions of the transaction that completed last (its Prepare* record's; Complete* records
    # list none), for closing a marker that a power cut took from one of them
    completed_partitions: set[TopicPartition] = field(default_factory=set)

    def value(self) -> TxnLogValue:
        parts: dict[str, list[int]] | None = None
        if self.state != TxnState.EMPTY:
            parts = {}
            for topic, p in sorted(self.partitions):
                parts.setdefault(topic, []).append(p)
        return TxnLogValue(self.producer_id, self.producer_epoch, self.timeout_ms, self.state, parts,
                           self.last_update_ms, self.start_ms)

    @classmethod
    def from_value(cls, tid: str, v: TxnLogValue) -> "TransactionMetadata":
        parts = {(t, p) for t, ids in (v.partitions or {}).items() for p in ids}
        return cls(tid, v.producer_id, v.producer_epoch, v.timeout_ms, v.state, parts, v.start_ms, v.last_update_ms)


class TransactionDescription(NamedTuple):
    """DescribeTransactions: one transactional id's coordinator state."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    state: str              # Kafka's name: Empty, Ongoing, PrepareCommit, ...
    timeout_ms: int
    start_ms: int           # when the open (or last) transaction began; -1 for none
    partitions: list[TopicPartition]


# Kafka's validPreviousStates
_VALID_PREVIOUS = {
    TxnState.EMPTY: {TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT},
    TxnState.ONGOING: {TxnState.ONGOING, TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT},
    TxnState.PREPARE_COMMIT: {TxnState.ONGOING},
    TxnState.PREPARE_ABORT: {TxnState.ONGOING, TxnState.PREPARE_EPOCH_FENCE},
    TxnState.COMPLETE_COMMIT: {TxnState.PREPARE_COMMIT},
    TxnState.COMPLETE_ABORT: {TxnState.PREPARE_ABORT},
    TxnState.DEAD: {TxnState.EMPTY, TxnState.COMPLETE_ABORT, TxnState.COMPLETE_COMMIT},
    TxnState.PREPARE_EPOCH_FENCE: {TxnState.ONGOING},
}


class TransactionConfig(NamedTuple):
    """The broker settings the transaction coordinator honours (Kafka's names, with underscores)."""

    transaction_max_timeout_ms: int = MAX_TIMEOUT_MS
    transactional_id_expiration_ms: int = ID_EXPIRATION_MS
    transaction_abort_timed_out_transaction_cleanup_interval_ms: int = ABORT_CHECK_INTERVAL_MS

    @classmethod
    def of(cls, settings: dict | None) -> "TransactionConfig":
        out = settings_of(cls, settings, "transaction")
        for name, value in out._asdict().items():
            if type(value) is not int or value < 1:
                raise InvalidConfigurationError(f"{name}={value!r} must be an int >= 1")
        return out


class TransactionCoordinator:
    def __init__(self, io: TxnIO, clock: Clock, config: TransactionConfig = TransactionConfig()) -> None:
        self.io, self.clock = io, clock
        self.max_timeout_ms = config.transaction_max_timeout_ms
        self.id_expiration_ms = config.transactional_id_expiration_ms
        self.txns: dict[str, TransactionMetadata] = {}
        self._lock = threading.RLock()

    # --- state changes ------------------------------------------------------------------------
    def _transition(self, md: TransactionMetadata, state: TxnState, **changes) -> None:
        """Write `md` in `state` (with `changes`) to the log, then make it the state in memory."""
        if md.state not in _VALID_PREVIOUS[state]:
            raise InvalidTxnStateError(f"transactional id {md.transactional_id!r} cannot go from "
                                       f"{md.state.kafka_name} to {state.kafka_name}")
        nxt = TransactionMetadata(**{**md.__dict__, "partitions": set(md.partitions), **changes, "state": state,
                                     "last_update_ms": self.clock.time_ms()})
        self.io.write_state(md.transactional_id, transaction_log.encode_value(nxt.value()))
        md.__dict__.update(nxt.__dict__)

    def _end(self, md: TransactionMetadata, commit: bool) -> None:
        """Ongoing -> Prepare* -> markers -> Complete*."""
        self._transition(md, TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT)
        self._complete(md)

    def _complete(self, md: TransactionMetadata) -> None:
        """Write the markers of a Prepare* state and move to Complete*."""
        commit = md.state == TxnState.PREPARE_COMMIT
        self.io.write_markers(md.producer_id, md.producer_epoch, self.io.coordinator_epoch(md.transactional_id),
                              sorted(md.partitions), commit)
        # Kafka's TransactionMetadata.prepareComplete: a completed transaction lists no partitions (a coordinator
        # loading the record would carry them into the next transaction)
        self._transition(md, TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT, partitions=set(),
                         completed_partitions=set(md.partitions))

    def _fence_and_abort(self, md: TransactionMetadata) -> None:
        """PrepareEpochFence: bump the epoch (the open producer is fenced) and abort under it."""
        md.state = TxnState.PREPARE_EPOCH_FENCE  # in memory only, as Kafka's pending state
        try:
            self._transition(md, TxnState.PREPARE_ABORT, producer_epoch=min(md.producer_epoch + 1, MAX_EPOCH))
        except BaseException:
            md.state = TxnState.ONGOING  # not written: still the open transaction it was
            raise
        self._complete(md)

    def _get(self, tid: str, producer_id: int, producer_epoch: int) -> TransactionMetadata:
        md = self.txns.get(tid)
        if md is None or md.producer_id != producer_id:
            raise InvalidProducerIdMappingError(
                f"producer id {producer_id} does not belong to transactional id {tid!r}")
        if producer_epoch != md.producer_epoch:
            raise ProducerFencedError(f"producer epoch {producer_epoch} of transactional id {tid!r} is fenced by "
                                      f"epoch {md.producer_epoch}")
        if md.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
            self._complete(md)  # a completion left by a crash or a failed marker write: finish it first
        return md

    # --- requests -----------------------------------------------------------------------------
    def init_producer_id(self, tid: str, timeout_ms: int) -> tuple[int, int]:
        """InitProducerId: (producer id, epoch) for `tid`, a new epoch that fences every older producer."""
        if not isinstance(tid, str) or not tid:
            raise InvalidTxnStateError(f"transactional_id must be a non-empty str, got {tid!r}")
        if type(timeout_ms) is not int or not 1 <= timeout_ms <= self.max_timeout_ms:
            raise InvalidTransactionTimeoutError(
                f"transaction_timeout_ms={timeout_ms!r} must be an int in [1, {self.max_timeout_ms}] "
                f"(transaction.max.timeout.ms)")
        with self._lock:
            md = self.txns.get(tid)
            if md is None:
                md = TransactionMetadata(tid, self.io.allocate_producer_id(), -1, timeout_ms)
            elif md.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
                self._complete(md)
            elif md.state == TxnState.ONGOING:
                self._fence_and_abort(md)
            if md.producer_epoch >= MAX_EPOCH - 1:
                pid, epoch = self.io.allocate_producer_id(), 0
            else:
                pid, epoch = md.producer_id, md.producer_epoch + 1
            self._transition(md, TxnState.EMPTY, producer_id=pid, producer_epoch=epoch, timeout_ms=timeout_ms,
                             partitions=set(), start_ms=-1)
            self.txns[tid] = md
            return pid, epoch

    def add_partitions(self, tid: str, producer_id: int, producer_epoch: int,
                       partitions: Iterable[TopicPartition]) -> None:
        """AddPartitionsToTxn (and AddOffsetsToTxn, with the group's `__consumer_offsets` partition)."""
        with self._lock:
            md = self._get(tid, producer_id, producer_epoch)
            new = set(partitions)
            if md.state == TxnState.ONGOING and new <= md.partitions:
                return
            ongoing = md.state == TxnState.ONGOING
            self._transition(md, TxnState.ONGOING, partitions=(md.partitions if ongoing else set()) | new,
                             start_ms=md.start_ms if ongoing else self.clock.time_ms())

    def end_txn(self, tid: str, producer_id: int, producer_epoch: int, commit: bool) -> None:
        """EndTxn: commit or abort the open transaction (a retry of a completed one succeeds)."""
        with self._lock:
            md = self._get(tid, producer_id, producer_epoch)
            if md.state == TxnState.ONGOING:
                self._end(md, commit)
            elif md.state != (TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT):
                raise InvalidTxnStateError(f"cannot {'commit' if commit else 'abort'} transactional id {tid!r} "
                                           f"in state {md.state.kafka_name}")

    # --- background work ----------------------------------------------------------------------
    def abort_timed_out(self) -> int:
        """Fence and abort transactions open longer than their timeout; finish stuck completions. The count aborted."""
        now, aborted = self.clock.time_ms(), 0
        with self._lock:
            for md in list(self.txns.values()):
                try:
                    if md.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
                        self._complete(md)
                    elif md.state == TxnState.ONGOING and now - md.start_ms > md.timeout_ms:
                        self._fence_and_abort(md)
                        aborted += 1
                except KafkaError:
                    continue  # a partition without a leader for now: the next run tries again
        return aborted

    def expire_ids(self) -> int:
        """Tombstone ids idle past transactional.id.expiration.ms with no transaction in progress."""
        now, expired = self.clock.time_ms(), 0
        with self._lock:
            for tid, md in list(self.txns.items()):
                if md.state in _VALID_PREVIOUS[TxnState.DEAD] and now - md.last_update_ms >= self.id_expiration_ms:
                    self.io.write_state(tid, None)
                    del self.txns[tid]
                    expired += 1
        return expired

    def load(self, records: Iterable[tuple[bytes, bytes | None]]) -> None:
        """Rebuild from `__transaction_state` records (key, value) in log order, then finish Prepare* states."""
        with self._lock:
            for key, value in records:
                tid = transaction_log.decode_key(key)
                if value is None:
                    self.txns.pop(tid, None)
                else:
                    md = TransactionMetadata.from_value(tid, transaction_log.decode_value(value))
                    before = self.txns.get(tid)
                    if md.state in (TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT) and before is not None \
                            and before.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
                        md.completed_partitions = before.partitions
                    self.txns[tid] = md
            for md in list(self.txns.values()):
                if md.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
                    try:
                        self._complete(md)
                    except KafkaError:
                        continue  # abort_timed_out retries it

    # --- admin --------------------------------------------------------------------------------
    def describe(self, tid: str) -> TransactionDescription:
        with self._lock:
            md = self.txns.get(tid)
            if md is None:
                raise TransactionalIdNotFoundError(f"no transactional id {tid!r}")
            return TransactionDescription(tid, md.producer_id, md.producer_epoch, md.state.kafka_name, md.timeout_ms,
                                          md.start_ms, sorted(md.partitions))

    def list(self) -> list[TransactionDescription]:
        with self._lock:
            return [self.describe(tid) for tid in sorted(self.txns)]

    def transactional_id_of(self, producer_id: int) -> str | None:
        with self._lock:
            return next((tid for tid, md in self.txns.items() if md.producer_id == producer_id), None)
