"""The consumer group protocol's server assignors (engine.groups.server_assignors): the properties Kafka's assignors
promise, on random groups (the same algorithms against Kafka's own classes: tests/broker/test_server_assignors.py)."""
from __future__ import annotations

import base64
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.common.errors import InvalidConfigurationError, UnknownServerError
from engine.groups.server_assignors import (
    GroupSpec,
    MemberSpec,
    PartitionAssignorError,
    RangeAssignor,
    ServerAssignor,
    UniformAssignor,
    resolve,
    uuid_order,
)


def _topic_id(n: int) -> str:
    return base64.urlsafe_b64encode(uuid.UUID(int=n).bytes).decode().rstrip("=")


def _owners(result: dict) -> dict[tuple[str, int], list[str]]:
    out: dict = {}
    for member, assignment in result.items():
        for t, ps in assignment.items():
            for p in ps:
                out.setdefault((t, p), []).append(member)
    return out


@st.composite
def groups(draw, homogeneous: bool):
    """A group with a previous target assignment that is valid for the topics and subscriptions it had then (the
    uniform assignor's output on an older shape of the group), and its new shape."""
    topics = {_topic_id(draw(st.integers(1, 2**128 - 1))): draw(st.integers(0, 12)) for _ in range(draw(st.integers(1, 4)))}
    names = list(topics)
    members = [f"m{i}" for i in range(draw(st.integers(1, 7)))]
    subs = {m: frozenset(draw(st.lists(st.sampled_from(names), min_size=1, unique=True))) for m in members}
    if homogeneous:
        subs = {m: subs[members[0]] for m in members}
    before = GroupSpec({m: MemberSpec(subs[m], {}) for m in members if draw(st.booleans())}, topics,
                       len(set(subs.values())) == 1)
    previous = UniformAssignor().assign(before) if before.members else {}
    grown = {t: n + draw(st.integers(0, 3)) for t, n in topics.items()}
    spec = GroupSpec({m: MemberSpec(subs[m], previous.get(m, {})) for m in members}, grown,
                     len(set(subs.values())) == 1)
    return spec


def _check_valid(spec: GroupSpec, result: dict) -> None:
    owners = _owners(result)
    assert all(len(ms) == 1 for ms in owners.values()), "a partition with two owners"
    for (t, p), (m,) in owners.items():
        assert t in spec.members[m].topics and 0 <= p < spec.partitions[t], (t, p, m)
    every = {(t, p) for m in spec.members.values() for t in m.topics for p in range(spec.partitions[t])}
    assert set(owners) == every, "a subscribed partition without an owner"


@settings(max_examples=200, deadline=None)
@given(groups(homogeneous=True))
def test_uniform_on_a_homogeneous_group_is_balanced_and_keeps_all_it_can(spec):
    result = UniformAssignor().assign(spec)
    _check_valid(spec, result)
    sizes = [sum(map(len, result.get(m, {}).values())) for m in spec.members]
    assert max(sizes) - min(sizes) <= 1
    # sticky: each member keeps what it had up to its share (the one-more shares go to the first members)
    total, n = sum(sizes), len(sizes)
    for i, (m, s) in enumerate(spec.members.items()):
        share = total // n + (1 if i < total % n else 0)
        kept = sum(len(result.get(m, {}).get(t, frozenset()) & ps) for t, ps in s.assignment.items())
        assert kept == min(sum(map(len, s.assignment.values())), share)
    again = GroupSpec({m: s._replace(assignment=result.get(m, {})) for m, s in spec.members.items()},
                      spec.partitions, True)
    assert UniformAssignor().assign(again) == result  # a settled group is left as it is


@settings(max_examples=200, deadline=None)
@given(groups(homogeneous=False))
def test_uniform_on_any_group_assigns_each_subscribed_partition_once_and_settles(spec):
    result = UniformAssignor().assign(spec)
    _check_valid(spec, result)
    again = GroupSpec({m: s._replace(assignment=result.get(m, {})) for m, s in spec.members.items()},
                      spec.partitions, spec.homogeneous)
    assert UniformAssignor().assign(again) == result


def test_uniform_on_different_subscriptions_balances_each_topic_across_its_subscribers():
    """A subscribes to t1 and t2 (4 partitions each), B to t1 only: B takes t1's four, A t2's four (balance first)."""
    t1, t2 = _topic_id(1), _topic_id(2)
    spec = GroupSpec({"A": MemberSpec(frozenset({t1, t2}), {}), "B": MemberSpec(frozenset({t1}), {})},
                     {t1: 4, t2: 4}, False)
    result = UniformAssignor().assign(spec)
    assert sorted(len(p) for a in result.values() for p in a.values()) == [4, 4]
    assert result["B"] == {t1: frozenset(range(4))} and result["A"] == {t2: frozenset(range(4))}


def test_range_is_kafkas_javadoc_example_co_partitioned():
    """Kafka's RangeAssignor javadoc: two members, two topics of three partitions: M0 takes partitions 0 and 1 of
    both, M1 partition 2 of both; with instance ids the static order decides, whatever the member ids."""
    t1, t2 = _topic_id(1), _topic_id(2)
    both = frozenset({t1, t2})
    spec = GroupSpec({"M1": MemberSpec(both, {}), "M0": MemberSpec(both, {})}, {t1: 3, t2: 3}, True)
    assert RangeAssignor().assign(spec) == {"M0": {t1: frozenset({0, 1}), t2: frozenset({0, 1})},
                                            "M1": {t1: frozenset({2}), t2: frozenset({2})}}
    static = GroupSpec({"M3": MemberSpec(both, {}, "I0"), "M2": MemberSpec(both, {}, "I1"),
                        "A": MemberSpec(both, {})}, {t1: 3, t2: 3}, True)
    assert {m: a[t1] for m, a in RangeAssignor().assign(static).items()} == \
        {"M3": frozenset({0}), "M2": frozenset({1}), "A": frozenset({2})}


@settings(max_examples=100, deadline=None)
@given(groups(homogeneous=False))
def test_range_gives_each_subscriber_of_a_topic_a_consecutive_range(spec):
    result = RangeAssignor().assign(spec)
    _check_valid(spec, result)
    for t, n in spec.partitions.items():
        ranges = sorted(sorted(a[t]) for a in result.values() if t in a)
        assert all(r == list(range(r[0], r[-1] + 1)) for r in ranges)
        counts = sorted(len(r) for r in ranges)
        assert not counts or counts[-1] - counts[0] <= 1


def test_topic_ids_sort_as_kafkas_uuid_compare_does():
    """Uuid.compareTo compares the two halves as signed longs: an id whose top bit is set sorts first."""
    low, high = _topic_id(1), _topic_id(1 << 127)
    assert sorted([low, high], key=uuid_order) == [high, low]


def test_a_topic_without_metadata_and_an_unknown_assignor_are_typed_errors():
    spec = GroupSpec({"m": MemberSpec(frozenset({_topic_id(9)}), {})}, {}, True)
    for assignor in (UniformAssignor(), RangeAssignor()):
        with pytest.raises(PartitionAssignorError) as e:
            assignor.assign(spec)
        assert isinstance(e.value, UnknownServerError) and e.value.code == -1
    with pytest.raises(InvalidConfigurationError, match="no server assignor named 'sticky'"):
        resolve(["uniform", "sticky"])

    class Mine(ServerAssignor):
        name = "mine"

        def assign(self, spec):
            return {}

    assert list(resolve(["range", Mine(), "uniform"])) == ["range", "mine", "uniform"]
