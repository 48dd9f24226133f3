"""The consumer group protocol (KIP-848) over the wire, judged by librdkafka (confluent-kafka with
group.protocol=consumer): members split a topic's partitions by the coordinator's assignment, learn their topics'
names from Metadata by topic id, commit with their member epoch, and a member that leaves hands its partitions over;
the admin client describes the group through ConsumerGroupDescribe."""
from __future__ import annotations

import pytest

from tests.network.test_listener import _read_until, _records, produced

CONF = {"group.protocol": "consumer", "auto.offset.reset": "earliest", "enable.auto.commit": False}


@pytest.fixture
def served(kafka_server):
    return kafka_server.engine, kafka_server.listener


def test_librdkafka_members_share_partitions_commit_and_hand_over(served):
    from confluent_kafka import Consumer

    eng, listener = served
    produced(listener, eng, "kip848", 4, 400)
    conf = {"bootstrap.servers": listener.bootstrap, "group.id": "g848", **CONF}
    first, second = Consumer(conf), Consumer(conf)
    first.subscribe(["kip848"])
    second.subscribe(["kip848"])
    got, before = [], []  # what the first member reads, and the second before the hand-over
    assert _read_until({first: got, second: before},
                       lambda: len(first.assignment()) == 2 and len(second.assignment()) == 2)
    mine, theirs = {tp.partition for tp in first.assignment()}, {tp.partition for tp in second.assignment()}
    assert mine | theirs == {0, 1, 2, 3} and not mine & theirs
    group = eng.groups.describe_consumer_group("g848")
    assert group.state == "Stable" and len(group.members) == 2
    assert all(m.member_epoch == group.assignment_epoch for m in group.members)
    everything = {(p, o) for p in range(4) for o in range(len(_records(eng, "kip848", p)))}
    of_mine = {(p, o) for p, o in everything if p in mine}
    # (the first to join may read every partition before the second is given half: a partition that moves without
    # a commit is read again by its new owner)
    assert _read_until({first: got}, lambda: of_mine <= set(got))
    first.commit(asynchronous=False)  # OffsetCommit with the member's epoch
    committed = eng.committed_offsets("g848", [("kip848", p) for p in mine])
    assert {tp.partition: om.offset for tp, om in committed.items()} == \
        {p: len(_records(eng, "kip848", p)) for p in mine}
    first.close()  # a heartbeat with epoch -1: the other member is given every partition
    rest: list = []
    assert _read_until({second: rest}, lambda: len(second.assignment()) == 4 and
                       everything - of_mine <= set(before + rest))
    second.close()
    # every record read, and none of the first member's partitions again after the hand-over: they were committed
    assert set(got + before + rest) == everything
    assert not [(p, o) for p, o in rest if p in mine]
    assert eng.groups.describe_consumer_group("g848").state == "Empty"


def test_librdkafka_admin_describes_and_lists_a_consumer_group(served):
    from confluent_kafka import Consumer, ConsumerGroupType
    from confluent_kafka.admin import AdminClient

    eng, listener = served
    eng.create_topic("described", 3)
    consumer = Consumer({"bootstrap.servers": listener.bootstrap, "group.id": "gd", "client.id": "me", **CONF})
    consumer.subscribe(["described"])
    assert _read_until({consumer: []}, lambda: len(consumer.assignment()) == 3)
    admin = AdminClient({"bootstrap.servers": listener.bootstrap})
    listed = admin.list_consumer_groups(request_timeout=10).result()
    assert [(g.group_id, g.type) for g in listed.valid] == [("gd", ConsumerGroupType.CONSUMER)]
    described = admin.describe_consumer_groups(["gd"], request_timeout=10)["gd"].result()
    assert described.type == ConsumerGroupType.CONSUMER and described.partition_assignor == "uniform"
    (member,) = described.members
    assert member.client_id == "me"
    assert sorted(tp.partition for tp in member.assignment.topic_partitions) == [0, 1, 2]
    assert {tp.topic for tp in member.assignment.topic_partitions} == {"described"}
    consumer.close()


def test_metadata_answers_a_topic_asked_for_by_id(served):
    """Metadata v12 with topic ids and no names (what the consumer group protocol's clients send for the topics of
    their assignment): the topic by its id, and UNKNOWN_TOPIC_ID (100) for an id no topic has."""
    import socket
    import uuid

    from engine.segments.partition_metadata import topic_uuid
    from engine.protocol import messages as m
    from tests.network.test_listener import _call

    eng, listener = served
    eng.create_topic("by-id", 3)
    known, unknown = topic_uuid(eng.admin.topic_id_of("by-id")), uuid.UUID(int=12345)
    with socket.create_connection(listener.address, timeout=10) as sock:
        answer = _call(sock, m.METADATA, 12, {"topics": [{"name": None, "topic_id": known},
                                                          {"name": None, "topic_id": unknown}],
                                              "allow_auto_topic_creation": False})
    found, missing = answer["topics"]
    assert (found["error_code"], found["name"], found["topic_id"], len(found["partitions"])) == (0, "by-id", known, 3)
    assert (missing["error_code"], missing["name"], missing["topic_id"]) == (100, None, unknown)


def test_api_versions_announces_the_consumer_group_protocol(served):
    """ApiVersions v3+: the two APIs of the consumer group protocol, and the feature `group.version` at level 1 (Kafka
    4's switch for it), beside `share.version` at level 1 (share groups') and `transaction.version` at level 2
    (transactions v2, Kafka 4's default)."""
    import socket

    from engine.protocol import messages as m
    from tests.network.test_listener import _call

    _, listener = served
    with socket.create_connection(listener.address, timeout=10) as sock:
        answer = _call(sock, m.API_VERSIONS, 3, {"client_software_name": "t", "client_software_version": "1"})
    keys = {k["api_key"]: (k["min_version"], k["max_version"]) for k in answer["api_keys"]}
    assert keys[68] == (0, 1) and keys[69] == (0, 0)
    assert [(f["name"], f["min_version_level"], f["max_version_level"]) for f in answer["finalized_features"]] == \
        [("group.version", 1, 1), ("share.version", 1, 1), ("transaction.version", 2, 2)]
    assert [f["name"] for f in answer["supported_features"]] == ["group.version", "share.version",
                                                                 "transaction.version"]
    assert keys[76] == keys[77] == (0, 1) and keys[78] == keys[79] == (0, 2)


def test_librdkafka_regex_subscription_is_resolved_by_the_coordinator(served):
    """librdkafka sends its `^` subscriptions as one SubscribedTopicRegex (each in parentheses, joined by `|`) beside
    its plain names; the coordinator matches it against the topics, and a matching topic created later is assigned
    to the member without a new subscribe()."""
    from confluent_kafka import Consumer

    eng, listener = served
    eng.create_topic("metrics-cpu", 2)
    eng.create_topic("plain", 1)
    eng.create_topic("other", 1)
    consumer = Consumer({"bootstrap.servers": listener.bootstrap, "group.id": "gre", **CONF,
                         "topic.metadata.refresh.interval.ms": 500})
    consumer.subscribe(["^metrics-.*", "plain"])

    def held() -> list[tuple[str, int]]:
        return sorted((tp.topic, tp.partition) for tp in consumer.assignment())
    assert _read_until({consumer: []}, lambda: held() == [("metrics-cpu", 0), ("metrics-cpu", 1), ("plain", 0)])
    (member,) = eng.groups.describe_consumer_group("gre").members
    assert member.subscribed_topic_regex == "(^metrics-.*)" and member.subscribed_topic_names == ["plain"]
    eng.create_topic("metrics-disk", 1)
    assert _read_until({consumer: []}, lambda: ("metrics-disk", 0) in held())
    assert ("other", 0) not in held()
    consumer.close()


@pytest.mark.parametrize("strategy", ["range", "cooperative-sticky"])
def test_librdkafka_members_upgrade_a_classic_group_and_downgrade_it_again(served, strategy):
    """Kafka's online migration, judged by librdkafka on both protocols: a group of two classic members takes a member
    of the consumer group protocol (the group becomes a consumer group; the classic members stay in it and keep
    speaking JoinGroup, SyncGroup and Heartbeat), a classic member leaves, and a new classic member joins the consumer
    group; when the last member of the consumer protocol leaves, the group is a classic group again. At every step the
    members hold disjoint shares of every partition, and together they read every record. The classic members are
    eager (range) or cooperative (cooperative-sticky: they join with the partitions they own, and give up only those
    the coordinator takes)."""
    from confluent_kafka import Consumer

    eng, listener = served
    produced(listener, eng, "roll", 4, 400)
    classic_conf = {"bootstrap.servers": listener.bootstrap, "group.id": "rolling", "auto.offset.reset": "earliest",
                    "enable.auto.commit": False, "heartbeat.interval.ms": 200,
                    "partition.assignment.strategy": strategy}
    consumer_conf = {"bootstrap.servers": listener.bootstrap, "group.id": "rolling", **CONF}
    everything = {(p, o) for p in range(4) for o in range(len(_records(eng, "roll", p)))}
    got: dict = {}

    def split(*members) -> bool:
        shares = [{tp.partition for tp in m.assignment()} for m in members]
        return all(shares) and set().union(*shares) == {0, 1, 2, 3} and sum(map(len, shares)) == 4

    first, second = Consumer(classic_conf), Consumer(classic_conf)
    for m in (first, second):
        got[m] = []
        m.subscribe(["roll"])
    assert _read_until(got, lambda: split(first, second))
    assert eng.groups.describe_group("rolling").protocol_type == "consumer"  # a classic group
    upgraded = Consumer(consumer_conf)
    got[upgraded] = []
    upgraded.subscribe(["roll"])
    assert _read_until(got, lambda: split(first, second, upgraded)), \
        [sorted(tp.partition for tp in m.assignment()) for m in got]
    group = eng.groups.describe_consumer_group("rolling")  # the group became a consumer group
    assert group.state == "Stable" and len(group.members) == 3
    second.close()  # LeaveGroup from a classic member of the consumer group
    del got[second]
    assert _read_until(got, lambda: split(first, upgraded))
    late = Consumer(classic_conf)  # a classic member joins the consumer group
    got[late] = []
    late.subscribe(["roll"])
    assert _read_until(got, lambda: split(first, upgraded, late))
    assert len(eng.groups.describe_consumer_group("rolling").members) == 3
    upgraded.close()  # the last member of the consumer protocol leaves: a classic group again
    del got[upgraded]
    assert _read_until(got, lambda: split(first, late) and eng.groups.describe_group("rolling").state == "Stable")
    assert "rolling" not in eng.groups.consumer.groups
    assert _read_until(got, lambda: everything <= {r for rs in got.values() for r in rs})
    for m in (first, late):
        m.close()
