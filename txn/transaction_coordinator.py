"""The transaction coordinator (Kafka's TransactionCoordinator and TransactionMetadata), in process.

Each transactional id maps to a producer id and epoch and a transaction state (txn.transaction_log.TxnState)
with Kafka's transitions: InitProducerId bumps the epoch (fencing the previous producer; an Ongoing transaction
is first aborted under a fenced epoch), AddPartitionsToTxn/AddOffsetsToTxn move Empty/Complete* to Ongoing and
add partitions, EndTxn goes Ongoing -> Prepare{Commit,Abort} -> markers on every partition -> Complete*. Every
state change is written to `__transaction_state` before it holds, through `TxnIO` (the engine's appends).
Transactions v2 (KIP-890, the client's EndTxn v5+): EndTxn bumps the epoch (Prepare* and its markers carry epoch + 1,
a new producer id at epoch 0 follows an exhausted epoch) and answers the producer id and epoch to use next; an abort
needs no partitions (from Empty or Complete*); a retry is told apart by its epoch being one behind. The cluster's
`transaction.version` (TransactionConfig) says which value version the log gets (1 from transaction.version 1, with
the client's transaction version as tag 2) and how fences and timeouts abort; each request's own version says how
its producer is treated, as Kafka's brokers decide it.
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
TV2 = 2                             # transaction.version 2: the epoch bump per transaction (KIP-890)
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
    client_tv: int = 0  # the transaction version of the client that made the last change (ClientTransactionVersion)
    # memory only, as Kafka keeps them: the producer id before the last change (prevProducerId) and, while a v2
    # Prepare* whose epoch is exhausted is open, the producer id its Complete* takes (nextProducerId)
    prev_producer_id: int = -1
    next_producer_id: int = -1
    # memory only: the partitions of the transaction that completed last (its Prepare* record's; Complete* records
    # list none) and the epoch its data was written with, for closing a marker that a power cut took from one of them
    completed_partitions: set[TopicPartition] = field(default_factory=set)
    completed_epoch: int = -1

    def value(self) -> TxnLogValue:
        parts: dict[str, list[int]] | None = None
        if self.state != TxnState.EMPTY:
            parts = {}
            for topic, p in sorted(self.partitions):
                parts.setdefault(topic, []).append(p)
        return TxnLogValue(self.producer_id, self.producer_epoch, self.timeout_ms, self.state, parts,
                           self.last_update_ms, self.start_ms, client_transaction_version=self.client_tv)

    @classmethod
    def from_value(cls, tid: str, v: TxnLogValue) -> "TransactionMetadata":
        parts = {(t, p) for t, ids in (v.partitions or {}).items() for p in ids}
        return cls(tid, v.producer_id, v.producer_epoch, v.timeout_ms, v.state, parts, v.start_ms, v.last_update_ms,
                   v.client_transaction_version)

    @property
    def data_epoch(self) -> int:
        """The epoch the open (or Prepare*) transaction's data carries: a v2 Prepare* is one past it."""
        bumped = self.client_tv >= TV2 and self.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT)
        return self.producer_epoch - 1 if bumped else self.producer_epoch


class TransactionDescription(NamedTuple):
    """DescribeTransactions: one transactional id's coordinator state."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    state: str              # Kafka's name: Empty, Ongoing, PrepareCommit, ...
    timeout_ms: int
    start_ms: int           # when the open (or last) transaction began; -1 for none
    partitions: list[TopicPartition]


def _cannot_end(tid: str, md: TransactionMetadata, commit: bool) -> InvalidTxnStateError:
    return InvalidTxnStateError(f"cannot {'commit' if commit else 'abort'} transactional id {tid!r} in state "
                                f"{md.state.kafka_name}")


# Kafka's validPreviousStates
_VALID_PREVIOUS = {
    TxnState.EMPTY: {TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT},
    TxnState.ONGOING: {TxnState.ONGOING, TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT},
    TxnState.PREPARE_COMMIT: {TxnState.ONGOING},
    # (from Empty and Complete*: a v2 abort with no partition added)
    TxnState.PREPARE_ABORT: {TxnState.ONGOING, TxnState.PREPARE_EPOCH_FENCE, TxnState.EMPTY, TxnState.COMPLETE_COMMIT,
                             TxnState.COMPLETE_ABORT},
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
    # the cluster's finalized transaction.version feature (Kafka 4's default, 2; 0 and 1 as a cluster not upgraded)
    transaction_version: int = TV2

    @classmethod
    def of(cls, settings: dict | None) -> "TransactionConfig":
        out = settings_of(cls, settings, "transaction")
        for name, value in out._asdict().items():
            if name == "transaction_version":
                if type(value) is not int or not 0 <= value <= TV2:
                    raise InvalidConfigurationError(f"transaction_version={value!r} must be 0, 1 or 2 "
                                                    f"(the transaction.version feature)")
            elif type(value) is not int or value < 1:
                raise InvalidConfigurationError(f"{name}={value!r} must be an int >= 1")
        return out


class TransactionCoordinator:
    def __init__(self, io: TxnIO, clock: Clock, config: TransactionConfig = TransactionConfig()) -> None:
        self.io, self.clock = io, clock
        self.max_timeout_ms = config.transaction_max_timeout_ms
        self.id_expiration_ms = config.transactional_id_expiration_ms
        self.transaction_version = config.transaction_version
        self.txns: dict[str, TransactionMetadata] = {}
        self._lock = threading.RLock()

    # --- state changes ------------------------------------------------------------------------
    def _transition(self, md: TransactionMetadata, state: TxnState, **changes) -> None:
        """Write `md` in `state` (with `changes`) to the log, then make it the state in memory."""
        if md.state not in _VALID_PREVIOUS[state]:
            raise InvalidTxnStateError(f"transactional id {md.transactional_id!r} cannot go from "
                                       f"{md.state.kafka_name} to {state.kafka_name}")
        nxt = TransactionMetadata(**{**md.__dict__, "partitions": set(md.partitions), **changes, "state": state,
                                     "last_update_ms": self.clock.time_ms(), "prev_producer_id": md.producer_id})
        self.io.write_state(md.transactional_id, transaction_log.encode_value(
            nxt.value(), transaction_log.value_version(self.transaction_version)))
        md.__dict__.update(nxt.__dict__)

    def _end(self, md: TransactionMetadata, commit: bool) -> None:
        """Ongoing -> Prepare* -> markers -> Complete*."""
        self._transition(md, TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT)
        self._complete(md)

    def _complete(self, md: TransactionMetadata) -> None:
        """Write the markers of a Prepare* state (with its epoch) and move to Complete*."""
        commit = md.state == TxnState.PREPARE_COMMIT
        self.io.write_markers(md.producer_id, md.producer_epoch, self.io.coordinator_epoch(md.transactional_id),
                              sorted(md.partitions), commit)
        # Kafka's TransactionMetadata.prepareComplete: a completed transaction lists no partitions (a coordinator
        # loading the record would carry them into the next transaction); a v2 transaction that exhausted its
        # producer's epochs completes under the next producer id, at epoch 0
        rotate = md.client_tv >= TV2 and md.next_producer_id >= 0
        self._transition(md, TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT, partitions=set(),
                         completed_partitions=set(md.partitions), completed_epoch=md.data_epoch,
                         producer_id=md.next_producer_id if rotate else md.producer_id,
                         producer_epoch=0 if rotate else md.producer_epoch, next_producer_id=-1)

    def _fence_and_abort(self, md: TransactionMetadata) -> None:
        """PrepareEpochFence: bump the epoch (the open producer is fenced) and abort under it (the cluster's
        transaction version is the abort's, as Kafka's; either way its markers carry the bumped epoch)."""
        md.state = TxnState.PREPARE_EPOCH_FENCE  # in memory only, as Kafka's pending state
        try:
            self._transition(md, TxnState.PREPARE_ABORT, producer_epoch=min(md.producer_epoch + 1, MAX_EPOCH),
                             client_tv=self.transaction_version)
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
                       partitions: Iterable[TopicPartition], client_tv: int = 0) -> None:
        """AddPartitionsToTxn (and AddOffsetsToTxn, with the group's `__consumer_offsets` partition; with
        `client_tv` 2, a Produce v12 or TxnOffsetCommit v5 adding its partition itself)."""
        with self._lock:
            md = self._get(tid, producer_id, producer_epoch)
            new = set(partitions)
            if md.state == TxnState.ONGOING and new <= md.partitions:
                return
            ongoing = md.state == TxnState.ONGOING
            self._transition(md, TxnState.ONGOING, partitions=(md.partitions if ongoing else set()) | new,
                             start_ms=md.start_ms if ongoing else self.clock.time_ms(), client_tv=client_tv)

    def verify_partition(self, tid: str, producer_id: int, producer_epoch: int, tp: TopicPartition) -> bool:
        """Whether `tp` is in the open transaction of that producer (Kafka's transaction verification, for a first
        transactional append to a partition); a fenced or unknown producer raises as AddPartitionsToTxn does."""
        with self._lock:
            md = self._get(tid, producer_id, producer_epoch)
            return md.state == TxnState.ONGOING and tp in md.partitions

    def end_txn(self, tid: str, producer_id: int, producer_epoch: int, commit: bool,
                client_tv: int = 0) -> tuple[int, int]:
        """EndTxn: commit or abort the open transaction (a retry of a completed one succeeds). With `client_tv` 2
        (EndTxn v5+) the transaction ends under a bumped epoch; the (producer id, epoch) to use next."""
        with self._lock:
            if client_tv >= TV2:
                return self._end_txn_v2(tid, producer_id, producer_epoch, commit)
            md = self._get(tid, producer_id, producer_epoch)
            if md.state == TxnState.ONGOING:
                self._end(md, commit)
            elif md.state != (TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT):
                raise _cannot_end(tid, md, commit)
            return md.producer_id, md.producer_epoch

    def _end_txn_v2(self, tid: str, producer_id: int, producer_epoch: int, commit: bool) -> tuple[int, int]:
        """Kafka's TransactionCoordinator.endTransaction for transactions v2: which epochs are a retry, which a
        fence, and when an abort with nothing added still bumps the epoch."""
        md = self.txns.get(tid)
        if md is None:
            raise InvalidProducerIdMappingError(f"producer id {producer_id} does not belong to transactional id "
                                                f"{tid!r}")
        # a retry whose answer was lost: the coordinator is one epoch ahead (or rotated the id past an exhausted one)
        retry_on_overflow = (md.prev_producer_id == producer_id and producer_epoch == MAX_EPOCH - 1
                             and md.producer_epoch == 0)
        retry_on_bump = md.producer_epoch == producer_epoch + 1
        if md.producer_id != producer_id and not retry_on_overflow:
            raise InvalidProducerIdMappingError(f"producer id {producer_id} does not belong to transactional id "
                                                f"{tid!r}")
        prepared = md.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT)
        if prepared:  # (only a retry can find its own transaction still completing)
            valid = retry_on_bump
        elif md.state in (TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT):
            valid = retry_on_bump or retry_on_overflow or producer_epoch == md.producer_epoch
        else:
            valid = producer_epoch == md.producer_epoch
        if not valid:
            raise ProducerFencedError(f"producer epoch {producer_epoch} of transactional id {tid!r} is fenced by "
                                      f"epoch {md.producer_epoch}")
        want = TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT
        if prepared:  # Kafka answers CONCURRENT_TRANSACTIONS until the markers land; here they land now
            if md.state != (TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT):
                raise _cannot_end(tid, md, commit)
            self._complete(md)
        elif md.state == TxnState.ONGOING:
            self._end_v2(md, commit, nothing_added=False)
        elif retry_on_bump or retry_on_overflow:
            if md.state != want:
                raise _cannot_end(tid, md, commit)
        elif commit:
            raise _cannot_end(tid, md, commit)  # nothing to commit
        else:
            self._end_v2(md, commit, nothing_added=True)
        return md.producer_id, md.producer_epoch

    def _end_v2(self, md: TransactionMetadata, commit: bool, nothing_added: bool) -> None:
        """Prepare* under the next epoch (and the next producer id when this one's epochs are exhausted), its
        markers, Complete*."""
        next_pid = self.io.allocate_producer_id() if md.producer_epoch >= MAX_EPOCH - 1 else -1
        self._transition(md, TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT,
                         producer_epoch=md.producer_epoch + 1, client_tv=TV2, next_producer_id=next_pid,
                         start_ms=self.clock.time_ms() if nothing_added else md.start_ms)
        self._complete(md)

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
                        md.completed_partitions, md.completed_epoch = before.partitions, before.data_epoch
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
