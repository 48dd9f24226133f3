"""Against a real Kafka broker (KAFKA_HOME given to `make bench`): kafkalog's embedded producer and consumer beside
confluent-kafka producing to and consuming from a local KRaft broker, and the mirror beside raw confluent-kafka
produce. The broker runs on 127.0.0.1 with a fresh data directory for the suite (bench.kafka_broker) and is stopped
after it. Without KAFKA_HOME the rows are listed as not run."""
from __future__ import annotations

import contextlib
import logging
import os
import shutil
import tempfile
import time

import engine
from bench.runner import Contender, Workload

VALUE = 100
PARTITIONS = 3
QUIET = logging.getLogger("bench.librdkafka")
QUIET.propagate = False
QUIET.addHandler(logging.NullHandler())


def _rows(n: int) -> list[tuple[str, str, list[str]]]:
    label = f"{n // 1000}k x {VALUE} B records, keyed, {PARTITIONS} partitions"
    return [("produce", f"per-record send() of {label}, acks=all, linger 5 ms: embedded vs to a local broker",
             ["confluent-kafka to a real broker"]),
            ("consume", f"per-record iteration over {label}, partitions assigned: embedded vs from a local broker",
             ["confluent-kafka from a real broker"]),
            ("consume", f"per-record iteration over {label}, each run in a new consumer group (the broker's "
             f"group.initial.rebalance.delay.ms=0): embedded vs from a local broker",
             ["confluent-kafka from a real broker"]),
            ("mirror", f"kafkalog mirror of {label} into a local broker (transactions of 50k records) vs "
             f"producing them with confluent-kafka (idempotent, no transactions)",
             ["confluent-kafka produce to a real broker"])]


def rdkafka_send(config: dict, topic: str, n: int, keys: list[bytes], values: list[bytes]) -> None:
    """n keyed records (keys and values taken in turn) produced with confluent-kafka as its users produce fast:
    acks=all, idempotent, linger 5 ms, polling for delivery reports every 10,000 records and when the queue is full;
    returns once every record is acknowledged."""
    import confluent_kafka as ck

    producer = ck.Producer({**config, "acks": "all", "linger.ms": 5, "enable.idempotence": True})
    produce, poll = producer.produce, producer.poll
    for i in range(n):
        while True:
            try:
                produce(topic, values[i % len(values)], keys[i % len(keys)])
                break
            except BufferError:
                poll(0.01)
        if i % 10_000 == 0:
            poll(0)
    assert producer.flush(120) == 0


def rdkafka_read(config: dict, topic: str, n: int, group_id: str, subscribe: bool, batch: int = 0) -> None:
    """Read n records of `topic` from its start with confluent-kafka, reading each key and value: one poll() per
    record, or consume(num_messages=batch) calls when `batch` (the loop then measures the server more than the
    client); as a member of `group_id` (subscribe) or with every partition assigned. With librdkafka's default
    fetch.queue.backoff.ms (1 s: it stops fetching for that long whenever 100,000 records are queued) a poll loop
    reads about 135,000 records a second from any server, a broker or kafkalog's listener alike; at 10 ms it reads
    several times as fast, so both sides get that."""
    import confluent_kafka as ck

    c = ck.Consumer({**config, "group.id": group_id, "auto.offset.reset": "earliest", "enable.auto.commit": False,
                     "fetch.queue.backoff.ms": 10})
    if subscribe:
        c.subscribe([topic])
    else:
        c.assign([ck.TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    got, deadline = 0, time.monotonic() + 300
    while got < n and time.monotonic() < deadline:
        for msg in c.consume(batch, 1) if batch else (c.poll(1),):
            if msg is not None and msg.error() is None:
                msg.key(), msg.value()
                got += 1
    c.close()
    assert got == n


@contextlib.contextmanager
def session(scratch: str):
    """A started broker (stopped on exit); None without KAFKA_HOME."""
    home = os.environ.get("KAFKA_HOME")
    if not home:
        yield None
        return
    from bench.kafka_broker import KafkaBroker

    workdir = tempfile.mkdtemp(prefix="broker-", dir=scratch)
    try:
        with KafkaBroker(home, workdir) as broker:
            yield broker
    finally:  # (a scratch on tmpfs is memory: the later suites need it)
        shutil.rmtree(workdir, ignore_errors=True)


def workloads(quick: bool, broker, scratch: str) -> list[Workload]:
    """The rows; the engine they use is the suite's, closed after it (its group members' heartbeat thread too)."""
    n = 100_000 if quick else 1_000_000
    if broker is None:
        return [Workload(g, name, 0, 0, [Contender("kafkalog", None)] + [Contender(p, None) for p in peers],
                         not_yet="needs a broker: make bench KAFKA_HOME=<a Kafka installation or build folder>")
                for g, name, peers in _rows(n)]
    import confluent_kafka as ck
    import confluent_kafka.admin  # noqa: F401

    from engine import mirror

    local = engine.open(tempfile.mkdtemp(dir=scratch))
    config = {"bootstrap.servers": broker.bootstrap, "logger": QUIET}
    admin = ck.admin.AdminClient(config)
    counter = iter(range(10**9))
    keys = [b"key-%05d" % i for i in range(1000)]
    values = [os.urandom(VALUE) for _ in range(1000)]

    def new_topic(prefix: str) -> str:
        topic = f"{prefix}{next(counter)}"
        admin.create_topics([ck.admin.NewTopic(topic, PARTITIONS, 1)])[topic].result()
        return topic

    def kafkalog_send():
        topic = f"p{next(counter)}"
        local.create_topic(topic, PARTITIONS)
        with local.producer(acks="all", linger_ms=5) as p:
            send = p.send
            for i in range(n):
                send(topic, values[i % 1000], keys[i % 1000])

    def rdkafka_produce(topic_of=lambda: new_topic("p")):
        rdkafka_send(config, topic_of(), n, keys, values)

    # data to consume: the same records in kafkalog and in the broker
    local.create_topic("c", PARTITIONS)
    with local.producer(acks="all", linger_ms=5) as p:
        for i in range(n):
            p.send("c", values[i % 1000], keys[i % 1000])
    consumed = new_topic("c")
    rdkafka_produce(lambda: consumed)

    def kafkalog_iterate(group: bool):  # reads each record's key and value, as the peer does
        options = {"group_id": f"g{next(counter)}", "enable_auto_commit": False} if group else {}
        with local.consumer(*(["c"] if group else []), auto_offset_reset="earliest", consumer_timeout_ms=60_000,
                            **options) as c:
            if not group:
                c.assign([("c", p) for p in range(PARTITIONS)])
            got = 0
            for rec in c:
                rec.key, rec.value
                got += 1
                if got == n:
                    break
            assert got == n

    def rdkafka_iterate(group: bool):
        rdkafka_read(config, consumed, n, f"g{next(counter)}", subscribe=group)

    def kafkalog_mirror():
        summary = mirror.to_kafka(local, config, name=f"bench{next(counter)}", topics=["c"],
                                  progress_topic="bench-progress")
        assert summary.records == n

    label_rows = _rows(n)
    rows = [Workload(label_rows[0][0], label_rows[0][1], n, n * VALUE,
                     [Contender("kafkalog", kafkalog_send), Contender(label_rows[0][2][0], rdkafka_produce)]),
            *(Workload(label_rows[i][0], label_rows[i][1], n, n * VALUE,
                       [Contender("kafkalog", lambda g=group: kafkalog_iterate(g)),
                        Contender(label_rows[i][2][0], lambda g=group: rdkafka_iterate(g))])
              for i, group in ((1, False), (2, True))),
            Workload(label_rows[3][0], label_rows[3][1], n, n * VALUE,
                     [Contender("kafkalog", kafkalog_mirror), Contender(label_rows[3][2][0], rdkafka_produce)])]
    rows[0].close = local.close
    return rows
