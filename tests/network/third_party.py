"""Virtual environments for software other people wrote that cannot share kafkalog's (a framework that pins its own
confluent-kafka, a suite that needs its own pytest): made once under .cache from the package index, remade when the
requirements change, and the helpers the framework tests share to read what those programs wrote."""
from __future__ import annotations

import os
import subprocess
import time
import venv

from tests.network.test_listener import ROOT

APPS = os.path.join(ROOT, "tests", "network", "apps")


def virtualenv(name: str, requirements: list[str]) -> str:
    """The interpreter of .cache/NAME, a virtual environment with exactly these requirements installed."""
    home = os.path.join(ROOT, ".cache", name)
    python = os.path.join(home, "bin", "python")
    stamp = os.path.join(home, ".installed")
    wanted = "\n".join(requirements)
    installed = None
    if os.path.exists(stamp):
        with open(stamp) as f:
            installed = f.read()
    if installed != wanted:
        venv.create(home, with_pip=True, clear=True)
        subprocess.run([python, "-m", "pip", "install", "-q", *requirements], check=True)
        with open(stamp, "w") as f:
            f.write(wanted)
    return python


def create_topics(bootstrap: str, **topics: int) -> None:
    """Create each topic with its number of partitions, through librdkafka's admin client."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(name, partitions, 1) for name, partitions in topics.items()])
    for future in futures.values():
        future.result(10)


def produce(bootstrap: str, topic: str, records: list[tuple]) -> None:
    """Each (key, value) or (key, value, timestamp in ms) through an idempotent librdkafka producer, all acknowledged."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    reports: list = []
    for key, value, *timestamp in records:
        producer.produce(topic, key=key, value=value, timestamp=timestamp[0] if timestamp else 0,
                         on_delivery=lambda err, msg: reports.append(err))
    assert producer.flush(30) == 0 and reports == [None] * len(records), [r for r in reports if r][:3]


def read_topic(bootstrap: str, topic: str, *, until: int | None = None, committed: bool = False,
               timeout_s: float = 60.0) -> list:
    """Every record of topic from its start, through librdkafka: up to the end of each partition, or (with `until`)
    once that many records are read, waiting for them up to timeout_s. read_committed when `committed`."""
    from confluent_kafka import Consumer, TopicPartition
    from confluent_kafka.admin import AdminClient

    meta = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=10).topics[topic]
    assert meta.error is None, meta.error
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "kafkalog-check", "enable.partition.eof": True,
                         "isolation.level": "read_committed" if committed else "read_uncommitted"})
    consumer.assign([TopicPartition(topic, p, 0) for p in meta.partitions])
    got, ends = [], set()
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is not None:
                ends.add(msg.partition())
            elif msg is not None:
                got.append(msg)
                ends.discard(msg.partition())
            if until is None and len(ends) == len(meta.partitions) or until is not None and len(got) >= until:
                return got
    finally:
        consumer.close()
    raise AssertionError(f"{topic}: {len(got)} records after {timeout_s} s, waiting for "
                         f"{until if until is not None else 'the end of every partition'}")
