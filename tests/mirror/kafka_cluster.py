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


def watermarks(bootstrap: str, topic: str, partition: int) -> tuple[int, int]:
    consumer = ck.Consumer(config(bootstrap, **{"group.id": "tests-reader"}))
    try:
        return consumer.get_watermark_offsets(ck.TopicPartition(topic, partition), timeout=30)
    finally:
        consumer.close()


def read_committed_model(bootstrap: str, topic: str, partitions: int, timeout_s: float = 60.0) -> dict[int, list]:
    """Every record of `topic` a read_committed reader may see, decided here rather than by the cluster:
    librdkafka 2.16's mock cluster keeps aborted records visible to read_committed readers (it sends no aborted
    transactions). kafka-python fetches the raw batches (read_uncommitted; without CRC checks: the mock writes its
    control batches with a wrong CRC); its record classes decode them; a transactional batch counts when the next
    control batch of its producer id is a commit (Kafka's rule). The shape of read_all's answer."""
    from kafka import KafkaConsumer, TopicPartition as KTP
    from kafka.consumer import fetcher
    from kafka.record.memory_records import MemoryRecords

    captured: dict[int, dict[int, bytes]] = {p: {} for p in range(partitions)}
    original = fetcher.Fetcher.PartitionRecords.__init__

    def capture(self, fetch_offset, tp, records, *args, **kwargs):
        if tp.topic == topic:
            captured[tp.partition][fetch_offset] = bytes(records._buffer)
        original(self, fetch_offset, tp, records, *args, **kwargs)
    fetcher.Fetcher.PartitionRecords.__init__ = capture
    try:
        consumer = KafkaConsumer(bootstrap_servers=bootstrap.split(","), enable_auto_commit=False, group_id=None,
                                 api_version=(2, 0), check_crcs=False,
                                 isolation_level="read_uncommitted")
        tps = [KTP(topic, p) for p in range(partitions)]
        consumer.assign(tps)
        ends = {}
        for tp in tps:  # the mock cluster answers librdkafka's ListOffsets, not kafka-python's: ask librdkafka
            low, ends[tp] = watermarks(bootstrap, topic, tp.partition)
            consumer.seek(tp, low)  # (the mock keeps a bounded log: its oldest records go)
        deadline = time.monotonic() + timeout_s
        while any(consumer.position(tp) < ends[tp] for tp in tps):
            assert time.monotonic() < deadline, f"the cluster served {topic} up to {[consumer.position(tp) for tp in tps]}"
            consumer.poll(200)
        consumer.close()
    finally:
        fetcher.Fetcher.PartitionRecords.__init__ = original
    out = {}
    for p, buffers in captured.items():
        batches = {}
        for buf in buffers.values():
            records = MemoryRecords(buf)
            batch = records.next_batch()
            while batch is not None:
                batches[batch.base_offset] = batch
                batch = records.next_batch()
        ordered = [batches[o] for o in sorted(batches)]
        fate: dict[int, bool] = {}  # base offset of a transactional batch -> committed
        open_batches: dict[int, list[int]] = {}
        for b in ordered:
            if b.is_control_batch:
                abort = next(iter(b)).abort
                for base in open_batches.pop(b.producer_id, []):
                    fate[base] = not abort
            elif b.is_transactional:
                open_batches.setdefault(b.producer_id, []).append(b.base_offset)
        out[p] = [(r.offset, r.key, r.value, [tuple(h) for h in r.headers], (r.timestamp_type + 1, r.timestamp))
                  for b in ordered if not b.is_control_batch and fate.get(b.base_offset, not b.is_transactional)
                  for r in b]
    return out
