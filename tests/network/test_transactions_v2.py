"""Transactions over the wire as Kafka 4's brokers serve them: transaction verification for clients of transactions
v1 (a first transactional batch, or offsets, outside the transaction are refused with the error the request's
version knows), and a transactions v2 client's requests (Produce v12 and TxnOffsetCommit v5 add their partition,
EndTxn v5 ends under the next epoch and answers it). Batches are built with kafka-python's record builder and the
expected codes come from kafka-python's table of Kafka's errors; Kafka's Java producer judges the whole flow in
make interop (tests/broker/test_kafka_transactions_v2.py)."""
from __future__ import annotations

import socket

import pytest
from kafka import errors as kafka_errors
from kafka.record.default_records import DefaultRecordBatchBuilder

import engine
from engine.groups import offsets
from engine.protocol import messages as m
from tests.network.test_kafka_semantics import served  # noqa: F401  (a fixture: an engine and its listener)
from tests.network.test_listener import _call

ABORTABLE, INVALID_TXN_STATE = kafka_errors.TransactionAbortableError.errno, kafka_errors.InvalidTxnStateError.errno
FENCED = kafka_errors.ProducerFencedError.errno


def _batch(pid: int, epoch: int, seq: int, values: list[bytes]) -> bytes:
    b = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=True, producer_id=pid,
                                  producer_epoch=epoch, base_sequence=seq, batch_size=1 << 20)
    for i, v in enumerate(values):
        b.append(i, timestamp=1_700_000_000_000, key=None, value=v, headers=[])
    return bytes(b.build())


def _produce(sock, version: int, tid: str, topic: str, data: bytes) -> int:
    answer = _call(sock, m.PRODUCE, version, {"transactional_id": tid, "acks": -1, "timeout_ms": 5000, "topic_data": [
        {"name": topic, "partition_data": [{"index": 0, "records": data}]}]})
    return answer["responses"][0]["partition_responses"][0]["error_code"]


def _txn_offset_commit(sock, version: int, tid: str, pid: int, epoch: int, group: str, topic: str, at: int) -> int:
    answer = _call(sock, m.TXN_OFFSET_COMMIT, version, {
        "transactional_id": tid, "group_id": group, "producer_id": pid, "producer_epoch": epoch,
        "topics": [{"name": topic, "partitions": [{"partition_index": 0, "committed_offset": at,
                                                   "committed_metadata": None}]}]})
    return answer["topics"][0]["partitions"][0]["error_code"]


def _init(sock, version: int, tid: str) -> tuple[int, int]:
    answer = _call(sock, m.INIT_PRODUCER_ID, version, {"transactional_id": tid, "transaction_timeout_ms": 60_000})
    assert answer["error_code"] == 0
    return answer["producer_id"], answer["producer_epoch"]


def _state(eng, tid: str):
    return eng.transactions.coordinator.describe(tid)


def test_a_v1_clients_batch_or_offsets_outside_its_transaction_are_refused(served):
    """KIP-890's verification: Produce v11 / TxnOffsetCommit v4 get TRANSACTION_ABORTABLE, older versions
    INVALID_TXN_STATE; nothing is appended; once the partition is added the same requests succeed."""
    eng, listener = served
    eng.create_topic("t")
    with socket.create_connection(listener.address) as sock:
        pid, epoch = _init(sock, 4, "v1")
        assert _produce(sock, 11, "v1", "t", _batch(pid, epoch, 0, [b"x"])) == ABORTABLE
        assert _produce(sock, 10, "v1", "t", _batch(pid, epoch, 0, [b"x"])) == INVALID_TXN_STATE
        assert eng.log("t", 0).log_end_offset == 0 and _state(eng, "v1").state == "Empty"
        added = _call(sock, m.ADD_PARTITIONS_TO_TXN, 3, {
            "v3_and_below_transactional_id": "v1", "v3_and_below_producer_id": pid,
            "v3_and_below_producer_epoch": epoch, "v3_and_below_topics": [{"name": "t", "partitions": [0]}]})
        assert added["results_by_topic_v3_and_below"][0]["results_by_partition"][0]["partition_error_code"] == 0
        assert _produce(sock, 11, "v1", "t", _batch(pid, epoch, 0, [b"a"])) == 0
        assert _produce(sock, 11, "v1", "t", _batch(pid, epoch, 1, [b"b"])) == 0
        assert _txn_offset_commit(sock, 4, "v1", pid, epoch, "g", "t", 2) == ABORTABLE
        assert _txn_offset_commit(sock, 3, "v1", pid, epoch, "g", "t", 2) == INVALID_TXN_STATE
        assert _call(sock, m.ADD_OFFSETS_TO_TXN, 3, {"transactional_id": "v1", "producer_id": pid,
                                                     "producer_epoch": epoch, "group_id": "g"})["error_code"] == 0
        assert _txn_offset_commit(sock, 3, "v1", pid, epoch, "g", "t", 2) == 0
        ended = _call(sock, m.END_TXN, 4, {"transactional_id": "v1", "producer_id": pid, "producer_epoch": epoch,
                                           "committed": True})
        assert ended["error_code"] == 0
    assert (_state(eng, "v1").state, _state(eng, "v1").producer_epoch) == ("CompleteCommit", epoch)
    assert eng.committed("g", ("t", 0)).offset == 2


def test_a_v2_clients_produce_and_offsets_join_its_transaction_and_end_txn_moves_its_epoch(served):
    eng, listener = served
    eng.create_topic("t")
    group_tp = (offsets.TOPIC, offsets.partition("g2"))
    with socket.create_connection(listener.address) as sock:
        pid, epoch = _init(sock, 5, "v2")
        assert _produce(sock, 12, "v2", "t", _batch(pid, epoch, 0, [b"a", b"b"])) == 0
        assert _produce(sock, 12, "v2", "t", _batch(pid, epoch, 2, [b"c"])) == 0
        assert _txn_offset_commit(sock, 5, "v2", pid, epoch, "g2", "t", 3) == 0
        d = _state(eng, "v2")
        assert (d.state, sorted(d.partitions)) == ("Ongoing", sorted([("t", 0), group_tp]))
        ended = _call(sock, m.END_TXN, 5, {"transactional_id": "v2", "producer_id": pid, "producer_epoch": epoch,
                                           "committed": True})
        assert (ended["error_code"], ended["producer_id"], ended["producer_epoch"]) == (0, pid, epoch + 1)
        # the next transaction: the new epoch, sequences from 0; the old epoch is fenced
        assert _produce(sock, 12, "v2", "t", _batch(pid, epoch + 1, 0, [b"d"])) == 0
        assert _produce(sock, 12, "v2", "t", _batch(pid, epoch, 3, [b"late"])) == FENCED
        ended = _call(sock, m.END_TXN, 5, {"transactional_id": "v2", "producer_id": pid,
                                           "producer_epoch": epoch + 1, "committed": False})
        assert (ended["error_code"], ended["producer_id"], ended["producer_epoch"]) == (0, pid, epoch + 2)
    lg = eng.log("t", 0)
    markers = [(b.producer_epoch, next(iter(b.records())).key[-1]) for _, b in lg.batches(0, lg.log_end_offset)
               if b.is_control]
    assert markers == [(epoch + 1, 1), (epoch + 2, 0)]  # commit at the bumped epoch, then the abort at the next
    assert eng.committed("g2", ("t", 0)).offset == 3
    c = eng.consumer(isolation_level="read_committed", auto_offset_reset="earliest", consumer_timeout_ms=0)
    c.assign([engine.TopicPartition("t", 0)])
    got = []
    while c.position(engine.TopicPartition("t", 0)) < c.end_offsets([engine.TopicPartition("t", 0)])[
            engine.TopicPartition("t", 0)]:
        got += [r.value for rs in c.poll(max_records=100).values() for r in rs]
    assert got == [b"a", b"b", b"c"]


@pytest.mark.parametrize("tv", [0, 1, 2])
def test_api_versions_finalizes_the_transaction_version_served(tmp_path, tv):
    """Kafka 4's clients take transactions v2 from the finalized `transaction.version` (2); at 0 it is not listed
    (Kafka lists no feature finalized at level 0) and they keep to v1."""
    with engine.open(str(tmp_path), transaction_config={"transaction_version": tv}) as eng:
        listener = eng.serve(port=0)
        with socket.create_connection(listener.address) as sock:
            answer = _call(sock, m.API_VERSIONS, 3, {"client_software_name": "t", "client_software_version": "1"})
    finalized = {f["name"]: (f["min_version_level"], f["max_version_level"]) for f in answer["finalized_features"]}
    assert finalized.get("transaction.version") == ((tv, tv) if tv else None)
    supported = {f["name"]: (f["min_version"], f["max_version"]) for f in answer["supported_features"]}
    assert supported["transaction.version"] == (0, 2)
