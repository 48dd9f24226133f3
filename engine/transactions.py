"""Transactions in an engine: the coordinator's writes, its markers, and the group offsets they carry.

The engine's side of txn.transaction_coordinator.TxnIO: a state change is one record appended to the
transactional id's `__transaction_state` partition, a marker is appended to each partition's leader, and both
wait for the ISR (acks='all'). Offsets sent to a transaction (TxnOffsetCommit) are a transactional batch in the
group's `__consumer_offsets` partition, under the producer's id and epoch; the group coordinator's offset store
(engine.groups) holds them pending until the marker. Both internal topics are created (50 partitions each) on
first use and loaded on open.
Crash policy: see the coordinator's (the logs are the truth; Prepare* states complete on load). On open, a
transaction still open in a partition but not open at the coordinator (a power loss can keep one file's
appends and not another's) is closed: COMMIT if the coordinator completed that commit, else ABORT.
Thread-safety: the coordinator's lock serialises requests; the group coordinator has its own.
"""
from __future__ import annotations

import logging
from typing import Callable, NamedTuple

from engine.common.errors import (
    InvalidConfigurationError,
    KafkaError,
    TransactionAbortableError,
    UnknownTopicOrPartitionError,
)
from engine.common.structs import ConsumerGroupMetadata, OffsetAndMetadata, TopicPartition
from engine.common.clock import Clock
from engine.groups import offsets
from engine.groups.group_coordinator import GroupCoordinator
from engine.internal_topics import INTERNAL_WRITE_TIMEOUT_MS, InternalTopics
from engine.record import codec
from engine.txn import transaction_log
from engine.txn.transaction_coordinator import TV2, TransactionConfig, TransactionCoordinator
from engine.txn.transaction_log import TxnState

log = logging.getLogger("kafkalog.transactions")


class OpenTransaction(NamedTuple):
    """A transaction open in one partition (what KIP-664's DescribeProducers shows)."""

    topic: str
    partition: int
    producer_id: int
    producer_epoch: int
    first_offset: int
    last_timestamp: int
    transactional_id: str | None


class Transactions:
    """The transaction coordinator of one engine and its TxnIO (see the module docstring): it writes through
    `internal` (the coordinators' appends and markers), reads the group coordinator's offset store through `groups()`,
    takes producer ids from `allocate_producer_id()`, and after a clean shutdown looks for orphans only in the
    partitions `transaction_partitions()` names (None: every partition)."""

    def __init__(self, internal: InternalTopics, clock: Clock, config: TransactionConfig, *,
                 groups: Callable[[], GroupCoordinator], allocate_producer_id: Callable[[], int],
                 transaction_partitions: Callable[[], set[tuple[str, int]] | None]) -> None:
        self._internal, self._clock, self._groups = internal, clock, groups
        self.allocate_producer_id, self._transaction_partitions = allocate_producer_id, transaction_partitions
        self.coordinator = TransactionCoordinator(self, clock, config)
        if internal.adopted(transaction_log.TOPIC):
            self.coordinator.load(self._records())
        self.resolve_orphans()

    @property
    def offsets(self):
        """The committed group offsets (the group coordinator's store)."""
        return self._groups().offsets

    def ensure_topic(self, topic: str) -> None:
        """Create an internal topic on first use (adopting a broker's partitions of it, whose records load)."""
        if self._internal.ensure_internal_topic(topic):
            if topic == transaction_log.TOPIC:
                self.coordinator.load(self._records())
            else:
                self._groups().load()

    def init_producer_id(self, transactional_id: str, timeout_ms: int) -> tuple[int, int]:
        self.ensure_topic(transaction_log.TOPIC)
        return self.coordinator.init_producer_id(transactional_id, timeout_ms)

    def _records(self):
        """(key, value) of every `__transaction_state` record up to each partition's HW."""
        topic = transaction_log.TOPIC
        for p in range(self._internal.internal_topics()[topic]):
            log = self._internal.internal_partition(topic, p).log
            for _, batch in log.batches(log.log_start_offset, log.high_watermark):
                if not batch.is_control:
                    yield from ((r.key, r.value) for r in batch.records())

    # --- TxnIO ----------------------------------------------------------------------------------
    def write_state(self, transactional_id: str, value: bytes | None) -> None:
        data = codec.encode_batch([(transaction_log.encode_key(transactional_id), value, None,
                                    self._clock.time_ms())])
        self._internal.append_internal(transaction_log.TOPIC, transaction_log.partition(transactional_id), data)

    def coordinator_epoch(self, transactional_id: str) -> int:
        return self._internal.internal_partition(transaction_log.TOPIC, transaction_log.partition(transactional_id)) \
            .leader_epoch

    def write_markers(self, producer_id: int, producer_epoch: int, coordinator_epoch: int,
                      partitions: list[tuple[str, int]], commit: bool) -> None:
        for topic, p in partitions:
            try:
                self._internal.append_marker(topic, p, commit, producer_id, producer_epoch, coordinator_epoch,
                                        INTERNAL_WRITE_TIMEOUT_MS)
            except UnknownTopicOrPartitionError:
                continue  # deleted since it joined the transaction: nothing to mark
            if topic == offsets.TOPIC:
                self.offsets.complete(p, producer_id, commit)

    # --- requests the producer makes ------------------------------------------------------------
    def add_offsets(self, transactional_id: str, producer_id: int, producer_epoch: int, group_id: str,
                    client_tv: int = 0) -> None:
        """AddOffsetsToTxn: the group's `__consumer_offsets` partition joins the transaction."""
        _check_group(group_id)
        self.ensure_topic(offsets.TOPIC)
        self.coordinator.add_partitions(transactional_id, producer_id, producer_epoch,
                                        [(offsets.TOPIC, offsets.partition(group_id))], client_tv)

    def admit(self, transactional_id: str, tp: tuple[str, int], producer_id: int, producer_epoch: int,
              producer_state, add: bool) -> None:
        """Kafka's transaction verification (KIP-890) before a client's transactional batch of that producer is
        appended to `tp`, whose producer state is `producer_state`: the producer's first batch there in a transaction
        must belong to its open transaction. With `add` (Produce v12+, TxnOffsetCommit v5+: transactions v2) the
        partition joins the transaction here; otherwise a partition the coordinator does not list is
        TransactionAbortableError.
        A fenced or unknown producer raises as AddPartitionsToTxn would."""
        entry = producer_state.producers.get(producer_id)
        if entry is not None and entry.txn_first_offset >= 0 and entry.epoch == producer_epoch:
            return  # its transaction is open there already
        if add:
            self.coordinator.add_partitions(transactional_id, producer_id, producer_epoch, [tp], TV2)
        elif not self.coordinator.verify_partition(transactional_id, producer_id, producer_epoch, tp):
            raise TransactionAbortableError(f"partition {tp[0]}-{tp[1]} was not added to the transaction of "
                                            f"transactional id {transactional_id!r}")

    def commit_offsets(self, transactional_id: str, producer_id: int, producer_epoch: int,
                       member: ConsumerGroupMetadata, committed: dict[TopicPartition, OffsetAndMetadata],
                       client_tv: int = 0) -> None:
        """TxnOffsetCommit: `committed` written in the producer's transaction, visible once it commits (the group's
        partition joins the transaction first, as AddOffsetsToTxn or, from transactions v2, TxnOffsetCommit v5 does)."""
        self.add_offsets(transactional_id, producer_id, producer_epoch, member.group_id, client_tv)
        self._groups().commit_transactional(member, committed, producer_id, producer_epoch)

    def resolve_orphans(self) -> int:
        """Close transactions of this coordinator's producers left open in a partition where the coordinator has
        none open (a power loss kept a partition's data but not its marker): COMMIT where the coordinator completed
        that commit, ABORT otherwise (as `kafka-transactions.sh abort` does for a hanging transaction). Producers
        it does not know are left alone. The count closed. A coordinator that knows no transactional id has nothing to
        close; after a clean shutdown only the partitions the catalogue noted with an open transaction, and the ones
        loaded since, are looked at (ReplicaManager.transaction_partitions); after an unclean one, every partition."""
        if not self.coordinator.txns:
            return 0
        closed = 0
        for o in self.open_transactions(self._transaction_partitions()):
            if o.transactional_id is None:
                continue  # a producer this coordinator never knew (a broker's, in an adopted directory)
            md = self.coordinator.txns[o.transactional_id]
            tp = (o.topic, o.partition)
            if md.producer_epoch == o.producer_epoch and tp in md.partitions and md.state == TxnState.ONGOING:
                continue  # a live transaction: its producer (or its timeout) ends it
            commit = md.completed_epoch == o.producer_epoch and tp in md.completed_partitions \
                and md.state == TxnState.COMPLETE_COMMIT
            epoch = max(o.producer_epoch, md.producer_epoch)
            coordinator_epoch = self.coordinator_epoch(o.transactional_id)
            try:
                self.write_markers(o.producer_id, epoch, coordinator_epoch, [(o.topic, o.partition)], commit)
            except KafkaError as exc:
                log.warning("could not close the transaction open in %s-%d since offset %d: %s", o.topic,
                            o.partition, o.first_offset, exc)
                continue
            log.warning("closed the transaction of producer %d open in %s-%d since offset %d with %s (its "
                        "coordinator had no such open transaction)", o.producer_id, o.topic, o.partition,
                        o.first_offset, "COMMIT" if commit else "ABORT")
            closed += 1
        return closed

    def open_transactions(self, among: set[tuple[str, int]] | None = None) -> list[OpenTransaction]:
        """Every partition's open transactions (hanging ones included), from the partitions' producer state; with
        `among`, only those partitions' and the ones whose log is loaded already (the others are not loaded)."""
        out = []
        for (topic, p), part in sorted(self._internal.leaders().items()):
            if among is not None and (topic, p) not in among and part.loaded_log is None:
                continue
            for pid, entry in sorted(part.load_log().producer_state.ongoing().items()):
                out.append(OpenTransaction(topic, p, pid, entry.epoch, entry.txn_first_offset, entry.last_timestamp,
                                           self.coordinator.transactional_id_of(pid)))
        return out


def _check_group(group_id) -> str:
    if not isinstance(group_id, str) or not group_id:
        raise InvalidConfigurationError(f"group_id must be a non-empty str, got {group_id!r}")
    return group_id
