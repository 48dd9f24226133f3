"""Transactions v2 (KIP-890's second part) in the coordinator and the in-process producer: EndTxn v5 ends every
transaction under the next epoch, its markers carry that epoch, a retry is known by its epoch being one behind, an
abort needs no partition, and an exhausted epoch moves to a new producer id at epoch 0. The rules are those of
Kafka 4's TransactionCoordinator.endTransaction; Kafka's own Java producer judges them over the wire in make interop
(tests/broker/test_kafka_transactions_v2.py)."""
from __future__ import annotations

import pytest

import engine
from engine.common.errors import InvalidProducerIdMappingError, InvalidTxnStateError, ProducerFencedError
from engine.txn import transaction_log
from engine.txn.transaction_coordinator import MAX_EPOCH, TV2
from tests.unit.test_transactions import read

TID = "v2"


def _markers(e, topic: str) -> list[tuple[int, int, bool]]:
    """(producer id, producer epoch, commit) of every control batch in the partition, in log order."""
    lg = e.log(topic, 0)
    out = []
    for _, batch in lg.batches(0, lg.log_end_offset):
        if batch.is_control:
            rec, = batch.records()
            out.append((batch.producer_id, batch.producer_epoch, rec.key[-1] == 1))
    return out


def _state_records(e) -> int:
    part = e.internal.internal_partition(transaction_log.TOPIC, transaction_log.partition(TID))
    return part.log.log_end_offset


def _append(e, topic: str, pid: int, epoch: int, seq: int) -> None:
    e.append(topic, 0, engine.encode_batch([(None, b"v", None, 0)], producer_id=pid, producer_epoch=epoch,
                                          base_sequence=seq, transactional=True))


def test_end_txn_v2_bumps_the_epoch_and_tells_a_retry_from_a_fenced_producer(tmp_path):
    with engine.open(tmp_path) as e:
        e.create_topic("t")
        c = e.transactions.coordinator
        pid, epoch = e.transactions.init_producer_id(TID, 60_000)
        c.add_partitions(TID, pid, epoch, [("t", 0)], TV2)
        _append(e, "t", pid, epoch, 0)
        assert c.end_txn(TID, pid, epoch, True, TV2) == (pid, epoch + 1)
        assert _markers(e, "t") == [(pid, epoch + 1, True)]  # the marker carries the bumped epoch
        assert c.describe(TID).state == "CompleteCommit"
        written = _state_records(e)
        # the same EndTxn again (its answer was lost): the same answer, nothing written, no second marker
        assert c.end_txn(TID, pid, epoch, True, TV2) == (pid, epoch + 1)
        assert _state_records(e) == written and len(_markers(e, "t")) == 1
        with pytest.raises(InvalidTxnStateError):  # a retry that asks the other outcome
            c.end_txn(TID, pid, epoch, False, TV2)
        with pytest.raises(InvalidTxnStateError):  # at the new epoch there is nothing to commit
            c.end_txn(TID, pid, epoch + 1, True, TV2)
        # an abort with nothing added still ends a transaction: one more epoch, no marker anywhere
        assert c.end_txn(TID, pid, epoch + 1, False, TV2) == (pid, epoch + 2)
        assert len(_markers(e, "t")) == 1 and c.describe(TID).state == "CompleteAbort"
        with pytest.raises(ProducerFencedError):  # two epochs behind is no retry
            c.end_txn(TID, pid, epoch, False, TV2)
        with pytest.raises(ProducerFencedError):  # ahead of the coordinator
            c.end_txn(TID, pid, epoch + 3, False, TV2)
        with pytest.raises(InvalidProducerIdMappingError):
            c.end_txn(TID, pid + 1, epoch + 2, False, TV2)
        # a v1 EndTxn of the same producer keeps its epoch, as Kafka's coordinator treats EndTxn before v5
        c.add_partitions(TID, pid, epoch + 2, [("t", 0)])
        _append(e, "t", pid, epoch + 2, 0)
        assert c.end_txn(TID, pid, epoch + 2, False) == (pid, epoch + 2)
        assert _markers(e, "t")[-1] == (pid, epoch + 2, False)


def test_a_v2_abort_from_empty_bumps_and_a_commit_from_empty_is_refused(tmp_path):
    with engine.open(tmp_path) as e:
        c = e.transactions.coordinator
        pid, epoch = e.transactions.init_producer_id(TID, 60_000)
        with pytest.raises(InvalidTxnStateError):
            c.end_txn(TID, pid, epoch, True, TV2)
        assert c.end_txn(TID, pid, epoch, False, TV2) == (pid, epoch + 1)
        d = c.describe(TID)
        assert (d.state, d.producer_epoch, d.partitions) == ("CompleteAbort", epoch + 1, [])


def test_an_exhausted_epoch_ends_its_transaction_under_a_new_producer_id(tmp_path):
    """Kafka's rule: an epoch >= Short.MAX_VALUE - 1 is exhausted; the transaction that reaches it writes its
    markers at Short.MAX_VALUE under the old id and completes under a new id at epoch 0, and a retry of that EndTxn
    (old id, MAX - 1) gets the new id."""
    with engine.open(tmp_path) as e:
        e.create_topic("t")
        c = e.transactions.coordinator
        pid, _ = e.transactions.init_producer_id(TID, 60_000)
        c.txns[TID].producer_epoch = MAX_EPOCH - 2  # (as if 32,765 transactions had ended)
        epoch = MAX_EPOCH - 2
        c.add_partitions(TID, pid, epoch, [("t", 0)], TV2)
        _append(e, "t", pid, epoch, 0)
        assert c.end_txn(TID, pid, epoch, True, TV2) == (pid, MAX_EPOCH - 1)
        c.add_partitions(TID, pid, MAX_EPOCH - 1, [("t", 0)], TV2)
        _append(e, "t", pid, MAX_EPOCH - 1, 0)
        new_pid, new_epoch = c.end_txn(TID, pid, MAX_EPOCH - 1, True, TV2)
        assert new_pid != pid and new_epoch == 0
        assert _markers(e, "t")[-1] == (pid, MAX_EPOCH, True)
        assert c.end_txn(TID, pid, MAX_EPOCH - 1, True, TV2) == (new_pid, 0)  # the retry
        c.add_partitions(TID, new_pid, 0, [("t", 0)], TV2)  # the new id carries on
        _append(e, "t", new_pid, 0, 0)
        assert c.end_txn(TID, new_pid, 0, True, TV2) == (new_pid, 1)
        assert [v for _, _, v in read(e, "t")] == [b"v"] * 3


@pytest.mark.parametrize("tv", [0, 1, 2])
def test_the_in_process_producer_follows_the_coordinators_transaction_version(tmp_path, tv):
    """Kafka's client uses transactions v2 when the cluster finalizes transaction.version 2: the producer then takes
    the epoch each EndTxn answers and starts its sequences again at 0; below 2 it keeps its epoch."""
    with engine.open(tmp_path, transaction_config={"transaction_version": tv}) as e:
        e.create_topic("t")
        p = e.producer(transactional_id=TID)
        p.init_transactions()
        epochs = []
        for i in range(3):
            p.begin_transaction()
            p.send("t", b"%d" % i, partition=0).get()
            p.send("t", b"%d" % i, partition=0).get()
            p.commit_transaction() if i != 1 else p.abort_transaction()
            epochs.append(p.producer_epoch)
        p.begin_transaction()
        p.commit_transaction()  # touched nothing: no EndTxn, no bump
        epochs.append(p.producer_epoch)
        assert epochs == ([1, 2, 3, 3] if tv == 2 else [0, 0, 0, 0])
        assert [(m[1], m[2]) for m in _markers(e, "t")] == \
            ([(1, True), (2, False), (3, True)] if tv == 2 else [(0, True), (0, False), (0, True)])
        assert [v for _, _, v in read(e, "t")] == [b"0", b"0", b"2", b"2"]
        entry = e.log("t", 0).producer_state.producers[p.producer_id]
        # (the marker at the new epoch leaves no batch of it: the next starts at sequence 0)
        assert (entry.epoch, entry.last_seq) == ((3, -1) if tv == 2 else (0, 5))
