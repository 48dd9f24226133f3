"""Records of `__transaction_state`: one per transactional id and state change (Kafka's TransactionLog).

Byte layout (engine.record.schema encodings): key = `int16 version (0) | TransactionalId string`; value =
`int16 version | ProducerId int64 | ProducerEpoch int16 | TransactionTimeoutMs int32 | TransactionStatus int8
| TransactionPartitions nullable [Topic string, PartitionIds [int32]] | TransactionLastUpdateTimestampMs int64 |
TransactionStartTimestampMs int64`; version 0 is non-flexible, version 1 flexible with tagged fields
(0 PreviousProducerId int64, 1 NextProducerId int64, 2 ClientTransactionVersion int16, 3 NextProducerEpoch int16).
kafkalog writes version 0 while the transaction.version feature is 0 and version 1 from 1 on, as Kafka does, with tag
2 alone (Kafka sets no other) when the client's transaction version is not 0; it reads both. A null value (a
tombstone) removes the id. Partition = abs(javaHashCode(id)) % 50.
Crash policy: records are appended to the log like any other (acks='all'); the latest per id wins on load.
Pure functions over bytes; thread-safe.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass

from engine.common.errors import CorruptRecordError
from engine.record.schema import Reader, Writer, partition_for

TOPIC = "__transaction_state"
PARTITIONS = 50  # transaction.state.log.num.partitions
KEY_VERSION = 0
CLIENT_TRANSACTION_VERSION_TAG = 2


class TxnState(enum.IntEnum):
    """Kafka's TransactionState ids (the TransactionStatus byte)."""

    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def kafka_name(self) -> str:
        return "".join(part.capitalize() for part in self.name.split("_"))


@dataclass(frozen=True)
class TxnLogValue:
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState
    partitions: dict[str, list[int]] | None  # None: a null array (Kafka writes it for Empty)
    last_update_ms: int
    start_ms: int
    # tag 2 of version 1; its other tagged fields (PreviousProducerId, NextProducerId, NextProducerEpoch: Kafka's
    # for its retries, which this coordinator keeps in memory) are read past
    client_transaction_version: int = 0


def value_version(transaction_version: int) -> int:
    """The value version a cluster at that transaction.version writes (Kafka's transactionLogValueVersion)."""
    return 1 if transaction_version >= 1 else 0


def partition(transactional_id: str) -> int:
    return partition_for(transactional_id, PARTITIONS)


def encode_key(transactional_id: str) -> bytes:
    return Writer().int(16, KEY_VERSION).string(transactional_id).done()


def decode_key(data) -> str:
    r = Reader(data, "transaction log key")
    r.version(KEY_VERSION, "key version", KEY_VERSION)
    tid = r.string("TransactionalId")
    r.end()
    return tid


def encode_value(v: TxnLogValue, version: int = 0) -> bytes:
    flexible = version >= 1
    w = Writer(flexible).int(16, version).int(64, v.producer_id).int(16, v.producer_epoch).int(32, v.timeout_ms)
    w.int(8, int(v.state))
    parts = None if v.partitions is None else sorted(v.partitions.items())
    w.count(None if parts is None else len(parts))
    for topic, ids in parts or ():
        w.string(topic).int32s(sorted(ids))
        if flexible:
            w.tagged({})
    w.int(64, v.last_update_ms).int(64, v.start_ms)
    if flexible:
        tv = v.client_transaction_version
        w.tagged({CLIENT_TRANSACTION_VERSION_TAG: Writer().int(16, tv).done()} if tv else {})
    return w.done()


def decode_value(data) -> TxnLogValue:
    r = Reader(data, "transaction log value")
    version = r.version(1, "value version")
    flexible = version >= 1
    pid, epoch, timeout = r.int(64, "ProducerId"), r.int(16, "ProducerEpoch"), r.int(32, "TransactionTimeoutMs")
    status = r.int(8, "TransactionStatus")
    try:
        state = TxnState(status)
    except ValueError:
        raise CorruptRecordError(f"transaction log value: unknown TransactionStatus {status}") from None
    n = r.count("TransactionPartitions", flexible)
    parts: dict[str, list[int]] | None = None if n is None else {}
    for _ in range(n or 0):
        topic = r.string("Topic", flexible)
        m = r.count("PartitionIds", flexible) or 0
        parts[topic] = [r.int(32, "PartitionId") for _ in range(m)]
        if flexible:
            r.tagged()
    last, start = r.int(64, "TransactionLastUpdateTimestampMs"), r.int(64, "TransactionStartTimestampMs")
    tagged = r.tagged() if flexible else {}
    r.end()
    tv = tagged.get(CLIENT_TRANSACTION_VERSION_TAG)
    if tv is not None:
        tv = Reader(tv, "ClientTransactionVersion")
        client_tv = tv.int(16, "ClientTransactionVersion")
        tv.end()
    else:
        client_tv = 0
    return TxnLogValue(pid, epoch, timeout, state, parts, last, start, client_tv)


def describe_value(v: TxnLogValue | None) -> str:
    """Kafka's TransactionLogMessageFormatter-like text of a value (for dump-log's decoder)."""
    if v is None:
        return "<DELETE>"
    parts = ",".join(f"{t}-{p}" for t, ids in (v.partitions or {}).items() for p in ids)  # the record's order
    return (f"producerId:{v.producer_id},producerEpoch:{v.producer_epoch},state={v.state.kafka_name},"
            f"partitions=[{parts}],txnLastUpdateTimestamp={v.last_update_ms},txnTimeoutMs={v.timeout_ms}")
