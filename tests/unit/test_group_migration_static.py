"""Kafka's online downgrade on a static member's replacement (GroupMetadataManager.classicGroupJoinToConsumerGroup,
validateOnlineDowngradeWithReplacedMember): when a member of the classic protocol joins a consumer group under the
instance id of its member of the consumer group protocol, and the group is then all classic, the group becomes a
classic group at once, the joining member holding the replaced member's partitions; it rebalances only when the
subscription changed. Kafka's own consumers judge online migration in make interop
(tests/broker/test_kafka_tools.py)."""
from __future__ import annotations

import pytest

from tests.unit.test_consumer_group_protocol import ClassicClient, Client, _owned, reopened  # noqa: F401 (a fixture)

STATIC_LEAVE_EPOCH = -2


def _a_consumer_group_of_a_classic_and_a_static_member(e) -> tuple[ClassicClient, Client]:
    e.create_topic("t", partitions=6)
    e.create_topic("u", partitions=2)
    classic = ClassicClient(e.groups)
    classic.join()
    static = Client(e.groups, instance="i1")
    static.beat()  # (upgrades the classic group)
    for _ in range(4):
        classic.beat(), static.beat()
    assert sorted(_owned(e, (classic, static))) == [("t", p) for p in range(6)] and static.owned and classic.owned
    return classic, static


@pytest.mark.parametrize("topics", [("t",), ("t", "u")], ids=["same subscription", "another subscription"])
def test_a_classic_member_replacing_the_last_static_consumer_member_makes_the_group_classic(reopened, topics):
    with reopened() as e:
        classic, static = _a_consumer_group_of_a_classic_and_a_static_member(e)
        held = {("t", p) for p in static.partitions()}
        epoch = e.groups.describe_consumer_group("g").group_epoch
        static.beat(member_epoch=STATIC_LEAVE_EPOCH)  # it goes, keeping its place until its session ends
        assert "g" in e.groups.consumer.groups
        replacement = ClassicClient(e.groups, topics=topics, instance="i1")
        replacement.join()
        assert "g" not in e.groups.consumer.groups
        g = e.groups.describe_group("g")
        assert sorted(m["member_id"] for m in g.members) == sorted([classic.member_id, replacement.member_id])
        if topics == ("t",):  # no rebalance: it holds what the member it replaced held, the other keeps its own
            assert (g.state, g.generation) == ("Stable", epoch) and replacement.owned == held
            classic.beat()
            assert classic.pending is None and sorted(_owned(e, (classic, replacement))) == [("t", p) for p in range(6)]
        else:  # the subscription changed: a rebalance (the test's classic leader then assigns "t" by ranges)
            assert g.state == "PreparingRebalance"
            for _ in range(3):
                classic.beat(), replacement.beat()
            g = e.groups.describe_group("g")
            assert (g.state, g.generation) == ("Stable", epoch + 1)
            assert sorted(_owned(e, (classic, replacement))) == [("t", p) for p in range(6)]
    with reopened() as e:  # the classic group is what the directory holds
        assert e.groups.describe_group("g").state == "Stable" and "g" not in e.groups.consumer.groups


def test_no_downgrade_while_a_member_of_the_consumer_protocol_stays(reopened):
    with reopened() as e:
        classic, static = _a_consumer_group_of_a_classic_and_a_static_member(e)
        other = Client(e.groups)
        other.beat()
        static.beat(member_epoch=STATIC_LEAVE_EPOCH)
        ClassicClient(e.groups, instance="i1").join()
        assert "g" in e.groups.consumer.groups and len(e.groups.describe_consumer_group("g").members) == 3
