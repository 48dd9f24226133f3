"""Transactions: the seed's examples, fencing, timeouts, recovery of a PrepareCommit, misuse, a model check of
read_committed, and Kafka's txn-0 vector read with Kafka's aborted ranges."""
from __future__ import annotations

import os
import random
import shutil
import struct

import pytest

import engine
from engine import ManualClock, TopicPartition
from engine.common.errors import (
    IllegalStateError,
    InvalidConfigurationError,
    InvalidRecordError,
    InvalidTransactionTimeoutError,
    InvalidTxnStateError,
    KafkaStorageError,
    NotEnoughReplicasError,
    ProducerFencedError,
    RecordTooLargeError,
    TransactionAbortableError,
)
from engine.transactions import Transactions
from engine.segments.txn_index import AbortedTxn
from tests import vectors
from engine.log import producer_snapshot
from engine.txn import transaction_log
from engine.txn.transaction_log import TxnState


def read(e, topic, isolation="read_committed", partitions=None):
    """(partition, offset, value) of everything a fresh consumer at `isolation` reads from the start."""
    c = e.consumer(isolation_level=isolation, auto_offset_reset="earliest", consumer_timeout_ms=0)
    tps = [TopicPartition(topic, p) for p in (partitions if partitions is not None else range(e.partitions_for(topic)))]
    c.assign(tps)
    end = c.end_offsets(tps)  # the HW, or the LSO under read_committed
    out = []
    for _ in range(10_000):
        if all(c.position(tp) >= end[tp] for tp in tps):
            return sorted(out)
        got = c.poll(max_records=10_000)  # (a fetch of aborted batches only returns nothing, but moves on)
        out += [(r.partition, r.offset, r.value) for rs in got.values() for r in rs]
    raise AssertionError(f"the consumer never reached {end}")


def begun(e, transactional_id: str, **config):
    """A transactional producer, initialised, inside a new transaction."""
    p = e.producer(transactional_id=transactional_id, **config)
    p.init_transactions()
    p.begin_transaction()
    return p


# --- seed 000, 7.4: TransactionOnlySend and consume-transform-produce ------------------------------
@pytest.mark.parametrize("commit", [True, False])
def test_transaction_only_send(tmp_path, commit):
    """The seed's TransactionOnlySend: msg1..msg3 in one transaction; read_committed sees them only after the
    commit, and never after an abort."""
    with engine.open(tmp_path) as e:
        e.create_topic("topic-transaction")
        producer = e.producer(transactional_id="transactionId", key_serializer=str.encode,
                              value_serializer=str.encode)
        producer.init_transactions()
        producer.begin_transaction()
        for msg in ("msg1", "msg2", "msg3"):
            producer.send("topic-transaction", msg)
        producer.flush()
        assert read(e, "topic-transaction") == []  # not yet decided: held back
        assert [v for _, _, v in read(e, "topic-transaction", "read_uncommitted")] == [b"msg1", b"msg2", b"msg3"]
        producer.commit_transaction() if commit else producer.abort_transaction()
        got = [v for _, _, v in read(e, "topic-transaction")]
        assert got == ([b"msg1", b"msg2", b"msg3"] if commit else [])
        # the marker took offset 3, and the LSO reached the log end
        lg = e.log("topic-transaction", 0)
        assert lg.log_end_offset == 4 and lg.last_stable_offset == 4
        assert [t.first_offset for s in lg.segments for t in s.txn_index.all()] == ([] if commit else [0])
        producer.close()


def test_consume_transform_produce(tmp_path):
    """The seed's loop: records of topic-source go to topic-sink with the consumed offsets in the same
    transaction; a restarted consumer starts from the committed offsets; an aborted round leaves nothing."""
    with engine.open(tmp_path) as e:
        e.create_topic("topic-source", 2)
        e.create_topic("topic-sink")
        with e.producer() as p:
            for i in range(20):
                p.send("topic-source", b"v%d" % i, partition=i % 2)
        producer = e.producer(transactional_id="transactionalId")
        producer.init_transactions()

        def run_once(abort=False, limit=7):
            consumer = e.consumer(group_id="groupId", enable_auto_commit=False, auto_offset_reset="earliest",
                                  isolation_level="read_committed")
            consumer.assign([TopicPartition("topic-source", p) for p in (0, 1)])
            records = consumer.poll(max_records=limit)
            if not records:
                return 0
            producer.begin_transaction()
            offsets = {}
            for tp, rs in records.items():
                for r in rs:
                    producer.send("topic-sink", r.value, key=r.key)
                offsets[tp] = engine.OffsetAndMetadata(rs[-1].offset + 1)
            producer.send_offsets_to_transaction(offsets, "groupId")
            producer.abort_transaction() if abort else producer.commit_transaction()
            return sum(len(rs) for rs in records.values())

        assert run_once(abort=True) == 7
        assert read(e, "topic-sink") == [] and e.committed("groupId", ("topic-source", 0)) is None
        rounds = 0
        while run_once():
            rounds += 1
        assert rounds == 3  # 20 records, at most 7 a round (the aborted round committed no offsets)
        sink = sorted(v for _, _, v in read(e, "topic-sink"))
        assert sink == sorted(b"v%d" % i for i in range(20))
        assert e.committed("groupId", ("topic-source", 0)).offset == 10
    with engine.open(tmp_path) as e:  # the offsets are in __consumer_offsets: they survive a reopen
        c = e.consumer(group_id="groupId", enable_auto_commit=False)
        assert c.committed(TopicPartition("topic-source", 1)) == 10
        c.assign([TopicPartition("topic-source", 1)])
        assert c.position(TopicPartition("topic-source", 1)) == 10


# --- fencing, timeouts, recovery ------------------------------------------------------------------
@pytest.mark.parametrize("tv", [0, 2])
def test_a_zombie_is_fenced(tmp_path, tv):
    with engine.open(tmp_path, transaction_config={"transaction_version": tv}) as e:
        e.create_topic("t")
        zombie = begun(e, "app")
        zombie.send("t", b"zombie-1").get()
        successor = e.producer(transactional_id="app")
        successor.init_transactions()  # aborts the zombie's open transaction and fences it
        with pytest.raises(ProducerFencedError):
            zombie.send("t", b"zombie-2").get()
        with pytest.raises(ProducerFencedError):
            zombie.commit_transaction()
        with pytest.raises(ProducerFencedError):
            zombie.begin_transaction()
        successor.begin_transaction()
        successor.send("t", b"fresh")
        successor.commit_transaction()
        assert [v for _, _, v in read(e, "t")] == [b"fresh"]
        desc = e.transactions.coordinator.describe("app")
        # fence +1, then the new producer +1; with transactions v2 its commit +1 (KIP-890: EndTxn bumps the epoch)
        assert (desc.state, desc.producer_epoch) == ("CompleteCommit", 3 if tv == 2 else 2)


@pytest.mark.parametrize("tv", [0, 2])
def test_a_transaction_past_its_timeout_is_aborted(tmp_path, tv):
    clock = ManualClock(1_700_000_000_000)
    with engine.open(tmp_path, clock=clock, background=False, transaction_config={"transaction_version": tv}) as e:
        e.create_topic("t")
        p = begun(e, "slow", transaction_timeout_ms=5_000)
        p.send("t", b"late").get()
        clock.advance(5_000)
        assert e.coordinators.abort_timed_out_transactions() == 0  # not past it yet
        assert e.log("t", 0).last_stable_offset == 0
        clock.advance(1)
        assert e.coordinators.abort_timed_out_transactions() == 1
        assert e.transactions.coordinator.describe("slow").state == "CompleteAbort"
        assert e.log("t", 0).last_stable_offset == 2 and read(e, "t") == []
        # transactions v1: the abort's fenced epoch fences the producer; v2: the abort ends where a commit retried
        # after its own epoch bump would, and Kafka's coordinator answers the commit INVALID_TXN_STATE (fatal)
        error = InvalidTxnStateError if tv == 2 else ProducerFencedError
        with pytest.raises(error):
            p.commit_transaction()
        with pytest.raises(error):
            p.begin_transaction()


def test_an_engine_reopened_in_prepare_commit_completes_it(tmp_path, monkeypatch):
    with engine.open(tmp_path) as e:
        e.create_topic("t", 2)
        p = begun(e, "crashy", max_block_ms=50)  # the failure is retriable: stop retrying soon
        p.send("t", b"a", partition=0)
        p.send("t", b"b", partition=1)

        def lost(*args):
            raise KafkaStorageError("the process died while writing markers")
        monkeypatch.setattr(Transactions, "write_markers", lost)
        with pytest.raises(KafkaStorageError):
            p.commit_transaction()
        assert e.transactions.coordinator.describe("crashy").state == "PrepareCommit"
        assert read(e, "t") == []
        monkeypatch.undo()
    with engine.open(tmp_path) as e:
        assert e.transactions.coordinator.describe("crashy").state == "CompleteCommit"
        assert read(e, "t") == [(0, 0, b"a"), (1, 0, b"b")]


def test_an_open_transaction_survives_a_reopen_until_its_timeout(tmp_path):
    clock = ManualClock(1_700_000_000_000)
    with engine.open(tmp_path, clock=clock, background=False) as e:
        e.create_topic("t")
        p = begun(e, "open", transaction_timeout_ms=10_000)
        p.send("t", b"x").get()
    with engine.open(tmp_path, clock=clock, background=False) as e:
        assert e.log("t", 0).last_stable_offset == 0  # the snapshot kept the open transaction
        assert [(t.topic, t.first_offset, t.transactional_id) for t in e.transactions.open_transactions()] == \
            [("t", 0, "open")]
        clock.advance(10_001)
        assert e.coordinators.abort_timed_out_transactions() == 1
        assert e.log("t", 0).last_stable_offset == 2 and e.transactions.open_transactions() == []


def test_expired_transactional_ids_get_tombstones(tmp_path):
    clock = ManualClock(1_700_000_000_000)
    with engine.open(tmp_path, clock=clock, background=False) as e:
        p = e.producer(transactional_id="idle")
        p.init_transactions()
        clock.advance(604_800_000)
        assert e.coordinators.expire_transactional_ids() == 1
        assert e.transactions.coordinator.list() == []
        part = e.internal.internal_partition(transaction_log.TOPIC, transaction_log.partition("idle"))
        last = list(part.log.read(0).batches())[-1].records()[-1]
        assert transaction_log.decode_key(last.key) == "idle" and last.value is None
    with engine.open(tmp_path, clock=clock, background=False) as e:
        assert e.transactions.coordinator.list() == []


# --- misuse and bad input ---------------------------------------------------------------------------
@pytest.mark.parametrize("call, error", [
    (lambda p: p.begin_transaction(), IllegalStateError),                     # before init_transactions
    (lambda p: (p.init_transactions(), p.send("t", b"x")), IllegalStateError),  # outside a transaction
    (lambda p: (p.init_transactions(), p.commit_transaction()), IllegalStateError),
    (lambda p: (p.init_transactions(), p.abort_transaction()), IllegalStateError),
    (lambda p: (p.init_transactions(), p.init_transactions()), IllegalStateError),
    (lambda p: (p.init_transactions(), p.begin_transaction(), p.begin_transaction()), IllegalStateError),
    (lambda p: (p.init_transactions(), p.begin_transaction(), p.send_offsets_to_transaction([1], "g")),
     InvalidConfigurationError),
    (lambda p: (p.init_transactions(), p.begin_transaction(),
                p.send_offsets_to_transaction({TopicPartition("t", 0): -1}, "g")), InvalidConfigurationError),
    (lambda p: (p.init_transactions(), p.begin_transaction(),
                p.send_offsets_to_transaction({TopicPartition("t", 0): 1}, "")), InvalidConfigurationError),
])
def test_misuse_raises_kafkas_errors(tmp_path, call, error):
    with engine.open(tmp_path) as e:
        e.create_topic("t")
        p = e.producer(transactional_id="misuse")
        with pytest.raises(error):
            call(p)
        assert read(e, "t", "read_uncommitted") == []


@pytest.mark.parametrize("config, error", [
    ({"transactional_id": "x", "acks": 1}, InvalidConfigurationError),
    ({"transactional_id": "x", "enable_idempotence": False}, InvalidConfigurationError),
    ({"transactional_id": ""}, InvalidConfigurationError),
    ({"transactional_id": 7}, InvalidConfigurationError),
    ({"transactional_id": "x", "transaction_timeout_ms": 0}, InvalidConfigurationError),
])
def test_bad_transactional_configs(tmp_path, config, error):
    with engine.open(tmp_path) as e, pytest.raises(error):
        e.producer(**config)


def test_timeout_above_the_coordinators_maximum(tmp_path):
    with engine.open(tmp_path) as e:
        with pytest.raises(InvalidTransactionTimeoutError):
            e.producer(transactional_id="x", transaction_timeout_ms=900_001).init_transactions()


def test_the_coordinators_settings_are_the_engines(tmp_path):
    with engine.open(tmp_path, transaction_config={"transaction_max_timeout_ms": 5000}) as e:
        with pytest.raises(InvalidTransactionTimeoutError, match=r"\[1, 5000\]"):
            e.producer(transactional_id="x", transaction_timeout_ms=5001).init_transactions()
        e.producer(transactional_id="y", transaction_timeout_ms=5000).init_transactions()
    for bad in ({"transaction_max_timeout_ms": 0}, {"transactional_id_expiration_ms": "7 days"},
                {"transaction_timeout_ms": 5}):
        with pytest.raises(InvalidConfigurationError):
            engine.open(tmp_path / "bad", transaction_config=bad)


def test_methods_of_a_non_transactional_producer_and_group_options(tmp_path):
    with engine.open(tmp_path) as e:
        e.create_topic("t")
        with pytest.raises(IllegalStateError):
            e.producer().begin_transaction()
        with pytest.raises(IllegalStateError):
            e.consumer().committed(TopicPartition("t", 0))


@pytest.mark.parametrize("where", ["send", "append"])
def test_a_failed_send_makes_the_transaction_abort_only(tmp_path, monkeypatch, where):
    with engine.open(tmp_path) as e:
        e.create_topic("t", config={"max.message.bytes": 1000})
        p = begun(e, "big")
        p.send("t", b"ok").get()
        if where == "send":  # refused by the accumulator
            with pytest.raises(RecordTooLargeError):
                p.send("t", b"x" * 5000)
        else:  # refused by the log
            def refuse(*args, **kwargs):
                raise InvalidRecordError("refused by the log")
            monkeypatch.setattr(e, "append", refuse)
            failed = p.send("t", b"y")
            p.flush()
            assert failed.failed()
            monkeypatch.undo()
        with pytest.raises(TransactionAbortableError):
            p.commit_transaction()
        with pytest.raises(TransactionAbortableError):
            p.send("t", b"more")
        p.abort_transaction()
        p.begin_transaction()
        p.send("t", b"after")
        p.commit_transaction()
        assert [v for _, _, v in read(e, "t")] == [b"after"]


def test_coordinator_refuses_invalid_transitions(tmp_path):
    with engine.open(tmp_path) as e:
        coordinator = e.transactions.coordinator
        pid, epoch = e.transactions.init_producer_id("t1", 60_000)
        with pytest.raises(InvalidTxnStateError):  # Empty cannot commit
            coordinator.end_txn("t1", pid, epoch, True)
        with pytest.raises(ProducerFencedError):
            coordinator.add_partitions("t1", pid, epoch - 1 if epoch else epoch + 5, [("x", 0)])
        assert coordinator.describe("t1").state == "Empty"


# --- read_committed against a model -------------------------------------------------------------
@pytest.mark.parametrize("seed", range(int(os.environ.get("KAFKALOG_TXN_MODEL_RUNS", "24"))))
def test_random_transactions_agree_with_the_model(tmp_path, seed):
    """3 transactional producers and 1 plain one, interleaved at random with commits and aborts: after every
    step read_committed returns exactly the model's committed records, in offset order, and the LSO is the
    model's (never above the HW). Every fourth seed runs on 3 brokers with RF 3; odd seeds run transactions v1."""
    rng = random.Random(seed)
    brokers = 3 if seed % 4 == 3 else 1
    tv = 0 if seed % 2 else 2  # transactions v1 and v2 (an epoch bump per transaction) alike
    with engine.open(tmp_path, brokers=brokers, background=False, transaction_config={"transaction_version": tv}) as e:
        e.create_topic("t", 2, replication_factor=brokers)
        txns = [e.producer(transactional_id=f"tx{i}") for i in range(3)]
        for p in txns:
            p.init_transactions()
        plain = e.producer()
        state = {i: None for i in range(3)}   # producer -> its open transaction's number, or None
        status: dict[tuple[int, int], str] = {}
        written: list[tuple[int, int, bytes, tuple | None]] = []  # (partition, offset, value, (producer, txn))
        counter = 0
        for step in range(30):
            i = rng.randrange(4)
            if i == 3:
                part = rng.randrange(2)
                meta = plain.send("t", b"plain-%d" % step, partition=part).get()
                written.append((part, meta.offset, b"plain-%d" % step, None))
            elif state[i] is None:
                counter += 1
                state[i] = counter
                status[(i, counter)] = "open"
                txns[i].begin_transaction()
            elif rng.random() < 0.6:
                part = rng.randrange(2)
                values = [b"tx%d-%d-%d" % (i, step, k) for k in range(rng.randrange(1, 4))]
                futures = [txns[i].send("t", v, partition=part) for v in values]
                written += [(part, f.get().offset, v, (i, state[i])) for f, v in zip(futures, values)]
            else:
                commit = rng.random() < 0.5
                txns[i].commit_transaction() if commit else txns[i].abort_transaction()
                status[(i, state[i])] = "committed" if commit else "aborted"
                state[i] = None
            for part in (0, 1):
                opens = [off for p, off, _, who in written if p == part and who and status[who] == "open"]
                lg = e.log("t", part)
                lso = min(opens) if opens else lg.high_watermark
                assert lg.last_stable_offset == lso <= lg.high_watermark
            want = sorted((p, off, v) for p, off, v, who in written
                          if (who is None or status[who] == "committed")
                          and off < e.log("t", p).last_stable_offset)
            assert read(e, "t") == want, f"seed {seed} step {step}"
        if brokers > 1:  # followers replicate markers and keep the same aborted-transaction index
            e.replicate()
            for part in (0, 1):
                indexes = {b: [s.txn_index.all() for s in e._brokers[b].partitions[("t", part)].log.segments]
                           for b in range(brokers)}
                assert indexes[1] == indexes[0] == indexes[2]


# --- Kafka's txn-0 vector -------------------------------------------------------------------------
def _txn_case(tmp_path):
    root = tmp_path / "logdir"
    shutil.copytree(vectors.case_dir("txn-0"), root / "txn-0",
                    ignore=shutil.ignore_patterns("*.json", "*.jsonl", "*.txt"))
    return root


def _expected_committed():
    """Kafka's own decode of txn-0: data records below the first still-open transaction, minus those of the
    transaction its `.txnindex` says was aborted."""
    lines = vectors.expected("txn-0")
    aborted = [line for line in lines if line["type"] == "abortedTxn"]
    out, batch, open_first = [], None, {}
    for line in lines:
        if line["type"] == "batch":
            batch = line
            if line["isTransactional"] and not line["isControl"]:
                open_first.setdefault(line["producerId"], line["baseOffset"])
            elif line["isControl"]:
                open_first.pop(line["producerId"], None)
        elif line["type"] == "record" and not batch["isControl"]:
            hidden = batch["isTransactional"] and any(
                t["producerId"] == batch["producerId"] and t["firstOffset"] <= line["offset"] <= t["lastOffset"]
                for t in aborted)
            if not hidden:
                out.append((line["offset"], vectors.b64(line["valueB64"])))
    lso = min(open_first.values())
    return [r for r in out if r[0] < lso], lso, aborted


def test_kafkas_txn_vector_reads_with_kafkas_aborted_ranges(tmp_path):
    want, lso, aborted = _expected_committed()
    assert lso == 22 and len(aborted) == 1
    with engine.open(_txn_case(tmp_path)) as e:
        lg = e.log("txn", 0)
        assert lg.last_stable_offset == lso
        assert lg.collect_aborted(0, lg.log_end_offset) == [
            AbortedTxn(t["producerId"], t["firstOffset"], t["lastOffset"], t["lastStableOffset"]) for t in aborted]
        assert [(off, v) for _, off, v in read(e, "txn")] == want


def test_recovery_rebuilds_the_txnindex_and_snapshot_kafka_wrote(tmp_path):
    root = _txn_case(tmp_path)
    seg = root / "txn-0" / "00000000000000000000.txnindex"
    kafka_index = seg.read_bytes()
    kafka_snapshot = producer_snapshot.decode((root / "txn-0" / "00000000000000000027.snapshot").read_bytes())
    os.remove(seg)
    os.remove(root / "txn-0" / "00000000000000000027.snapshot")
    with open(root / "recovery-point-offset-checkpoint", "w") as f:
        f.write("0\n1\ntxn 0 0\n")  # an unclean shutdown that flushed nothing: the segment is recovered
    with engine.open(root) as e:
        assert any("re-validated" in n for n in e.recovery_notes())
        assert seg.read_bytes() == kafka_index
        ours = {s.producer_id: s for s in e.log("txn", 0).producer_state.producers.values()}
        for want in kafka_snapshot:
            got = ours[want.producer_id].snapshot_entry()
            assert got == want


# --- byte formats decoded independently ------------------------------------------------------------
def _string(data, pos):
    n = struct.unpack_from(">h", data, pos)[0]
    return data[pos + 2:pos + 2 + n].decode(), pos + 2 + n


def _uvarint(data, pos):
    n = shift = 0
    while True:
        b = data[pos]
        n, pos, shift = n | (b & 0x7F) << shift, pos + 1, shift + 7
        if b < 0x80:
            return n, pos


def _txn_value(v):
    """TransactionLogValue by Kafka's published schema (transaction-coordinator's TransactionLogValue.json): version 0
    plain, version 1 flexible (compact arrays and strings, tagged fields; tag 2 ClientTransactionVersion int16)."""
    version, pid, epoch, timeout, status = struct.unpack_from(">hqhib", v)
    pos, flexible = struct.calcsize(">hqhib"), version >= 1
    if flexible:
        count, pos = _uvarint(v, pos)
        count -= 1
    else:
        count, = struct.unpack_from(">i", v, pos)
        pos += 4
    parts = {}
    for _ in range(max(count, 0)):
        if flexible:
            n, pos = _uvarint(v, pos)
            topic, pos = v[pos:pos + n - 1].decode(), pos + n - 1
            n, pos = _uvarint(v, pos)
            n -= 1
        else:
            topic, pos = _string(v, pos)
            n, = struct.unpack_from(">i", v, pos)
            pos += 4
        parts[topic] = list(struct.unpack_from(">%di" % n, v, pos))
        pos += 4 * n
        if flexible:
            assert v[pos] == 0  # no tagged fields in a PartitionsSchema
            pos += 1
    last_update, start = struct.unpack_from(">qq", v, pos)
    pos += 16
    tags = {}
    if flexible:
        n, pos = _uvarint(v, pos)
        for _ in range(n):
            tag, pos = _uvarint(v, pos)
            size, pos = _uvarint(v, pos)
            tags[tag], pos = v[pos:pos + size], pos + size
    assert pos == len(v)
    return version, pid, epoch, timeout, status, count, parts, last_update, start, tags


@pytest.mark.parametrize("tv", [0, 2])
def test_transaction_state_records_decode_with_kafkas_schema(tmp_path, tv):
    """TransactionLogKey v0 and TransactionLogValue as Kafka's published JSON schemas lay them out, read here with
    struct alone: version 0 while transaction.version is 0, version 1 from 1 on (Kafka's transactionLogValueVersion),
    where the changes a transactions v2 client made carry ClientTransactionVersion 2 (tag 2) and its EndTxn moves the
    epoch on: Prepare* and Complete* one past the transaction's."""
    with engine.open(tmp_path, transaction_config={"transaction_version": tv}) as e:
        e.create_topic("t", 3)
        p = begun(e, "schema-check")
        p.send("t", b"x", partition=2).get()
        p.send("t", b"y", partition=0).get()
        p.commit_transaction()
        part = e.internal.internal_partition("__transaction_state", transaction_log.partition("schema-check"))
        records = [r for b in part.log.read(0).batches() for r in b.records()]
    states = []
    for r in records:
        version, = struct.unpack_from(">h", r.key)
        tid, end = _string(r.key, 2)
        assert (version, tid, end) == (0, "schema-check", len(r.key))
        version, pid, epoch, timeout, status, count, parts, last_update, start, tags = _txn_value(r.value)
        assert version == (1 if tv else 0) and timeout == 60_000 and last_update > 0
        client_tv = struct.unpack(">h", tags.pop(2))[0] if 2 in tags else 0
        assert tags == {}
        states.append((status, epoch, count, parts, start > 0, client_tv))
    bump = 1 if tv == 2 else 0
    assert states == [(TxnState.EMPTY, 0, -1, {}, False, 0), (TxnState.ONGOING, 0, 1, {"t": [2]}, True, tv),
                      (TxnState.ONGOING, 0, 1, {"t": [0, 2]}, True, tv),
                      (TxnState.PREPARE_COMMIT, bump, 1, {"t": [0, 2]}, True, tv),
                      (TxnState.COMPLETE_COMMIT, bump, 0, {}, True, tv)]  # prepareComplete: Set.empty


def test_offset_commit_records_decode_with_kafkas_schema(tmp_path):
    """OffsetCommitKey v1 and OffsetCommitValue v3, transactional, in the group's partition (Java's hashCode)."""
    with engine.open(tmp_path) as e:
        e.create_topic("src")
        p = begun(e, "x")
        p.send_offsets_to_transaction({TopicPartition("src", 0): engine.OffsetAndMetadata(42, "meta")},
                                      "polygenelubricants")
        p.commit_transaction()
        # "polygenelubricants".hashCode() is Integer.MIN_VALUE: Utils.abs makes it 0
        batches = list(e.internal.internal_partition("__consumer_offsets", 0).log.read(0).batches())
    data, marker = batches
    assert data.is_transactional and not data.is_control and marker.is_control
    r, = data.records()
    version, = struct.unpack_from(">h", r.key)
    group, pos = _string(r.key, 2)
    topic, pos = _string(r.key, pos)
    assert (version, group, topic, struct.unpack_from(">i", r.key, pos)[0]) == (1, "polygenelubricants", "src", 0)
    version, offset, leader_epoch = struct.unpack_from(">hqi", r.value)
    metadata, pos = _string(r.value, 14)
    assert (version, offset, leader_epoch, metadata, len(r.value)) == (3, 42, -1, "meta", pos + 8)


def test_coordinator_state_round_trips_through_version_1_values():
    value = transaction_log.TxnLogValue(5, 3, 1000, TxnState.ONGOING, {"a": [1, 0]}, 10, 9)
    v1 = bytearray(transaction_log.encode_value(value))
    v1[0:2] = b"\x00\x01"
    # hand-built flexible layout: compact array of (compact string, compact int32 array, tags), then tags
    flexible = bytes(v1[:17]) + bytes([2, 2]) + b"a" + bytes([3]) + struct.pack(">ii", 0, 1) + b"\x00" + \
        struct.pack(">qq", 10, 9) + b"\x00"
    decoded = transaction_log.decode_value(flexible)
    assert (decoded.producer_id, decoded.state, decoded.partitions, decoded.start_ms) == (5, TxnState.ONGOING,
                                                                                          {"a": [0, 1]}, 9)


@pytest.mark.parametrize("outcome", ["commit", "abort"])
@pytest.mark.parametrize("tv", [0, 2])
def test_a_marker_lost_to_a_power_cut_is_written_again_on_open(tmp_path, outcome, tv):
    """The coordinator's log says the transaction completed, but the data partition lost its marker (a power loss
    keeps each file's fsynced bytes only): the next open closes it the way the coordinator decided, instead of
    leaving a hanging transaction that holds the LSO back forever. Under transactions v2 the data's epoch is one
    behind the coordinator's (its EndTxn moved it on), and the commit is still recognised as that transaction's."""
    config = {"transaction_config": {"transaction_version": tv}}
    with engine.open(tmp_path, **config) as e:
        e.create_topic("t")
        p = begun(e, "cut")
        p.send("t", b"a")
        p.send("t", b"b")
        p.commit_transaction() if outcome == "commit" else p.abort_transaction()
        lg = e.log("t", 0)
        assert lg.log_end_offset == 3
        lg.truncate_to(2)  # the marker is gone; the data stays
        assert lg.last_stable_offset == 0 and e.transactions.open_transactions()
    with engine.open(tmp_path, **config) as e:
        assert e.transactions.open_transactions() == []
        assert e.log("t", 0).last_stable_offset == 3
        assert [v for _, _, v in read(e, "t")] == ([b"a", b"b"] if outcome == "commit" else [])


def test_a_brokers_open_transaction_in_an_adopted_directory_is_left_alone(tmp_path):
    root = _txn_case(tmp_path)
    with engine.open(root) as e:
        e.producer(transactional_id="ours").init_transactions()  # the coordinator starts: it knows only its own
        assert [(o.producer_id, o.first_offset, o.transactional_id) for o in e.transactions.open_transactions()] \
            == [(7001, 22, None)]
    with engine.open(root) as e:
        assert e.log("txn", 0).last_stable_offset == 22


def test_coordinator_requests_retry_retriable_errors(tmp_path, monkeypatch):
    """A commit whose markers meet a retriable error (an internal partition without enough replicas for a moment)
    is retried within max_block_ms: the second attempt finishes the PrepareCommit the first one wrote."""
    with engine.open(tmp_path) as e:
        e.create_topic("t")
        p = begun(e, "retry", retry_backoff_ms=1)
        p.send("t", b"once")
        written, failures = Transactions.write_markers, []

        def flaky(self, *args):
            if not failures:
                failures.append(1)
                raise NotEnoughReplicasError("one replica short, for a moment")
            return written(self, *args)
        monkeypatch.setattr(Transactions, "write_markers", flaky)
        p.commit_transaction()
        assert failures and e.transactions.coordinator.describe("retry").state == "CompleteCommit"
        assert [v for _, _, v in read(e, "t")] == [b"once"]
        never = begun(e, "never", retry_backoff_ms=1, max_block_ms=20)
        never.send("t", b"x")
        monkeypatch.setattr(Transactions, "write_markers",
                            lambda self, *args: (_ for _ in ()).throw(NotEnoughReplicasError("still short")))
        with pytest.raises(NotEnoughReplicasError):
            never.commit_transaction()
        assert e.transactions.coordinator.describe("never").state == "PrepareCommit"


def test_an_abort_whose_marker_lands_in_a_later_segment_hides_its_data(tmp_path):
    """The ABORT marker's `.txnindex` entry is in the segment after the data's: a read_committed fetch of the
    earlier segment still learns of the abort (the search goes on past the fetched segment until an entry's LSO
    reaches the bound, as Kafka's collectAbortedTransactions)."""
    with engine.open(tmp_path) as e:
        e.create_topic("t", config={"segment.bytes": 1024})
        p = begun(e, "spans")
        for i in range(12):
            p.send("t", b"aborted-%02d" % i + b"x" * 80).get()  # one batch each: the log rolls inside the transaction
        lg = e.log("t", 0)
        p.abort_transaction()
        segments = lg.segments
        marker_segment = next(s for s in reversed(segments) if s.txn_index.all())
        assert len(segments) > 2 and marker_segment.base_offset > 0
        e.producer().send("t", b"plain").get()
        assert read(e, "t") == [(0, 13, b"plain")]
