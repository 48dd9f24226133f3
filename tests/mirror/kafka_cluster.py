"""Test helpers for a Kafka cluster: librdkafka's in-process mock cluster (confluent-kafka's test.mock.num.brokers)
or a real broker, read and written with confluent-kafka's own clients (the oracle for what the cluster holds)."""
from __future__ import annotations

import logging
import time

import confluent_kafka as ck

QUIET = logging.getLogger("tests.librdkafka")
QUIET.propagate = False
QUIET.addHandler(logging.NullHandler())


class MockCluster:
    """A mock cluster of `brokers` brokers, alive while this object is (its owner is a producer handle)."""

    def __init__(self, brokers: int = 3) -> None:
        self._owner = ck.Producer({"test.mock.num.brokers": brokers, "logger": QUIET})
        md = self._owner.list_topics(timeout=10)
        self.bootstrap = ",".join(f"{b.host}:{b.port}" for b in md.brokers.values())

    def close(self) -> None:
        self._owner.flush(1)
        del self._owner


def config(bootstrap: str, **extra) -> dict:
    return {"bootstrap.servers": bootstrap, "logger": QUIET, **extra}


def read_all(bootstrap: str, topic: str, partitions: int, isolation: str = "read_committed",
             timeout_s: float = 30.0) -> dict[int, list[tuple]]:
    """Every record of `topic` visible at `isolation`: {partition: [(offset, key, value, headers, (type, ts))]}."""
    consumer = ck.Consumer(config(bootstrap, **{"group.id": "tests-reader", "enable.auto.commit": False,
                                                "enable.partition.eof": True, "isolation.level": isolation}))
    out: dict[int, list] = {p: [] for p in range(partitions)}
    pending = set(range(partitions))
    consumer.assign([ck.TopicPartition(topic, p, ck.OFFSET_BEGINNING) for p in range(partitions)])
    deadline = time.monotonic() + timeout_s
    try:
        while pending:
            assert time.monotonic() < deadline, f"{topic}: partitions {sorted(pending)} never reached their end"
            m = consumer.poll(0.5)
            if m is None:
                continue
            if m.error() is not None:
                assert m.error().code() == ck.KafkaError._PARTITION_EOF, m.error()
                pending.discard(m.partition())
                continue
            out[m.partition()].append((m.offset(), m.key(), m.value(), m.headers() or [], m.timestamp()))
    finally:
        consumer.close()
    return out


def produce(bootstrap: str, topic: str, records) -> None:
    """Produce (partition, key, value, headers, timestamp) records."""
    producer = ck.Producer(config(bootstrap))
    for partition, key, value, headers, ts in records:
        producer.produce(topic, value, key, partition, timestamp=ts, headers=headers)
        producer.poll(0)
    assert producer.flush(30) == 0
