"""Kafka 4.1's consumer group metadata hash (KIP-1101) in kafkalog's coordinator: the group epoch record carries the
hash of the subscribed topics, the epoch moves when it changes (a topic grown, or deleted and made again under a new id
with the same name and partition count, which the partition metadata record of Kafka 4.0 could not tell), and a
Kafka 4.0 group's partition metadata record is tombstoned by the first heartbeat that computes the hash. Kafka's own
brokers judge the hash's value in make interop (tests/broker/test_kafka_metadata_hash.py)."""
from __future__ import annotations

import pytest

import engine
from engine.common.clock import ManualClock
from engine.groups import consumer_group_records as records
from engine.groups import offsets
from engine.record import codec
from tests.unit.test_consumer_group_protocol import Client


@pytest.fixture
def opened(tmp_path):
    e = engine.open(str(tmp_path / "d"), clock=ManualClock(1_000_000), background=False)
    e.create_topic("t", partitions=3)
    e.create_topic("u", partitions=2)
    yield e
    e.close()


def _epoch_records(e, group: str = "g") -> list[dict | None]:
    lg = e.internal.internal_partition(offsets.TOPIC, offsets.partition(group)).log
    return [records.decode(r.key, r.value).value for _, b in lg.batches(0, lg.log_end_offset) if not b.is_control
            for r in b.records() if records.is_consumer_group_key(r.key)
            and records.decode(r.key, r.value).kind == records.GROUP_EPOCH]


def _ids(e) -> dict[str, str]:
    return {t: e.admin.topic_id_of(t) for t in ("t", "u")}


def test_the_group_epoch_record_carries_the_hash_of_the_subscribed_topics(opened):
    e = opened
    a, b = Client(e.groups, topics=("t",)), Client(e.groups, topics=("u",))
    a.beat()
    b.beat()
    ids = _ids(e)
    assert [v["metadata_hash"] for v in _epoch_records(e)] == [
        records.metadata_hash({"t": (ids["t"], 3)}), records.metadata_hash({"t": (ids["t"], 3), "u": (ids["u"], 2)})]
    # the group's hash is of the topics in name order, whoever subscribes to which
    assert records.metadata_hash({"u": (ids["u"], 2), "t": (ids["t"], 3)}) == _epoch_records(e)[-1]["metadata_hash"]
    a.beat(), b.beat()  # nothing changed: no new epoch
    assert len(_epoch_records(e)) == 2
    b.beat(member_epoch=-1)  # b leaves: the hash of what is left
    assert _epoch_records(e)[-1] == {"epoch": 3, "metadata_hash": records.metadata_hash({"t": (ids["t"], 3)})}


def test_a_topic_made_again_under_its_name_moves_the_group_epoch(opened):
    """Same name, same partition count, a new topic id: only the id tells them apart, and the hash covers it."""
    e = opened
    a = Client(e.groups, topics=("t",))
    a.beat(), a.beat()
    before = _epoch_records(e)[-1]
    e.delete_topic("t")
    e.create_topic("t", partitions=3)
    a.beat()
    after = _epoch_records(e)[-1]
    assert after["epoch"] == before["epoch"] + 1 and after["metadata_hash"] != before["metadata_hash"] != 0
    assert after["metadata_hash"] == records.metadata_hash({"t": (_ids(e)["t"], 3)})


def test_hashes_of_no_topic_and_of_different_topics():
    one = "AAAAAAAAAAAAAAAAAAAAAQ"
    assert records.metadata_hash({}) == 0
    hashes = {records.topic_hash(one, "t", 3), records.topic_hash(one, "t", 4), records.topic_hash(one, "u", 3),
              records.topic_hash("AAAAAAAAAAAAAAAAAAAAAg", "t", 3)}
    assert len(hashes) == 4 and all(-(1 << 63) <= h < 1 << 63 for h in hashes)


def test_a_kafka_4_0_groups_partition_metadata_record_is_tombstoned_by_its_next_heartbeat(tmp_path):
    """A group Kafka 4.0 wrote (its epoch record without a hash, its ConsumerGroupPartitionMetadata record): the first
    heartbeat computes the hash, moves the epoch (0 was no hash) and writes the partition metadata's tombstone, as
    Kafka 4.1's coordinator does."""
    path, clock = str(tmp_path / "d"), ManualClock(1_000_000)
    with engine.open(path, clock=clock, background=False) as e:
        e.create_topic("t", partitions=3)
        a = Client(e.groups, topics=("t",))
        a.beat(), a.beat()
        tid = e.admin.topic_id_of("t")
        legacy = records.Record(records.PARTITION_METADATA, "g", "", {"topics": [
            {"topic_id": records.topic_uuid(tid), "topic_name": "t", "num_partitions": 3, "partition_metadata": []}]})
        old_epoch = records.Record(records.GROUP_EPOCH, "g", "", {"epoch": 1})  # (Kafka 4.0: no hash)
        e.internal.append_internal(offsets.TOPIC, offsets.partition("g"), codec.encode_batch(
            [(*records.encode(r), None, clock.time_ms()) for r in (legacy, old_epoch)]))
    with engine.open(path, clock=clock, background=False) as e:
        g = e.groups.consumer.groups["g"]
        assert (g.epoch, g.metadata_hash, g.partition_metadata_record) == (1, 0, True)
        a.groups = e.groups
        a.beat()
        assert (g.epoch, g.metadata_hash, g.partition_metadata_record) == \
            (2, records.metadata_hash({"t": (tid, 3)}), False)
        a.beat()
        assert g.epoch == 2  # (nothing more to write)


def test_kafkas_null_classic_member_metadata_reads_and_writes_byte_for_byte():
    """A ConsumerGroupMemberMetadata value a Kafka 4.2 broker wrote for a member of the consumer protocol (taken from
    its `__consumer_offsets` in make interop): Kafka writes the null ClassicMemberMetadata as tagged field 0 holding a
    0 marker; kafkalog reads it as null and writes the same bytes."""
    key = b"\x00\x05\x00\x06hashed\x00\x16WFKTZcg9S0K/G9NlucpqlA"
    value = b"\x00\x00\x00\x00\x08rdkafka\x0b/127.0.0.1\x03\x07hash-a\x07hash-b\x01\x00\x04\x93\xe0\x00\x01\x00\x01\x00"
    r = records.decode(key, value)
    assert r.value["classic_member_metadata"] is None and r.value["subscribed_topic_names"] == ["hash-a", "hash-b"]
    assert records.encode(r) == (key, value)


def _regex_records(e, group: str = "g") -> list[tuple[str, dict | None]]:
    lg = e.internal.internal_partition(offsets.TOPIC, offsets.partition(group)).log
    found = [records.decode(r.key, r.value) for _, b in lg.batches(0, lg.log_end_offset) if not b.is_control
             for r in b.records() if records.is_consumer_group_key(r.key)]
    return [(r.member_id, r.value) for r in found if r.kind == records.REGULAR_EXPRESSION]


def test_a_regex_subscription_writes_kafka_4_1s_resolved_expression_records(opened):
    """Kafka 4.1 keeps what each subscribed expression matched in a record of its own (key 16: the group and the
    expression; the topics, the metadata version, the time): one when the match changes, a tombstone when no member
    uses the expression any more."""
    e = opened
    a = Client(e.groups, topics=None, regex="t.*")
    a.beat()
    assert _regex_records(e) == [("t.*", {"topics": ["t"], "version": 0, "timestamp": 1_000_000})]
    a.beat()  # the same match: nothing written
    assert len(_regex_records(e)) == 1
    e.create_topic("t2", partitions=1)
    e.clock.advance(5)
    a.beat()
    assert _regex_records(e)[-1] == ("t.*", {"topics": ["t", "t2"], "version": 0, "timestamp": 1_000_005})
    assert e.groups.consumer.groups["g"].resolved == {"t.*": frozenset({"t", "t2"})}
    a.beat(member_epoch=-1)  # the only member using it leaves
    assert _regex_records(e)[-1] == ("t.*", None) and e.groups.consumer.groups["g"].resolved == {}
