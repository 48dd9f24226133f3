"""Share groups (KIP-932's queues): records acknowledged per second by 1, 4 and 16 share consumers, each on a thread of
its own, beside the same work through a consumer group (as many members, each committing after every poll: a record
is done once its commit or its acknowledgement returned), in process and over the wire (librdkafka's ShareConsumer
against librdkafka's consumer, both through `kafkalog serve`); and redelivery latency, from a RELEASE acknowledged
until another member, waiting in poll(), has the record again.

Every contender reads the same records (16 partitions, produced once before the runs), each run as a new group from
the earliest offset, and ends when its group has every record done (the share group's start offsets, or the consumer
group's committed offsets, at the log end).
"""
from __future__ import annotations

import tempfile
import threading
import time
import uuid

import engine
from bench.runner import figure

PARTITIONS = 16
# both protocols' members heartbeat every second (Kafka's defaults are 5 s): over the wire a share group's members are
# given their partitions at their second heartbeat (the first initializes them), a consumer group's at their first
HEARTBEATS = {"group_share_heartbeat_interval_ms": 1000, "group_consumer_heartbeat_interval_ms": 1000}
GIVE_UP_S = 300


def _filled(scratch: str, records: int):
    e = engine.open(tempfile.mkdtemp(dir=scratch), group_config=HEARTBEATS)
    e.create_topic("q", partitions=PARTITIONS)
    with e.producer(linger_ms=5) as producer:
        for i in range(records):
            producer.send("q", b"x" * 100, key=b"%d" % i)
    return e


def _timed(clients: list, step, finished) -> float:
    """Seconds until `finished()`, each of `clients` calling `step(client)` in a loop on a thread of its own; then
    the clients are closed."""
    done, failed = threading.Event(), []
    give_up = time.monotonic() + GIVE_UP_S

    def work(client) -> None:
        while not done.is_set():
            step(client)
            if finished():
                done.set()
            elif time.monotonic() > give_up:  # (a benchmark that cannot finish fails; it never hangs the run)
                failed.append(f"not every record was done in {GIVE_UP_S} s")
                done.set()
    threads = [threading.Thread(target=work, args=(c,)) for c in clients]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    took = time.perf_counter() - start
    for c in clients:
        c.close()
    if failed:
        raise AssertionError(failed[0])
    return took


def _ends(e) -> int:
    return sum(e.partition("q", p).high_watermark for p in range(PARTITIONS))


def _share_done(e, group: str):
    total = _ends(e)
    e.alter_group_configs(group, {"share.auto.offset.reset": "earliest"})
    return lambda: sum(e.share_groups.start_offsets(group).values()) >= total


def _group_done(e, group: str):
    total, tps = _ends(e), [("q", p) for p in range(PARTITIONS)]
    return lambda: sum(om.offset for om in e.committed_offsets(group, tps).values()) >= total


def share_in_process(e, members: int) -> float:
    """Seconds until `members` in-process share consumers acknowledged every record."""
    group = f"s-{uuid.uuid4().hex[:8]}"
    finished = _share_done(e, group)
    return _timed([e.share_consumer(group, ["q"]) for _ in range(members)], lambda c: c.poll(100), finished)


def group_in_process(e, members: int) -> float:
    """Seconds until `members` in-process consumer group members committed every record."""
    group = f"g-{uuid.uuid4().hex[:8]}"

    def step(c) -> None:
        if c.poll(100):
            c.commit()
    return _timed([e.consumer("q", group_id=group, auto_offset_reset="earliest", enable_auto_commit=False,
                              group_protocol="consumer") for _ in range(members)], step, _group_done(e, group))


def share_wire(e, bootstrap: str, members: int) -> float:
    """The same through the listener: librdkafka's ShareConsumer (implicit acknowledgement)."""
    from confluent_kafka import ShareConsumer

    group = f"ws-{uuid.uuid4().hex[:8]}"
    finished = _share_done(e, group)
    consumers = [ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group}) for _ in range(members)]
    for c in consumers:
        c.subscribe(["q"])
    return _timed(consumers, lambda c: c.poll(0.1), finished)


def group_wire(e, bootstrap: str, members: int) -> float:
    """The same through the listener: librdkafka's consumer in a group, committing after each batch it read."""
    from confluent_kafka import Consumer

    group = f"wg-{uuid.uuid4().hex[:8]}"
    consumers = [Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                           "enable.auto.commit": False, "group.protocol": "consumer"}) for _ in range(members)]
    for c in consumers:
        c.subscribe(["q"])

    def step(c) -> None:
        if [m for m in c.consume(500, 0.1) if m.error() is None]:
            c.commit(asynchronous=False)
    return _timed(consumers, step, _group_done(e, group))


def redelivery_ms(e) -> float:
    """Milliseconds from a RELEASE acknowledged by one member until another, already waiting in poll(), has it."""
    from engine.clients.share_consumer import AcknowledgeType

    e.create_topic(topic := f"r-{uuid.uuid4().hex[:8]}", partitions=1)
    group = f"r-{uuid.uuid4().hex[:8]}"
    e.alter_group_configs(group, {"share.auto.offset.reset": "earliest"})
    with e.producer(linger_ms=0) as producer:
        producer.send(topic, b"job").get()
    first = e.share_consumer(group, [topic], acknowledgement_mode="explicit")
    [record] = first.poll(5000)
    second = e.share_consumer(group, [topic])
    got: list = []
    waiting = threading.Event()

    def wait() -> None:
        second.poll(0)  # (joined and assigned before the release)
        waiting.set()
        got.extend(second.poll(10_000))
        got.append(time.perf_counter())
    t = threading.Thread(target=wait)
    t.start()
    waiting.wait()
    time.sleep(0.05)  # (it is inside its waiting poll)
    start = time.perf_counter()
    first.acknowledge(record, AcknowledgeType.RELEASE)
    first.commit_sync()
    t.join()
    first.close()
    second.close()
    assert got[0].delivery_count == 2
    return (got[-1] - start) * 1000


def redelivery_wire_ms(e, bootstrap: str) -> float:
    """The same over the listener: librdkafka's ShareConsumers, the second waiting in poll()."""
    from confluent_kafka import AcknowledgeType, ShareConsumer

    e.create_topic(topic := f"w-{uuid.uuid4().hex[:8]}", partitions=1)
    group = f"w-{uuid.uuid4().hex[:8]}"
    e.alter_group_configs(group, {"share.auto.offset.reset": "earliest"})
    with e.producer(linger_ms=0) as producer:
        producer.send(topic, b"job").get()
    conf = {"bootstrap.servers": bootstrap, "group.id": group, "share.acknowledgement.mode": "explicit"}
    first, second = ShareConsumer(conf), ShareConsumer(conf)
    first.subscribe([topic])
    second.subscribe([topic])
    deadline = time.monotonic() + 30
    records: list = []
    while not records and time.monotonic() < deadline:
        records = [m for m in first.poll(0.2) if m.error() is None]
    def assigned() -> bool:  # (both members were sent a partition: the second fetches it from now on)
        members = e.share_groups.describe(group).members.values()
        return len(members) == 2 and all(m.assignment and m.sent for m in members)
    while not assigned() and time.monotonic() < deadline:
        second.poll(0.05)
    second.poll(0.2)
    got: list = []

    def wait() -> None:
        while not got and time.monotonic() < deadline:
            got.extend(m for m in second.poll(0.05) if m.error() is None)
        got.append(time.perf_counter())
    t = threading.Thread(target=wait)
    t.start()
    time.sleep(0.05)
    start = time.perf_counter()
    first.acknowledge(records[0], AcknowledgeType.RELEASE)
    first.commit_sync()
    t.join()
    first.close()
    second.close()
    assert got[0].delivery_count() == 2
    return (got[-1] - start) * 1000


def figures(quick: bool, scratch: str) -> list[dict]:
    records, reps = (2_000, 1) if quick else (50_000, 3)
    out = []
    e = _filled(scratch, records)
    try:
        for members in (1, 4, 16):
            ours = [records / share_in_process(e, members) for _ in range(reps)]
            theirs = [records / group_in_process(e, members) for _ in range(reps)]
            out.append(figure(f"share group, {members} in-process member(s), {records:,} records acknowledged",
                              ours, "records/s", f"consumer group, {members} member(s) committing each poll",
                              theirs, lower_is_better=False))
        listener = e.serve(port=0)
        for members in (1, 4, 16):
            ours = [records / share_wire(e, listener.bootstrap, members) for _ in range(reps)]
            theirs = [records / group_wire(e, listener.bootstrap, members) for _ in range(reps)]
            out.append(figure(f"share group over the listener, {members} librdkafka ShareConsumer(s), {records:,} "
                              "records acknowledged", ours, "records/s",
                              f"librdkafka consumer group, {members} member(s) committing each batch", theirs,
                              lower_is_better=False))
        n = 3 if quick else 10
        ours, theirs = [redelivery_ms(e) for _ in range(n)], [redelivery_wire_ms(e, listener.bootstrap)
                                                             for _ in range(n)]
        out.append(figure("share group redelivery latency: a RELEASE until the next member, waiting in poll(), has "
                          "the record; in process", ours, "ms", "the same over the listener (librdkafka "
                          "ShareConsumers)", theirs, lower_is_better=True))
    finally:
        e.close()
    return out
