"""Share groups (KIP-932) over the wire, judged by librdkafka's share consumer (confluent-kafka's ShareConsumer):
two members of one share group read the same partitions, each record is acquired by one of them at a time and
acknowledged record by record (accepted, released for redelivery, rejected), the group's share.auto.offset.reset is
set through IncrementalAlterConfigs on the GROUP resource, and what was acknowledged survives a restart of the
engine."""
from __future__ import annotations

import time

import pytest

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


def _drain(member, wanted: int, accept) -> dict[tuple[int, int], list[int]]:
    """Poll an explicit in-process member until `wanted` distinct (partition, offset) were delivered, accepting those
    `accept` picks and releasing the rest; returns the delivery counts each was seen with."""
    from engine.clients.share_consumer import AcknowledgeType

    seen: dict[tuple[int, int], list[int]] = {}
    for _ in range(200):
        if len(seen) >= wanted:
            break
        for r in member.poll(50):
            seen.setdefault((r.partition, r.offset), []).append(r.delivery_count)
            member.acknowledge(r, AcknowledgeType.ACCEPT if accept(r.partition, r.offset) else
                               AcknowledgeType.RELEASE)
        member.commit_sync()
    assert len(seen) == wanted, sorted(seen)
    return seen


@pytest.mark.kio
def test_the_share_group_offsets_apis_as_kio_speaks_them(kafka_server):
    """DescribeShareGroupOffsets (v0, v1), AlterShareGroupOffsets and DeleteShareGroupOffsets sent and read by kio (an
    independent codec of Kafka's published schemas) over a socket: start offsets and lags as a model of the
    acknowledgements made gives them, -1 where the group holds no state, alterations and deletions refused while
    the group has a member or when it does not exist, and an altered start offset is where delivery resumes."""
    import socket

    from kio.schema.alter_share_group_offsets.v0 import request as alter
    from kio.schema.delete_share_group_offsets.v0 import request as delete
    from kio.schema.describe_share_group_offsets.v0 import request as describe0
    from kio.schema.describe_share_group_offsets.v1 import request as describe1
    from kio.schema.errors import ErrorCode
    from kio.static.primitive import i32, i64

    from tests.network import kio_peer

    eng, listener = kafka_server.engine, kafka_server.listener
    for topic, partitions in (("jobs", 2), ("other", 1), ("unread", 1)):
        eng.create_topic(topic, partitions)
    with eng.producer(linger_ms=5) as p:
        for i in range(10):
            for partition in (0, 1):
                p.send("jobs", b"v", key=b"%d" % i, partition=partition)
    eng.alter_group_configs("w", {"share.auto.offset.reset": "earliest"})
    done = {(0, o) for o in range(4)} | {(1, o) for o in (0, 2, 4)}  # what the member accepts; the rest it releases
    with eng.share_consumer("w", ["jobs"], acknowledgement_mode="explicit") as member:
        _drain(member, 20, lambda partition, offset: (partition, offset) in done)

    def model(partition: int) -> tuple[int, int]:  # (start offset, lag) of ten records after those acknowledgements
        left = [o for o in range(10) if (partition, o) not in done]
        return left[0], len(left)

    def groups(sock, version: int, group: str, topics) -> list[dict]:
        module = describe1 if version else describe0
        wanted = None if topics is None else tuple(
            module.DescribeShareGroupOffsetsRequestTopic(topic_name=t, partitions=tuple(i32(p) for p in ps))
            for t, ps in topics)
        answer = kio_peer.call(sock, module.DescribeShareGroupOffsetsRequest(groups=(
            module.DescribeShareGroupOffsetsRequestGroup(group_id=group, topics=wanted),)))
        return kio_peer.plain(answer)["groups"]

    def offsets(sock, version: int = 1, group: str = "w", topics=None) -> dict:
        [g] = groups(sock, version, group, topics)
        assert (g["group_id"], g["error_code"]) == (group, 0)
        return {(t["topic_name"], p["partition_index"]): (p["start_offset"], p.get("lag"), p["leader_epoch"],
                                                          p["error_code"], t["topic_id"] is None)
                for t in g["topics"] for p in t["partitions"]}

    def altered(sock, group: str, starts: dict[str, list[tuple[int, int]]]) -> dict:
        answer = kio_peer.plain(kio_peer.call(sock, alter.AlterShareGroupOffsetsRequest(group_id=group, topics=tuple(
            alter.AlterShareGroupOffsetsRequestTopic(topic_name=t, partitions=tuple(
                alter.AlterShareGroupOffsetsRequestPartition(partition_index=i32(p), start_offset=i64(o))
                for p, o in ps)) for t, ps in starts.items()))))
        return answer

    def deleted(sock, group: str, topics: list[str]) -> dict:
        return kio_peer.plain(kio_peer.call(sock, delete.DeleteShareGroupOffsetsRequest(group_id=group, topics=tuple(
            delete.DeleteShareGroupOffsetsRequestTopic(topic_name=t) for t in topics))))

    unknown = int(ErrorCode.unknown_topic_or_partition)
    with socket.create_connection(listener.address, timeout=10) as sock:
        # every share-partition the group holds state of, with its lag (v1)
        assert offsets(sock) == {("jobs", p): (*model(p), 0, 0, False) for p in (0, 1)}
        # named ones (v0: no lag): -1 where the group holds no state, the topic id zero (kio: None) for an unknown topic
        assert offsets(sock, 0, topics=[("jobs", [0, 7]), ("nope", [0]), ("unread", [0])]) == {
            ("jobs", 0): (model(0)[0], None, 0, 0, False), ("jobs", 7): (-1, None, 0, 0, False),
            ("nope", 0): (-1, None, 0, 0, True), ("unread", 0): (-1, None, 0, 0, False)}
        assert offsets(sock, group="nobody") == {}

        with eng.share_consumer("w", ["other"]) as busy:  # a member (of another topic): the group is not empty
            busy.poll(0)
            for answer in (altered(sock, "w", {"jobs": [(0, 2)]}), deleted(sock, "w", ["jobs"])):
                assert (answer["error_code"], answer["responses"]) == (int(ErrorCode.non_empty_group), [])
        for answer in (altered(sock, "nobody", {"jobs": [(0, 2)]}), deleted(sock, "nobody", ["jobs"])):
            assert (answer["error_code"], answer["responses"]) == (int(ErrorCode.group_id_not_found), [])
        assert offsets(sock)[("jobs", 0)][:2] == model(0)  # nothing changed by the refusals

        answer = altered(sock, "w", {"jobs": [(0, 2), (5, 0), (1, -3)], "nope": [(0, 0)]})
        assert answer["error_code"] == 0
        assert {(t["topic_name"], p["partition_index"]): p["error_code"] for t in answer["responses"]
                for p in t["partitions"]} == {("jobs", 0): 0, ("jobs", 5): unknown, ("nope", 0): unknown,
                                              ("jobs", 1): int(ErrorCode.invalid_request)}
        now = offsets(sock)
        assert now[("jobs", 0)] == (2, 8, 0, 0, False)  # what was acknowledged there is forgotten
        assert now[("jobs", 1)][:2] == model(1)
    with eng.share_consumer("w", ["jobs"], acknowledgement_mode="explicit") as member:
        seen = _drain(member, 8 + model(1)[1], lambda partition, offset: True)
    assert {o: counts for (p, o), counts in seen.items() if p == 0} == {o: [1] for o in range(2, 10)}

    with socket.create_connection(listener.address, timeout=10) as sock:
        answer = deleted(sock, "w", ["jobs", "other", "unread", "nope"])
        assert answer["error_code"] == 0
        assert {t["topic_name"]: (t["error_code"], t["topic_id"] is None) for t in answer["responses"]} == {
            "jobs": (0, False), "other": (0, False), "unread": (unknown, True), "nope": (unknown, True)}
        assert offsets(sock) == {}


@pytest.mark.kio
def test_kafka_4_2s_share_fetch_v2_record_limit_and_renew_as_kio_speaks_them(kafka_server):
    """ShareFetch and ShareAcknowledge v2 from kio over a socket: a member joins (ShareGroupHeartbeat v1), fetches
    in record_limit mode three records of a batch of ten (the batch comes whole, the acquired range is three), RENEWs
    them with ShareAcknowledge v2 (whose answer gives the lock's duration), then accepts them in a ShareFetch that
    only acknowledges (IsRenewAck: no records); the next fetches go on from offset 3, one v1 refuses RENEW."""
    import socket

    from kio.schema.errors import ErrorCode
    from kio.schema.share_acknowledge.v1 import request as ack1
    from kio.schema.share_acknowledge.v2 import request as ack2
    from kio.schema.share_fetch.v2 import request as fetch2
    from kio.schema.share_group_heartbeat.v1.request import ShareGroupHeartbeatRequest
    from kio.static.primitive import i8, i32, i64

    from engine.segments.partition_metadata import topic_uuid
    from tests.network import kio_peer

    eng, listener = kafka_server.engine, kafka_server.listener
    eng.create_topic("jobs", 1)
    eng.alter_group_configs("q", {"share.auto.offset.reset": "earliest", "share.record.lock.duration.ms": "7000"})
    with eng.producer(linger_ms=60_000) as p:  # (one batch of ten)
        for i in range(10):
            p.send("jobs", b"v", key=b"%d" % i)
    tid = topic_uuid(eng.admin.topic_id_of("jobs"))
    epochs = iter(range(100))

    def fetch(sock, acks=(), renew_only=False, mode=1, max_records=3) -> dict:
        partition = fetch2.FetchPartition(partition_index=i32(0), acknowledgement_batches=tuple(
            fetch2.AcknowledgementBatch(first_offset=i64(f), last_offset=i64(la), acknowledge_types=(i8(k),))
            for f, la, k in acks))
        answer = kio_peer.plain(kio_peer.call(sock, fetch2.ShareFetchRequest(
            group_id="q", member_id="m-1", share_session_epoch=i32(next(epochs)), max_wait=_ms(500),
            min_bytes=i32(1), max_records=i32(max_records), batch_size=i32(max_records), share_acquire_mode=i8(mode),
            is_renew_ack=renew_only, topics=(fetch2.FetchTopic(topic_id=tid, partitions=(partition,)),),
            forgotten_topics_data=())))
        assert answer["error_code"] == 0, answer
        [[part]] = [t["partitions"] for t in answer["responses"]]
        return part

    def acknowledge(sock, module, kind: int) -> tuple[int, dict]:
        answer = kio_peer.plain(kio_peer.call(sock, module.ShareAcknowledgeRequest(
            group_id="q", member_id="m-1", share_session_epoch=i32(next(epochs)), topics=(module.AcknowledgeTopic(
                topic_id=tid, partitions=(module.AcknowledgePartition(partition_index=i32(0), acknowledgement_batches=(
                    module.AcknowledgementBatch(first_offset=i64(3), last_offset=i64(5),
                                                acknowledge_types=(i8(kind),)),)),)),))))
        [[part]] = [t["partitions"] for t in answer["responses"]]
        return answer.get("acquisition_lock_timeout"), part

    with socket.create_connection(listener.address, timeout=10) as sock:
        beat = None
        for _ in range(20):  # (the first heartbeats initialize the share-partition, a later one assigns it)
            beat = kio_peer.plain(kio_peer.call(sock, ShareGroupHeartbeatRequest(
                group_id="q", member_id="m-1", member_epoch=i32(beat["member_epoch"] if beat else 0),
                subscribed_topic_names=("jobs",))))
            assert beat["error_code"] == 0, beat
            if beat["assignment"] and beat["assignment"]["topic_partitions"]:
                break
        assert beat["assignment"]["topic_partitions"] == [{"topic_id": tid, "partitions": [0]}]
        first = fetch(sock)
        assert [(a["first_offset"], a["last_offset"], a["delivery_count"]) for a in first["acquired_records"]] == \
            [(0, 2, 1)]
        assert first["records"][:8] == (0).to_bytes(8, "big")  # the batch from offset 0, whole
        assert eng.partition("jobs", 0).high_watermark == 10
        part = fetch(sock, acks=[(0, 2, 4)], renew_only=True)  # RENEW in a ShareFetch that only acknowledges
        assert (part["acknowledge_error_code"], part["acquired_records"]) == (0, [])
        part = fetch(sock, acks=[(0, 2, 1)])  # ACCEPT, and the next three
        assert part["acknowledge_error_code"] == 0
        assert [(a["first_offset"], a["last_offset"]) for a in part["acquired_records"]] == [(3, 5)]
        lock, renewed = acknowledge(sock, ack2, 4)
        assert (lock, renewed["error_code"]) == (7000, 0)
        _, refused = acknowledge(sock, ack1, 4)  # v1 has no RENEW
        assert refused["error_code"] == int(ErrorCode.invalid_request)
        part = fetch(sock, acks=[(3, 5, 1)], mode=0, max_records=1)  # batch_optimized: the rest of the batch
        assert part["acknowledge_error_code"] == 0
        assert [(a["first_offset"], a["last_offset"]) for a in part["acquired_records"]] == [(6, 9)]
    assert eng.share_groups.start_offsets("q") == {(eng.admin.topic_id_of("jobs"), 0): 6}


def _ms(n: int):
    import datetime

    return datetime.timedelta(milliseconds=n)
