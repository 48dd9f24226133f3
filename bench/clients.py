"""Client workloads against their peers in the same run: per-record Producer.send() (librdkafka's
in-process mock cluster through confluent-kafka; a plain-Python f.write loop of length-prefixed
records), bulk send_batch(), and consuming per record and in bulk (the mock cluster's poll() and
consume()). Every contender sends the same key, value and header objects: no headers, or two (str, bytes)
headers per record (a trace id and a source), which the f.write loop writes too."""
from __future__ import annotations

import logging
import os
import re
import struct
import tempfile
import time

import engine
from bench.runner import Contender, Workload

VALUE = 100
CONSUME_RECORDS = 40_000


class FreshTopic:
    """A topic of its own for each timed call of a produce workload. The previous call's topic is deleted first,
    inside the call, as the f.write loop truncates its last file inside its own: a topic that kept every
    repetition's records would leave gigabytes of dirty pages, whose writeback competes with later repetitions
    for this VM's two cores, and would grow past a segment roll (a flush of 1 GiB) in the middle of a call. Its
    `file.delete.delay.ms` is 0: the engine's background thread removes the deleted topic's files at once, during
    the call (as Kafka's delete-logs task would after its delay), not a minute later in another suite."""

    def __init__(self, eng: engine.Engine, prefix: str = "t", **create) -> None:
        create["config"] = {"file.delete.delay.ms": 0, **create.get("config", {})}
        self.eng, self.prefix, self.create, self.count, self.name = eng, prefix, create, 0, None

    def next(self) -> str:
        if self.name is not None:
            self.eng.delete_topic(self.name)
        self.count += 1
        self.name = f"{self.prefix}{self.count}"
        self.eng.create_topic(self.name, **self.create)
        return self.name


class _MockCluster:
    """A librdkafka mock cluster started by a producer; its bootstrap address comes from its log line."""

    def __init__(self) -> None:
        import confluent_kafka
        self.address = None
        log = logging.getLogger("bench.rdkafka")
        log.propagate = False
        log.addHandler(self._Handler(self))
        log.setLevel(logging.INFO)
        self.producer = confluent_kafka.Producer({"test.mock.num.brokers": 1, "logger": log, "linger.ms": 5,
                                                  "queue.buffering.max.messages": 2_000_000,
                                                  "queue.buffering.max.kbytes": 2_000_000})
        self.producer.produce("warmup", b"v")
        self.producer.flush(10)

    class _Handler(logging.Handler):
        def __init__(self, owner) -> None:
            super().__init__()
            self.owner = owner

        def emit(self, record: logging.LogRecord) -> None:
            found = re.search(r"replaced with (\S+)", record.getMessage())
            if found:
                self.owner.address = found.group(1)


def _values(n: int) -> list[bytes]:
    return [os.urandom(VALUE) for _ in range(min(n, 1000))]


def workloads(quick: bool, scratch: str) -> list[Workload]:
    n = 100_000 if quick else 1_000_000
    values = _values(n)
    keys = [b"key-%05d" % i for i in range(1000)]
    mock = _MockCluster()
    topic_counter = iter(range(10**9))

    produce_dir = tempfile.mkdtemp(dir=scratch)
    target = engine.open(produce_dir)
    fresh = FreshTopic(target, partitions=3)

    header_lists = [[("trace-id", os.urandom(16)), ("source", b"bench-service")] for _ in range(1000)]

    def kafkalog_send(batch_size: int, headers: bool = False):
        def call():
            topic = fresh.next()
            with target.producer(linger_ms=5, batch_size=batch_size) as p:
                send = p.send
                if headers:
                    for i in range(n):
                        send(topic, values[i % 1000], keys[i % 1000], header_lists[i % 1000])
                else:
                    for i in range(n):
                        send(topic, values[i % 1000], keys[i % 1000])
        return call

    pairs = [(keys[i % 1000], values[i % 1000]) for i in range(n)]  # built once: the caller already has them

    zstd_topic = FreshTopic(target, "zstd", partitions=3, config={"compression.type": "zstd"})

    def kafkalog_send_zstd(on_topic: bool):
        """zstd at its default level 3 either way: the producer sends uncompressed batches that the leader
        re-encodes (the topic's compression.type), or compresses them itself."""
        def call():
            topic = zstd_topic.next() if on_topic else fresh.next()
            with target.producer(linger_ms=5, compression_type=None if on_topic else "zstd") as p:
                send = p.send
                for i in range(n):
                    send(topic, values[i % 1000], keys[i % 1000])
        return call

    def kafkalog_send_batch():
        topic = fresh.next()
        with target.producer(linger_ms=5, batch_size=1_000_000) as p:
            p.send_batch(topic, pairs)

    def rdkafka_produce(headers: bool = False):
        def call():
            produce, poll = mock.producer.produce, mock.producer.poll
            topic = "p%d" % next(topic_counter)
            if headers:
                for i in range(n):
                    produce(topic, values[i % 1000], keys[i % 1000], headers=header_lists[i % 1000])
                    if i % 10_000 == 0:
                        poll(0)
            else:
                for i in range(n):
                    produce(topic, values[i % 1000], keys[i % 1000])
                    if i % 10_000 == 0:
                        poll(0)
            mock.producer.flush(60)
        return call

    def fwrite_loop(headers: bool = False):
        def call():
            pack, pack_header = struct.Struct(">iii").pack, struct.Struct(">ii").pack
            with open(os.path.join(scratch, "fwrite.bin"), "wb") as f:
                write = f.write
                if headers:
                    for i in range(n):
                        k, v, hs = keys[i % 1000], values[i % 1000], header_lists[i % 1000]
                        parts = [pack(len(k), len(v), len(hs)), k, v]
                        for hk, hv in hs:
                            hk = hk.encode()
                            parts += (pack_header(len(hk), len(hv)), hk, hv)
                        write(b"".join(parts))
                else:
                    for i in range(n):
                        k, v = keys[i % 1000], values[i % 1000]
                        write(pack(len(k), len(v), 0) + k + v)
        return call

    # data to consume, written once (the mock cluster keeps only ~5 MB of a partition, so fewer records)
    m = min(n, CONSUME_RECORDS)
    consume_dir = tempfile.mkdtemp(dir=scratch)
    eng = engine.open(consume_dir)
    eng.create_topic("t", partitions=1)
    with eng.producer() as p:
        p.send_batch("t", [(keys[i % 1000], values[i % 1000]) for i in range(m)], partition=0)
    for i in range(m):
        mock.producer.produce("consume", values[i % 1000], keys[i % 1000], partition=0)
        if i % 10_000 == 0:
            mock.producer.poll(0)
    mock.producer.flush(60)

    def kafkalog_iterate():
        c = eng.consumer("t", auto_offset_reset="earliest", consumer_timeout_ms=0)
        assert sum(1 for _ in c) == m

    def kafkalog_poll_bulk():
        c = eng.consumer("t", auto_offset_reset="earliest", max_poll_records=10_000)
        got = 0
        while got < m:
            got += sum(len(v) for v in c.poll().values())

    import confluent_kafka
    rd_consumer = confluent_kafka.Consumer({"bootstrap.servers": mock.address, "group.id": "bench",
                                            "enable.auto.commit": False, "fetch.wait.max.ms": 10})

    def rdkafka_read(bulk: bool):
        """Rewind the (already connected) mock-cluster consumer and read the m records again."""
        def call():
            rd_consumer.assign([confluent_kafka.TopicPartition("consume", 0, confluent_kafka.OFFSET_BEGINNING)])
            got, deadline = 0, time.monotonic() + 60
            while got < m and time.monotonic() < deadline:
                if bulk:
                    got += sum(1 for msg in rd_consumer.consume(10_000, 1) if msg.error() is None)
                else:
                    msg = rd_consumer.poll(1)
                    got += msg is not None and msg.error() is None
            rd_consumer.unassign()  # stop its background fetching: it would load the workloads that follow
            assert got == m, f"the mock cluster returned {got} of {m} records"
        return call

    def close() -> None:
        """What the suite opened: the engine and its topic, and librdkafka's clients, whose threads (the mock
        cluster's among them) would otherwise live on into the suites that follow."""
        target.close()
        eng.close()
        rd_consumer.close()
        mock.producer.close()

    label = f"{n // 1000}k x {VALUE} B records, keyed, 3 partitions"
    targets = {"confluent-kafka mock cluster": 2.0, "plain-Python f.write loop": 1.0}
    return [
        Workload("produce", f"per-record send() of {label}, batch_size 16 KiB (Kafka's default), no headers", n,
                 n * VALUE, [Contender("kafkalog", kafkalog_send(16384)),
                             Contender("confluent-kafka mock cluster", rdkafka_produce()),
                             Contender("plain-Python f.write loop", fwrite_loop())], targets=targets),
        Workload("produce", f"per-record send() of {label}, batch_size 16 KiB (Kafka's default), 2 headers", n,
                 n * VALUE, [Contender("kafkalog", kafkalog_send(16384, headers=True)),
                             Contender("confluent-kafka mock cluster", rdkafka_produce(headers=True)),
                             Contender("plain-Python f.write loop", fwrite_loop(headers=True))], targets=targets),
        Workload("produce", f"per-record send() of {label}, batch_size 1 MB (librdkafka's default), no headers", n,
                 n * VALUE, [Contender("kafkalog", kafkalog_send(1_000_000)),
                             Contender("confluent-kafka mock cluster", rdkafka_produce()),
                             Contender("plain-Python f.write loop", fwrite_loop())], targets=targets),
        Workload("produce", f"per-record send() of {label}, zstd: compression.type=zstd on the topic (the leader "
                 f"re-encodes) vs compression_type='zstd' in the producer", n, n * VALUE,
                 [Contender("kafkalog", kafkalog_send_zstd(True)),
                  Contender("kafkalog, zstd in the producer", kafkalog_send_zstd(False))]),
        Workload("produce", f"bulk send_batch() of {label}, batch_size 1 MB", n, n * VALUE,
                 [Contender("kafkalog", kafkalog_send_batch),
                  Contender("confluent-kafka mock cluster", rdkafka_produce())],
                 targets={"confluent-kafka mock cluster": 2.0}),
        Workload("consume", f"per-record iteration over {m // 1000}k records", m, m * VALUE,
                 [Contender("kafkalog", kafkalog_iterate), Contender("confluent-kafka mock cluster", rdkafka_read(False))],
                 targets={"confluent-kafka mock cluster": 2.0}),
        Workload("consume", f"bulk poll of {m // 1000}k records", m, m * VALUE,
                 [Contender("kafkalog", kafkalog_poll_bulk),
                  Contender("confluent-kafka mock cluster", rdkafka_read(True))],
                 targets={"confluent-kafka mock cluster": 2.0}, close=close),
    ]
