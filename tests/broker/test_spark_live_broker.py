"""`make interop`: Spark reads a running broker's data directory, through both of kafkalog's sources at once (the
JVM source and the Python one, each in a driver of its own: tests/broker/spark_live.py), from the moment the broker
formats it: while the broker starts (its checkpoint files empty), while a topic is created and a transactional
producer commits and aborts into it. Every read succeeds, none shows a value twice or one of an aborted transaction,
and each reader ends on exactly the count a read_committed consumer of the broker sees. Not part of `make test` (it
needs a broker)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from bench.kafka_broker import KafkaBroker
from tests.crash.children import ROOT

TRANSACTIONS = int(os.environ.get("KAFKALOG_LIVE_TRANSACTIONS", "120"))
PER_TRANSACTION = 50
PACE_S = 0.25  # between transactions: the producer runs while each reader reads several times


def _produce(bootstrap: str, topic: str) -> int:
    """Transactions of PER_TRANSACTION records over the topic's partitions, every fourth aborted; the committed
    count."""
    import confluent_kafka as ck

    producer = ck.Producer({"bootstrap.servers": bootstrap, "transactional.id": "live-spark", "linger.ms": 5})
    producer.init_transactions(60)
    committed = 0
    for t in range(TRANSACTIONS):
        abort = t % 4 == 3
        producer.begin_transaction()
        for i in range(PER_TRANSACTION):
            producer.produce(topic, value=b"%s-%d-%d" % (b"a" if abort else b"c", t, i), key=b"%d" % i)
        if abort:
            producer.abort_transaction(60)
        else:
            producer.commit_transaction(60)
            committed += PER_TRANSACTION
        time.sleep(PACE_S)
    return committed


def _consumed(bootstrap: str, topic: str) -> int:
    """What a read_committed consumer of the broker reads of `topic`, to its end."""
    import confluent_kafka as ck

    consumer = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": "live-count", "auto.offset.reset": "earliest",
                            "isolation.level": "read_committed", "enable.partition.eof": True})
    partitions = len(consumer.list_topics(topic, timeout=30).topics[topic].partitions)
    consumer.subscribe([topic])
    seen, ended = 0, set()
    while len(ended) < partitions:
        msg = consumer.poll(30)
        assert msg is not None, "the broker's consumer stopped before the topic's end"
        if msg.error() and msg.error().code() == ck.KafkaError._PARTITION_EOF:
            ended.add(msg.partition())
        elif msg.error():
            raise AssertionError(msg.error())
        else:
            seen += 1
    consumer.close()
    return seen


def test_spark_reads_a_running_brokers_directory_from_its_first_second(tmp_path):
    home = os.environ.get("KAFKA_HOME")
    if not home:
        raise pytest.UsageError("make interop needs KAFKA_HOME: a Kafka installation or a broker build folder")
    broker = KafkaBroker(home, str(tmp_path / "broker"), extra={"num.partitions": 3})
    stop = tmp_path / "stop"
    readers = {}
    for source in ("jvm", "python"):
        readers[source] = subprocess.Popen(
            [sys.executable, "-m", "tests.broker.spark_live", broker.data, "live", str(stop)], cwd=ROOT,
            env={**os.environ, "KAFKALOG_SPARK_SOURCE": source}, stdout=subprocess.PIPE, text=True)
    try:
        for source, reader in readers.items():
            assert reader.stdout.readline().strip() == "ready", source
        broker.start()  # the readers read from the moment it formats the directory
        try:
            for source, reader in readers.items():  # a read of the broker as it started, before the topic exists
                assert reader.stdout.readline().strip() == "read 0", source
            import confluent_kafka.admin as admin

            client = admin.AdminClient({"bootstrap.servers": broker.bootstrap})
            client.create_topics([admin.NewTopic("live", 3, 1)])["live"].result(60)
            committed = _produce(broker.bootstrap, "live")
            assert _consumed(broker.bootstrap, "live") == committed
            stop.write_text(f"{committed}\n")
            results = {source: json.loads(reader.communicate(timeout=300)[0].strip().splitlines()[-1])
                       for source, reader in readers.items()}
        finally:
            broker.stop()
    finally:
        for reader in readers.values():
            reader.kill()
            reader.wait()
    for source, got in results.items():
        assert got["path"] == source
        assert got["errors"] == [] and got["wrong"] == [], (source, got)
        assert got["reads_with_records"] > 1 and got["reads"] > got["reads_with_records"], (source, got)
        assert got["final"] == committed, (source, got)
