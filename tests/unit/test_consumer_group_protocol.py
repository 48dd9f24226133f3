"""The group coordinator's consumer group protocol (KIP-848: engine.groups.consumer_group and its coordinator), driven
by heartbeats as Kafka's clients send them, on an injected clock: revocation before assignment, epochs and fencing,
session and rebalance timeouts, static members, restarts, offset commits with member epochs, subscriptions by regular
expression, and a random history checked against the protocol's promise that no partition has two owners."""
from __future__ import annotations

import random
import re

import pytest

import engine
from engine.common.clock import ManualClock
from engine.common.errors import (
    CorruptRecordError,
    FencedInstanceIdError,
    FencedMemberEpochError,
    GroupIdNotFoundError,
    IllegalGenerationError,
    InconsistentGroupProtocolError,
    InvalidRegularExpressionError,
    InvalidRequestError,
    RebalanceInProgressError,
    StaleMemberEpochError,
    UnknownMemberIdError,
    UnsupportedAssignorError,
)
from engine.common.structs import OffsetAndMetadata, TopicPartition
from engine.groups import consumer_group_records as records, consumer_protocol
from engine.groups.consumer_group import Heartbeat
from engine.groups.group_metadata import JoinResult

SESSION_MS = 45_000


class Client:
    """A member as Kafka's clients run one: it joins with epoch 0, then sends its epoch and what it owns; it gives up
    revoked partitions and takes new ones as soon as an answer says so."""

    def __init__(self, groups, group: str = "g", topics=("t",), instance: str | None = None,
                 assignor: str | None = None, regex: str | None = None) -> None:
        self.groups, self.group, self.instance, self.assignor = groups, group, instance, assignor
        self.topics, self.regex = None if topics is None else list(topics), regex
        self.member_id, self.epoch, self.owned = "", 0, {}

    def beat(self, **changes):
        joining = self.epoch == 0
        hb = Heartbeat(self.group, self.member_id, self.epoch, self.instance, None, 30_000 if joining else -1,
                       self.topics if joining else None, self.regex if joining else None,
                       self.assignor if joining else None, {} if joining else self.owned, "test")
        answer = self.groups.consumer_group_heartbeat(hb._replace(**changes))
        self.member_id, self.epoch = answer.member_id, answer.member_epoch
        if answer.assignment is not None:
            self.owned = dict(answer.assignment)
        return answer

    def partitions(self) -> set[int]:
        return {p for ps in self.owned.values() for p in ps}


@pytest.fixture
def opened(tmp_path):
    clock = ManualClock(1_000_000)
    e = engine.open(str(tmp_path / "d"), clock=clock, background=False)
    e.create_topic("t", partitions=6)
    yield e, clock
    e.close()


def test_a_partition_moves_only_once_its_owner_revoked_it(opened):
    e, _ = opened
    a = Client(e.groups)
    assert a.beat().member_epoch == 1 and a.partitions() == set(range(6))
    b = Client(e.groups)
    joined = b.beat()  # epoch 2, but every partition is still a's
    assert joined.member_epoch == 2 and b.partitions() == set()
    assert e.groups.describe_consumer_group("g").state == "Reconciling"
    answer = a.beat()  # told to revoke three; it stays at epoch 1 until it says it no longer owns them
    assert answer.member_epoch == 1 and len(a.partitions()) == 3
    assert a.beat().member_epoch == 2
    assert b.beat().member_epoch == 2 and b.partitions() == set(range(6)) - a.partitions()
    d = e.groups.describe_consumer_group("g")
    assert (d.state, d.group_epoch, d.assignment_epoch, d.assignor_name) == ("Stable", 2, 2, "uniform")


def test_epochs_the_member_does_not_have_are_fenced(opened):
    e, _ = opened
    a = Client(e.groups)
    a.beat()
    Client(e.groups).beat()
    a.beat()  # epoch 1, revoking
    with pytest.raises(FencedMemberEpochError):
        a.beat(member_epoch=5)
    a.beat()  # epoch 2 now
    assert a.epoch == 2
    a.beat(member_epoch=1)  # its previous epoch, owning only what it holds: accepted (a retried request)
    with pytest.raises(FencedMemberEpochError):
        a.beat(member_epoch=1, owned={**a.owned, "x" * 22: frozenset({0})})
    with pytest.raises(UnknownMemberIdError):
        a.beat(member_id="nobody")
    with pytest.raises(GroupIdNotFoundError):
        a.beat(group_id="other")


def test_requests_kafka_refuses_are_refused_typed(opened):
    e, _ = opened
    for changes, error in [({"topic_regex": "t(.*"}, InvalidRegularExpressionError),
                           ({"topic_regex": "(?<=x)t"}, InvalidRegularExpressionError),  # (no lookbehind in RE2)
                           ({"server_assignor": "sticky"}, UnsupportedAssignorError),
                           ({"topic_names": None}, InvalidRequestError),
                           ({"rebalance_timeout_ms": -1}, InvalidRequestError),
                           ({"owned": {"x" * 22: frozenset({1})}}, InvalidRequestError),
                           ({"member_epoch": -3}, InvalidRequestError)]:
        with pytest.raises(error):
            Client(e.groups).beat(**changes)
    assert e.groups.list_groups() == []


def test_a_regex_subscribes_to_every_matching_topic_and_to_those_created_later(opened):
    """SubscribedTopicRegex: RE2's syntax matched against whole topic names (Kafka's RE2/J `matches()`), never an
    internal topic; a matching topic created later joins at the next heartbeat, in a new group epoch."""
    e, _ = opened
    e.create_topic("orders-eu", partitions=2)
    e.create_topic("orders-us", partitions=3)
    e.create_topic("xorders-eu", partitions=1)  # (a whole-name match: not this one)
    e.groups.commit_offsets("other", {TopicPartition("t", 0): OffsetAndMetadata(1)})  # (__consumer_offsets is there)
    assert "__consumer_offsets" in e.admin.catalogue.topics
    a = Client(e.groups, topics=None, regex=r"orders-\w+|__.*")
    answer = a.beat()
    ids = {name: e.admin.topic(name).topic_id for name in ("orders-eu", "orders-us")}
    assert answer.member_epoch == 1 and a.owned == {ids["orders-eu"]: frozenset({0, 1}),
                                                   ids["orders-us"]: frozenset({0, 1, 2})}
    e.create_topic("orders-ap", partitions=1)
    answer = a.beat()
    assert answer.member_epoch == 2 and a.owned == {ids["orders-eu"]: frozenset({0, 1}),
                                                   ids["orders-us"]: frozenset({0, 1, 2}),
                                                   e.admin.topic("orders-ap").topic_id: frozenset({0})}
    d = e.groups.describe_consumer_group("g")
    assert d.members[0].subscribed_topic_regex == r"orders-\w+|__.*" and d.members[0].subscribed_topic_names == []
    assert sorted(d.topic_names.values()) == ["orders-ap", "orders-eu", "orders-us"]
    assert a.beat().member_epoch == 2  # nothing new: no new epoch


def test_a_member_may_join_subscribed_to_nothing(opened):
    """Kafka 4 accepts a join with an empty list of names or an empty expression: a member of no topic, whose answer
    still carries an epoch (a zero would read as "join again")."""
    e, _ = opened
    for topics, regex in (([], None), (None, "")):
        c = Client(e.groups, group=f"g{regex}", topics=topics, regex=regex)
        answer = c.beat()
        assert answer.member_epoch == 1 and c.partitions() == set() and c.beat().member_epoch == 1


def test_members_by_names_and_by_regex_share_a_group(opened):
    e, _ = opened
    e.create_topic("u", partitions=4)
    by_names, by_regex = Client(e.groups, topics=["t"]), Client(e.groups, topics=None, regex="[tu]")
    by_names.beat()
    by_regex.beat()
    for _ in range(3):
        by_names.beat()
        by_regex.beat()
    t, u = e.admin.topic("t").topic_id, e.admin.topic("u").topic_id
    assert set(by_names.owned) <= {t} and by_regex.owned[u] == frozenset(range(4))  # (u is the regex member's alone)
    assert by_names.owned[t] | by_regex.owned.get(t, frozenset()) == frozenset(range(6))
    assert not by_names.owned[t] & by_regex.owned.get(t, frozenset())
    epoch = by_regex.epoch
    by_regex.beat(topic_regex="")  # "" takes the regex away (a member of no topic now)
    by_names.beat()
    assert by_regex.beat().member_epoch > epoch and by_regex.partitions() == set()
    assert by_names.beat().member_epoch > epoch and by_names.partitions() == set(range(6))


def test_a_regex_subscription_survives_a_restart(tmp_path):
    clock = ManualClock(1_000_000)
    e = engine.open(str(tmp_path / "d"), clock=clock, background=False)
    e.create_topic("a1", partitions=2)
    c = Client(e.groups, topics=None, regex="a[0-9]")
    c.beat()
    e.close()
    e = engine.open(str(tmp_path / "d"), clock=clock, background=False)
    try:
        c.groups = e.groups
        e.create_topic("a2", partitions=1)
        assert c.beat().member_epoch == 2 and set(c.owned) == {e.admin.topic("a1").topic_id,
                                                               e.admin.topic("a2").topic_id}
        assert e.groups.describe_consumer_group("g").members[0].subscribed_topic_regex == "a[0-9]"
    finally:
        e.close()


def test_a_silent_member_is_removed_after_its_session_and_one_that_keeps_what_it_must_revoke_after_its_rebalance_timeout(
        opened):
    e, clock = opened
    a, b = Client(e.groups), Client(e.groups)
    a.beat()
    b.beat()
    a.beat()  # revoking three
    clock.advance(29_999)
    a.beat(owned=a.owned | {t: ps | frozenset(range(6)) for t, ps in a.owned.items()})  # still owns all six
    b.beat()
    clock.advance(2)
    e.groups.tick()  # 30 s (its rebalance timeout) since it was asked to revoke: fenced
    assert [m.member_id for m in e.groups.describe_consumer_group("g").members] == [b.member_id]
    assert b.beat().member_epoch == 3 and b.partitions() == set(range(6))
    clock.advance(SESSION_MS)
    e.groups.tick()
    d = e.groups.describe_consumer_group("g")
    assert d.state == "Empty" and d.group_epoch == 4


def test_a_static_member_comes_back_under_a_new_id_with_its_partitions_and_no_new_epoch(opened):
    e, _ = opened
    a, b = Client(e.groups, instance="i-a"), Client(e.groups, instance="i-b")
    a.beat(), b.beat(), a.beat(), a.beat(), b.beat()
    held, epoch = a.partitions(), e.groups.describe_consumer_group("g").group_epoch
    assert a.beat(member_epoch=-2).member_epoch == -2  # leaves for a restart
    back = Client(e.groups, instance="i-a")
    assert back.beat().member_epoch == epoch and back.partitions() == held and back.member_id != a.member_id
    assert e.groups.describe_consumer_group("g").group_epoch == epoch
    with pytest.raises(FencedInstanceIdError):  # the old incarnation is gone
        a.beat(member_epoch=epoch)


def test_the_group_survives_a_restart_from_its_records(tmp_path):
    clock = ManualClock(1_000_000)
    path = str(tmp_path / "d")
    with engine.open(path, clock=clock, background=False) as e:
        e.create_topic("t", partitions=4)
        a, b = Client(e.groups), Client(e.groups)
        a.beat(), b.beat(), a.beat(), a.beat(), b.beat()
        before = e.groups.describe_consumer_group("g")
        e.groups.commit_offsets("g", {TopicPartition("t", 0): OffsetAndMetadata(7)}, a.member_id, a.epoch)
    with engine.open(path, clock=clock, background=False) as e:
        assert e.groups.describe_consumer_group("g") == before
        a.groups = b.groups = e.groups
        assert a.beat().member_epoch == before.group_epoch and b.beat().member_epoch == before.group_epoch
        assert e.committed("g", TopicPartition("t", 0)).offset == 7
        clock.advance(SESSION_MS)  # sessions start again at the open
        e.groups.tick()
        assert e.groups.describe_consumer_group("g").state == "Empty"


def test_offset_commits_carry_the_member_epoch(opened):
    e, _ = opened
    a = Client(e.groups)
    a.beat()
    tp = {TopicPartition("t", 0): OffsetAndMetadata(3)}
    e.groups.commit_offsets("g", tp, a.member_id, a.epoch)
    with pytest.raises(StaleMemberEpochError):
        e.groups.commit_offsets("g", tp, a.member_id, a.epoch - 1)
    with pytest.raises(UnknownMemberIdError):
        e.groups.commit_offsets("g", tp)  # an admin's commit while the group has members
    a.beat(member_epoch=-1)
    e.groups.commit_offsets("g", {TopicPartition("t", 0): OffsetAndMetadata(5)})
    assert e.committed("g", TopicPartition("t", 0)).offset == 5


def test_a_member_whose_metadata_is_no_consumer_subscription_does_not_cross_protocols(opened):
    """Online migration needs each classic member's subscription: a JoinGroup without one to a consumer group is
    INCONSISTENT_GROUP_PROTOCOL, and a classic group of such members is not upgraded (GROUP_ID_NOT_FOUND)."""
    e, _ = opened
    Client(e.groups).beat()
    with pytest.raises(InconsistentGroupProtocolError):
        e.groups.join_group("g", "", "c", "consumer", [("range", b"")], 10_000, 10_000)
    pending = e.groups.join_group("classic", "", "c", "consumer", [("range", b"")], 10_000, 10_000)
    assert pending.done
    with pytest.raises(GroupIdNotFoundError):
        Client(e.groups, group="classic").beat()
    assert e.groups.describe_group("classic").state == "CompletingRebalance"  # (left as it was)


def test_a_new_partition_of_a_subscribed_topic_moves_the_group_epoch(opened):
    e, _ = opened
    a = Client(e.groups)
    a.beat()
    e.create_partitions("t", 8)
    assert a.beat().member_epoch == 2 and a.partitions() == set(range(8))


def test_the_records_round_trip_and_a_damaged_one_is_a_typed_error():
    tid = records.topic_id_text(records.topic_uuid("AAAAAAAAAAAAAAAAAAAAAQ"))
    rec = records.Record(records.CURRENT_ASSIGNMENT, "g", "m", {
        "member_epoch": 3, "previous_member_epoch": 2, "state": 1,
        "assigned_partitions": records.partitions_out({tid: frozenset({1, 0})}),
        "partitions_pending_revocation": records.partitions_out({tid: frozenset({2})})})
    key, value = records.encode(rec)
    back = records.decode(key, value)
    assert back.kind == records.CURRENT_ASSIGNMENT and (back.group_id, back.member_id) == ("g", "m")
    assert records.partitions_in(back.value["assigned_partitions"]) == {tid: frozenset({0, 1})}
    assert records.decode(key, None).value is None
    with pytest.raises(CorruptRecordError):
        records.decode(key, value[:-3])


def test_a_random_history_never_gives_a_partition_to_two_members(opened):
    """Members join, heartbeat, leave and go silent at random; at every step the partitions the members believe they
    own are disjoint, and once everyone heartbeats a few times the group is stable with every partition owned."""
    e, clock = opened
    e.create_topic("u", partitions=5)
    rng = random.Random(848)
    live: list[Client] = []
    for _ in range(400):
        r = rng.random()
        if r < 0.15 or not live:
            topics, regex = rng.choice([(["t"], None), (["u"], None), (["t", "u"], None), (None, "[tu]"), ([], "u"),
                                        (["t"], "u+")])
            c = Client(e.groups, topics=topics, regex=regex, assignor=rng.choice([None, "range"]))
            c.beat()
            live.append(c)
        elif r < 0.2:
            live.pop(rng.randrange(len(live))).beat(member_epoch=-1)
        elif r < 0.23:
            gone = live.pop(rng.randrange(len(live)))  # goes silent: its session ends; the others beat every 5 s
            for _ in range(SESSION_MS // 5_000):
                clock.advance(5_000)
                for c in live:
                    c.beat()
            e.groups.tick()
            assert gone.member_id not in {m.member_id for m in e.groups.describe_consumer_group("g").members}
            gone.owned = {}
        else:
            rng.choice(live).beat()
        clock.advance(rng.randrange(100))
        owned = [(t, p) for c in live for t, ps in c.owned.items() for p in ps]
        assert len(owned) == len(set(owned))
    for _ in range(4):
        for c in live:
            c.beat()
    assert e.groups.describe_consumer_group("g").state == "Stable"
    subscribed = {t for c in live for t in ("t", "u") if t in (c.topics or ()) or
                  c.regex and re.fullmatch(c.regex, t)}  # (Python's re and RE2 agree on these simple expressions)
    owned = sorted((t, p) for c in live for t, ps in c.owned.items() for p in ps)
    assert owned == sorted((e.admin.topic_id_of(t), p) for t in subscribed for p in range(6 if t == "t" else 5))


def test_options_the_coordinator_decides_are_refused_under_the_consumer_protocol(opened):
    from engine.common.errors import InvalidConfigurationError

    e, _ = opened
    for option in ({"session_timeout_ms": 10_000}, {"heartbeat_interval_ms": 1_000},
                   {"partition_assignment_strategy": "range"}):
        with pytest.raises(InvalidConfigurationError, match="does not apply to group_protocol='consumer'"):
            e.consumer("t", group_id="g", group_protocol="consumer", **option)
    with pytest.raises(InvalidConfigurationError, match="group_remote_assignor does not apply"):
        e.consumer("t", group_id="g", group_remote_assignor="range")
    with pytest.raises(InvalidConfigurationError, match="must be 'classic' or 'consumer'"):
        e.consumer("t", group_id="g", group_protocol="eager")


def test_in_process_consumers_of_the_consumer_protocol_share_hand_over_and_commit(tmp_path):
    """Two engine consumers with group_protocol='consumer' split a topic; the first's listener hears what it gives
    up; when it closes (committing), the second takes every partition from the committed offsets."""
    from engine.clients.consumer_coordinator import ConsumerRebalanceListener

    class Heard(ConsumerRebalanceListener):
        def __init__(self):
            self.events = []

        def on_partitions_revoked(self, revoked):
            self.events.append(("revoked", sorted(tp.partition for tp in revoked)))

        def on_partitions_assigned(self, assigned):
            self.events.append(("assigned", sorted(tp.partition for tp in assigned)))

    with engine.open(str(tmp_path / "d"), group_config={"group_consumer_heartbeat_interval_ms": 50}) as e:
        e.create_topic("t", partitions=4)
        with e.producer() as p:
            for i in range(200):
                p.send("t", key=b"%d" % i, value=b"%d" % i)
        heard = Heard()
        first = e.consumer(group_id="g", group_protocol="consumer", auto_offset_reset="earliest",
                           group_remote_assignor="range")
        first.subscribe(["t"], listener=heard)
        got: list = []
        for _ in range(50):
            got += [r.value for rs in first.poll(timeout_ms=50).values() for r in rs]
            if len(first.assignment()) == 4 and len(got) >= 30:
                break
        assert len(first.assignment()) == 4 and heard.events[0] == ("assigned", [0, 1, 2, 3])
        second = e.consumer(group_id="g", group_protocol="consumer", auto_offset_reset="earliest")
        second.subscribe(["t"])
        for _ in range(200):
            got += [r.value for rs in first.poll(timeout_ms=10).values() for r in rs]
            second.poll(timeout_ms=10)
            if len(first.assignment()) == 2 and len(second.assignment()) == 2:
                break
        assert sorted(tp.partition for tp in first.assignment() | second.assignment()) == [0, 1, 2, 3]
        assert heard.events[1][0] == "revoked" and len(heard.events[1][1]) == 2
        assert e.groups.describe_consumer_group("g").assignor_name == "range"
        first.close()  # commits what it read, leaves with epoch -1
        rest: list = []
        for _ in range(200):
            rest += [r.value for rs in second.poll(timeout_ms=20).values() for r in rs]
            if len(second.assignment()) == 4 and len(got) + len(rest) >= 200:
                break
        second.close()
        assert sorted(got + rest, key=int) == [b"%d" % i for i in range(200)]


def test_in_process_members_are_told_at_once_when_a_change_leaves_them_a_step(tmp_path):
    """With a heartbeat interval no test waits for (an hour, on a clock that never moves), two in-process members
    still hand partitions over: the coordinator tells the first to give up half when the second joins, and the second
    to heartbeat once the first released them."""
    clock = ManualClock(1_000_000)
    with engine.open(str(tmp_path / "d"), clock=clock, background=False,
                     group_config={"group_consumer_heartbeat_interval_ms": 3_600_000}) as e:
        e.create_topic("t", partitions=4)
        first = e.consumer(group_id="g", group_protocol="consumer")
        first.subscribe(["t"])
        first.poll(timeout_ms=0)  # joins: every partition
        first.poll(timeout_ms=0)  # (applied at the next poll)
        assert len(first.assignment()) == 4
        second = e.consumer(group_id="g", group_protocol="consumer")
        second.subscribe(["t"])
        polls = 0
        while not (len(first.assignment()) == 2 and len(second.assignment()) == 2) and polls < 10:
            second.poll(timeout_ms=0)
            first.poll(timeout_ms=0)
            polls += 1
        assert sorted(tp.partition for tp in first.assignment() | second.assignment()) == [0, 1, 2, 3]
        assert len(first.assignment()) == 2 and polls < 10  # (without being told: never, the clock stands still)
        assert e.groups.describe_consumer_group("g").state == "Stable"
        first.close()
        second.close()


def test_an_empty_consumer_group_goes_with_its_last_offset(opened):
    e, clock = opened
    a = Client(e.groups)
    a.beat()
    e.groups.commit_offsets("g", {TopicPartition("t", 1): OffsetAndMetadata(2)}, a.member_id, a.epoch)
    e.groups.expire_offsets()
    assert e.groups.list_groups() == [("g", "Stable", "consumer")]  # a member's subscribed offsets stay
    a.beat(member_epoch=-1)
    clock.advance(e.groups.config.offsets_retention_minutes * 60_000)
    assert e.groups.expire_offsets() == 1
    assert e.groups.list_groups() == []
    with pytest.raises(GroupIdNotFoundError):
        e.groups.describe_consumer_group("g")


def test_kafkalog_groups_describes_a_consumer_protocol_group(tmp_path, capsys):
    import json

    from engine.tools.cli import main

    path = str(tmp_path / "d")
    with engine.open(path, background=False) as e:
        e.create_topic("t", partitions=2)
        a = Client(e.groups)
        a.beat()
        e.groups.commit_offsets("g", {TopicPartition("t", 0): OffsetAndMetadata(0)}, a.member_id, a.epoch)
    assert main(["groups", "--describe", "--group", "g", "--json", "--data", path]) == 0
    d = json.loads(capsys.readouterr().out)
    assert (d["type"], d["state"], d["generation"], d["protocol"]) == ("consumer", "Stable", 1, "uniform")
    (member,) = d["members"]
    assert member["member_id"] == a.member_id and sorted(member["assignment"]) == ["t-0", "t-1"]
    assert [(r["partition"], r["consumerId"]) for r in d["partitions"]] == [(0, a.member_id), (1, a.member_id)]
    assert main(["groups", "--describe", "--group", "g", "--data", path]) == 0
    assert "(the consumer group protocol, group epoch 1, assignor uniform, 1 member(s))" in capsys.readouterr().out


def test_a_custom_server_assignor_is_offered_and_chosen_by_name(tmp_path):
    class FirstTakesAll(engine.ServerAssignor):
        """Every subscribed partition to the first member (the GroupSpec's order: arrival)."""

        name = "first-takes-all"

        def assign(self, spec: engine.GroupSpec) -> dict:
            first = next(iter(spec.members))
            return {first: {t: frozenset(range(spec.partitions[t])) for t in spec.members[first].topics}}

    config = {"group_consumer_assignors": ["uniform", FirstTakesAll()]}
    with engine.open(str(tmp_path / "d"), group_config=config, background=False) as e:
        e.create_topic("t", partitions=3)
        a, b = Client(e.groups, assignor="first-takes-all"), Client(e.groups, assignor="first-takes-all")
        a.beat(), b.beat()
        assert (a.partitions(), b.partitions()) == ({0, 1, 2}, set())
        assert e.groups.describe_consumer_group("g").assignor_name == "first-takes-all"
    with pytest.raises(engine.InvalidConfigurationError, match="not a named ServerAssignor"):
        engine.open(str(tmp_path / "e"), group_config={"group_consumer_assignors": [object()]})


def test_a_fenced_member_joins_again_under_its_id_with_epoch_0(opened):
    """After FENCED_MEMBER_EPOCH the member gives up its partitions and joins with epoch 0 and the same member id
    (KIP-848); the coordinator takes it back and hands it its assignment again."""
    e, _ = opened
    a = Client(e.groups)
    a.beat()
    epoch, held = a.epoch, a.partitions()
    with pytest.raises(FencedMemberEpochError):
        a.beat(member_epoch=epoch + 1)
    a.epoch, a.owned = 0, {}
    answer = a.beat()
    assert answer.member_id == a.member_id and answer.member_epoch == epoch and a.partitions() == held


class ClassicClient:
    """A member of the classic protocol as Kafka's clients run one: JoinGroup then SyncGroup, each answered at once
    or later (`pending`: the request waiting; the leader of a classic group assigns ranges itself); a Heartbeat
    answered REBALANCE_IN_PROGRESS or ILLEGAL_GENERATION, or a join or sync refused, makes it join again. An eager
    member gives up every partition before it joins; a cooperative one joins with what it owns, gives up what its
    new assignment leaves out, and then joins again at once. `owned`: (topic, partition)s."""

    def __init__(self, groups, group: str = "g", topics=("t",), protocols=("range",), cooperative: bool = False,
                 instance: str | None = None):
        self.groups, self.group, self.topics, self.protocols = groups, group, list(topics), protocols
        self.cooperative, self.instance = cooperative, instance
        self.member_id, self.generation, self.owned, self.pending = "", -1, set(), None

    def join(self) -> None:
        if not self.cooperative:
            self.owned = set()
        meta = consumer_protocol.encode_subscription(consumer_protocol.Subscription(
            self.topics, owned_partitions=[TopicPartition(t, p) for t, p in sorted(self.owned)]))
        self.pending = self.groups.join_group(self.group, self.member_id, "classic-client", "consumer",
                                              [(n, meta) for n in self.protocols], SESSION_MS, 30_000,
                                              group_instance_id=self.instance)
        self._advance()

    def _advance(self) -> None:
        held = self.pending
        if held is None or not held.done:
            return
        try:
            answer = held.result()
        except (RebalanceInProgressError, IllegalGenerationError):
            self.join()
            return
        if not isinstance(answer, JoinResult):
            assigned = {(tp.topic, tp.partition) for tp in consumer_protocol.decode_assignment(answer).partitions}
            revoked, self.owned, self.pending = self.owned - assigned, assigned, None
            if self.cooperative and revoked:
                self.join()
            return
        self.member_id, self.generation = answer.member_id, answer.generation_id
        assignments = {}
        if answer.leader_id == self.member_id:  # (a classic group's leader: every partition of "t" by ranges)
            ids = [mid for mid, _, _ in answer.members]
            assignments = {mid: consumer_protocol.encode_assignment(consumer_protocol.Assignment(
                [TopicPartition("t", p) for p in range(6) if p * len(ids) // 6 == i])) for i, mid in enumerate(ids)}
        try:
            self.pending = held.sync or self.groups.sync_group(self.group, self.generation, self.member_id,
                                                               "consumer", answer.protocol_name, assignments,
                                                               group_instance_id=self.instance)
        except (RebalanceInProgressError, IllegalGenerationError):
            self.join()
            return
        self._advance()

    def beat(self) -> None:
        if self.pending is not None:
            self.groups.tick()
            self._advance()
            return
        try:
            self.groups.heartbeat(self.group, self.member_id, self.generation, group_instance_id=self.instance)
        except (RebalanceInProgressError, IllegalGenerationError):
            self.join()

    def partitions(self) -> set[int]:
        return {p for _, p in self.owned}


def _owned(e, members) -> list[tuple[str, int]]:
    """Every (topic, partition) the members believe they own, by topic name, one entry per owner."""
    names = {e.admin.topic_id_of(t): t for t in ("t", "u")}
    out = []
    for m in members:
        out += sorted(m.owned) if isinstance(m, ClassicClient) else \
            [(names[t], p) for t, ps in m.owned.items() for p in ps]
    return out


@pytest.fixture
def reopened(tmp_path):
    """engine.open of one directory on one manual clock, for a test that restarts it."""
    clock = ManualClock(1_000_000)
    return lambda **options: engine.open(str(tmp_path / "d"), clock=clock, background=False, **options)


def _classic_group(e) -> tuple[ClassicClient, Client]:
    """Topic "t" (six partitions) and a classic group "g" holding all of it in one member; and a member of the consumer
    protocol, not joined yet."""
    e.create_topic("t", partitions=6)
    old = ClassicClient(e.groups)
    old.join()
    return old, Client(e.groups)


def test_a_member_of_the_consumer_protocol_upgrades_a_classic_group_whose_members_stay(reopened):
    """Kafka's online upgrade: the classic group becomes a consumer group at its generation, each classic member
    holding what it held (Stable, its subscription and protocols kept as classic metadata), in one batch with the
    classic group's tombstone; the join then moves the group epoch, so the classic members are told to rejoin, and
    the partitions are split without one having two owners. It all survives a restart."""
    with reopened() as e:
        old, new = _classic_group(e)
        assert old.partitions() == set(range(6)) and old.generation == 1
        answer = new.beat()
        assert "g" not in e.groups.groups and answer.member_epoch == 2 and new.partitions() == set()  # (not freed)
        d = e.groups.describe_consumer_group("g")
        (held,) = [m for m in d.members if m.member_id == old.member_id]
        assert (held.member_epoch, held.state, held.client_id) == (1, "Stable", "classic-client")
        member = e.groups.consumer.groups["g"].members[old.member_id]
        assert member.classic.session_timeout_ms == SESSION_MS and member.classic.protocols[0][0] == "range"
        with pytest.raises(RebalanceInProgressError):  # the group epoch moved past its epoch: rejoin
            e.groups.heartbeat("g", old.member_id, old.generation)
        old.beat()  # rejoins (an eager member owns nothing as it does) and syncs its share
        assert old.generation == 2 and len(old.partitions()) == 3
        new.beat()
        assert new.partitions() == set(range(6)) - old.partitions()
        old.beat()  # nothing more to do
        assert old.generation == 2 and e.groups.describe_consumer_group("g").state == "Stable"
        before = e.groups.describe_consumer_group("g")
    with reopened() as e:
        assert e.groups.describe_consumer_group("g") == before
        assert e.groups.consumer.groups["g"].members[old.member_id].classic.session_timeout_ms == SESSION_MS
        old.groups = new.groups = e.groups
        old.beat()
        new.beat()
        assert old.generation == 2 and new.epoch == 2


def test_when_the_last_member_of_the_consumer_protocol_leaves_the_group_is_classic_again(reopened):
    """Kafka's online downgrade: the consumer group's records become tombstones and the classic group's record takes
    their place (generation: the group epoch, each member with its target assignment); a rebalance starts, after
    which the classic members share every partition. A restart finds the classic group."""
    with reopened() as e:
        old, new = _classic_group(e)
        new.beat()
        late = ClassicClient(e.groups)
        late.join()  # a classic member joins the consumer group
        for _ in range(3):
            for m in (old, new, late):
                m.beat()
        assert sorted(_owned(e, (old, new, late))) == [("t", p) for p in range(6)]
        epoch = e.groups.describe_consumer_group("g").group_epoch
        new.beat(member_epoch=-1)  # leaves: only classic members remain
        assert "g" not in e.groups.consumer.groups
        g = e.groups.describe_group("g")
        assert (g.state, g.protocol_type, g.generation) == ("PreparingRebalance", "consumer", epoch)
        for _ in range(2):  # told to rejoin; the round completes once both have, and each then syncs
            old.beat(), late.beat()
        assert old.generation == late.generation == epoch + 1 and old.pending is late.pending is None
        assert sorted(_owned(e, (old, late))) == [("t", p) for p in range(6)] and old.owned and late.owned
    with reopened() as e:
        assert e.groups.describe_group("g").state == "Stable" and "g" not in e.groups.consumer.groups
        with pytest.raises(GroupIdNotFoundError):
            e.groups.describe_consumer_group("g")


def test_a_classic_member_of_a_consumer_group_keeps_its_own_session_and_is_refused_what_kafka_refuses(opened):
    e, clock = opened
    new = Client(e.groups)
    new.beat()
    old = ClassicClient(e.groups)
    old.join()
    with pytest.raises(InconsistentGroupProtocolError):  # a protocol type other than "consumer"
        e.groups.join_group("g", "", "c", "connect", [("range", b"")], SESSION_MS, 30_000)
    meta = consumer_protocol.encode_subscription(consumer_protocol.Subscription(["t"]))
    with pytest.raises(InconsistentGroupProtocolError):  # no protocol common with the classic members'
        e.groups.join_group("g", "", "c", "consumer", [("roundrobin", meta)], SESSION_MS, 30_000)
    with pytest.raises(UnknownMemberIdError):  # a member of the consumer protocol speaking the classic one
        e.groups.heartbeat("g", new.member_id, new.epoch)
    with pytest.raises(IllegalGenerationError):
        e.groups.sync_group("g", old.generation + 1, old.member_id, "consumer", "range").result()
    with pytest.raises(IllegalGenerationError):  # (a classic member's commit: never STALE_MEMBER_EPOCH, as Kafka)
        e.groups.commit_offsets("g", {TopicPartition("t", 0): OffsetAndMetadata(1)}, old.member_id, old.generation - 1)
    e.groups.commit_offsets("g", {TopicPartition("t", 0): OffsetAndMetadata(1)}, old.member_id, old.generation)
    assert e.committed("g", TopicPartition("t", 0)).offset == 1
    for _ in range(4):  # the consumer member beats at 5 s; the classic one never: it goes at its session timeout
        clock.advance(SESSION_MS // 4)
        new.beat()
        e.groups.tick()
    assert [m.member_id for m in e.groups.describe_consumer_group("g").members] == [new.member_id]
    new.beat()
    assert new.partitions() == set(range(6))


def test_a_random_history_of_both_protocols_never_gives_a_partition_to_two_members(opened):
    """Classic and consumer-protocol members join, beat, leave and go silent at random in one group (a consumer
    member always stays, so the group stays a consumer group); at every step the partitions the members believe they
    own are disjoint, and once everyone beats a few times the group is stable with every partition owned once."""
    e, clock = opened
    rng = random.Random(2026)
    anchor = Client(e.groups)
    first = ClassicClient(e.groups, cooperative=True)
    first.join()
    anchor.beat()  # the upgrade
    live: list = [anchor, first]
    for _ in range(400):
        r = rng.random()
        if r < 0.12:
            c = ClassicClient(e.groups, cooperative=rng.random() < 0.5) if rng.random() < 0.5 else Client(e.groups)
            c.join() if isinstance(c, ClassicClient) else c.beat()
            live.append(c)
        elif r < 0.18 and len(live) > 1:
            gone = live.pop(rng.randrange(1, len(live)))
            if isinstance(gone, ClassicClient):
                e.groups.leave_group("g", gone.member_id)
            else:
                gone.beat(member_epoch=-1)
        elif r < 0.2 and len(live) > 1:
            gone = live.pop(rng.randrange(1, len(live)))  # goes silent: removed at its session timeout
            for _ in range(SESSION_MS // 5_000 + 1):
                clock.advance(5_000)
                for c in live:
                    c.beat()
            e.groups.tick()
            assert gone.member_id not in {m.member_id for m in e.groups.describe_consumer_group("g").members}
        else:
            rng.choice(live).beat()
        clock.advance(rng.randrange(100))
        owned = _owned(e, live)
        assert len(owned) == len(set(owned)), owned
    for _ in range(5):
        for c in live:
            c.beat()
    assert e.groups.describe_consumer_group("g").state == "Stable"
    assert sorted(_owned(e, live)) == [("t", p) for p in range(6)]
    assert any(isinstance(c, ClassicClient) for c in live) and any(isinstance(c, Client) for c in live)


@pytest.mark.parametrize("policy", ["disabled", "upgrade", "downgrade"])
def test_the_migration_policy_allows_what_kafkas_allows(tmp_path, reopened, policy):
    """group_consumer_migration_policy, Kafka's group.consumer.migration.policy: without upgrades a classic group with
    members is not a consumer group (GROUP_ID_NOT_FOUND); without downgrades a consumer group whose last member of the
    consumer protocol left stays one, its classic members in it."""
    from engine.common.errors import InvalidConfigurationError

    with pytest.raises(InvalidConfigurationError, match="must be one of"):
        engine.open(str(tmp_path / "e"), group_config={"group_consumer_migration_policy": "sideways"})
    with reopened(group_config={"group_consumer_migration_policy": policy}) as e:
        old, new = _classic_group(e)
        if policy in ("disabled", "downgrade"):
            with pytest.raises(GroupIdNotFoundError):
                new.beat()
            assert e.groups.describe_group("g").state == "Stable"
            return
        new.beat()
        late = ClassicClient(e.groups)
        late.join()
        new.beat(member_epoch=-1)
        assert [m.member_id for m in e.groups.describe_consumer_group("g").members] == [old.member_id, late.member_id]
        for _ in range(3):
            old.beat(), late.beat()
        assert sorted(_owned(e, (old, late))) == [("t", p) for p in range(6)]


def test_in_process_consumers_migrate_a_group_both_ways_and_read_every_record(tmp_path):
    """An engine consumer of the classic protocol holds every partition; one of the consumer protocol joins (the group
    is upgraded) and they split the topic; when that one closes (committing what it read), the group is classic again
    and the first takes every partition back. Every record is read, and none of the second's after its commit."""
    with engine.open(str(tmp_path / "d"), group_config={"group_consumer_heartbeat_interval_ms": 50}) as e:
        e.create_topic("t", partitions=4)
        with e.producer() as p:
            for i in range(200):
                p.send("t", key=b"%d" % i, value=b"%d" % i)
        classic = e.consumer(group_id="g", auto_offset_reset="earliest", heartbeat_interval_ms=100,
                             enable_auto_commit=False)
        classic.subscribe(["t"])
        got: list = []

        def poll(*members) -> None:
            for m in members:
                got.extend((r.partition, r.offset) for rs in m.poll(timeout_ms=10).values() for r in rs)

        for _ in range(300):
            poll(classic)
            if len(classic.assignment()) == 4:
                break
        assert e.groups.describe_group("g").protocol_type == "consumer" and len(classic.assignment()) == 4
        upgraded = e.consumer(group_id="g", group_protocol="consumer", auto_offset_reset="earliest")
        upgraded.subscribe(["t"])
        for _ in range(300):
            poll(classic, upgraded)
            if len(classic.assignment()) == 2 and len(upgraded.assignment()) == 2:
                break
        theirs = {tp.partition for tp in upgraded.assignment()}
        assert theirs | {tp.partition for tp in classic.assignment()} == {0, 1, 2, 3} and len(theirs) == 2
        assert e.groups.describe_consumer_group("g").state == "Stable"
        ends = {p: e.describe_topic("t").partitions[p].log_end_offset for p in range(4)}
        for _ in range(300):
            poll(classic, upgraded)
            if all((p, ends[p] - 1) in got for p in theirs):
                break
        upgraded.close()  # commits its position, then leaves: the group downgrades
        read_before = len(got)
        for _ in range(300):
            poll(classic)
            if len(classic.assignment()) == 4 and e.groups.describe_group("g").state == "Stable" and \
                    all((p, ends[p] - 1) in got for p in range(4)):
                break
        assert "g" not in e.groups.consumer.groups
        classic.close()
    assert set(got) == {(p, o) for p in range(4) for o in range(ends[p])}
    assert not [(p, o) for p, o in got[read_before:] if p in theirs]  # committed: not read again
