"""`make interop`: Kafka 4.1's metadata hash of a consumer group (KIP-1101), judged by a real broker of KAFKA_HOME.
Kafka's Java consumers of the consumer group protocol join a group subscribed to topics of the broker; the broker's
`__consumer_offsets` then holds its ConsumerGroupMetadata record with the hash it computed, and
engine.groups.consumer_group_records.metadata_hash must give the same number from the same topic ids (the broker's
partition.metadata files), names and partition counts; as a topic grows, both hashes move together. A Kafka before
4.1 (the 4.0 build) writes ConsumerGroupPartitionMetadata instead and no hash: the test then checks that, which is
what kafkalog reads from such a directory. Not part of `make test` (it needs a Kafka build)."""
from __future__ import annotations

import os
import time

import pytest

import engine
from bench.kafka_broker import KafkaBroker
from engine.groups import consumer_group_records as records
from engine.groups import offsets
from engine.record import codec
from engine.segments import partition_metadata
from tests.broker.test_kafka_tools import _console_consumer, _kafka_has, run_class  # noqa: F401  (a fixture)

GROUP = "hashed"
TOPICS = {"hash-a": 3, "hash-b": 5}


def _group_records(data: str) -> list:
    folder = os.path.join(data, f"{offsets.TOPIC}-{offsets.partition(GROUP)}")
    raw = b""
    for name in sorted(f for f in os.listdir(folder) if f.endswith(".log")):
        with open(os.path.join(folder, name), "rb") as f:
            raw += f.read()
    return [records.decode(r.key, r.value) for b in codec.iter_batches(raw) if not b.is_control
            for r in b.records() if records.is_consumer_group_key(r.key)]


def _members(data: str) -> set[str]:
    try:
        found = _group_records(data)
    except FileNotFoundError:
        return set()
    return {r.member_id for r in found if r.kind == records.MEMBER_METADATA and r.value is not None}


def test_the_brokers_consumer_group_metadata_hash_is_kafkalogs(tmp_path, run_class):
    """Two of Kafka's own consumers (ConsoleConsumer, group.protocol=consumer) in one group, each subscribed to one
    topic (a heterogeneous group: the hash covers both, in name order); then hash-b grows."""
    from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

    broker = KafkaBroker(os.environ["KAFKA_HOME"], str(tmp_path / "broker")).start()
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        for f in admin.create_topics([NewTopic(t, n, 1) for t, n in TOPICS.items()]).values():
            f.result(30)
        consumers = [_console_consumer(run_class, broker.bootstrap, t, GROUP, "group.protocol=consumer")
                     for t in sorted(TOPICS)]
        deadline = time.monotonic() + 60
        while len(_members(broker.data)) < 2:
            assert time.monotonic() < deadline and all(c.poll() is None for c in consumers)
            time.sleep(0.5)
        time.sleep(3)
        admin.create_partitions([NewPartitions("hash-b", 7)])["hash-b"].result(30)
        for c in consumers:  # (each leaves after 20 s without a record)
            c.communicate(timeout=120)
    finally:
        broker.stop()
    ids = {}
    for t in TOPICS:
        with open(os.path.join(broker.data, f"{t}-0", "partition.metadata"), "rb") as f:
            ids[t] = partition_metadata.parse(f.read())
    found = _group_records(broker.data)
    epochs = [r.value for r in found if r.kind == records.GROUP_EPOCH and r.value is not None]
    if not _kafka_has(run_class, "org/apache/kafka/clients/admin/ListShareGroupOffsetsSpec.class"):
        # Kafka 4.0: the subscriptions' metadata record, no hash
        assert {e["metadata_hash"] for e in epochs} == {0}
        assert any(r.kind == records.PARTITION_METADATA and r.value for r in found)
        return
    assert not any(r.kind == records.PARTITION_METADATA and r.value for r in found)
    before = records.metadata_hash({t: (ids[t], n) for t, n in TOPICS.items()})
    after = records.metadata_hash({"hash-a": (ids["hash-a"], 3), "hash-b": (ids["hash-b"], 7)})
    hashes = [e["metadata_hash"] for e in epochs]
    alone = {records.metadata_hash({"hash-a": (ids["hash-a"], 3)}),
             records.metadata_hash({"hash-b": (ids["hash-b"], 5)}),
             records.metadata_hash({"hash-b": (ids["hash-b"], 7)})}
    # every epoch's hash is one kafkalog computes: a member alone (whichever joined first, or stayed last), both
    # topics, both after the growth, none once both left
    assert hashes[0] in alone and hashes[-1] == 0 and set(hashes) <= alone | {before, after, 0}, (hashes, before, after)
    assert hashes.index(before) < hashes.index(after) and len(alone | {before, after, 0}) == 6, hashes
    assert records.metadata_hash({}) == 0
    # kafkalog opens the broker's directory: its coordinator adopts `__consumer_offsets` and loads the group from
    # Kafka's records (a consumer member's null ClassicMemberMetadata is a tagged field there, which kafkalog reads)
    with engine.open(broker.data) as eng:
        d = eng.groups.describe_consumer_group(GROUP)
        assert (d.state, d.group_epoch, d.members) == ("Empty", epochs[-1]["epoch"], [])
        assert eng.groups.consumer.groups[GROUP].metadata_hash == epochs[-1]["metadata_hash"]
