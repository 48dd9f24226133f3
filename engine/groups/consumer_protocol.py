"""The "consumer" protocol's bytes: what a member tells the coordinator it wants (Subscription) and what the
leader hands back (Assignment), carried opaquely by JoinGroup/SyncGroup and stored in the group's metadata
record in `__consumer_offsets` (Kafka's ConsumerProtocol).

Byte layout (non-flexible message schema, engine.record.schema): `int16 version` then
- Subscription v0-v3: `topics [string] | userData nullable bytes | ownedPartitions [topic string, partitions
  [int32]] (v1+) | generationId int32 (v2+, -1) | rackId nullable string (v3+)`;
- Assignment v0-v3: `assignedPartitions [topic string, partitions [int32]] | userData nullable bytes`.
kafkalog writes version 3 of both. A newer version is read as v3 with its trailing fields ignored, as Kafka does.
Every member's Subscription and Assignment are encoded and decoded on every rebalance, so both are built with one
`struct` call per field group; a decode reads well-formed bytes of versions 0-3 on that fast path, and anything else
(a newer version, a null array, a short or corrupt field) through `engine.record.schema.Reader`, which reads the
newer versions and names the corrupt field. In one process most bytes decoded were encoded here a moment before (the
leader reads its fellow members' Subscriptions, each member the leader's Assignment): a memo of the latest encodings
answers those decodes with copies of what the bytes hold, without reading them, and an encode of the same fields
again (members rejoin with what they sent a round before, the leader hands out the same assignments) with the bytes.
Functions over bytes; thread-safe (the memo is read without a lock, one dict lookup, and changed under its lock; it
never hands out a list it keeps).
"""
from __future__ import annotations

import contextlib
import struct
import threading
from typing import Iterable, NamedTuple

from engine.common.structs import PARTITION_OF, TOPIC_OF, TopicPartition, topic_partitions
from engine.record.schema import Reader, Writer, encoded_bytes, encoded_int32s, encoded_string

PROTOCOL_TYPE = "consumer"
VERSION = 3


class Subscription(NamedTuple):
    """A member's topics, its assignor's user data, the partitions it owns now and the generation it owns them in."""

    topics: list[str]
    user_data: bytes | None = None
    owned_partitions: list[TopicPartition] = []
    generation_id: int = -1
    rack_id: str | None = None
    group_instance_id: str | None = None  # not on the wire: the coordinator tells the leader


class Assignment(NamedTuple):
    partitions: list[TopicPartition]
    user_data: bytes | None = None


_I16, _I32, _VERSION_COUNT = struct.Struct(">h"), struct.Struct(">i"), struct.Struct(">hi")
_ONE = _I32.pack(1)


def _grouped(partitions: Iterable[TopicPartition]) -> tuple[bytes, list[TopicPartition]]:
    """`[topic string, partitions [int32]]`, grouped by topic in first-seen order (also StickyAssignor's layout), and
    the TopicPartitions in the order a decode of those bytes gives them."""
    partitions = list(partitions)
    topics = set(map(TOPIC_OF, partitions))
    if len(topics) == 1:  # (the common case, at C speed)
        topic, ps = topics.pop(), list(map(PARTITION_OF, partitions))
        return b"".join((_ONE, encoded_string(topic), encoded_int32s(ps))), topic_partitions(topic, ps)
    by_topic: dict[str, list[int]] = {}
    for topic, p in partitions:
        by_topic.setdefault(topic, []).append(p)
    out, order = [_I32.pack(len(by_topic))], []
    for topic, ps in by_topic.items():
        out += (encoded_string(topic), encoded_int32s(ps))
        order += topic_partitions(topic, ps)
    return b"".join(out), order


def write_partitions(w: Writer, partitions: Iterable[TopicPartition]) -> None:
    """The `[topic string, partitions [int32]]` layout into a Writer (the sticky assignor's user data)."""
    w.raw(_grouped(partitions)[0])


def read_partitions(r: Reader, what: str) -> list[TopicPartition]:
    out = []
    for _ in range(r.count(what) or 0):
        topic = r.string("topic")
        out += topic_partitions(topic, r.int32s("partitions") or ())
    return out


def encode_subscription(s: Subscription) -> bytes:
    fields = _fields((tuple(s.topics), s.user_data, tuple(s.owned_partitions), s.generation_id, s.rack_id))
    data = _SUBSCRIPTIONS.made(fields)
    if data is not None:
        return data
    partitions, owned = _grouped(s.owned_partitions)
    data = b"".join((_VERSION_COUNT.pack(VERSION, len(s.topics)), *map(encoded_string, s.topics),
                     encoded_bytes(s.user_data), partitions, _I32.pack(s.generation_id), encoded_string(s.rack_id)))
    user_data = s.user_data if s.user_data is None else bytes(s.user_data)
    _SUBSCRIPTIONS.remember(data, Subscription(list(s.topics), user_data, owned, int(s.generation_id), s.rack_id),
                            fields)
    return data


def decode_subscription(data) -> Subscription:
    known = _SUBSCRIPTIONS.get(data)
    if known is not None:  # (its lists are the memo's own: the caller gets copies)
        return Subscription(list(known.topics), known.user_data, list(known.owned_partitions), known.generation_id,
                            known.rack_id)
    try:
        return _subscription(data)
    except (_Irregular, struct.error, UnicodeDecodeError):
        return _read_subscription(data)


def _read_subscription(data) -> Subscription:
    r = Reader(data, "consumer protocol subscription")
    version = r.version(None)
    topics = [r.string("topic") for _ in range(r.count("topics") or 0)]
    user_data = r.bytes("userData", nullable=True)
    owned = read_partitions(r, "ownedPartitions") if version >= 1 else []
    generation = r.int(32, "generationId") if version >= 2 else -1
    rack = r.string("rackId", nullable=True) if version >= 3 else None
    if version <= VERSION:
        r.end()
    return Subscription(topics, user_data, owned, generation, rack)


def encode_assignment(a: Assignment) -> bytes:
    fields = _fields((tuple(a.partitions), a.user_data))
    data = _ASSIGNMENTS.made(fields)
    if data is not None:
        return data
    partitions, order = _grouped(a.partitions)
    data = b"".join((_I16.pack(VERSION), partitions, encoded_bytes(a.user_data)))
    _ASSIGNMENTS.remember(data, Assignment(order, a.user_data if a.user_data is None else bytes(a.user_data)), fields)
    return data


def decode_assignment(data) -> Assignment:
    known = _ASSIGNMENTS.get(data)
    if known is not None:
        return Assignment(list(known.partitions), known.user_data)
    try:
        return _assignment(data)
    except (_Irregular, struct.error, UnicodeDecodeError):
        return _read_assignment(data)


class _Memo:
    """The latest encodings of one kind: what each decodes to, and the fields each was made from. In one process the
    leader decodes the Subscriptions its fellow members have just encoded, and each member the Assignment the leader
    has just encoded; equal bytes decode alike, so a decode of bytes found here copies the lists kept (never handed
    out) instead of reading the bytes. Members encode the same fields again and again (an eager member owns nothing
    when it rejoins; a cooperative one mostly owns what it owned a round before, and the leader hands out the same
    assignments): equal fields (user data as `bytes` or None) make the bytes found here. It holds encodings of up to
    MEMO_BYTES in all (a list kept costs about twice its bytes), then starts again."""

    def __init__(self) -> None:
        self.found: dict[bytes, tuple] = {}
        self.encoded: dict[tuple, bytes] = {}
        self.held = 0
        self._lock = threading.Lock()

    def get(self, data) -> tuple | None:
        return self.found.get(data) if type(data) is bytes else None

    def made(self, fields: tuple | None) -> bytes | None:
        """The bytes `fields` (see _fields) were encoded to, if they are here."""
        try:
            return self.encoded.get(fields)  # (None is never kept)
        except TypeError:  # an unhashable field: encoded as given, not kept
            return None

    def remember(self, data: bytes, decoded: tuple, fields: tuple | None) -> None:
        with self._lock:
            if self.held + len(data) > MEMO_BYTES:
                self.found, self.encoded, self.held = {}, {}, 0  # (the oldest rebalances' are not asked for again)
            self.found[data] = decoded
            if fields is not None:
                with contextlib.suppress(TypeError):
                    self.encoded[fields] = data
            self.held += len(data)


def _fields(fields: tuple) -> tuple | None:
    """What an encode is remembered by (its fields, user data second): None with user data in a buffer that may
    change (its bytes now are not its bytes at the next encode; a writable memoryview cannot even be hashed)."""
    return fields if fields[1] is None or type(fields[1]) is bytes else None


MEMO_BYTES = 1 << 20
_SUBSCRIPTIONS, _ASSIGNMENTS = _Memo(), _Memo()


def _read_assignment(data) -> Assignment:
    r = Reader(data, "consumer protocol assignment")
    version = r.version(None)
    partitions = read_partitions(r, "assignedPartitions")
    user_data = r.bytes("userData", nullable=True)
    if version <= VERSION:
        r.end()
    return Assignment(partitions, user_data)


# --- the fast path: well-formed bytes of versions 0-3 only; anything else raises _Irregular (or struct.error,
# UnicodeDecodeError) and the Reader decodes it, or names what is corrupt
class _Irregular(Exception):
    """Bytes the fast path leaves to the Reader."""


def _fast_string(data: bytes, pos: int) -> tuple[str, int]:
    (n,) = _I16.unpack_from(data, pos)
    end = pos + 2 + n
    if n < 0 or end > len(data):
        raise _Irregular
    return data[pos + 2:end].decode(), end


def _fast_bytes(data: bytes, pos: int) -> tuple[bytes | None, int]:
    (n,) = _I32.unpack_from(data, pos)
    if n == -1:
        return None, pos + 4
    end = pos + 4 + n
    if n < 0 or end > len(data):
        raise _Irregular
    return data[pos + 4:end], end


def _fast_count(data: bytes, pos: int) -> int:
    (n,) = _I32.unpack_from(data, pos)
    if n < 0:
        raise _Irregular
    return n


def _fast_partitions(data: bytes, pos: int) -> tuple[list[TopicPartition], int]:
    count, pos, out = _fast_count(data, pos), pos + 4, []
    for _ in range(count):
        topic, pos = _fast_string(data, pos)
        n = _fast_count(data, pos)
        if pos + 4 + 4 * n > len(data):
            raise _Irregular
        out += topic_partitions(topic, struct.unpack_from(f">{n}i", data, pos + 4))
        pos += 4 + 4 * n
    return out, pos


def _fast_version(data) -> tuple[bytes, int]:
    if type(data) is not bytes:
        data = bytes(data)
    (version,) = _I16.unpack_from(data, 0)
    if not 0 <= version <= VERSION:
        raise _Irregular
    return data, version


def _subscription(data) -> Subscription:
    data, version = _fast_version(data)
    count, pos, topics = _fast_count(data, 2), 6, []
    for _ in range(count):
        topic, pos = _fast_string(data, pos)
        topics.append(topic)
    user_data, pos = _fast_bytes(data, pos)
    owned, generation, rack = [], -1, None
    if version >= 1:
        owned, pos = _fast_partitions(data, pos)
    if version >= 2:
        (generation,) = _I32.unpack_from(data, pos)
        pos += 4
    if version >= 3:
        (n,) = _I16.unpack_from(data, pos)
        rack, pos = (None, pos + 2) if n == -1 else _fast_string(data, pos)
    if pos != len(data):
        raise _Irregular
    return Subscription(topics, user_data, owned, generation, rack)


def _assignment(data) -> Assignment:
    data, _ = _fast_version(data)
    partitions, pos = _fast_partitions(data, 2)
    user_data, pos = _fast_bytes(data, pos)
    if pos != len(data):
        raise _Irregular
    return Assignment(partitions, user_data)
