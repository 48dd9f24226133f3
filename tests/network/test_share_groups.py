"""Share groups (KIP-932) over the wire, judged by librdkafka's share consumer (confluent-kafka's ShareConsumer):
two members of one share group read the same partitions, each record is acquired by one of them at a time and
acknowledged record by record (accepted, released for redelivery, rejected), the group's share.auto.offset.reset is
set through IncrementalAlterConfigs on the GROUP resource, and what was acknowledged survives a restart of the
engine."""
from __future__ import annotations

import time

from tests.network.test_listener import produced


def _alter(bootstrap: str, group: str, name: str, value: str) -> None:
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

    admin = AdminClient({"bootstrap.servers": bootstrap})
    res = ConfigResource(ResourceType.GROUP, group, incremental_configs=[
        ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)])
    for future in admin.incremental_alter_configs([res]).values():
        assert future.result() is None
    described = admin.describe_configs([ConfigResource(ResourceType.GROUP, group)])
    [configs] = [f.result() for f in described.values()]
    assert configs[name].value == value and configs["share.isolation.level"].value == "read_uncommitted"


def test_librdkafka_share_consumers_split_a_queue_and_redeliver_what_they_release(kafka_server, tmp_path):
    from confluent_kafka import AcknowledgeType, ShareConsumer

    eng, listener = kafka_server.engine, kafka_server.listener
    produced(listener, eng, "jobs", 2, 300)
    _alter(listener.bootstrap, "workers", "share.auto.offset.reset", "earliest")
    conf = {"bootstrap.servers": listener.bootstrap, "group.id": "workers",
            "share.acknowledgement.mode": "explicit"}
    members = [ShareConsumer(conf), ShareConsumer(conf)]
    for m in members:
        m.subscribe(["jobs"])
    accepted: dict[tuple[int, int], int] = {}   # (partition, offset) -> the member that accepted it
    deliveries: dict[tuple[int, int], list[int]] = {}  # -> the delivery counts it was seen with
    rejected: set[tuple[int, int]] = set()
    total = 300
    deadline = time.monotonic() + 60
    while len(accepted) + len(rejected) < total and time.monotonic() < deadline:
        for i, m in enumerate(members):
            batch = [msg for msg in m.poll(0.2) if msg.error() is None]
            for msg in batch:
                key = (msg.partition(), msg.offset())
                deliveries.setdefault(key, []).append(msg.delivery_count())
                n = int(msg.key())
                if n % 10 == 0:
                    kind = AcknowledgeType.REJECT
                    rejected.add(key)
                elif n % 10 == 1 and msg.delivery_count() == 1:
                    kind = AcknowledgeType.RELEASE  # delivered again, to either member
                else:
                    kind = AcknowledgeType.ACCEPT
                    assert key not in accepted, f"{key} accepted twice"
                    accepted[key] = i
                m.acknowledge(msg, kind)
            if batch:
                m.commit_sync()
    for m in members:
        m.close()
    assert len(accepted) + len(rejected) == total
    assert set(accepted) | rejected == set(deliveries) and not set(accepted) & rejected
    released = {k for k, counts in deliveries.items() if counts[0] == 1 and len(counts) > 1}
    assert released and all(deliveries[k] == [1, 2] for k in released)  # delivered again, counted
    assert all(deliveries[k] == [1] for k in rejected)  # never again
    assert set(accepted.values()) == {0, 1}  # both members did work
    spso = eng.share_groups.start_offsets("workers")
    assert sorted(spso.values()) == sorted(eng.partition("jobs", p).high_watermark for p in (0, 1))


def test_librdkafka_share_consumer_starts_at_the_log_end_by_default_and_an_unacknowledged_batch_comes_back(
        kafka_server):
    from confluent_kafka import ShareConsumer

    eng, listener = kafka_server.engine, kafka_server.listener
    produced(listener, eng, "q", 1, 50)  # before the group exists: share.auto.offset.reset=latest skips them
    conf = {"bootstrap.servers": listener.bootstrap, "group.id": "late", "share.acknowledgement.mode": "explicit"}
    first = ShareConsumer(conf)
    first.subscribe(["q"])
    deadline = time.monotonic() + 30
    while dict(eng.share_groups.list_groups()).get("late") != "Stable" and time.monotonic() < deadline:
        first.poll(0.2)
    from confluent_kafka import Producer
    producer = Producer({"bootstrap.servers": listener.bootstrap})
    for i in range(50, 80):
        producer.produce("q", key=b"%d" % i, value=b"x")
    assert producer.flush(30) == 0
    got = []
    while len(got) < 30 and time.monotonic() < deadline:
        got += [msg for msg in first.poll(0.2) if msg.error() is None]
    assert sorted(int(m.key()) for m in got) == list(range(50, 80))
    first.close()  # nothing acknowledged: the share session's close releases the records
    second = ShareConsumer({**conf, "share.acknowledgement.mode": "implicit"})
    second.subscribe(["q"])
    again = []
    while len(again) < 30 and time.monotonic() < deadline + 30:
        again += [msg for msg in second.poll(0.2) if msg.error() is None]
    assert sorted(int(m.key()) for m in again) == list(range(50, 80))
    assert {m.delivery_count() for m in again} == {2}
    second.poll(0.5)  # (implicit mode acknowledges a poll's records at the next poll)
    second.close()
    assert eng.share_groups.start_offsets("late") == {
        (eng.describe_topic("q").topic_id, 0): 80}


def test_a_share_consumer_that_vanishes_without_closing_has_its_records_released_with_its_connection(kafka_server):
    """Its acquisition locks and its group session last ten minutes here, so only the connection's close (which
    closes its share session, as Kafka's brokers do) can give its records to the next member within the test's
    time."""
    import gc

    from confluent_kafka import ShareConsumer

    eng, listener = kafka_server.engine, kafka_server.listener
    produced(listener, eng, "gone", 1, 20)
    _alter(listener.bootstrap, "vanish", "share.auto.offset.reset", "earliest")
    _alter(listener.bootstrap, "vanish", "share.record.lock.duration.ms", "600000")
    _alter(listener.bootstrap, "vanish", "share.session.timeout.ms", "600000")
    conf = {"bootstrap.servers": listener.bootstrap, "group.id": "vanish", "share.acknowledgement.mode": "explicit"}
    first = ShareConsumer(conf)
    first.subscribe(["gone"])
    got = []
    deadline = time.monotonic() + 30
    while len(got) < 20 and time.monotonic() < deadline:
        got += [m.offset() for m in first.poll(0.2) if m.error() is None]
    assert sorted(got) == list(range(20))
    del first  # destroyed without close(): no acknowledgement, no share session closed by the client
    gc.collect()
    second = ShareConsumer(conf)
    second.subscribe(["gone"])
    again = []
    while len(again) < 20 and time.monotonic() < deadline + 30:
        again += [(m.offset(), m.delivery_count()) for m in second.poll(0.2) if m.error() is None]
    second.close()
    assert sorted(again) == [(o, 2) for o in range(20)]
