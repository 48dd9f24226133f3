"""Consumer groups: Kafka's assignors, the group coordinator's lifecycle, static membership, committed offsets in
`__consumer_offsets`, and consumers sharing a topic end to end."""
from __future__ import annotations

import os
import random
import struct
import threading
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import engine
from engine.clients.consumer_coordinator import ConsumerRebalanceListener
from engine.common.clock import ManualClock
from engine.common.errors import (
    CommitFailedError,
    CorruptRecordError,
    KafkaError,
    FencedInstanceIdError,
    GroupIdNotFoundError,
    IllegalGenerationError,
    IllegalStateError,
    InconsistentGroupProtocolError,
    InvalidConfigurationError,
    InvalidSessionTimeoutError,
    NonEmptyGroupError,
    OffsetMetadataTooLargeError,
    RebalanceInProgressError,
    TransactionAbortableError,
    UnknownMemberIdError,
)
from engine.common.structs import ConsumerGroupMetadata, OffsetAndMetadata, topic_partitions
from engine.common.structs import TopicPartition as TP
from engine.groups import assignors as asg
from engine.groups import consumer_protocol as cp
from engine.groups import group_metadata, offsets
from engine.groups.group_coordinator import GroupCoordinator
from engine.groups.group_metadata import COMPLETING_REBALANCE, EMPTY, PREPARING_REBALANCE, STABLE, Pending
from engine.record.schema import partition_for

FAST = {"group_min_session_timeout_ms": 50}


def names(assignment: dict) -> dict[str, set[str]]:
    return {m: {f"{tp.topic}p{tp.partition}" for tp in tps} for m, tps in assignment.items()}


def sub(*topics, **kw) -> cp.Subscription:
    return cp.Subscription(list(topics), **kw)


# --- Kafka's documented assignments ---------------------------------------------------------------------------
def test_range_assignor_javadoc_examples():
    four = asg.RangeAssignor().assign({"t0": 4, "t1": 4}, {"C0": sub("t0", "t1"), "C1": sub("t0", "t1")})
    assert names(four) == {"C0": {"t0p0", "t0p1", "t1p0", "t1p1"}, "C1": {"t0p2", "t0p3", "t1p2", "t1p3"}}
    three = asg.RangeAssignor().assign({"t0": 3, "t1": 3}, {"C0": sub("t0", "t1"), "C1": sub("t0", "t1")})
    assert names(three) == {"C0": {"t0p0", "t0p1", "t1p0", "t1p1"}, "C1": {"t0p2", "t1p2"}}


def test_roundrobin_assignor_javadoc_examples():
    same = asg.RoundRobinAssignor().assign({"t0": 3, "t1": 3}, {"C0": sub("t0", "t1"), "C1": sub("t0", "t1")})
    assert names(same) == {"C0": {"t0p0", "t0p2", "t1p1"}, "C1": {"t0p1", "t1p0", "t1p2"}}
    unequal = asg.RoundRobinAssignor().assign(
        {"t0": 1, "t1": 2, "t2": 3}, {"C0": sub("t0"), "C1": sub("t0", "t1"), "C2": sub("t0", "t1", "t2")})
    assert names(unequal) == {"C0": {"t0p0"}, "C1": {"t1p0"}, "C2": {"t1p1", "t2p0", "t2p1", "t2p2"}}


def test_static_members_are_ordered_by_instance_id():
    subs = {"a": sub("t", group_instance_id="z"), "b": sub("t", group_instance_id="y"), "c": sub("t")}
    assert asg.member_order(subs) == ["b", "a", "c"]
    assert names(asg.RangeAssignor().assign({"t": 3}, subs)) == {"b": {"tp0"}, "a": {"tp1"}, "c": {"tp2"}}


def sticky_rounds(cls, partitions: dict, rounds: list[dict[str, list[str]]]) -> list[dict]:
    """Run rebalances as members would: each member's assignor sends its user data and learns its assignment."""
    members: dict[str, asg.AbstractStickyAssignor] = {}
    owned: dict[str, list] = {}
    out = []
    for generation, topics_by_member in enumerate(rounds, 1):
        members = {m: members.get(m) or cls() for m in topics_by_member}
        subs = {m: cp.Subscription(t, members[m].subscription_user_data(set(t)),
                                   owned.get(m, []) if cls is asg.CooperativeStickyAssignor else [], generation - 1)
                for m, t in topics_by_member.items()}
        # the leader decodes what the members encoded
        subs = {m: cp.decode_subscription(cp.encode_subscription(s)) for m, s in subs.items()}
        result = cls().assign(partitions, subs)
        for m in topics_by_member:
            members[m].on_assignment(cp.Assignment(result[m]), ConsumerGroupMetadata("g", generation, m))
            owned[m] = result[m]
        out.append(names(result))
    return out


def test_sticky_assignor_javadoc_examples_with_todays_algorithm():
    every = [f"t{i}" for i in range(4)]
    first, second = sticky_rounds(asg.StickyAssignor, {t: 2 for t in every},
                                  [{"C0": every, "C1": every, "C2": every}, {"C0": every, "C2": every}])
    assert first == {"C0": {"t0p0", "t1p1", "t3p0"}, "C1": {"t0p1", "t2p0", "t3p1"}, "C2": {"t1p0", "t2p1"}}
    assert second == {"C0": {"t0p0", "t1p1", "t3p0", "t0p1"}, "C2": {"t1p0", "t2p1", "t2p0", "t3p1"}}
    unequal = {"C0": ["t0"], "C1": ["t0", "t1"], "C2": ["t0", "t1", "t2"]}
    first, second = sticky_rounds(asg.StickyAssignor, {"t0": 1, "t1": 2, "t2": 3},
                                  [unequal, {m: t for m, t in unequal.items() if m != "C0"}])
    assert first == {"C0": {"t0p0"}, "C1": {"t1p0", "t1p1"}, "C2": {"t2p0", "t2p1", "t2p2"}}
    assert second == {"C1": {"t1p0", "t1p1", "t0p0"}, "C2": {"t2p0", "t2p1", "t2p2"}}


def test_cooperative_sticky_moves_a_partition_in_two_rounds():
    owned = {"consumer1": [TP("T0", 0), TP("T0", 2)], "consumer2": [TP("T0", 1)], "consumer3": []}
    subs = {m: sub("T0", owned_partitions=tps, generation_id=1 if tps else -1) for m, tps in owned.items()}
    first = asg.CooperativeStickyAssignor().assign({"T0": 3}, subs)
    assert names(first) == {"consumer1": {"T0p0"}, "consumer2": {"T0p1"}, "consumer3": set()}
    subs = {m: sub("T0", owned_partitions=first[m], generation_id=2) for m in owned}
    second = asg.CooperativeStickyAssignor().assign({"T0": 3}, subs)
    assert names(second) == {"consumer1": {"T0p0"}, "consumer2": {"T0p1"}, "consumer3": {"T0p2"}}


def test_sticky_assignors_stay_balanced_and_complete_on_random_groups():
    rng = random.Random(7)
    for _ in range(60):
        partitions = {f"t{i}": rng.randint(1, 5) for i in range(rng.randint(1, 4))}
        members = {f"m{i}": rng.sample(sorted(partitions), rng.randint(1, len(partitions)))
                   for i in range(rng.randint(1, 5))}
        for cls in (asg.StickyAssignor, asg.CooperativeStickyAssignor, asg.RangeAssignor, asg.RoundRobinAssignor):
            result = cls().assign(partitions, {m: sub(*t) for m, t in members.items()})
            flat = [tp for tps in result.values() for tp in tps]
            assert len(flat) == len(set(flat))  # nobody shares a partition
            subscribed = {TP(t, p) for ts in members.values() for t in ts for p in range(partitions[t])}
            assert set(flat) == subscribed  # every subscribed partition has an owner
            assert all(tp.topic in members[m] for m, tps in result.items() for tp in tps)


def test_resolving_partition_assignment_strategy():
    class Mine(asg.ConsumerPartitionAssignor):
        name = "mine"

        def assign(self, partitions_per_topic, subscriptions):
            return {m: [] for m in subscriptions}
    got = asg.resolve(["cooperative-sticky", Mine, asg.RangeAssignor(),
                       "org.apache.kafka.clients.consumer.RoundRobinAssignor"])
    assert [a.name for a in got] == ["cooperative-sticky", "mine", "range", "roundrobin"]
    assert asg.rebalance_protocol(asg.resolve(asg.DEFAULT_STRATEGY)) == asg.EAGER  # range is eager only

    class Unfinished(asg.ConsumerPartitionAssignor):  # no assign(): refused when configured, not mid-rebalance
        name = "unfinished"
    with pytest.raises(InvalidConfigurationError, match="assign"):
        asg.resolve([Unfinished])
    assert asg.rebalance_protocol(asg.resolve("cooperative-sticky")) == asg.COOPERATIVE


# --- hashing and records ----------------------------------------------------------------------------------
def _java_hash_by_hand(s: str) -> int:
    """Java's String.hashCode computed from its definition, over UTF-16 code units (independent of engine code)."""
    units = []
    for ch in s:
        cp_ = ord(ch)
        if cp_ >= 0x10000:
            cp_ -= 0x10000
            units += [0xD800 + (cp_ >> 10), 0xDC00 + (cp_ & 0x3FF)]
        else:
            units.append(cp_)
    h = 0
    for u in units:
        h = (h * 31 + u) % (1 << 32)
    return h - (1 << 32) if h >= 1 << 31 else h


PROTOCOL_CASES = [
    ([TP("t", 0), TP("u", 2), TP("t", 5), TP("t", 2**31 - 1)], b"ud", ["t", "u"], 7, "rack-1"),
    ([], None, ["t"], -1, None),
    ([TP("t", p) for p in (3, 0, 2**31 - 1, 7)], b"x", ["t"], 1, None),  # one topic, in the order given
    ([TP("topic-%d" % (i % 3), i) for i in range(1000)], b"", ["topic-0", "topic-1", "topic-2"], 2, None),
]


@pytest.mark.parametrize("owned, user_data, topics, generation, rack", PROTOCOL_CASES)
def test_the_consumer_protocols_bytes_are_kafkas_schemas_as_kafka_python_reads_them(owned, user_data, topics,
                                                                                    generation, rack):
    """kafka-python generates its ConsumerProtocol types from Kafka's published schemas: our v3 Subscription and
    Assignment are its bytes after the int16 version, each side decodes the other's, and every strict prefix of
    ours is refused as corrupt (never read short)."""
    from kafka.protocol.consumer.metadata import ConsumerProtocolAssignment as KA
    from kafka.protocol.consumer.metadata import ConsumerProtocolSubscription as KS
    grouped: dict[str, list[int]] = {}
    for tp in owned:
        grouped.setdefault(tp.topic, []).append(tp.partition)
    version = struct.pack(">h", cp.VERSION)
    theirs = {
        "assignment": version + KA(assigned_partitions=[KA.TopicPartition(topic=t, partitions=ps)
                                                        for t, ps in grouped.items()],
                                   user_data=user_data).encode(version=cp.VERSION, header=False),
        "subscription": version + KS(topics=topics, user_data=user_data, generation_id=generation, rack_id=rack,
                                     owned_partitions=[KS.TopicPartition(topic=t, partitions=ps)
                                                       for t, ps in grouped.items()]).encode(version=cp.VERSION,
                                                                                            header=False),
    }
    ours = {"assignment": cp.encode_assignment(cp.Assignment(owned, user_data)),
            "subscription": cp.encode_subscription(cp.Subscription(topics, user_data, owned, generation, rack))}
    assert ours == theirs
    assert cp.decode_assignment(theirs["assignment"]) == cp.Assignment(
        [TP(t, p) for t, ps in grouped.items() for p in ps], user_data)
    assert cp.decode_subscription(theirs["subscription"]) == cp.Subscription(
        topics, user_data, [TP(t, p) for t, ps in grouped.items() for p in ps], generation, rack)
    decode = {"assignment": cp.decode_assignment, "subscription": cp.decode_subscription}
    for what, data in ours.items():
        for end in sorted({*range(0, len(data), max(1, len(data) // 200)), len(data) - 1}):
            with pytest.raises(CorruptRecordError):
                decode[what](data[:end])


def _outcome(decode, data):
    try:
        return decode(data)
    except CorruptRecordError as exc:
        return type(exc), str(exc)


def _older(version: int, topics, user_data, owned, generation, rack) -> bytes:
    """A Subscription of `version` (0-3, or newer with a trailing field), laid out here by hand."""
    def string(t):
        return struct.pack(">h", len(t.encode())) + t.encode()
    grouped: dict[str, list[int]] = {}
    for tp in owned:
        grouped.setdefault(tp.topic, []).append(tp.partition)
    out = struct.pack(">hi", version, len(topics)) + b"".join(map(string, topics))
    out += struct.pack(">i", -1) if user_data is None else struct.pack(">i", len(user_data)) + user_data
    if version >= 1:
        out += struct.pack(">i", len(grouped)) + b"".join(string(t) + struct.pack(f">i{len(ps)}i", len(ps), *ps)
                                                          for t, ps in grouped.items())
    if version >= 2:
        out += struct.pack(">i", generation)
    if version >= 3:
        out += struct.pack(">h", -1) if rack is None else string(rack)
    return out + (b"\x00\x07future" if version > 3 else b"")


_topics = st.lists(st.sampled_from(["t", "u", "topic-ü", ""]), max_size=3)
_owned = st.lists(st.builds(TP, st.sampled_from(["t", "u"]), st.integers(-3, 2**31 - 1)), max_size=6)
_edits = st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255), st.sampled_from(["set", "cut", "put"])),
                  max_size=3)


@settings(max_examples=150, deadline=None)
@given(st.integers(0, 5), _topics, st.none() | st.binary(max_size=8), _owned, st.integers(-2**31, 2**31 - 1),
       st.none() | st.sampled_from(["rack-1", ""]), _edits)
def test_the_fast_protocol_decode_answers_as_the_schema_reader_does(version, topics, user_data, owned, generation,
                                                                     rack, edits):
    """Subscriptions of every version and Assignments, whole and with bytes changed, cut or inserted: the decode
    (its fast path for well-formed v0-v3 bytes) returns what the schema Reader returns, or raises its error."""
    data = bytearray(_older(version, topics, user_data, owned, generation, rack))
    assignment = bytearray(cp.encode_assignment(cp.Assignment(owned, user_data)))
    for at, byte, how in edits:
        for buf in (data, assignment):
            i = at % (len(buf) + 1)
            if how == "set" and i < len(buf):
                buf[i] = byte
            elif how == "cut":
                del buf[i:]
            else:
                buf[i:i] = bytes([byte])
    for buf in (bytes(data), bytearray(data), memoryview(bytes(data))):
        assert _outcome(cp.decode_subscription, buf) == _outcome(cp._read_subscription, bytes(data))
    assert _outcome(cp.decode_assignment, bytes(assignment)) == _outcome(cp._read_assignment, bytes(assignment))
    for buf, decode, read in ((data, cp.decode_subscription, cp._read_subscription),
                              (assignment, cp.decode_assignment, cp._read_assignment)):
        for i in range(len(buf)):  # every byte set to each edge of a signed length in turn
            for byte in (0x00, 0x7F, 0x80, 0xFF):
                changed = bytes(buf[:i]) + bytes([byte]) + bytes(buf[i + 1:])
                assert _outcome(decode, changed) == _outcome(read, changed)
    if not edits:
        grouped: dict[str, list[int]] = {}
        for tp in owned:
            grouped.setdefault(tp.topic, []).append(tp.partition)
        regrouped = [TP(t, p) for t, ps in grouped.items() for p in ps]
        assert cp.decode_subscription(bytes(data)) == cp.Subscription(
            topics, user_data, regrouped if version >= 1 else [], generation if version >= 2 else -1,
            rack if version >= 3 else None)
        assert cp.decode_assignment(bytes(assignment)) == cp.Assignment(regrouped, user_data)


@settings(max_examples=100, deadline=None)
@given(_topics, st.none() | st.binary(max_size=8), st.booleans(), _owned, st.integers(-2**31, 2**31 - 1),
       st.none() | st.sampled_from(["rack-1", ""]))
def test_a_decode_of_bytes_just_encoded_answers_as_the_schema_reader(topics, user_data, mutable, owned, generation,
                                                                     rack):
    """The bytes of the latest encodings decode from the memo (a member's Subscription at its leader, the leader's
    Assignment at a member): exactly what the schema Reader reads from them, types included, owned partitions
    regrouped by topic; no list is shared with the encoder's caller or between decodes."""
    given = bytearray(user_data) if mutable and user_data is not None else user_data
    names, owned_given = list(topics), [tuple(tp) for tp in owned]
    sub = cp.encode_subscription(cp.Subscription(names, given, owned_given, generation, rack))
    assignment = cp.encode_assignment(cp.Assignment(owned_given, given))
    names.append("changed")  # the caller's lists, changed after the encode
    owned_given.append(("changed", 1))
    assert sub in cp._SUBSCRIPTIONS.found and assignment in cp._ASSIGNMENTS.found
    for data, decode, read in ((sub, cp.decode_subscription, cp._read_subscription),
                               (assignment, cp.decode_assignment, cp._read_assignment)):
        first, expected = decode(bytes(data)), read(data)
        assert first == expected
        assert [type(v) for v in first] == [type(v) for v in expected]
        for got, want in zip(first, expected):
            if isinstance(got, list):
                assert [type(v) for v in got] == [type(v) for v in want]
                got.append(TP("changed", 1))
        assert decode(data) == expected


def test_the_protocol_memo_holds_a_bounded_number_of_bytes(monkeypatch):
    """The memo keeps encodings up to MEMO_BYTES in all, then starts again: a big group's bytes are not kept for
    the life of the process."""
    monkeypatch.setattr(cp, "MEMO_BYTES", 4096)
    encoded = [cp.encode_assignment(cp.Assignment([TP("t", p) for p in range(i, i + 400)])) for i in range(5)]
    assert all(len(data) > 1600 for data in encoded)
    assert cp._ASSIGNMENTS.held == sum(map(len, cp._ASSIGNMENTS.found)) <= 4096
    assert sorted(cp._ASSIGNMENTS.encoded.values()) == sorted(cp._ASSIGNMENTS.found)  # (both start again together)
    assert encoded[-1] in cp._ASSIGNMENTS.found and encoded[0] not in cp._ASSIGNMENTS.found
    assert cp.decode_assignment(encoded[0]) == cp._read_assignment(encoded[0])


def test_an_encode_of_fields_encoded_before_answers_as_a_fresh_encode():
    """Equal fields make the memo's bytes: whichever one field differs from the encode before, the bytes read back as
    the new fields; a mutable user data buffer or an unhashable field is encoded as given each time."""
    base = cp.Subscription(["a", "b"], b"u", [TP("a", 0), TP("b", 1)], 3, "r1")
    variants = [base._replace(topics=["a"]), base._replace(user_data=None), base._replace(user_data=b""),
                base._replace(user_data=b"v"),
                base._replace(owned_partitions=[TP("a", 0)]), base._replace(generation_id=4),
                base._replace(rack_id=None), base._replace(rack_id="r2")]
    for before, variant in zip([base] + variants, variants):
        for earlier in (base, before):
            cp.encode_subscription(earlier)
            assert cp._read_subscription(cp.encode_subscription(variant)) == variant
    for parts, user_data in (([TP("a", 0)], b"u"), ([TP("a", 0)], None), ([TP("a", 1)], b"u"), ([], b"u")):
        cp.encode_assignment(cp.Assignment([TP("a", 0)], b"u"))
        assert cp._read_assignment(cp.encode_assignment(cp.Assignment(parts, user_data))) == (parts, user_data)
    for mutable in (bytearray, lambda data: memoryview(bytearray(data)),
                    lambda data: memoryview(bytearray(data)).toreadonly()):  # (the last one can be hashed)
        buffer = mutable(b"x")
        first = cp.encode_subscription(base._replace(user_data=buffer))
        (buffer.obj if isinstance(buffer, memoryview) else buffer)[0] = ord("y")
        assert cp._read_subscription(cp.encode_subscription(base._replace(user_data=buffer))).user_data == b"y"
        assert cp._read_subscription(first).user_data == b"x"
    assert None not in cp._SUBSCRIPTIONS.encoded  # (what cannot be remembered is not kept under None either)
    listed = base._replace(owned_partitions=[["a", 0]])  # (lists of topic and partition: encoded, not hashable)
    assert cp._read_subscription(cp.encode_subscription(listed)).owned_partitions == [TP("a", 0)]
    assert cp.encode_subscription(listed) == cp.encode_subscription(base._replace(owned_partitions=[TP("a", 0)]))


def test_topic_partitions_are_shared_and_equal_to_new_ones():
    """structs.topic_partitions shares the TopicPartitions of small non-negative partitions; each list is equal to
    one made by hand, in the order given, whatever the partitions (negative, huge, repeated, any iterable)."""
    from engine.common.structs import topic_partitions
    cases = [("t", range(5)), ("t", (3, 1, 3)), ("t", [700]), ("t", [-1, 2]), ("t", [2**31 - 1, 0]), ("u", iter([9])),
             ("t", ()), ("t", [1 << 16, 1])]
    ranges = [range(5, 9), range(0), range(60, 70), range(3, 70_000), range(-2, 3), range(0, 10, 2), range(9, 3, -1),
              range(65_530, 65_540)]
    for topic, ps in cases + [("v", r) for r in ranges] + [("t", r) for r in ranges]:
        ps = ps if type(ps) is range else list(ps)
        made = [TP(topic, p) for p in ps]
        for given in (list(ps), ps):
            assert topic_partitions(topic, given) == made
            assert all(type(tp) is TP for tp in topic_partitions(topic, given))
    assert topic_partitions("t", [4])[0] is topic_partitions("t", range(5))[4]


def test_group_partition_is_abs_java_hash_mod_50():
    assert offsets.partition("consumerGroupId") == 20  # the seed's example
    assert partition_for("polygenelubricants", 50) == 0  # hashCode is Integer.MIN_VALUE; Utils.abs gives 0
    for gid in ("grüppe", "组-消费者", "emoji-\U0001F600", "a" * 40):
        expected = _java_hash_by_hand(gid)
        assert offsets.partition(gid) == (0 if expected == -(1 << 31) else abs(expected)) % 50


class _Bytes:
    """An independent reader of Kafka's non-flexible message schemas, for the tests."""

    def __init__(self, data: bytes) -> None:
        self.data, self.pos = bytes(data), 0

    def take(self, fmt: str):
        (v,) = struct.unpack_from(">" + fmt, self.data, self.pos)
        self.pos += struct.calcsize(">" + fmt)
        return v

    def string(self):
        n = self.take("h")
        if n < 0:
            return None
        s = self.data[self.pos:self.pos + n].decode()
        self.pos += n
        return s

    def blob(self):
        n = self.take("i")
        if n < 0:
            return None
        b = self.data[self.pos:self.pos + n]
        self.pos += n
        return b

    def array(self, item):
        return [item() for _ in range(self.take("i"))]


def _decode_topic_partitions(r: _Bytes) -> list[tuple[str, list[int]]]:
    return r.array(lambda: (r.string(), r.array(lambda: r.take("i"))))


def independent_group_value(data: bytes) -> dict:
    """GroupMetadataValue v3 (group-coordinator/src/main/resources/common/message/GroupMetadataValue.json)."""
    r = _Bytes(data)
    out = {"version": r.take("h"), "protocolType": r.string(), "generation": r.take("i"), "protocol": r.string(),
           "leader": r.string(), "currentStateTimestamp": r.take("q")}
    out["members"] = r.array(lambda: {"memberId": r.string(), "groupInstanceId": r.string(), "clientId": r.string(),
                                      "clientHost": r.string(), "rebalanceTimeout": r.take("i"),
                                      "sessionTimeout": r.take("i"), "subscription": r.blob(),
                                      "assignment": r.blob()})
    assert r.pos == len(r.data)
    return out


def independent_subscription(data: bytes) -> dict:
    r = _Bytes(data)
    out = {"version": r.take("h"), "topics": r.array(r.string), "userData": r.blob(),
           "ownedPartitions": _decode_topic_partitions(r), "generationId": r.take("i"), "rackId": r.string()}
    assert r.pos == len(r.data)
    return out


def independent_assignment(data: bytes) -> dict:
    r = _Bytes(data)
    out = {"version": r.take("h"), "assignedPartitions": _decode_topic_partitions(r), "userData": r.blob()}
    assert r.pos == len(r.data)
    return out


def independent_offset_record(key: bytes, value: bytes | None):
    r = _Bytes(key)
    version = r.take("h")
    if version == 2:
        return ("group", r.string(), None if value is None else independent_group_value(value))
    assert version == 1
    k = (r.string(), r.string(), r.take("i"))
    if value is None:
        return ("offset", k, None)
    v = _Bytes(value)
    val = {"version": v.take("h"), "offset": v.take("q"), "leaderEpoch": v.take("i"), "metadata": v.string(),
           "commitTimestamp": v.take("q")}
    assert v.pos == len(v.data)
    return ("offset", k, val)


def offsets_records(eng, group_id: str) -> list:
    part = eng.internal_partition(offsets.TOPIC, offsets.partition(group_id))
    lg = part.log
    out = []
    for _, batch in lg.batches(lg.log_start_offset, lg.log_end_offset):
        if not batch.is_control:
            out += [independent_offset_record(bytes(r.key), None if r.value is None else bytes(r.value))
                    for r in batch.records()]
    return out


# --- the coordinator on a manual clock --------------------------------------------------------------------
class Member:
    """A test double of a consumer talking to the coordinator directly (no threads)."""

    def __init__(self, coordinator, name: str, topics=("t",), instance: str | None = None, session: int = 10_000,
                 rebalance: int = 30_000, strategy: str = "range") -> None:
        self.c, self.name, self.topics, self.instance = coordinator, name, list(topics), instance
        self.session, self.rebalance, self.strategy = session, rebalance, strategy
        self.member_id, self.generation, self.assignment = "", -1, []
        self.pending = None

    def join(self):
        meta = cp.encode_subscription(cp.Subscription(self.topics))
        self.pending = self.c.join_group("g", self.member_id, self.name, "consumer", [(self.strategy, meta)],
                                         self.session, self.rebalance, self.instance)
        self.member_id = self.pending.member_id
        return self.pending

    def sync(self, partitions: dict[str, int]):
        result = self.pending.result()
        self.generation = result.generation_id
        given = None
        if result.members and not result.skip_assignment:
            subs = {m: cp.decode_subscription(meta)._replace(group_instance_id=i) for m, i, meta in result.members}
            plan = asg.resolve(result.protocol_name)[0].assign(partitions, subs)
            given = {m: cp.encode_assignment(cp.Assignment(tps)) for m, tps in plan.items()}
        return self.c.sync_group("g", self.generation, self.member_id, "consumer", result.protocol_name, given,
                                 self.instance)


def settle(members: list[Member], partitions: dict[str, int]) -> None:
    """Every member joins; once all joins complete, all sync (the leader last, as a slow leader would)."""
    pendings = [m.join() for m in members]
    assert all(p.done for p in pendings)
    syncs = [m.sync(partitions) for m in sorted(members, key=lambda m: m.pending.value.leader_id == m.member_id)]
    for m, s in zip(sorted(members, key=lambda m: m.pending.value.leader_id == m.member_id), syncs):
        m.assignment = cp.decode_assignment(s.result()).partitions if s.result() else []


@pytest.fixture
def coordinator(tmp_path):
    clock = ManualClock()
    with engine.open(tmp_path, clock=clock, background=False, group_config=FAST) as e:
        e.create_topic("t", partitions=6)
        yield e.groups, clock, e


def test_a_join_storm_makes_one_generation_with_every_member(coordinator):
    c, clock, _ = coordinator
    first = Member(c, "m0")
    settle([first], {"t": 6})
    assert c.groups["g"].state == STABLE and c.groups["g"].generation == 1 and first.assignment
    storm = [first] + [Member(c, f"m{i}") for i in range(1, 8)]
    pend = [m.join() for m in storm[1:]]  # the newcomers wait: the group is preparing a rebalance
    assert not any(p.done for p in pend) and c.groups["g"].state == PREPARING_REBALANCE
    with pytest.raises(RebalanceInProgressError):
        c.heartbeat("g", first.member_id, 1)
    settle(storm, {"t": 6})
    g = c.groups["g"]
    assert g.state == STABLE and g.generation == 2 and g.leader == first.member_id  # the first joiner leads
    owned = [tp for m in storm for tp in m.assignment]
    assert sorted(owned) == [TP("t", p) for p in range(6)]
    assert all(m.member_id.startswith(m.name + "-") and len(m.member_id) == len(m.name) + 37 for m in storm)


def test_a_silent_member_is_evicted_after_its_session_timeout(coordinator):
    c, clock, _ = coordinator
    a, b = Member(c, "a", session=6000), Member(c, "b", session=6000)
    settle([a], {"t": 6})
    b.join()
    settle([a, b], {"t": 6})
    generation = c.groups["g"].generation
    clock.advance(5999)
    c.heartbeat("g", a.member_id, generation)
    c.tick()
    assert b.member_id in c.groups["g"].members  # exactly at its deadline minus one: still alive
    clock.advance(1)
    c.tick()
    g = c.groups["g"]
    assert b.member_id not in g.members and g.state == PREPARING_REBALANCE
    with pytest.raises(UnknownMemberIdError):
        c.heartbeat("g", b.member_id, generation)
    settle([a], {"t": 6})
    assert len(a.assignment) == 6 and c.groups["g"].generation == generation + 1


def test_the_leader_leaving_elects_another_and_a_rebalance_drops_members_that_do_not_rejoin(coordinator):
    c, clock, _ = coordinator
    a, b, d = (Member(c, n, session=30_000, rebalance=20_000) for n in "abd")
    settle([a], {"t": 6})
    b.join(), d.join()
    settle([a, b, d], {"t": 6})
    c.leave_group("g", a.member_id)
    g = c.groups["g"]
    assert g.leader == b.member_id and g.state == PREPARING_REBALANCE
    b.join()  # d never rejoins: the rebalance completes without it at the rebalance timeout
    clock.advance(19_999)
    c.tick()
    assert not b.pending.done
    clock.advance(1)
    c.tick()
    assert b.pending.done and d.member_id not in g.members and g.state == COMPLETING_REBALANCE
    with pytest.raises(UnknownMemberIdError):
        c.sync_group("g", g.generation, d.member_id, "consumer", "range")


def test_protocol_votes_and_errors(coordinator):
    c, clock, _ = coordinator
    meta = cp.encode_subscription(cp.Subscription(["t"]))
    j1 = c.join_group("g", "", "a", "consumer", [("roundrobin", meta), ("range", meta)], 10_000, 10_000)
    with pytest.raises(InconsistentGroupProtocolError):
        c.join_group("g", "", "x", "consumer", [("sticky", meta)], 10_000, 10_000)
    with pytest.raises(InconsistentGroupProtocolError):
        c.join_group("g", "", "x", "connect", [("range", meta)], 10_000, 10_000)
    with pytest.raises(InvalidSessionTimeoutError):
        c.join_group("g", "", "x", "consumer", [("range", meta)], 10, 10_000)
    assert j1.done
    j1b = c.join_group("g", j1.member_id, "a", "consumer", [("roundrobin", meta), ("range", meta)], 10_000, 10_000)
    j2 = c.join_group("g", "", "b", "consumer", [("range", meta), ("roundrobin", meta)], 10_000, 10_000)
    j3 = c.join_group("g", "", "c", "consumer", [("range", meta)], 10_000, 10_000)
    assert not j2.done
    c.join_group("g", j1.member_id, "a", "consumer", [("roundrobin", meta), ("range", meta)], 10_000, 10_000)
    assert j2.done and j3.done and j1b.done  # the replaced JoinGroup is answered too
    assert j2.result().protocol_name == "range"  # 2 votes to 1, and "range" is the only common one with c
    with pytest.raises(IllegalGenerationError):
        c.heartbeat("g", j2.member_id, 99)


# --- consumers, end to end ------------------------------------------------------------------------------
class Recorder(ConsumerRebalanceListener):
    def __init__(self) -> None:
        self.events: list[tuple[str, set]] = []

    def on_partitions_revoked(self, revoked):
        self.events.append(("revoked", set(revoked)))

    def on_partitions_assigned(self, assigned):
        self.events.append(("assigned", set(assigned)))

    def on_partitions_lost(self, lost):
        self.events.append(("lost", set(lost)))


def produce(e, topic: str, n: int, start: int = 0) -> None:
    with e.producer() as p:
        for i in range(start, start + n):
            p.send(topic, key=b"%d" % i, value=b"%d" % i)


def poll_until(consumers, done, timeout_s: float = 20.0, poll_ms: int = 50):
    end = time.monotonic() + timeout_s
    while not done():
        assert time.monotonic() < end, "the group did not settle"
        for c in consumers:
            c.poll(poll_ms)


def test_cooperative_rebalance_revokes_only_what_moves(tmp_path):
    # consumer1 and consumer2 form the group together (an initial delay), so the seed's starting point follows
    with engine.open(tmp_path, group_config={**FAST, "group_initial_rebalance_delay_ms": 300}) as e:
        e.create_topic("T0", partitions=3)
        listeners = {n: Recorder() for n in ("consumer1", "consumer2", "consumer3")}
        cfg = dict(group_id="g", partition_assignment_strategy="cooperative-sticky", session_timeout_ms=3000,
                   heartbeat_interval_ms=100, auto_offset_reset="earliest")
        c1, c2 = (e.consumer(client_id=n, **cfg) for n in ("consumer1", "consumer2"))
        c1.subscribe(["T0"], listener=listeners["consumer1"])
        c2.subscribe(["T0"], listener=listeners["consumer2"])
        poll_until([c1, c2], lambda: c1.assignment() | c2.assignment() == {TP("T0", p) for p in range(3)}
                   and e.groups.describe_group("g").state == STABLE)
        assert c1.assignment() == {TP("T0", 0), TP("T0", 2)} and c2.assignment() == {TP("T0", 1)}
        produce(e, "T0", 30)
        seen2 = []
        c3 = e.consumer(client_id="consumer3", **cfg)
        c3.subscribe(["T0"], listener=listeners["consumer3"])
        before = len(listeners["consumer2"].events)
        end = time.monotonic() + 20
        while not c3.assignment():
            assert time.monotonic() < end
            for c in (c1, c2, c3):
                got = c.poll(50)
                if c is c2:
                    seen2 += [r.offset for rs in got.values() for r in rs]
            assert TP("T0", 1) in c2.assignment()  # consumer2 never stops owning (and reading) p1
        assert c3.assignment() == {TP("T0", 2)} and c1.assignment() == {TP("T0", 0)}
        assert ("revoked", {TP("T0", 2)}) in listeners["consumer1"].events  # the first round revokes only p2
        assert all(parts == set() for _, parts in listeners["consumer2"].events[before:])  # nothing moved for it
        assert seen2 == list(range(e.partition("T0", 1).high_watermark))  # p1's records, read during the rebalance
        for c in (c1, c2, c3):
            c.close()


def test_a_cooperative_member_revokes_a_dropped_topic_before_it_rejoins(tmp_path):
    """As Kafka's ConsumerCoordinator.onJoinPrepare: partitions of a topic no longer subscribed are revoked before the
    JoinGroup, so one round gives the member the rest (the assignor never sees them owned)."""
    with engine.open(tmp_path, group_config=FAST) as e:
        for t in ("A", "B"):
            e.create_topic(t, partitions=2)
        c = e.consumer(group_id="g", partition_assignment_strategy="cooperative-sticky", session_timeout_ms=3000,
                       heartbeat_interval_ms=100)
        c.subscribe(["A", "B"])
        poll_until([c], lambda: len(c.assignment()) == 4 and e.groups.describe_group("g").state == STABLE)
        generation, rec = c.group_metadata().generation_id, Recorder()
        c.subscribe(["A"], listener=rec)
        poll_until([c], lambda: c.group_metadata().generation_id > generation and not c._group._rejoin
                   and e.groups.describe_group("g").state == STABLE)
        assert c.assignment() == {TP("A", 0), TP("A", 1)}
        assert rec.events == [("revoked", {TP("B", 0), TP("B", 1)}), ("assigned", set())]
        assert c.group_metadata().generation_id == generation + 1
        c.close()


@pytest.mark.parametrize("strategy", ["range", "cooperative-sticky"])
@pytest.mark.parametrize("during", ["after its JoinGroup", "before its SyncGroup"])
def test_a_heartbeat_while_the_member_is_between_rounds_neither_resets_it_nor_asks_for_another(tmp_path, during,
                                                                                                strategy):
    """The heartbeat thread may run while its member's JoinGroup is answered and before its SyncGroup is: the member
    still holds the old generation then. A heartbeat of it would be told the generation is stale (a reset: the
    member then stops heartbeating until it polls) or that the group rebalances (one more round). It sends nothing
    until the round completes, and the round makes one generation."""
    clock = ManualClock()
    with engine.open(tmp_path, clock=clock, background=False, group_config=FAST) as e:
        for t in ("A", "B"):
            e.create_topic(t, partitions=2)
        c = e.consumer("A", group_id="g", partition_assignment_strategy=strategy, heartbeat_interval_ms=10_000,
                       session_timeout_ms=30_000, enable_auto_commit=False)
        poll_until([c], lambda: len(c.assignment()) == 2 and e.groups.describe_group("g").state == STABLE, poll_ms=0)
        generation, sent, joins = c.group_metadata().generation_id, [], []
        beat, join, sync = e.groups.heartbeat, e.groups.join_group, e.groups.sync_group
        e.groups.heartbeat = lambda *args: sent.append(args[2]) or beat(*args)

        def joining(*args, **kw):
            joins.append(args)
            answer = join(*args, **kw)
            if during == "after its JoinGroup" and len(joins) == 1:
                c._group.heartbeat()  # as the heartbeat thread would, with the join answered and not yet applied
            return answer

        def syncing(*args, **kw):
            if during == "before its SyncGroup" and len(joins) == 1:
                c._group.heartbeat()
            return sync(*args, **kw)

        e.groups.join_group, e.groups.sync_group = joining, syncing
        c._group.heartbeat()  # between rounds: sent
        c.subscribe(["A", "B"])
        poll_until([c], lambda: len(c.assignment()) == 4 and not c._group._rejoin, poll_ms=0)
        assert len(joins) == 1 and c.group_metadata().generation_id == generation + 1
        assert e.groups.describe_group("g").state == STABLE
        c._group.heartbeat()  # the round completed: sent, with the new generation
        assert sent == [generation, generation + 1]
        c.close()


def test_three_consumers_share_six_partitions_while_one_joins_and_one_leaves(tmp_path):
    total = 3000
    with engine.open(tmp_path, group_config=FAST) as e:
        e.create_topic("events", partitions=6)
        produce(e, "events", total // 2)
        seen: list[bytes] = []
        lock = threading.Lock()
        stop = {}
        errors = []

        def run(name: str, gate: threading.Event | None = None):
            try:
                with e.consumer("events", group_id="billing", client_id=name, auto_offset_reset="earliest",
                                enable_auto_commit=False, session_timeout_ms=5000, heartbeat_interval_ms=100,
                                max_poll_records=50) as c:
                    while len(seen) < total and not stop.get(name):
                        got = c.poll(100)
                        with lock:
                            seen.extend(r.value for rs in got.values() for r in rs)
                        if got:
                            c.commit()
                        time.sleep(0.002)
            except Exception as exc:  # noqa: BLE001 (reported below)
                errors.append(exc)

        threads = {n: threading.Thread(target=run, args=(n,)) for n in ("c0", "c1", "c2")}
        for t in threads.values():
            t.start()
        while len(seen) < total // 4:
            time.sleep(0.01)
        threads["c3"] = threading.Thread(target=run, args=("c3",))
        threads["c3"].start()
        produce(e, "events", total // 2, start=total // 2)
        while len(seen) < (3 * total) // 4:
            time.sleep(0.01)
        stop["c1"] = True  # c1 leaves (close(): LeaveGroup)
        threads["c1"].join(30)
        for t in threads.values():
            t.join(60)
        assert not errors and not any(t.is_alive() for t in threads.values())
        assert sorted(seen) == sorted(b"%d" % i for i in range(total))  # every record exactly once
        committed = {p: e.committed("billing", TP("events", p)).offset for p in range(6)}
        assert committed == {p: e.partition("events", p).high_watermark for p in range(6)}
    with engine.open(tmp_path, group_config=FAST) as e:  # a restart resumes from the commits
        produce(e, "events", 60, start=total)
        later: list[bytes] = []
        with e.consumer("events", group_id="billing", auto_offset_reset="earliest", session_timeout_ms=5000,
                        heartbeat_interval_ms=100) as c:
            end = time.monotonic() + 20
            while len(later) < 60 and time.monotonic() < end:
                later += [r.value for rs in c.poll(100).values() for r in rs]
        assert sorted(later) == sorted(b"%d" % i for i in range(total, total + 60))


def test_static_membership_restart_fencing_and_no_leave_on_close(tmp_path):
    with engine.open(tmp_path, group_config=FAST) as e:
        e.create_topic("t", partitions=4)
        cfg = dict(group_id="g", session_timeout_ms=2000, heartbeat_interval_ms=100, auto_offset_reset="earliest")
        other_listener = Recorder()
        a = e.consumer(group_instance_id="host-a", client_id="a", **cfg)
        b = e.consumer(group_instance_id="host-b", client_id="b", **cfg)
        a.subscribe(["t"])
        b.subscribe(["t"], listener=other_listener)
        poll_until([a, b], lambda: len(a.assignment()) == 2 and len(b.assignment()) == 2
                   and e.groups.describe_group("g").state == STABLE)
        generation, mine = e.groups.describe_group("g").generation, a.assignment()
        events = len(other_listener.events)
        a.close()  # a static member sends no LeaveGroup
        assert {m["group_instance_id"] for m in e.groups.describe_group("g").members} == {"host-a", "host-b"}
        a2 = e.consumer(group_instance_id="host-a", client_id="a", **cfg)
        a2.subscribe(["t"])
        poll_until([a2, b], lambda: a2.assignment() == mine)
        for _ in range(5):
            b.poll(20)
        assert e.groups.describe_group("g").generation == generation  # no rebalance
        assert len(other_listener.events) == events and b.assignment() and e.groups.describe_group("g").state == STABLE
        a3 = e.consumer(group_instance_id="host-a", client_id="a", **cfg)  # a second live "host-a"
        a3.subscribe(["t"])
        poll_until([a3], lambda: a3.assignment() == mine)
        with pytest.raises(FencedInstanceIdError):
            for _ in range(100):
                a2.poll(20)
                a2.commit()
        for c in (a3, b):
            c.close()


def test_a_consumer_that_stops_polling_leaves_after_max_poll_interval(tmp_path):
    clock = ManualClock()
    with engine.open(tmp_path, clock=clock, background=False, group_config=FAST) as e:
        e.create_topic("t", partitions=2)
        slow = e.consumer("t", group_id="g", session_timeout_ms=60_000, heartbeat_interval_ms=1000,
                          max_poll_interval_ms=5000)
        slow.poll(0)
        assert slow.assignment() and e.groups.describe_group("g").state == STABLE
        member = slow.group_metadata().member_id
        clock.advance(4000)
        slow._group.heartbeat()
        assert member in {m["member_id"] for m in e.groups.describe_group("g").members}
        clock.advance(1001)  # the heartbeat thread notices: no poll() for max_poll_interval_ms
        end = time.monotonic() + 10
        while member in {m["member_id"] for m in e.groups.describe_group("g").members}:
            assert time.monotonic() < end
            time.sleep(0.01)
        assert e.groups.describe_group("g").state == EMPTY
        slow.poll(0)  # the next poll rejoins, as a new member
        assert slow.assignment() and slow.group_metadata().member_id != member
        slow.close()


def test_random_joins_leaves_and_crashes_never_share_a_partition(tmp_path):
    runs = int(os.environ.get("KAFKALOG_GROUP_MODEL_RUNS", "6"))
    for seed in range(runs):
        rng = random.Random(seed)
        clock = ManualClock()
        path = tmp_path / str(seed)
        with engine.open(path, clock=clock, background=False, group_config=FAST) as e:
            e.create_topic("t", partitions=rng.randint(1, 9))
            e.create_topic("u", partitions=rng.randint(1, 4))
            strategy = rng.choice(["range", "roundrobin", "sticky", "cooperative-sticky"])
            live, crashed = [], []
            everything = {TP(t, p) for t in ("t", "u") for p in range(e.partitions_for(t))}
            for step in range(12):
                action = rng.choice(["join", "join", "leave", "crash"]) if live else "join"
                if action == "join":
                    c = e.consumer(group_id="g", session_timeout_ms=3000, heartbeat_interval_ms=1000,
                                   partition_assignment_strategy=strategy, enable_auto_commit=False)
                    c.subscribe(["t", "u"])
                    live.append(c)
                elif action == "leave":
                    live.pop(rng.randrange(len(live))).close()
                else:
                    c = live.pop(rng.randrange(len(live)))
                    c._group._stop.set()  # a crash: no more heartbeats, polls or LeaveGroup
                    crashed.append(c)
                for _ in range(rng.randint(0, 3)):  # some partial progress
                    for c in live:
                        c.poll(0)
                    check_no_sharing(e, live)
                for _ in range(200):  # then settle
                    g = e.groups.groups.get("g")
                    stable = g is not None and g.state == STABLE and all(
                        c.group_metadata().generation_id == g.generation and not c._group._rejoin for c in live)
                    if (stable and len(g.members) == len(live)) or (not live and (g is None or g.state == EMPTY)):
                        break
                    for c in live:  # the heartbeat threads' work, in step with the manual clock
                        c._group.heartbeat()
                    clock.advance(500)
                    e.groups.tick()
                    for c in live:
                        c.poll(0)
                    check_no_sharing(e, live)
                else:
                    raise AssertionError(f"seed {seed} step {step}: the group did not settle: {g.state} "
                                         f"{g.generation} {len(g.members)} members, clients at "
                                         f"{[(c.group_metadata().generation_id, c._group._rejoin) for c in live]}")
                owned = [tp for c in live for tp in c.assignment()]
                assert len(owned) == len(set(owned)) and (set(owned) == everything or not live), (seed, step)
            for c in live + crashed:
                c.close()


def check_no_sharing(e, live) -> None:
    by_generation: dict[int, list] = {}
    for c in live:
        by_generation.setdefault(c.group_metadata().generation_id, []).extend(c.assignment())
    for generation, owned in by_generation.items():
        if generation >= 0:
            assert len(owned) == len(set(owned)), f"a partition owned twice in generation {generation}"
    g = e.groups.groups.get("g")
    if g is not None and g.state == STABLE:
        stored = [tp for m in g.members.values() if m.assignment
                  for tp in cp.decode_assignment(m.assignment).partitions]
        assert len(stored) == len(set(stored))


def test_custom_assignors_from_the_seed(tmp_path):
    with engine.open(tmp_path, group_config=FAST) as e:
        e.create_topic("t", partitions=7)
        cfg = dict(group_id="bc", session_timeout_ms=3000, heartbeat_interval_ms=100)
        cs = [e.consumer(partition_assignment_strategy=asg.BroadcastAssignor, **cfg) for _ in range(3)]
        for c in cs:
            c.subscribe(["t"])
        everything = {TP("t", p) for p in range(7)}
        poll_until(cs, lambda: all(c.assignment() == everything for c in cs))  # every member reads every partition
        for c in cs:
            c.close()
        cfg["group_id"] = "rnd"
        cs = [e.consumer(partition_assignment_strategy=[asg.RandomAssignor(random.Random(3))], **cfg)
              for _ in range(3)]
        for c in cs:
            c.subscribe(["t"])
        poll_until(cs, lambda: sorted(tp for c in cs for tp in c.assignment()) == sorted(everything)
                   and e.groups.describe_group("rnd").state == STABLE)
        for c in cs:
            c.close()


def test_a_cooperative_assignor_that_moves_an_owned_partition_at_once_is_refused(tmp_path):
    """Under the cooperative protocol a partition changes owner only after its owner revoked it: an assignor that
    hands it straight to another member fails the leader's rebalance with IllegalStateError naming it."""
    class Hasty(asg.ConsumerPartitionAssignor):
        name = "hasty"

        def supported_protocols(self):
            return [asg.COOPERATIVE]

        def assign(self, partitions_per_topic, subscriptions):  # everything to a member that owns nothing
            taker = min(subscriptions, key=lambda m: (bool(subscriptions[m].owned_partitions), m))
            return {m: topic_partitions("t", range(partitions_per_topic["t"])) if m == taker else []
                    for m in subscriptions}
    with engine.open(tmp_path, group_config=FAST) as e:
        e.create_topic("t", partitions=40)
        cfg = dict(group_id="g", session_timeout_ms=3000, heartbeat_interval_ms=100,
                   partition_assignment_strategy=Hasty)
        first = e.consumer("t", **cfg)
        poll_until([first], lambda: len(first.assignment()) == 40)
        second = e.consumer("t", **cfg)
        with pytest.raises(IllegalStateError, match=r"gave TopicPartition\(topic='t', partition=0\) to .* while "
                                                    r".* still owns it"):
            for _ in range(100):
                for c in (first, second):
                    c.poll(0)


def test_the_cooperative_check_refuses_exactly_the_partitions_another_member_owns():
    """The leader's check of a cooperative assignment, against a model of Kafka's rule (no partition both added to
    a member and revoked from one): a member may keep any of what it owns (in any order) and take what nobody owns
    or what its owners keep; a partition taken from an owner who does not keep it is refused, named with its owner.
    Partition 4 is owned twice."""
    from engine.clients.consumer_coordinator import ConsumerCoordinator
    tps = topic_partitions("t", range(12))
    owned = {"a": tps[0:5], "b": tps[4:8], "c": []}
    subs = {m: sub("t", owned_partitions=list(o)) for m, o in owned.items()}
    rng = random.Random(7)
    outcomes = set()
    for _ in range(400):
        assignment = {m: [tp for tp in tps if rng.random() < 0.3] for m in subs}
        if rng.random() < 0.5:  # most rounds of a sticky assignor: owners keep a prefix of what they own
            assignment = {"a": tps[0:rng.randint(0, 5)], "b": tps[4:rng.randint(4, 8)], "c": tps[8:12]}
        rng.shuffle(assignment["a"])
        wrong = [(tp, m, o) for m, got in assignment.items() for tp in got if tp not in owned[m]
                 for o, mine in owned.items() if o != m and tp in mine and tp not in assignment[o]]
        outcomes.add(bool(wrong))
        if wrong:
            with pytest.raises(IllegalStateError, match="while . still owns it") as info:
                ConsumerCoordinator._check_cooperative("x", subs, assignment)
            assert any(f"gave {tp} to {m} while {o} still owns it" in str(info.value) for tp, m, o in wrong)
        else:
            ConsumerCoordinator._check_cooperative("x", subs, assignment)
    assert outcomes == {True, False}


# --- offsets --------------------------------------------------------------------------------------------
def test_commits_auto_commit_and_auto_offset_reset(tmp_path):
    clock = ManualClock()
    with engine.open(tmp_path, clock=clock, background=False, group_config=FAST) as e:
        e.create_topic("t", partitions=1)
        produce(e, "t", 10)
        tp = TP("t", 0)
        with e.consumer("t", group_id="late", auto_offset_reset="latest") as c:
            assert c.poll(0) == {} and c.position(tp) == 10  # nothing committed: auto_offset_reset
        c = e.consumer("t", group_id="g", auto_offset_reset="earliest", auto_commit_interval_ms=1000,
                       max_poll_records=4)
        assert len(c.poll(0)[tp]) == 4 and c.committed(tp) is None
        clock.advance(1000)
        c.poll(0)  # the interval passed: this poll commits the position it started from
        assert c.committed(tp) == 4 and c.position(tp) == 8
        calls = []
        fut = c.commit_async({tp: OffsetAndMetadata(6, "half")}, callback=lambda o, exc: calls.append((o, exc)))
        assert fut.result() and calls[0][1] is None and c.committed(tp, metadata=True) == OffsetAndMetadata(6, "half")
        with pytest.raises(OffsetMetadataTooLargeError):
            c.commit({tp: OffsetAndMetadata(1, "m" * 4097)})
        with pytest.raises(InvalidConfigurationError):
            c.commit({tp: -1})
        assert c.committed(tp) == 6  # a refused commit changes nothing
        c.close()  # close commits the position
        assert e.committed("g", tp).offset == 8
        with e.consumer("t", group_id="g", auto_offset_reset="latest") as again:
            assert [r.offset for r in again.poll(0)[tp]] == [8, 9]


def test_a_commit_in_on_partitions_revoked_commits_the_revoked_partitions_positions(tmp_path):
    """As the Java consumer: the listener is told while the partitions are still assigned, so commit() there commits
    their positions (the next owner starts after what this member read)."""
    with engine.open(tmp_path, group_config=FAST) as e:
        e.create_topic("t", partitions=2)
        produce(e, "t", 20)
        seen_in_callback = []

        class CommitOnRevoke(ConsumerRebalanceListener):
            def on_partitions_revoked(self, revoked):
                seen_in_callback.append((set(revoked), a.assignment(), {tp: a.position(tp) for tp in revoked}))
                if revoked:
                    a.commit()

        a = e.consumer(group_id="r", auto_offset_reset="earliest", enable_auto_commit=False, max_poll_records=3,
                       partition_assignment_strategy="range")
        a.subscribe(["t"], listener=CommitOnRevoke())
        assert sum(len(v) for v in a.poll(5000).values()) == 3
        b = e.consumer("t", group_id="r", auto_offset_reset="earliest", enable_auto_commit=False,
                       partition_assignment_strategy="range")
        poll_until([a, b], lambda: a.assignment() and b.assignment())
        revoked, assigned_then, positions = seen_in_callback[-1]
        assert revoked == assigned_then == {TP("t", 0), TP("t", 1)} and sum(positions.values()) >= 3
        assert {tp: e.committed("r", tp).offset for tp in positions} == positions
        a.close()
        b.close()


def test_a_member_of_an_older_generation_cannot_commit(coordinator):
    c, clock, e = coordinator
    a = Member(c, "a")
    settle([a], {"t": 6})
    b = Member(c, "b")
    b.join()
    settle([a, b], {"t": 6})
    with pytest.raises(IllegalGenerationError):
        c.commit_offsets("g", {TP("t", 0): OffsetAndMetadata(1)}, a.member_id, 1)
    with pytest.raises(UnknownMemberIdError):  # a standalone commit while the group has members
        c.commit_offsets("g", {TP("t", 0): OffsetAndMetadata(1)})
    with pytest.raises(NonEmptyGroupError):
        c.reset_offsets("g", {TP("t", 0): OffsetAndMetadata(0)})
    c.commit_offsets("g", {TP("t", 0): OffsetAndMetadata(3)}, a.member_id, 2)
    consumer = e.consumer(group_id="g", enable_auto_commit=False)
    consumer._group.member_id, consumer._group.generation = a.member_id, 1
    consumer._subscription = {"t"}
    with pytest.raises(CommitFailedError):
        consumer.commit({TP("t", 0): 5})
    assert c.fetch_offsets("g") == {TP("t", 0): OffsetAndMetadata(3)}


def test_consumer_offsets_records_decode_with_kafkas_schemas_and_expire(tmp_path):
    clock = ManualClock()
    with engine.open(tmp_path, clock=clock, background=False, group_config=FAST) as e:
        e.create_topic("t", partitions=2)
        produce(e, "t", 6)
        c = e.consumer("t", group_id="billing", group_instance_id="i-1", enable_auto_commit=False,
                       auto_offset_reset="earliest")
        c.poll(0)
        c.commit()
        kinds = offsets_records(e, "billing")
        group = [r for r in kinds if r[0] == "group"][-1][2]
        member = group["members"][0]
        assert group["version"] == 3 and group["protocolType"] == "consumer" and group["generation"] == 1
        assert group["protocol"] == "range" and group["leader"] == member["memberId"]
        assert member["groupInstanceId"] == "i-1" and member["clientHost"] == "/127.0.0.1"
        assert member["sessionTimeout"] == 10_000 and member["rebalanceTimeout"] == 300_000
        subscription = independent_subscription(member["subscription"])
        assert subscription["topics"] == ["t"] and subscription["version"] == 3
        assert independent_assignment(member["assignment"])["assignedPartitions"] == [("t", [0, 1])]
        commits = {r[1]: r[2] for r in kinds if r[0] == "offset"}
        assert {k: v["offset"] for k, v in commits.items()} == {("billing", "t", 0): 3, ("billing", "t", 1): 3}
        assert all(v["version"] == 3 and v["commitTimestamp"] == clock.time_ms() for v in commits.values())
        c.close()
        e.groups.leave_group("billing", "", "i-1")  # an admin removes the static member: the group empties
        assert e.groups.describe_group("billing").state == EMPTY
        clock.advance(7 * 24 * 3600 * 1000 - 1)
        assert e.coordinators.expire_group_offsets() == 0
        clock.advance(1)
        assert e.coordinators.expire_group_offsets() == 2
        tail = offsets_records(e, "billing")[-3:]
        assert tail[:2] == [("offset", ("billing", "t", 0), None), ("offset", ("billing", "t", 1), None)]
        assert tail[2] == ("group", "billing", None)  # the empty group's record goes too
        assert e.committed("billing", TP("t", 0)) is None
    from engine.tools.dump_log import dump
    part = os.path.join(tmp_path, f"{offsets.TOPIC}-{offsets.partition('billing')}")
    files = sorted(os.path.join(part, f) for f in os.listdir(part) if f.endswith((".log", ".index", ".timeindex")))
    with open(os.devnull, "w") as sink:
        assert dump(files, deep=True, index_sanity_check=True, out=sink) == 0


def test_groups_and_offsets_survive_a_restart(tmp_path):
    with engine.open(tmp_path, group_config=FAST) as e:
        e.create_topic("t", partitions=3)
        produce(e, "t", 9)
        c = e.consumer("t", group_id="g", group_instance_id="s", auto_offset_reset="earliest",
                       session_timeout_ms=60_000, heartbeat_interval_ms=1000, enable_auto_commit=False)
        poll_until([c], lambda: len(c.assignment()) == 3)
        c.commit({TP("t", p): p + 1 for p in range(3)})
        described = e.groups.describe_group("g")
        c.close()
    with engine.open(tmp_path, group_config=FAST) as e:
        again = e.groups.describe_group("g")
        assert (again.state, again.generation, again.protocol) == (STABLE, described.generation, "range")
        assert [m["assignment"] for m in again.members] == [m["assignment"] for m in described.members]
        assert {p: e.committed("g", TP("t", p)).offset for p in range(3)} == {0: 1, 1: 2, 2: 3}
        assert group_metadata.decode_value(group_metadata.encode_value(e.groups.groups["g"].record())).generation \
            == described.generation


def test_deleting_a_group_tombstones_its_offsets_and_record_and_refuses_a_live_one(tmp_path):
    with engine.open(tmp_path, group_config=FAST) as e:
        e.create_topic("t", partitions=2)
        produce(e, "t", 6)
        with e.consumer("t", group_id="live", session_timeout_ms=6000, heartbeat_interval_ms=100,
                        enable_auto_commit=False, auto_offset_reset="earliest") as member:
            poll_until([member], lambda: member.assignment())
            member.commit({TP("t", 0): 2})
            with pytest.raises(NonEmptyGroupError):  # not while it has a member; nothing is written
                e.groups.delete_group("live")
            assert e.committed("live", TP("t", 0)).offset == 2
        e.groups.commit_offsets("offsets-only", {TP("t", 1): OffsetAndMetadata(4)})
        with pytest.raises(GroupIdNotFoundError):
            e.groups.delete_group("never")
        e.groups.delete_group("live")
        e.groups.delete_group("offsets-only")
        assert e.committed("live", TP("t", 0)) is None and e.committed("offsets-only", TP("t", 1)) is None
        assert [g for g, _, _ in e.groups.list_groups()] == []
        tail = offsets_records(e, "live")[-2:]  # decoded by independent code from Kafka's schemas
        assert tail == [("offset", ("live", "t", 0), None), ("group", "live", None)]
        with pytest.raises(GroupIdNotFoundError):  # a deleted group is gone
            e.groups.delete_group("live")
    with engine.open(tmp_path, group_config=FAST) as e:  # and stays gone after a restart
        assert e.groups.list_groups() == [] and e.committed("live", TP("t", 0)) is None


def test_kafkalog_groups_cli(tmp_path, capsys):
    from engine.tools.cli import main
    with engine.open(tmp_path) as e:
        e.create_topic("t", partitions=2)
        produce(e, "t", 10)
        with e.consumer(group_id="billing", enable_auto_commit=False) as c:
            c.assign([TP("t", 0), TP("t", 1)])
            c.commit({TP("t", 0): 2, TP("t", 1): 1})
    data = ["--data", str(tmp_path)]
    assert main(["groups", "--list", *data]) == 0
    assert capsys.readouterr().out.split() == ["billing"]
    assert main(["groups", "--describe", "--group", "billing", *data]) == 0
    out = capsys.readouterr().out
    rows = [line.split() for line in out.splitlines() if line.startswith("billing")]
    highs = [int(row[4]) for row in rows]
    assert [row[:6] for row in rows] == [["billing", "t", "0", "2", str(highs[0]), str(highs[0] - 2)],
                                         ["billing", "t", "1", "1", str(highs[1]), str(highs[1] - 1)]]
    assert sum(highs) == 10 and all(row[6:] == ["-", "-", "-"] for row in rows)  # no members
    assert main(["groups", "--reset-offsets", "--group", "billing", "--to-earliest", *data]) == 0
    assert "dry run" in capsys.readouterr().out
    assert main(["groups", "--reset-offsets", "--group", "billing", "--to-latest", "--execute", *data]) == 0
    capsys.readouterr()
    assert main(["groups", "--reset-offsets", "--group", "billing", "--to-offset", "1", "--topic", "t:0",
                 "--execute", "--json", *data]) == 0
    capsys.readouterr()
    with engine.open(tmp_path) as e:
        assert e.committed("billing", TP("t", 0)).offset == 1
        assert e.committed("billing", TP("t", 1)).offset == e.partition("t", 1).high_watermark
    assert main(["groups", "--reset-offsets", "--group", "billing", "--to-datetime", "2001-01-01T00:00:00.000Z",
                 "--execute", *data]) == 0  # every record is newer: back to the first offsets
    capsys.readouterr()
    with engine.open(tmp_path) as e:
        assert [e.committed("billing", TP("t", p)).offset for p in range(2)] == [0, 0]
        with e.consumer("t", group_id="billing", session_timeout_ms=6000, heartbeat_interval_ms=100) as member:
            poll_until([member], lambda: member.assignment())
            with pytest.raises(NonEmptyGroupError):  # not while the group has a member
                e.groups.reset_offsets("billing", {TP("t", 0): OffsetAndMetadata(3)})
    assert main(["groups", "--delete", "--group", "billing", *data]) == 0
    assert "successful" in capsys.readouterr().out
    assert main(["groups", "--list", *data]) == 0
    assert capsys.readouterr().out.split() == []
    assert main(["groups", "--delete", "--group", "billing", *data]) != 0  # no such group any more
    assert main(["groups", "--describe", *data]) == 2  # --group is required


def test_an_evicted_member_loses_its_partitions_without_committing(tmp_path):
    clock = ManualClock()
    with engine.open(tmp_path, clock=clock, background=False, group_config=FAST) as e:
        e.create_topic("t", partitions=2)
        produce(e, "t", 4)
        seen = Recorder()
        c = e.consumer(group_id="g", session_timeout_ms=6000, heartbeat_interval_ms=1000, auto_offset_reset="earliest")
        c.subscribe(["t"], listener=seen)
        assert sum(len(v) for v in c.poll(0).values()) == 4
        c._group._stop.set()  # its heartbeats stop (a long GC pause, say)
        clock.advance(6000)
        e.groups.tick()
        assert e.groups.describe_group("g").state == EMPTY
        c._group.heartbeat()  # the answer: unknown member
        c.poll(0)  # rejoins as a new member; what it owned was lost, not revoked, and nothing was committed
        assert seen.events[-2:] == [("lost", {TP("t", 0), TP("t", 1)}), ("assigned", {TP("t", 0), TP("t", 1)})]
        assert ("revoked", {TP("t", 0), TP("t", 1)}) not in seen.events
        assert e.committed("g", TP("t", 0)) is None
        c.close(autocommit=False)


def test_send_offsets_to_transaction_checks_the_members_generation(tmp_path):
    with engine.open(tmp_path, group_config=FAST) as e:
        e.create_topic("t", partitions=1)
        produce(e, "t", 5)
        c = e.consumer("t", group_id="g", session_timeout_ms=6000, heartbeat_interval_ms=100,
                       enable_auto_commit=False, auto_offset_reset="earliest")
        poll_until([c], lambda: c.assignment())
        member = c.group_metadata()
        producer = e.producer(transactional_id="tx")
        producer.init_transactions()
        producer.begin_transaction()
        producer.send_offsets_to_transaction({TP("t", 0): 2}, member)  # the current generation: accepted
        producer.commit_transaction()
        assert e.committed("g", TP("t", 0)).offset == 2
        zombie = member._replace(generation_id=member.generation_id - 1)
        producer.begin_transaction()
        with pytest.raises(CommitFailedError):
            producer.send_offsets_to_transaction({TP("t", 0): 4}, zombie)
        with pytest.raises(TransactionAbortableError):
            producer.commit_transaction()
        producer.abort_transaction()
        assert e.committed("g", TP("t", 0)).offset == 2  # the zombie's offsets never landed
        producer.begin_transaction()
        producer.send_offsets_to_transaction({TP("t", 0): 3}, "g")  # a group id alone is not checked (old clients)
        producer.commit_transaction()
        assert e.committed("g", TP("t", 0)).offset == 3
        producer.close()
        c.close()


def _random_history_rounds(rng: random.Random, cls, rounds: int):
    """A group's history, round by round: members join, leave and come back with stale claims from old generations,
    topics are deleted and recreated with fewer partitions, and some claims are plain wrong. Yields each round's
    (partitions per topic, subscriptions, result, the assignor) for the caller's checks."""
    partitions = {f"t{i}": rng.randint(1, 6) for i in range(3)}
    memory: dict[str, tuple[list, int]] = {}  # member -> (what it owned, in which generation)
    generation = 0
    for _ in range(rounds):
        generation += 1
        if rng.random() < 0.3:  # a topic deleted and recreated smaller, or grown
            t = rng.choice(sorted(partitions))
            partitions[t] = rng.randint(1, max(1, partitions[t] - 1)) if rng.random() < 0.7 else partitions[t] + 2
        members = rng.sample([f"m{i}" for i in range(6)], rng.randint(1, 6))
        subs = {}
        for m in members:
            topics = rng.sample(sorted(partitions), rng.randint(1, len(partitions)))
            owned, gen = memory.get(m, ([], -1))
            owned = list(owned)
            if rng.random() < 0.3:  # a stale or conflicting claim: someone else's partition, maybe one that is gone
                owned.append(TP(rng.choice(sorted(partitions)), rng.randint(-2, 8)))  # (or no partition at all)
            if rng.random() < 0.3 and gen > 0:
                gen = rng.randint(0, gen)  # it comes back claiming an older generation
            if cls is asg.CooperativeStickyAssignor:
                subs[m] = sub(*topics, owned_partitions=owned, generation_id=gen)
            else:
                a = asg.StickyAssignor()
                if gen >= 0:
                    a.on_assignment(cp.Assignment(owned), ConsumerGroupMetadata("g", gen, m, None))
                subs[m] = sub(*topics, user_data=a.subscription_user_data(set(topics)))
        assignor = cls()
        result = assignor.assign(dict(partitions), subs)
        yield partitions, subs, result, assignor
        for m, tps in result.items():
            memory[m] = (tps, generation)


@pytest.mark.parametrize("cls", [asg.StickyAssignor, asg.CooperativeStickyAssignor])
def test_sticky_assignors_are_valid_and_complete_on_random_histories(cls):
    """Members' claims may conflict (two of one generation and a third of a newer one), name partitions of topics
    recreated smaller, or come from a member that no longer subscribes to the topic: the assignment is still valid
    and complete and nothing raises (where Kafka's own assignors throw or answer invalidly). The cooperative
    assignor may hold back partitions changing owner for a second round: those are counted as handed out."""
    seed = int(os.environ.get("KAFKALOG_GROUP_MODEL_SEED", random.randrange(1 << 30)))
    rng = random.Random(seed)
    runs = int(os.environ.get("KAFKALOG_GROUP_MODEL_RUNS", "10"))
    for _ in range(runs * 20):
        for partitions, subs, result, assignor in _random_history_rounds(rng, cls, 6):
            wanted = {TP(t, p) for s in subs.values() for t in s.topics for p in range(partitions[t])}
            _check_valid(seed, partitions, subs, result, wanted, complete=cls is asg.StickyAssignor)
            if cls is asg.CooperativeStickyAssignor:  # what was held back: owned by someone, handed over next round
                _converges(seed, cls, partitions, subs, result, wanted)


def _converges(seed, cls, partitions, subs, result, wanted, rounds: int = 4) -> None:
    """Cooperative rebalancing: each partition held back is one its owner revokes, and the follow-up rebalances
    (members owning what they were given) hand everything out within a few rounds."""
    for _ in range(rounds):
        flat = {tp for tps in result.values() for tp in tps}
        owned = {tp for s in subs.values() for tp in s.owned_partitions}
        assert wanted - flat <= owned, f"seed {seed}: {wanted - flat - owned} neither assigned nor moving"
        if flat == wanted:
            return
        subs = {m: sub(*s.topics, owned_partitions=result[m], generation_id=max(s.generation_id, 0) + 1)
                for m, s in subs.items()}
        result = cls().assign(dict(partitions), subs)
        _check_valid(seed, partitions, subs, result, wanted, complete=False)
    pytest.fail(f"seed {seed}: {wanted - flat} still not handed out after {rounds} cooperative rounds")


def _check_valid(seed, partitions, subs, result, wanted, complete: bool) -> None:
    """No partition twice, none that does not exist or is not wanted, none of a topic its member does not
    subscribe to; with `complete`, every wanted partition."""
    flat = [tp for tps in result.values() for tp in tps]
    assert len(flat) == len(set(flat)), f"seed {seed}: a partition handed out twice"
    assert set(flat) <= wanted, f"seed {seed}: handed out {set(flat) - wanted}, which is not wanted or does not exist"
    if complete:
        assert set(flat) == wanted, f"seed {seed}: {wanted - set(flat)} not handed out"
    for m, tps in result.items():
        assert all(tp.topic in subs[m].topics for tp in tps), f"seed {seed}: {m} got an unsubscribed topic"


def test_member_ids_outside_the_bmp_are_ordered_as_java_orders_them():
    """Java's String.compareTo compares UTF-16 code units: U+1F600 is the pair D83D DE00, which sorts before U+FFFD;
    Python's code-point order puts it after. Range and roundrobin follow Java's order (Kafka's MemberInfo)."""
    emoji, replacement = "\U0001F600-member", "\uFFFD-member"
    assert ord(emoji[0]) > ord(replacement[0])          # code-point order: replacement first
    assert 0xD800 + ((ord(emoji[0]) - 0x10000) >> 10) < ord(replacement[0])  # UTF-16 order: emoji first
    subs = {emoji: sub("t"), replacement: sub("t")}
    assert names(asg.RangeAssignor().assign({"t": 2}, subs)) == {emoji: {"tp0"}, replacement: {"tp1"}}
    assert names(asg.RoundRobinAssignor().assign({"t": 3}, subs)) == {emoji: {"tp0", "tp2"}, replacement: {"tp1"}}
    static = {"a": sub("t", group_instance_id=replacement), "b": sub("t", group_instance_id=emoji)}
    assert names(asg.RangeAssignor().assign({"t": 2}, static)) == {"b": {"tp0"}, "a": {"tp1"}}


def _committed_epoch_in_log(e, group: str, topic: str) -> list[tuple[int, int]]:
    """(offset, leaderEpoch) of each OffsetCommitValue for `topic`-0 in the group's `__consumer_offsets` partition,
    decoded with struct from Kafka's published schema (OffsetCommitValue v3: version int16, offset int64, leaderEpoch
    int32, metadata string, commitTimestamp int64)."""
    part = e.internal_partition("__consumer_offsets", offsets.partition(group))
    out = []
    for batch in part.log.read(0, 1 << 30).batches():
        for r in batch.records():
            key_version, = struct.unpack_from(">h", r.key)
            if key_version > 1 or r.value is None:
                continue  # a group metadata record, or a tombstone
            version, offset, epoch = struct.unpack_from(">hqi", r.value)
            assert version == 3
            out.append((offset, epoch))
    return out


def test_a_commit_of_consumed_positions_stores_the_last_records_leader_epoch(tmp_path):
    """Kafka's consumer commits OffsetAndMetadata(position.offset, position.offsetEpoch), the epoch being the leader
    epoch of the last record it consumed (SubscriptionState.allConsumed, Fetcher's lastEpoch). Offsets given
    explicitly without an epoch, and positions set by a seek, stay -1."""
    with engine.open(tmp_path, brokers=2, background=False) as e:
        e.create_topic("t", replication_factor=2)
        p = e.producer()
        p.send("t", b"epoch 0", partition=0).get()
        e.replicate()
        failed = e.partition("t", 0).broker_id
        e.fail_broker(failed)  # the next leader writes in epoch 1
        p.send("t", b"epoch 1", partition=0).get()
        e.restart_broker(failed)  # back as a follower (the offsets topic wants both brokers)
        e.replicate()
        c = e.consumer("t", group_id="g", auto_offset_reset="earliest", enable_auto_commit=False)
        got = []
        while polled := c.poll(timeout_ms=100):
            got += [r.value for rs in polled.values() for r in rs]
        assert got == [b"epoch 0", b"epoch 1"]
        c.commit()
        c.commit({TP("t", 0): OffsetAndMetadata(1)})
        c.seek(TP("t", 0), 0)
        c.commit()
        c.close()
        assert e.partition("t", 0).leader_epoch == 1
        assert _committed_epoch_in_log(e, "g", "t") == [(2, 1), (1, -1), (0, -1)]


@pytest.mark.parametrize("strategy", ["range", "cooperative-sticky"])
def test_a_rebalance_needs_no_heartbeat_to_start(tmp_path, strategy):
    """The clock never moves and no heartbeat reaches the coordinator: the members hear of each rebalance from the
    coordinator itself. One member waits in poll() for records the whole time (woken to rejoin, twice); the others
    are polled with no wait."""
    clock = ManualClock()
    start = clock.time_ms()
    with engine.open(tmp_path, clock=clock, background=False, group_config=FAST) as e:
        e.create_topic("t", partitions=6)
        heartbeats = []
        beat = e.groups.heartbeat
        e.groups.heartbeat = lambda *args: heartbeats.append(args) or beat(*args)
        cfg = dict(group_id="g", partition_assignment_strategy=strategy, heartbeat_interval_ms=10_000,
                   session_timeout_ms=30_000, enable_auto_commit=False, auto_offset_reset="earliest")
        first, second = e.consumer("t", **cfg), e.consumer("t", **cfg)
        first.poll(0)
        got = []
        waiting = threading.Thread(target=lambda: got.append(first.poll(3_600_000)))
        waiting.start()  # holds generation 1; waits for records, and rejoins from inside the wait when woken
        third = None
        end = time.monotonic() + 30
        while True:
            group = e.groups.describe_group("g")
            members = [c for c in (first, second, third) if c is not None]
            if group.state == STABLE and len(group.members) == len(members) and \
                    sorted(len(c.assignment()) for c in members) == [6 // len(members)] * len(members):
                if third is not None:
                    break
                third = e.consumer("t", **cfg)  # a second rebalance, with `first` still waiting
            assert time.monotonic() < end, f"the group did not settle without heartbeats: {group}"
            for c in (second, third):
                if c is not None:
                    c.poll(0)
            time.sleep(0.001)
        assert set().union(*(c.assignment() for c in members)) == {TP("t", p) for p in range(6)}
        assert waiting.is_alive() and not heartbeats and clock.time_ms() == start
        produce(e, "t", 12)  # records end the wait
        waiting.join(30)
        assert got and got[0]
        for c in members:
            c.close()


def _coordinator_outcome(call):
    """A request's answer: a Pending, or the error raised (type and message)."""
    try:
        return call()
    except KafkaError as exc:
        return "raised", type(exc).__name__, str(exc)


def _answer_view(answer, ids: dict[str, int]):
    """An answer (a Pending's state, an error raised, None), member ids replaced by the order the test made them in."""
    def named(text: str) -> str:
        for member_id, j in ids.items():
            text = text.replace(member_id, f"<member {j}>")
        return text

    if not isinstance(answer, Pending):
        return answer and (*answer[:2], named(answer[2]))
    value = answer.value
    if hasattr(value, "generation_id"):  # a JoinResult
        value = (ids.get(value.member_id), value.generation_id, ids.get(value.leader_id), len(value.members))
    return answer.done, value, answer.error and named(str(answer.error))


def _group_view(coordinator, ids: dict[str, int]) -> tuple:
    """What a group's deadlines decide, member ids replaced by the order the test made them in."""
    g = coordinator.groups.get("g")
    if g is None:
        return ()
    members = sorted((ids[m.member_id], m.awaiting_join is not None, m.awaiting_sync is not None, m.is_new,
                      m.last_heartbeat, m.session_timeout_ms, m.assignment) for m in g.members.values())
    return (g.state, g.generation, ids.get(g.leader), g.join_deadline, g.sync_deadline,
            sorted(map(ids.get, g.pending_sync)), members)


@pytest.mark.parametrize("seed", range(int(os.environ.get("KAFKALOG_GROUP_MODEL_RUNS", "6")) * 4))
def test_deadlines_apply_as_a_coordinator_that_looks_at_every_group_on_every_request(tmp_path, seed):
    """The coordinator skips its scan of members and groups until the earliest deadline; the model is the same
    coordinator made to scan on every request. Members join, rejoin with other session timeouts, sync, heartbeat,
    leave and go silent while time moves on: every answer, held or not, and the group's state stay the same."""
    rng = random.Random(seed)
    clock = ManualClock()
    cfg = {"group_min_session_timeout_ms": 50, "group_initial_rebalance_delay_ms": rng.choice([0, 300])}
    with engine.open(tmp_path / "a", clock=clock, background=False, group_config=cfg) as a, \
            engine.open(tmp_path / "b", clock=clock, background=False, group_config=cfg) as b:
        model = b.groups  # the model: it forgets the earliest deadline before every tick
        model.tick = lambda: (model._wake(), GroupCoordinator.tick(model))[1]
        coordinators = (a.groups, b.groups)
        members: list[list[str]] = [[], []]  # each coordinator's member ids, in the order they were made
        answers: list[list] = [[], []]  # every answer each coordinator gave, held ones included
        for step in range(150):
            clock.advance(rng.choice([0, 1, 5, 20, 60, 90, 150, 400, 2_000]))
            action = rng.choice(["join", "rejoin", "rejoin", "sync", "heartbeat", "heartbeat", "leave", "tick"])
            who = rng.randrange(max(1, len(members[0])))
            session = rng.choice([60, 100, 500, 3_000])
            views = []
            for i, co in enumerate(coordinators):
                known = members[i][who] if who < len(members[i]) else ""
                ids = {m: j for j, m in enumerate(members[i])}
                joined = [v for p in answers[i] if isinstance(p, Pending) and p.done
                          and getattr(v := p.value, "member_id", None) == known]
                gen = joined[-1].generation_id if joined else -1  # what its last join answer said
                if action == "join" or (action == "rejoin" and not known):
                    got = _coordinator_outcome(lambda: co.join_group("g", "", "c", "consumer", [("range", b"")],
                                                                     session, 1_000))
                    if isinstance(got, Pending):
                        members[i].append(got.member_id)
                elif action == "rejoin":
                    got = _coordinator_outcome(lambda: co.join_group("g", known, "c", "consumer", [("range", b"")],
                                                                     session, 1_000))
                elif action == "sync" and known:
                    given = {m: b"x%d" % j for j, m in enumerate(members[i])}
                    got = _coordinator_outcome(lambda: co.sync_group("g", gen, known, "consumer", "range", given))
                elif action == "heartbeat" and known:
                    got = _coordinator_outcome(lambda: co.heartbeat("g", known, gen))
                elif action == "leave" and known:
                    got = _coordinator_outcome(lambda: co.leave_group("g", known))
                else:
                    got = co.tick() and None
                answers[i].append(got)
                ids = {m: j for j, m in enumerate(members[i])}
                views.append(([_answer_view(p, ids) for p in answers[i]], _group_view(co, ids)))
            assert views[0] == views[1], (seed, step, action)
            soon, truth = (co.next_deadline() for co in coordinators)  # a deadline may be told early, never late
            assert (soon is None) == (truth is None) and (soon is None or soon <= truth), (seed, step, soon, truth)


def test_a_member_rejoining_with_other_protocols_changes_what_the_group_accepts(tmp_path):
    """The group's candidate protocols are kept between joins: a rejoin that drops one must drop it for the next
    member too, and a rejoin that only changes its metadata (each assignment does) changes nothing."""
    clock = ManualClock()
    with engine.open(tmp_path, clock=clock, background=False, group_config=FAST) as e:
        co = e.groups
        first = co.join_group("g", "", "c", "consumer", [("range", b"a"), ("roundrobin", b"a")], 3000, 1000)
        second = co.join_group("g", "", "c", "consumer", [("range", b"b"), ("roundrobin", b"b")], 3000, 1000)
        assert co.groups["g"].state == PREPARING_REBALANCE  # the initial delay: both may rejoin meanwhile
        co.join_group("g", first.member_id, "c", "consumer", [("range", b"a2"), ("roundrobin", b"a2")], 3000, 1000)
        assert co.groups["g"].candidate_protocols() == {"range", "roundrobin"}
        co.join_group("g", second.member_id, "c", "consumer", [("roundrobin", b"b2")], 3000, 1000)
        assert co.groups["g"].candidate_protocols() == {"roundrobin"}
        with pytest.raises(InconsistentGroupProtocolError):
            co.join_group("g", "", "c", "consumer", [("range", b"c")], 3000, 1000)
        co.join_group("g", "", "c", "consumer", [("roundrobin", b"c")], 3000, 1000)
