"""`make interop`: Kafka's own transactional producer (KAFKA_HOME's Java client) runs the same script of transactions
(tests/broker/java/KafkaTransactions.java: commits and aborts, offsets sent to transactions, one with offsets alone)
against a real broker of KAFKA_HOME and against a kafkalog listener finalizing the same `transaction.version`; the
two directories then hold the same history: the same `__transaction_state` records (states, epochs relative to the
first, partitions, value version, the client's transaction version), as Kafka's own DumpLogSegments decodes them
from either directory, the same markers (producer, epoch, outcome) in every partition the transactions touched,
and the same committed records and group offsets. With a Kafka whose client sends EndTxn v5 (4.1 on) and a broker
formatted with transaction.version 2, that is transactions v2: an epoch per transaction. Not part of `make test`
(it needs a Kafka build)."""
from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import time

import pytest

import engine
from bench.kafka_broker import KafkaBroker
from engine.groups import offsets
from engine.protocol import messages as m
from engine.record import codec
from engine.txn import transaction_log
from tests.broker.checkpoint_corpus import kafka_java
from tests.broker.test_kafka_tools import _kafka_has, _tool, run_class  # noqa: F401  (run_class: a fixture)
from tests.network.test_listener import _call

TID, TOPIC, GROUP = "java-txn", "txn", "txn-group"


def _finalized_transaction_version(bootstrap: str) -> int:
    host, port = bootstrap.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        answer = _call(sock, m.API_VERSIONS, 3, {"client_software_name": "t", "client_software_version": "1"})
    levels = {f["name"]: f["max_version_level"] for f in answer["finalized_features"]}
    return levels.get("transaction.version", 0)


def _segments(data: str, topic: str, partition: int) -> list[str]:
    folder = os.path.join(data, f"{topic}-{partition}")
    return sorted(os.path.join(folder, f) for f in os.listdir(folder) if f.endswith(".log")) \
        if os.path.isdir(folder) else []


def _batches(data: str, topic: str, partition: int):
    raw = b""
    for path in _segments(data, topic, partition):
        with open(path, "rb") as f:
            raw += f.read()
    return list(codec.iter_batches(raw))


class _Ids:
    """Producer ids in order of appearance (each side allocates its own)."""

    def __init__(self) -> None:
        self.seen: dict[int, int] = {}

    def __call__(self, pid: int) -> int:
        return self.seen.setdefault(pid, len(self.seen)) if pid >= 0 else pid


def _history(data: str) -> tuple[list, dict]:
    """The transactional id's `__transaction_state` records (state, producer, epoch, partitions, value version, client
    transaction version) and the markers of every partition they name (producer, epoch, commit)."""
    ids, records, touched = _Ids(), [], set()
    for batch in _batches(data, transaction_log.TOPIC, transaction_log.partition(TID)):
        for r in batch.records():
            if transaction_log.decode_key(r.key) != TID or r.value is None:
                continue
            v = transaction_log.decode_value(r.value)
            parts = sorted((t, p) for t, ps in (v.partitions or {}).items() for p in ps)
            touched.update(parts)
            records.append((v.state.kafka_name, ids(v.producer_id), v.producer_epoch, parts,
                            int.from_bytes(bytes(r.value[:2]), "big"), v.client_transaction_version))
    markers = {}
    for topic, p in sorted(touched):
        markers[f"{topic}-{p}"] = [(ids(b.producer_id), b.producer_epoch, next(iter(b.records())).key[-1] == 1)
                                   for b in _batches(data, topic, p) if b.is_control]
    return records, markers


def _kafkas_dump(run_class: str, data: str) -> list:
    """Kafka's DumpLogSegments --transaction-log-decoder of the id's partition: each record's key and payload, with
    what differs between two runs (timestamps, the producer id) left out."""
    files = _segments(data, transaction_log.TOPIC, transaction_log.partition(TID))
    dumped = _tool(run_class, "kafka.tools.DumpLogSegments", "--transaction-log-decoder", "--print-data-log",
                   "--files", ",".join(files))
    out, ids = [], _Ids()
    for line in dumped.splitlines():
        if " key: " not in line or " payload: " not in line:
            continue
        key, payload = line.split(" key: ", 1)[1].split(" payload: ", 1)
        text = re.match(r"producerId:(\d+),producerEpoch:(\d+),state=(\w+),partitions=\[([^]]*)\]", payload)
        if text:  # Kafka 4.0's text form (its decoder before the JSON one)
            pid, epoch, state, parts = text.groups()
            out.append((key, state, ids(int(pid)), int(epoch), sorted(filter(None, parts.split(",")))))
            continue
        value = json.loads(payload)
        body = value["data"]
        for stamp in ("transactionLastUpdateTimestampMs", "transactionStartTimestampMs"):
            body[stamp] = body[stamp] > 0
        body["producerId"] = ids(body["producerId"])
        body["transactionPartitions"] = sorted((t["topic"], sorted(t["partitionIds"]))
                                               for t in body["transactionPartitions"] or [])
        out.append((json.loads(key), value["version"], body))
    assert out, dumped[-2000:]
    return out


def _committed(bootstrap: str) -> tuple[list, int]:
    """What a read_committed consumer reads of the topic (sorted values), and the group's committed offset of
    partition 0 (Kafka's client, confluent-kafka's, on either side)."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "reader", "isolation.level": "read_committed",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    try:
        c.assign([TopicPartition(TOPIC, p, 0) for p in range(3)])
        values, quiet_until = [], time.monotonic() + 5
        while time.monotonic() < quiet_until:
            msg = c.poll(0.5)
            if msg is not None and msg.error() is None:
                values.append(msg.value().decode())
                quiet_until = time.monotonic() + 3
        group = Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP})
        try:
            offset = group.committed([TopicPartition(TOPIC, 0)], timeout=30)[0].offset
        finally:
            group.close()
        return sorted(values), offset
    finally:
        c.close()


def _script(program: list[str], bootstrap: str) -> list[dict]:
    done = subprocess.run([*program, bootstrap, TID, TOPIC, GROUP], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


def _settled(read, data: str) -> tuple[list, dict]:
    """The history once its last record is a Complete* (a broker writes the markers, then that record, after its
    EndTxn answer)."""
    deadline = time.monotonic() + 60
    while True:
        records, markers = read(data)
        if records and records[-1][0] in ("CompleteCommit", "CompleteAbort") or time.monotonic() > deadline:
            return records, markers
        time.sleep(0.5)


@pytest.mark.parametrize("formatted", [None, 0], ids=["kafkas-default", "transaction.version=0"])
def test_kafkas_transactional_producer_leaves_the_same_history_on_a_broker_and_on_the_listener(
        tmp_path, tmp_path_factory, run_class, formatted):
    """The broker formatted with Kafka's default features (4.1+: transaction.version 2), and at level 0, where Kafka
    4's client keeps to transactions v1."""
    program = kafka_java(tmp_path_factory, "KafkaTransactions")
    features = {} if formatted is None else {"transaction.version": formatted}
    broker = KafkaBroker(os.environ["KAFKA_HOME"], str(tmp_path / "broker"), features=features).start()
    try:
        tv = _finalized_transaction_version(broker.bootstrap)
        assert formatted is None or tv == formatted
        theirs_out = _script(program, broker.bootstrap)
        theirs_read = _committed(broker.bootstrap)
        theirs = _settled(_history, broker.data)
    finally:
        broker.stop()
    theirs_dump = _kafkas_dump(run_class, broker.data)

    data = str(tmp_path / "kafkalog")
    with engine.open(data, transaction_config={"transaction_version": tv}) as eng:
        listener = eng.serve(port=0)
        ours_out = _script(program, listener.bootstrap)
        ours_read = _committed(listener.bootstrap)
        ours = _history(data)
    ours_dump = _kafkas_dump(run_class, data)

    assert ours_out == theirs_out and len(ours_out) == 6
    assert ours_read == theirs_read
    assert ours_read[1] == 9 and ours_read[0] == sorted(["t0-p0", "t0-p1", "t2-p0", "t2-p2", "t4-p2", "t5-p0",
                                                          "t5-p1", "t5-p2"])
    assert ours[0] == theirs[0], "\n".join(map(str, theirs[0] + ["-- kafkalog --"] + ours[0]))
    assert ours[1] == theirs[1]
    assert ours_dump == theirs_dump
    group_partition = f"{offsets.TOPIC}-{offsets.partition(GROUP)}"
    assert group_partition in ours[1]  # the offsets' transactions marked the group's partition too
    completes = [epoch for state, _, epoch, *_ in ours[0] if state.startswith("Complete")]
    v2 = tv >= 2 and _kafka_has(run_class, "org/apache/kafka/clients/admin/ListShareGroupOffsetsSpec.class")
    # transactions v2 (a 4.1+ client on a cluster at level 2): every transaction ends under the next epoch;
    # v1: one epoch throughout
    assert completes == (list(range(1, 7)) if v2 else [0] * 6), (tv, completes)
    assert {tags for *_, tags in ours[0]} == ({0, 2} if v2 else {0})
