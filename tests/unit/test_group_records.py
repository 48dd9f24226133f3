"""The bytes of consumer groups: the consumer protocol's subscription and assignment as Kafka's schemas define them (read
back by kafka-python and by an independent reader), the fast decode and encode against the schema reader, and a
group's `__consumer_offsets` partition (Java's String.hashCode)."""
from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.common.errors import CorruptRecordError
from engine.common.structs import TopicPartition as TP
from engine.groups import consumer_protocol as cp
from engine.groups import offsets
from engine.record.schema import partition_for


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


@given(st.one_of(st.none(), st.binary(max_size=300)), st.one_of(st.none(), st.text(max_size=80)),
       st.lists(st.integers(-2**31, 2**31 - 1), max_size=20))
def test_a_flexible_writers_compact_fields_read_back_and_are_laid_out_as_kafkas(data, text, ints):
    """Compact bytes, strings and int32 arrays (a flexible version's forms): the length + 1 as an unsigned varint
    (0: null), then the bytes; what the Reader reads back is what was written."""
    from engine.record.schema import Reader, Writer

    def uvarint(n: int) -> bytes:  # written here from the format's rule, not with the codec's helper
        out = b""
        while n >= 0x80:
            out, n = out + bytes([n & 0x7F | 0x80]), n >> 7
        return out + bytes([n])

    encoded = None if text is None else text.encode()
    written = Writer(flexible=True).bytes(data).string(text).int32s(ints).tagged({}).done()
    assert written == (uvarint(0 if data is None else len(data) + 1) + (data or b"")
                       + uvarint(0 if encoded is None else len(encoded) + 1) + (encoded or b"")
                       + uvarint(len(ints) + 1) + struct.pack(f">{len(ints)}i", *ints) + b"\x00")
    r = Reader(written)
    assert r.bytes(compact=True, nullable=True) == data
    assert r.string(compact=True, nullable=True) == text
    assert [r.int(32) for _ in range(r.count(compact=True))] == ints
    assert r.tagged() == {}
    assert r.at_end()
