"""A transactional producer's side of a transaction (Kafka's client TransactionManager).

States: UNINITIALIZED -> (init_transactions) READY -> (begin_transaction) IN_TRANSACTION -> (commit or abort)
READY; a failed send moves IN_TRANSACTION to ABORTABLE_ERROR (only abort_transaction leaves it); being fenced
(another producer initialised the same transactional.id, or the coordinator aborted this one on its timeout) is
FATAL_ERROR, after which every call raises ProducerFencedError. With transactions v2 (the coordinator's
transaction.version 2, as Kafka 4's clients use it when a cluster finalizes it), every EndTxn moves the producer to
the epoch the coordinator answers, and a commit of a transaction the coordinator aborted on its timeout is
InvalidTxnStateError, fatal as in Kafka's client (its abort takes the next epoch, as a retry would). Offsets sent
for a consumer the group has moved on from (its group_metadata() is stale) also make the transaction abort-only.
Coordinator requests that fail with a retriable error (a partition of an internal topic without a leader for a
moment) are retried for up to max_block_ms. A partition joins the transaction (AddPartitionsToTxn) before its first
batch is appended; a transaction that touched nothing ends without the coordinator, as Kafka's client does.
Threads: the producer calls it under its send lock.
"""
from __future__ import annotations

import enum
import threading

from engine.common.errors import (
    CommitFailedError,
    FencedInstanceIdError,
    IllegalGenerationError,
    IllegalStateError,
    InvalidConfigurationError,
    InvalidProducerEpochError,
    InvalidTxnStateError,
    KafkaError,
    ProducerFencedError,
    TransactionAbortableError,
    UnknownMemberIdError,
)
from engine.common.structs import ConsumerGroupMetadata
from engine.groups.offsets import committed_map


class State(enum.Enum):
    UNINITIALIZED = "UNINITIALIZED"
    READY = "READY"
    IN_TRANSACTION = "IN_TRANSACTION"
    ABORTABLE_ERROR = "ABORTABLE_ERROR"
    FATAL_ERROR = "FATAL_ERROR"


class TransactionManager:
    def __init__(self, engine, transactional_id, timeout_ms, *, retry_backoff_ms: int = 100,
                 max_block_ms: int = 60_000) -> None:
        if not isinstance(transactional_id, str) or not transactional_id:
            raise InvalidConfigurationError(f"transactional_id={transactional_id!r} must be a non-empty str")
        if type(timeout_ms) is not int or timeout_ms < 1:
            raise InvalidConfigurationError(f"transaction_timeout_ms={timeout_ms!r} must be an int >= 1")
        self._engine, self.transactional_id, self.timeout_ms = engine, transactional_id, timeout_ms
        self._backoff_ms, self._max_block_ms = retry_backoff_ms, max_block_ms
        self.state = State.UNINITIALIZED
        self.producer_id, self.producer_epoch = -1, -1
        self._partitions: set[tuple[str, int]] = set()
        self._touched = False  # a partition or the group offsets joined the transaction
        self._tv = 0  # the transaction version of the transaction begun: the coordinator's transaction.version
        self._error: KafkaError | None = None

    def _require(self, *states: State, call: str) -> None:
        if self.state == State.FATAL_ERROR:
            raise type(self._error)(f"transactional id {self.transactional_id!r} cannot be used: {self._error}")
        if self.state not in states:
            if self.state == State.ABORTABLE_ERROR:
                raise TransactionAbortableError(f"cannot {call}: the transaction failed ({self._error}); "
                                                f"call abort_transaction()")
            raise IllegalStateError(f"cannot {call} in state {self.state.value}")

    def _call(self, fn, *args):
        """A coordinator request, retried on retriable errors (no leader for a moment, too few in-sync replicas)
        for up to max_block_ms; a fence makes this producer unusable."""
        clock = self._engine.clock
        deadline = clock.time_ms() + self._max_block_ms
        while True:
            try:
                return fn(*args)
            except (ProducerFencedError, InvalidProducerEpochError) as exc:
                raise self.fenced(exc) from None
            except InvalidTxnStateError as exc:
                self.state, self._error = State.FATAL_ERROR, exc
                raise
            except KafkaError as exc:
                if not exc.retriable or clock.time_ms() + self._backoff_ms >= deadline:
                    raise
                clock.wait(threading.Event(), self._backoff_ms)

    def fenced(self, exc: KafkaError) -> ProducerFencedError:
        error = ProducerFencedError(f"transactional id {self.transactional_id!r} is fenced by a newer producer "
                                    f"epoch ({exc.message})", file=exc.file, offset=exc.offset)
        self.state, self._error = State.FATAL_ERROR, error
        return error

    def init(self) -> tuple[int, int]:
        self._require(State.UNINITIALIZED, call="init_transactions()")
        self.producer_id, self.producer_epoch = self._call(self._engine.transactions.init_producer_id,
                                                          self.transactional_id, self.timeout_ms)
        self.state = State.READY
        return self.producer_id, self.producer_epoch

    def begin(self) -> None:
        self._require(State.READY, call="begin_transaction()")
        self.state, self._partitions, self._touched, self._error = State.IN_TRANSACTION, set(), False, None
        # (Kafka's clients use transactions v2 once a cluster finalizes transaction.version 2; before, v0)
        self._tv = 2 if self._engine.transactions.coordinator.transaction_version >= 2 else 0

    @property
    def in_transaction(self) -> bool:
        return self.state is State.IN_TRANSACTION

    def check_send(self) -> None:
        self._require(State.IN_TRANSACTION, call="send() outside a transaction")

    def before_append(self, partitions) -> None:
        """AddPartitionsToTxn for the partitions of the batches about to be appended, once per transaction (one
        request for all that are new, as Kafka's sender batches them)."""
        self._require(State.IN_TRANSACTION, call="send()")
        new = set(partitions) - self._partitions
        if new:
            self._call(self._engine.transactions.coordinator.add_partitions, self.transactional_id,
                       self.producer_id, self.producer_epoch, sorted(new), self._tv)
            self._partitions |= new
            self._touched = True

    def on_failed(self, exc: KafkaError) -> KafkaError:
        """A batch of the transaction failed: the error it fails with (fencing is fatal, the rest abortable)."""
        if isinstance(exc, (ProducerFencedError, InvalidProducerEpochError)):
            return exc if self.state == State.FATAL_ERROR else self.fenced(exc)
        if self.state == State.IN_TRANSACTION:
            self.state, self._error = State.ABORTABLE_ERROR, exc
        return exc

    def send_offsets(self, offsets: dict, group) -> None:
        """TxnOffsetCommit for `group` (a group id, or a member's ConsumerGroupMetadata, whose generation and member id
        the coordinator then checks: a member the group has moved on from makes the transaction abort-only)."""
        self._require(State.IN_TRANSACTION, call="send_offsets_to_transaction()")
        member = group if isinstance(group, ConsumerGroupMetadata) else ConsumerGroupMetadata(group)
        committed = committed_map(offsets, self._engine.partition)
        try:
            self._call(self._engine.transactions.commit_offsets, self.transactional_id, self.producer_id,
                       self.producer_epoch, member, committed, self._tv)
        except (IllegalGenerationError, UnknownMemberIdError, FencedInstanceIdError) as exc:
            self.state, self._error, self._touched = State.ABORTABLE_ERROR, exc, True  # the partition joined
            raise CommitFailedError(f"the offsets of group {member.group_id!r} cannot join the transaction: "
                                    f"{exc.message}; abort it") from None
        self._touched = True

    def check_commit(self) -> None:
        self._require(State.IN_TRANSACTION, call="commit_transaction()")

    def check_abort(self) -> None:
        self._require(State.IN_TRANSACTION, State.ABORTABLE_ERROR, call="abort_transaction()")

    def end(self, commit: bool) -> bool:
        """EndTxn (skipped when the transaction touched nothing); READY after it. True when it moved this producer to
        a new epoch (transactions v2: every transaction ends with one), whose sequences start again at 0."""
        bumped = False
        if self._touched:
            pid_epoch = self._call(self._engine.transactions.coordinator.end_txn, self.transactional_id,
                                   self.producer_id, self.producer_epoch, commit, self._tv)
            bumped = pid_epoch != (self.producer_id, self.producer_epoch)
            self.producer_id, self.producer_epoch = pid_epoch
        self.state, self._partitions, self._touched, self._error = State.READY, set(), False, None
        return bumped
